"""Fitting systems to data: closed-form least squares and gradient fitting."""

import dataclasses
import math
import warnings
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, PRNGKeyArray

from ._data import Dataset
from ._metrics import nrmse, spectral_radius
from ._ode import Discretized
from ._rollout import _times, rollout
from ._stable import StableLinearSystem
from ._system import AbstractSystem, LinearSystem
from ._train import train, TrainResult


def _check_data(call: str, data) -> Dataset:
    if not isinstance(data, Dataset):
        raise TypeError(
            f"{call}(data=...): expected a dynsys.Dataset, got {type(data)}."
        )
    return data


def fit_least_squares(
    data: Dataset, *, ridge: float = 0.0, offset: bool = False
) -> LinearSystem:
    """The one-step least-squares `LinearSystem` (DMD with control) for `data`.

    Stacks every transition $(x_t, u_t) \\to x_{t+1}$ of every trajectory and solves

    $\\min_{K, B, c} \\sum_{i,t} \\lVert x^i_{t+1} - K x^i_t - B u^i_t - c \\rVert^2
    + \\mathrm{ridge}\\,(\\lVert K \\rVert_F^2 + \\lVert B \\rVert_F^2)$

    by an orthogonal (QR/SVD) least-squares solve, not the normal equations, so
    noise-free data give `K` and `B` to round-off. The `offset` $c$ is not
    penalised. With measurement noise on the states this estimate is biased
    (errors in variables); `fit(..., loss="simulation")` is not.

    **Arguments:**

    - `data`: a `Dataset`; `B` is estimated when it has inputs.
    - `ridge`: the Tikhonov weight ($\\ge 0$).
    - `offset`: also estimate a constant term $c$.

    **Returns:**

    A `LinearSystem(K, B, offset=...)`, with `dt` from `data.ts` when uniform.

    **Raises:**

    `ValueError` if `ridge` is negative, or if without ridge the regressors
    $[x_t, u_t, 1]$ do not have full column rank (too few transitions, or inputs
    that do not excite the system), which would make the estimate not unique.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]),
                                 B=jnp.array([[0.0], [1.0]]))
    us = jax.random.normal(jax.random.key(1), (4, 30, 1))
    data = dynsys.simulate(system, jnp.ones((4, 2)), 30, inputs=us)
    estimate = dynsys.fit_least_squares(data)   # estimate.K == system.K to round-off
    ```
    """
    data = _check_data("fit_least_squares", data)
    if not (isinstance(ridge, int | float) and math.isfinite(ridge) and ridge >= 0):
        raise ValueError(
            f"fit_least_squares(ridge=...): expected a finite number >= 0, got "
            f"{ridge!r}."
        )
    if data.xs is None:
        raise ValueError(
            "fit_least_squares(data=...): the data have measured outputs ys but no "
            "states xs; use dynsys.fit_subspace(data) for input-output data."
        )
    n, m = data.state_size, data.input_size
    real = np.asarray(data.step_mask)  # the transitions of ragged data, no padding
    X = data.xs[:, :-1][real]
    Y = data.xs[:, 1:][real]
    columns = [X]
    if m:
        assert data.us is not None
        columns.append(data.us[real])
    if offset:
        columns.append(jnp.ones((X.shape[0], 1), X.dtype))
    Z = jnp.concatenate(columns, axis=1)
    d = Z.shape[1]
    if ridge > 0:
        penalised = jnp.sqrt(ridge) * jnp.eye(n + m, d, dtype=Z.dtype)
        Z = jnp.concatenate([Z, penalised], axis=0)
        Y = jnp.concatenate([Y, jnp.zeros((n + m, n), Y.dtype)], axis=0)
    else:
        rank = int(np.linalg.matrix_rank(np.asarray(Z)))
        if rank < d:
            names = "[x_t" + (", u_t" if m else "") + (", 1" if offset else "") + "]"
            raise ValueError(
                f"fit_least_squares(data=...): the regressors {names} have rank "
                f"{rank} < {d} over {Z.shape[0]} transitions, so the estimate is not "
                "unique; use more (or more varied) trajectories and inputs, or "
                "ridge > 0."
            )
    theta, *_ = jnp.linalg.lstsq(Z, Y)
    K = theta[:n].T
    B = theta[n : n + m].T if m else None
    c = theta[n + m] if offset else None
    return LinearSystem(K, B, offset=c, dt=data.dt)


