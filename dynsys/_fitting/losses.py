"""The fitting losses: the public loss objects (`Simulation`, `OneStep`,
`Prediction`, `MultipleShooting`, all `AbstractLoss`) and the residual vectors
they stand for, on states (data without outputs) or on outputs (output error,
with each experiment's initial state estimated), with ragged experiments
masked."""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._rollout.adjoint import Autodiff
from .._rollout.rollout import _times, rollout
from .._systems.innovation import InnovationSystem
from .._systems.ode import Discretized
from .._systems.stable import StableLinearSystem
from .._systems.system import LinearSystem
from .initial_states import closed_form, FreeRun, KalmanPredictor
from .separable import eliminate, linear_part_names, outputs as separable_outputs
from .solver_base import AbstractObjective


class AbstractLoss(eqx.Module):
    """What `fit` minimises (`fit(model, data, loss=...)`): `Simulation()`,
    `OneStep()`, `Prediction(horizon)` or `MultipleShooting(horizon)`."""

    @abc.abstractmethod
    def kind(self) -> Any:
        """The loss as `FitObjective.kind` reads it: `"simulation"`,
        `"one_step"`, a `PredictionError` or a `MultipleShooting`."""


class Simulation(AbstractLoss):
    """The simulation (free-run) loss, `fit`'s default: each experiment simulated
    from its initial state over all its steps and compared with the data. On
    states the initial state is the measured one (or fitted, with
    `fit(..., fit_x0=True)`); on outputs it is estimated (in closed form for linear
    models): the output-error method.

    **Example:**

    ```python
    result = dynsys.fit(model, data, loss=dynsys.Simulation())
    ```
    """

    def kind(self) -> str:
        return "simulation"


class OneStep(AbstractLoss):
    """The one-step loss on states: each measured state stepped once and compared
    with the next. Needs data with states (a one-step prediction needs the state
    at each step, which output data do not measure).

    **Example:**

    ```python
    result = dynsys.fit(model, data, loss=dynsys.OneStep())
    ```
    """

    def kind(self) -> str:
        return "one_step"


class Prediction(AbstractLoss):
    """The prediction-error loss: the error of the `horizon`-step-ahead predictions
    of an `InnovationSystem`'s Kalman predictor on output data, its initial state
    estimated in closed form (`horizon=1`: the prediction-error method). Fits
    integrating and unstable plants too: docs/noise-models.md.

    **Arguments:**

    - `horizon`: steps ahead (a positive integer, at most the data's `T`).

    **Example:**

    ```python
    start = dynsys.fit_subspace(data, 2, noise_model=True)
    result = dynsys.fit(start, data, loss=dynsys.Prediction())
    ```
    """

    horizon: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        value = self.horizon
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"Prediction(horizon=...): expected a positive integer, got {value!r}."
            )

    def kind(self) -> "PredictionError":
        return PredictionError(self.horizon)


class MultipleShooting(AbstractLoss):
    """The multiple-shooting loss: free-run simulation over windows of the data.

    Each trajectory is cut into windows of `horizon` steps starting every `stride`
    steps; each window is simulated from its own initial state and compared with the
    data. On data with states that is the measured first state of the window (or,
    with `fit(..., fit_x0=True)`, a fitted one); on data with outputs only it is
    estimated (in closed form for linear models, trained otherwise). Short windows
    keep the loss smooth for long or chaotic trajectories, where a full free run has
    a rugged loss surface; `horizon=1` is the one-step loss and `horizon=T` the
    simulation loss (on states).

    **Arguments:**

    - `horizon`: steps per window (a positive integer, at most the data's `T`).
    - `stride`: steps between window starts; default `horizon` (windows touch).

    **Example:**

    ```python
    loss = dynsys.MultipleShooting(horizon=10)
    ```
    """

    horizon: int = eqx.field(static=True)
    stride: int = eqx.field(static=True)

    def __init__(self, horizon: int, stride: int | None = None):
        self.horizon = horizon
        self.stride = horizon if stride is None else stride

    def __check_init__(self):
        for name in ("horizon", "stride"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"MultipleShooting({name}=...): expected a positive integer, got "
                    f"{value!r}."
                )

    def starts(self, num_steps: int) -> np.ndarray:
        """The first step of each window for trajectories of `num_steps` steps."""
        return np.arange(0, num_steps - self.horizon + 1, self.stride)

    def kind(self) -> "MultipleShooting":
        return self