class MultipleShooting(eqx.Module):
    """The multiple-shooting loss: free-run simulation over windows of the data.

    Each trajectory is cut into windows of `horizon` steps starting every `stride`
    steps; each window is simulated from its measured first state (or, with
    `fit(..., fit_x0=True)`, from a fitted state per window) and compared with the
    data. Short windows keep the loss smooth for long or chaotic trajectories, where
    a full free run has a rugged loss surface; `horizon=1` is the one-step loss and
    `horizon=T` the simulation loss.

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


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What `fit` returns.

    **Fields:**

    - `model`: the best model (lowest validation loss when `val_data` was given,
        else lowest training loss).
    - `x0s`: with `fit_x0=True`, the fitted initial states of the best step, shape
        `(N, n)` (or `(N, W, n)`, one per window, for `MultipleShooting`); else
        `None`.
    - `losses`: the training loss of each step, shape `(steps_run,)`.
    - `val_losses`: `(step, validation loss)` pairs (empty without `val_data`).
    - `best_step`: the step of `model`.
    - `stop_reason`: `None` if every step ran, else why the fit stopped (e.g. a
        non-finite loss, naming the step).
    - `metrics`: `{"train": {...}, "validation": {...}}` (the latter only with
        `val_data`), each with `loss`, `simulation_nrmse`, `fit_percent` (free run
        from each trajectory's first state over all steps), `one_step_nrmse`, and
        `spectral_radius` for models with a transition matrix `K`.
    - `train_result`: the underlying `TrainResult`.
    """

    model: Any
    x0s: Array | None
    losses: np.ndarray
    val_losses: list[tuple[int, float]]
    best_step: int
    stop_reason: str | None
    metrics: dict[str, dict[str, float]]
    train_result: TrainResult


def _materialise(model: AbstractSystem) -> AbstractSystem:
    """Compute derived matrices once per loss evaluation, not once per step.

    A `StableLinearSystem` builds `K` from its parameters and a `Discretized` ODE
    takes a matrix exponential: both are turned into the equivalent `LinearSystem`
    (differentiably) before the rollout.
    """
    if isinstance(model, StableLinearSystem | Discretized):
        return model.to_linear()
    return model


def _step_times(model, num_steps: int, dtype) -> Array:
    return _times(model, 0, num_steps, dtype)


def _squared_error(predicted, xs, fitted_x0: bool):
    """Mean squared error over the predicted states $x_1 \\dots$; with a fitted
    initial state also over $x_0$."""
    if not fitted_x0:
        predicted, xs = predicted[..., 1:, :], xs[..., 1:, :]
    return jnp.mean((predicted - xs) ** 2)


def _simulation_loss(model, xs, us, x0=None):
    start = xs[:, 0] if x0 is None else x0
    traj = rollout(model, start, xs.shape[-2] - 1, inputs=us)
    return _squared_error(traj.xs, xs, x0 is not None)


def _one_step_predictions(model, xs, us):
    ts = _step_times(model, xs.shape[-2] - 1, xs.dtype)[:-1]

    def one(x_traj, u_traj):
        if u_traj is None:
            return jax.vmap(lambda t, x: model.step(t, x, None))(ts, x_traj[:-1])
        return jax.vmap(model.step)(ts, x_traj[:-1], u_traj)

    if us is None:
        return jax.vmap(lambda x: one(x, None))(xs)
    return jax.vmap(one)(xs, us)


def _one_step_loss(model, xs, us):
    return jnp.mean((_one_step_predictions(model, xs, us) - xs[:, 1:]) ** 2)


def _windows(shooting: MultipleShooting, xs, us):
    T = xs.shape[1] - 1
    starts = shooting.starts(T)
    h = shooting.horizon
    x_windows = xs[:, starts[:, None] + np.arange(h + 1)]  # (N, W, h+1, n)
    u_windows = None if us is None else us[:, starts[:, None] + np.arange(h)]
    return starts, x_windows, u_windows


def _shooting_loss(model, shooting: MultipleShooting, xs, us, x0=None):
    starts, x_windows, u_windows = _windows(shooting, xs, us)
    times = _step_times(model, xs.shape[1] - 1, xs.dtype)
    fitted_x0 = x0 is not None
    if x0 is None:
        x0 = x_windows[:, :, 0]

    def window(x0_w, u_w, x_w, t0):
        traj = rollout(model, x0_w, shooting.horizon, inputs=u_w, t0=t0)
        return _squared_error(traj.xs, x_w, fitted_x0)

    u_axis = None if u_windows is None else 1
    per_window = jax.vmap(window, in_axes=(1, u_axis, 1, 0))(
        x0, u_windows, x_windows, times[starts]
    )
    return jnp.mean(per_window)


LossName = Literal["simulation", "one_step"]


def _check_loss(loss, data: Dataset):
    if isinstance(loss, MultipleShooting):
        if loss.horizon > data.num_steps:
            raise ValueError(
                f"fit(loss=MultipleShooting(horizon={loss.horizon})): the horizon is "
                f"longer than the trajectories ({data.num_steps} steps); use a "
                f"horizon <= {data.num_steps}."
            )
        return loss
    if loss not in ("simulation", "one_step"):
        raise ValueError(
            "fit(loss=...): expected 'simulation', 'one_step' or "
            f"MultipleShooting(horizon), got {loss!r}."
        )
    return loss


def _check_compatible(call: str, model: AbstractSystem, data: Dataset, name: str):
    if model.state_size != data.state_size:
        raise ValueError(
            f"{call}({name}=...): the data have n = {data.state_size} state columns "
            f"but the model has state_size = {model.state_size}."
        )
    m_data, m_model = data.input_size, model.input_size
    if m_data and not m_model:
        raise ValueError(
            f"{call}({name}=...): the data have inputs (m = {m_data} columns) but "
            f"the model {type(model).__name__} takes no input (input_size = 0)."
        )
    if m_model and not m_data:
        raise ValueError(
            f"{call}({name}=...): the model {type(model).__name__} takes inputs "
            f"(input_size = {m_model}) but the data have none (us is None)."
        )
    if m_data != m_model:
        raise ValueError(
            f"{call}({name}=...): the data have m = {m_data} input columns but the "
            f"model has input_size = {m_model}."
        )


def _loss_value(loss, model, xs, us, x0=None):
    model = _materialise(model)
    if loss == "one_step":
        return _one_step_loss(model, xs, us)
    if loss == "simulation":
        return _simulation_loss(model, xs, us, x0)
    return _shooting_loss(model, loss, xs, us, x0)


@eqx.filter_jit
def _evaluate(model, loss, xs, us, x0):
    model = _materialise(model)
    # The free run starts from the fitted initial state (the first window's, for
    # multiple shooting) when there is one, else from the measured one.
    start = xs[:, 0] if x0 is None else (x0 if x0.ndim == 2 else x0[:, 0])
    simulated = rollout(model, start, xs.shape[1] - 1, inputs=us).xs
    one_step = _one_step_predictions(model, xs, us)
    return (
        _loss_value(loss, model, xs, us, x0),
        nrmse(xs[:, 1:], simulated[:, 1:]),
        nrmse(xs[:, 1:], one_step),
    )


def _metrics(model, loss, data: Dataset, x0=None) -> dict[str, float]:
    value, sim, one = (float(v) for v in _evaluate(model, loss, data.xs, data.us, x0))
    metrics = {
        "loss": value,
        "simulation_nrmse": sim,
        "fit_percent": 100.0 * (1.0 - sim),
        "one_step_nrmse": one,
    }
    if hasattr(model, "K"):
        metrics["spectral_radius"] = spectral_radius(model.K)
    return metrics