class PredictionError(eqx.Module):
    """The prediction-error loss as `FitObjective.kind` (`Prediction(horizon)`):
    the error of the `horizon`-step-ahead predictions of an `InnovationSystem`'s Kalman
    predictor, its initial state estimated in closed form (the predictions are
    affine in it)."""

    horizon: int = eqx.field(static=True)


def masked_signals(batch) -> tuple[Array, Array | None, Array]:
    """`(ys (N, T, p), us (N, T, m) or None, mask (N, T))` of an output batch with
    the padded steps zeroed (they then enter no sum and no closed-form solve)."""
    mask = batch["mask"]
    us = batch.get("us")
    if us is not None:
        us = jnp.where(mask[..., None], us, 0.0)
    return jnp.where(mask[..., None], batch["ys"], 0.0), us, mask


def materialise(model):
    """Compute derived matrices once per loss evaluation, not once per step.

    A `StableLinearSystem` builds `K` from its parameters and a `Discretized` ODE
    takes a matrix exponential: both are turned into the equivalent `LinearSystem`
    (differentiably) before the rollout.
    """
    if isinstance(model, StableLinearSystem | Discretized):
        return model.to_linear()
    return model


def is_linear(model) -> bool:
    """Whether the initial state can be estimated in closed form for `model`."""
    return isinstance(
        model, LinearSystem | StableLinearSystem | Discretized | InnovationSystem
    )


def channel_weights(
    ys: Float[ArrayLike, "N T p"], mask: Bool[ArrayLike, "N T"], xp=jnp
) -> Float[ArrayLike, " p"]:
    """$1 / \\mathrm{var}_c$ of each output channel over the valid steps (1 for a
    constant channel); `xp` the array module (`jax.numpy`, or `numpy` on the
    host)."""
    valid = mask[..., None]
    count = xp.sum(mask).astype(ys.dtype)
    mean = xp.sum(xp.where(valid, ys, 0.0), axis=(0, 1)) / count
    var = xp.sum(xp.where(valid, (ys - mean[None, None]) ** 2, 0.0), axis=(0, 1))
    var = var / count
    return xp.where(var > 0, 1.0 / xp.where(var > 0, var, 1.0), 1.0)


class FitObjective(AbstractObjective):
    """The loss `fit` minimises, as a residual vector `r` with `loss = sum(r**2)`.

    - On states (data without outputs): the mean squared error of the predicted
        states over the valid steps (and of the fitted initial states).
    - On outputs: $\\frac{1}{p} \\sum_c \\frac{1}{n_{\\mathrm{valid}}}
        \\sum_{i,t\\ \\mathrm{valid}} w_c (\\hat y_{i,t,c} - y_{i,t,c})^2$ with
        $w_c = 1/\\mathrm{var}_c$ (the mean normalised squared error of the
        channels; 1 is as good as predicting each channel's mean).

    Padded steps (`mask` False) give zero residuals and never reach a gradient: the
    data there are replaced by zeros before use.
    """

    # "simulation", "one_step", MultipleShooting, PredictionError
    kind: Any = eqx.field(static=True)
    outputs: bool = eqx.field(static=True)
    x0: str = eqx.field(static=True)  # "data", "fitted", "closed_form", "trained"
    method: Any = eqx.field(static=True)
    adjoint: Any = eqx.field(static=True)
    weights: Array | None
    # B, D and the output level eliminated by least squares (`separable.py`):
    # `None`; "exact", the residuals those of the eliminated problem; "kaufman",
    # the full model's at points whose linear parts `complete` has solved for.
    separable: str | None = eqx.field(static=True, default=None)

    def residuals(self, params, batch):
        model, x0s = params
        model = materialise(model)
        if x0s is not None:
            x0s = x0s[batch["index"]]
        mask = batch["mask"]
        us = batch.get("us")
        if us is not None:
            us = jnp.where(mask[..., None], us, 0.0)
        if self.outputs:
            ys = jnp.where(mask[..., None], batch["ys"], 0.0)
            return self._output_residuals(model, x0s, ys, us, mask)
        xs = batch["xs"]
        valid_x = jnp.concatenate([jnp.ones_like(mask[:, :1]), mask], axis=1)
        xs = jnp.where(valid_x[..., None], xs, 0.0)
        return self._state_residuals(model, x0s, xs, us, mask)

    def loss(self, params, batch):
        return jnp.sum(self.residuals(params, batch) ** 2)

    def complete(self, params, static, batch):
        """With `separable`: `params` (the trainable part of `(model, None)`, every
        array of the `LinearSystem` trainable) with the least-squares `B`, `D` and
        output level at its `K` and `C`."""
        if self.separable is None:
            return params
        model = eqx.combine(params, static)[0]
        ys, us, mask = masked_signals(batch)
        solved = eliminate(model, ys, us, mask, self.weights)
        names = linear_part_names(model)
        return eqx.tree_at(
            lambda p: tuple(getattr(p[0], name) for name in names),
            params,
            tuple(getattr(solved, name) for name in names),
        )

    @property
    def gauge_free(self) -> bool:
        """On outputs with initial states estimated in closed form, a change of the
        state basis of a linear model changes no residual."""
        return self.outputs and self.x0 == "closed_form"

    def group_share(self, group_batch, batch):
        """`sqrt(count(group_batch) / count(batch))`: the residuals are divided by
        the square root of the number of valid entries of their batch."""
        return jnp.sqrt(self._valid_count(group_batch) / self._valid_count(batch))

    def _valid_count(self, batch):
        """The number of valid entries the residuals are normalised by, per channel
        (the channel count cancels in `group_share`)."""
        mask = batch["mask"].astype(jnp.float64 if jax.config.jax_enable_x64 else float)
        if self.outputs or self.kind == "one_step":
            return jnp.sum(mask)
        x0_rows = self.x0 == "fitted"
        if self.kind == "simulation":
            return jnp.sum(mask) + (mask.shape[0] if x0_rows else 0)
        starts, offsets = _window_index(self.kind, mask.shape[1])
        windows = mask[:, starts[:, None] + offsets]
        return jnp.sum(windows) + (jnp.sum(windows[..., :1]) if x0_rows else 0)

    def num_residuals(self, batch) -> int:
        """The length of the residual vector on `batch` (without tracing)."""
        mask = batch["mask"]
        N, T = mask.shape
        width = batch["ys"].shape[-1] if self.outputs else batch["xs"].shape[-1]
        x0_rows = 1 if self.x0 == "fitted" else 0
        if isinstance(self.kind, MultipleShooting):
            windows = len(self.kind.starts(T))
            return N * windows * (self.kind.horizon + x0_rows) * width
        if self.kind == "one_step":
            return N * T * width
        return N * (T + x0_rows) * width

    def _rollout(self, model, x0, num_steps, inputs, t0=0):
        return rollout(
            model,
            x0,
            num_steps,
            inputs=inputs,
            t0=t0,
            method=self.method,
            adjoint=Autodiff() if self.adjoint is None else self.adjoint,
        )

    # ----- states -----------------------------------------------------------------

    def _state_residuals(self, model, x0s, xs, us, mask):
        n = xs.shape[-1]
        if self.kind == "one_step":
            errors = one_step_predictions(model, xs, us) - xs[:, 1:]
            return _scaled([(errors, mask)], n)
        if self.kind == "simulation":
            start = xs[:, 0] if x0s is None else x0s
            traj = self._rollout(model, start, xs.shape[-2] - 1, us)
            parts = [(traj.xs[:, 1:] - xs[:, 1:], mask)]
            if x0s is not None:
                parts.append((traj.xs[:, :1] - xs[:, :1], jnp.ones_like(mask[:, :1])))
            return _scaled(parts, n)
        shooting = self.kind
        starts, offsets = _window_index(shooting, xs.shape[1] - 1)
        h = shooting.horizon
        x_windows = xs[:, starts[:, None] + np.arange(h + 1)]  # (N, W, h+1, n)
        u_windows = None if us is None else us[:, starts[:, None] + offsets]
        m_windows = mask[:, starts[:, None] + offsets]  # (N, W, h)
        times = _times(model, 0, xs.shape[1] - 1, xs.dtype)
        start = x_windows[:, :, 0] if x0s is None else x0s

        def window(x0_w, u_w, t0):
            return self._rollout(model, x0_w, h, u_w, t0).xs

        u_axis = None if u_windows is None else 1
        predicted = jax.vmap(window, in_axes=(1, u_axis, 0), out_axes=1)(
            start, u_windows, times[starts]
        )
        parts = [(predicted[:, :, 1:] - x_windows[:, :, 1:], m_windows)]
        if x0s is not None:
            first = predicted[:, :, :1] - x_windows[:, :, :1]
            parts.append((first, m_windows[..., :1]))
        return _scaled(parts, n)

    # ----- outputs ----------------------------------------------------------------

    def _output_residuals(self, model, x0s, ys, us, mask):
        p = ys.shape[-1]
        if isinstance(self.kind, MultipleShooting):
            shooting = self.kind
            starts, offsets = _window_index(shooting, ys.shape[1])
            index = starts[:, None] + offsets
            N, W, h = ys.shape[0], len(starts), shooting.horizon
            y_w = ys[:, index].reshape(N * W, h, p)
            u_w = None if us is None else us[:, index].reshape(N * W, h, -1)
            m_w = mask[:, index].reshape(N * W, h)
            times = _times(model, 0, ys.shape[1], ys.dtype)
            t0s = jnp.tile(times[starts], N)
            if x0s is not None:
                x0s = x0s.reshape(N * W, -1)
            predicted = self._predict_outputs(model, x0s, y_w, u_w, m_w, t0s)
            errors, valid = predicted - y_w, m_w
        elif isinstance(self.kind, PredictionError):
            predicted = self._prediction_closed_form(model, ys, us, mask)[0]
            errors, valid = predicted - ys, mask
        else:
            predicted = self._predict_outputs(model, x0s, ys, us, mask, None)
            errors, valid = predicted - ys, mask
        return self._weighted(errors, valid, mask)

    def _weighted(self, errors, valid, mask):
        """The output residuals `(R,)` from the errors `(..., p)` at the `valid`
        entries, normalised by the valid steps of `mask (N, T)`."""
        p = errors.shape[-1]
        root = jnp.sqrt(self.weights)
        count = jnp.maximum(jnp.sum(mask), 1).astype(errors.dtype)
        r = jnp.where(valid[..., None], errors * root[None, None], 0.0)
        return r.reshape(-1) / jnp.sqrt(p * count)

    def simulation_outputs(self, model, batch):
        """For the simulation loss on outputs with closed-form initial states: the
        residuals `(R,)`, the predicted outputs `(N, T, p)` and the initial states
        `(N, n)` from one closed-form solve (`residuals` and `initial_states`
        would each solve it again)."""
        model = materialise(model)
        ys, us, mask = masked_signals(batch)
        predicted, x0 = self._closed_form(model, ys, us, mask)
        return self._weighted(predicted - ys, mask, mask), predicted, x0

    def _predict_outputs(self, model, x0s, ys, us, mask, t0s):
        """The outputs of each experiment (or window) from its estimated initial
        state: closed form for a linear model, `x0s` (trained) otherwise."""
        T = ys.shape[1]
        if self.x0 == "closed_form":
            return self._closed_form(model, ys, us, mask)[0]
        if t0s is None:
            return self._rollout(model, x0s, T, us).ys

        def one(x0, u, t0):
            return self._rollout(model, x0, T, u, t0).ys

        return jax.vmap(one, in_axes=(0, None if us is None else 0, 0))(x0s, us, t0s)

    def _closed_form(self, model, ys, us, mask):
        """Per experiment, from its least-squares initial state: the predicted
        outputs `(N, T, p)` and the states `x0 (N, n)` (`closed_form`); with
        `separable="exact"`, from the least-squares `B`, `D` and output level too."""
        if self.separable == "exact":
            return separable_outputs(model, ys, us, mask, self.weights)
        return closed_form(FreeRun(self._simulate), model, ys, us, mask, self.weights)

    @property
    def _simulate(self):
        """`(model, x0s, num_steps, inputs) -> ys` with this loss's rollout
        options (a plain function: it holds no array of this module)."""
        method, adjoint = self.method, self.adjoint

        def simulate(model, x0, num_steps, inputs):
            return rollout(
                model,
                x0,
                num_steps,
                inputs=inputs,
                method=method,
                adjoint=Autodiff() if adjoint is None else adjoint,
            ).ys

        return simulate

    def _prediction_closed_form(self, model, ys, us, mask):
        """As `_closed_form`, for the Kalman predictor's `horizon`-step predictions:
        the predictions `(N, T, p)` from the weighted least-squares $\\hat x_0$
        `(N, n)`, and those states (`closed_form`)."""
        predictor = KalmanPredictor(self.kind.horizon)
        return closed_form(predictor, model, ys, us, mask, self.weights)

    def initial_states(self, model, batch):
        """The initial states the loss uses for `model` on `batch` when they are
        estimated in closed form: `(N, n)`, or `(N, W, n)` for multiple shooting."""
        model = materialise(model)
        ys, us, mask = masked_signals(batch)
        N, T, p = ys.shape
        if isinstance(self.kind, PredictionError):
            return self._prediction_closed_form(model, ys, us, mask)[1]
        if isinstance(self.kind, MultipleShooting):
            starts, offsets = _window_index(self.kind, T)
            index = starts[:, None] + offsets
            h = self.kind.horizon
            ys = ys[:, index].reshape(-1, h, p)
            us = None if us is None else us[:, index].reshape(-1, h, us.shape[-1])
            mask = mask[:, index].reshape(-1, h)
            return self._closed_form(model, ys, us, mask)[1].reshape(N, len(starts), -1)
        return self._closed_form(model, ys, us, mask)[1]


def _window_index(shooting: MultipleShooting, num_steps: int):
    return shooting.starts(num_steps), np.arange(shooting.horizon)


def _scaled(parts, n: int):
    """Concatenate the masked errors of `parts` (`(errors (..., n), valid (...))`),
    scaled so that the sum of squares is their mean over the valid entries."""
    count = sum(jnp.sum(valid) for _, valid in parts) * n
    flat = [jnp.where(valid[..., None], e, 0.0).reshape(-1) for e, valid in parts]
    r = jnp.concatenate(flat)
    return r / jnp.sqrt(jnp.maximum(count, 1).astype(r.dtype))


def one_step_predictions(model, xs, us):
    """`model.step(t, x_t, u_t)` for every step of every trajectory, `(N, T, n)`."""
    ts = _times(model, 0, xs.shape[-2] - 1, xs.dtype)[:-1]

    def one(x_traj, u_traj):
        if u_traj is None:
            return jax.vmap(lambda t, x: model.step(t, x, None))(ts, x_traj[:-1])
        return jax.vmap(model.step)(ts, x_traj[:-1], u_traj)

    if us is None:
        return jax.vmap(lambda x: one(x, None))(xs)
    return jax.vmap(one)(xs, us)