def fit(
    model: AbstractSystem,
    data: Dataset,
    *,
    loss: LossName | MultipleShooting = "simulation",
    optimizer: optax.GradientTransformation | None = None,
    num_steps: int,
    batch_size: int | None = None,
    fit_x0: bool = False,
    key: PRNGKeyArray | None = None,
    progress: bool = True,
    val_data: Dataset | None = None,
) -> FitResult:
    """Fit the parameters of any `AbstractSystem` to trajectories by gradient descent.

    Minimises the mean squared error between the data's states and the model's
    predictions of them ($x_1 \\dots$; also $x_0$ when it is fitted), with `optax`
    through `dynsys.train` (one jitted step, progress bar, best-model tracking, a
    stop at the first non-finite loss or gradient):

    - `"simulation"`: the free run from each trajectory's first state over all `T`
        steps, driven by the data's inputs (output error; unbiased under measurement
        noise, but a rugged loss for long or chaotic data);
    - `"one_step"`: $x_{t+1}$ against `model.step(t, x_t, u_t)` (equation error; fast
        and convex for linear models, biased by measurement noise);
    - `MultipleShooting(horizon)`: free runs over windows of `horizon` steps.

    Every inexact array of `model` is trained (nonlinear and neural models too).

    **Arguments:**

    - `model`: the initial `AbstractSystem` (e.g. `fit_least_squares(data)`).
    - `data`: a `Dataset` whose widths match the model's `state_size` and
        `input_size`.
    - `loss`: `"simulation"`, `"one_step"` or a `MultipleShooting`.
    - `optimizer`: an optax optimiser; default `optax.adam(1e-3)`.
    - `num_steps`: the number of optimiser steps.
    - `batch_size`: trajectories per step (`None`: all).
    - `fit_x0`: also fit each trajectory's initial state (each window's, for
        `MultipleShooting`), starting from the measured one; the exact gradient with
        respect to `x0` drives it. Not with `"one_step"`.
    - `key`: PRNG key for the minibatches.
    - `progress`: show a progress bar.
    - `val_data`: an optional held-out `Dataset`; its loss (from its measured
        initial states) is evaluated every 10 steps and picks the best model.

    **Returns:**

    A `FitResult` (the best model, the loss histories, the best step, metrics on the
    training and validation data).

    **Raises:**

    `ValueError` naming the argument: state or input widths that do not match the
    model (inputs in the data but a model without inputs, or the reverse), an
    unknown loss, a shooting horizon longer than the trajectories, `fit_x0` with
    `"one_step"`.

    **Example:**

    ```python
    true = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    data = dynsys.simulate(true, jax.random.normal(jax.random.key(0), (4, 2)), 20)
    start = dynsys.LinearSystem(K=0.5 * jnp.eye(2))
    result = dynsys.fit(start, data, optimizer=optax.adam(1e-2), num_steps=200,
                        progress=False)
    result.metrics["train"]["fit_percent"]  # close to 100
    ```
    """
    if not isinstance(model, AbstractSystem):
        raise TypeError(
            f"fit(model=...): expected an AbstractSystem, got {type(model)}."
        )
    data = _check_data("fit", data)
    _check_compatible("fit", model, data, "data")
    loss = _check_loss(loss, data)
    if val_data is not None:
        val_data = _check_data("fit", val_data)
        _check_compatible("fit", model, val_data, "val_data")
        if isinstance(loss, MultipleShooting) and loss.horizon > val_data.num_steps:
            raise ValueError(
                f"fit(val_data=...): the MultipleShooting horizon {loss.horizon} is "
                f"longer than the validation trajectories ({val_data.num_steps} "
                "steps)."
            )
    if fit_x0 and loss == "one_step":
        raise ValueError(
            "fit(fit_x0=True): the one-step loss does not depend on the initial "
            "state; use loss='simulation' or MultipleShooting(horizon)."
        )
    if optimizer is None:
        optimizer = optax.adam(1e-3)

    N = data.num_trajectories
    batch = {"xs": data.xs, "index": jnp.arange(N)}
    if data.us is not None:
        batch["us"] = data.us
    x0s = None
    if fit_x0:
        if isinstance(loss, MultipleShooting):
            x0s = _windows(loss, data.xs, data.us)[1][:, :, 0]
        else:
            x0s = data.xs[:, 0]

    def loss_fn(params, batch):
        model, x0s = params
        x0 = None if x0s is None else x0s[batch["index"]]
        return _loss_value(loss, model, batch["xs"], batch.get("us"), x0)

    val_fn = None
    if val_data is not None:
        val_xs, val_us = val_data.xs, val_data.us

        def val_fn(params):
            return _loss_value(loss, params[0], val_xs, val_us)

    result = train(
        loss_fn,
        (model, x0s),
        data=batch,
        optimizer=optimizer,
        num_steps=num_steps,
        batch_size=batch_size,
        key=key,
        progress=progress,
        val_fn=val_fn,
    )
    best_model, best_x0s = result.model
    metrics = {"train": _metrics(best_model, loss, data, best_x0s)}
    if val_data is not None:
        metrics["validation"] = _metrics(best_model, loss, val_data)
    if result.stop_reason is not None and "non-finite" in result.stop_reason:
        warnings.warn(
            f"fit: {result.stop_reason}; returning the model of step "
            f"{result.best_step}.",
            stacklevel=2,
        )
    return FitResult(
        model=best_model,
        x0s=best_x0s,
        losses=result.losses,
        val_losses=list(result.val_losses),
        best_step=result.best_step,
        stop_reason=result.stop_reason,
        metrics=metrics,
        train_result=result,
    )
