"""`fit`: fit any `AbstractSystem` to trajectories (states) or to measured outputs
(output error), with a default solver that needs no learning rate."""

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray, PyTree

from .._compile.jit import device_array, top_level_jit
from .._type_checks import checks_own_arguments
from .._data.checks import check_data, warn_findings
from .._data.dataset import Dataset
from .._rollout.adjoint import AbstractAdjoint, LinearAdjoint
from .._rollout.method import AbstractMethod
from .._rollout.rollout import rollout
from .._rollout.sharding import to_host
from .._systems.system import AbstractSystem
from .continuation import Continuation, NotResumable
from .covariance import LazyCovariance, ParameterCovariance
from .flat_loss import FLAT_STEPS, HELD_OUT_PATIENCE, HELD_OUT_STEPS
from .host_blas import on_one_blas_thread
from .least_squares import _check_data, step_mask
from .length_buckets import shared_length
from .losses import (
    AbstractLoss,
    channel_weights,
    FitObjective,
    is_linear,
    materialise,
    MultipleShooting,
    one_step_predictions,
    PredictionError,
    Simulation,
)
from .metrics import fit_percent, nrmse, spectral_radius
from .padded import with_free_parameters
from .prediction_fit import (
    kalman_outputs,
    prediction_loss,
    predictor_radius,
    warn_after_fit,
    with_innovation_covariance,
)
from .separable import applies as separable_applies
from .levenberg_marquardt import LevenbergMarquardt
from .optax_solver import LBFGS
from .solver_base import AbstractSolver
from .solvers import (
    as_solver,
    DEFAULT_MAX_STEPS,
    default_strategy,
    resolved_levenberg_marquardt,
    tolerances,
)
from .train import optimise, TrainResult


if TYPE_CHECKING:
    import optax


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What `fit` returns.

    **Fields:**

    - `model`: the best model (lowest validation loss when `val_data` was given,
        else lowest training loss).
    - `x0s`: the initial states of the best model, when they are not the measured
        ones: with `fit_x0=True` on state data the fitted ones, on output data the
        estimated ones (closed form for linear models, trained otherwise); shape
        `(N, n)` (or `(N, W, n)`, one per window, for `MultipleShooting`); else
        `None`.
    - `losses`: the training loss of each step, shape `(steps_run,)`.
    - `val_losses`: `(step, validation loss)` pairs (empty without `val_data`).
    - `best_step`: the step of `model`.
    - `stop_reason`: `None` when the fit ran normally (converged, or every step
        ran); else what went wrong, with a suggestion: a non-finite loss (naming the
        step), a fit no better than its start, a loss that grew by orders of
        magnitude, an interrupt or the callback; or, with dynsys's solvers,
        `"loss flat for 20 steps ..."` (stopped early, nothing wrong).
    - `converged`: whether the solver's tolerances ended the fit.
    - `optimizer`: the solver used, in words (e.g. `"Levenberg–Marquardt
        (scaled)"`).
    - `steps_run`: the number of solver steps run.
    - `metrics`: `{"train": {...}, "validation": {...}}` (the latter only with
        `val_data`), each with `loss`, `simulation_nrmse` and `fit_percent` (free
        run over all steps, from the measured, fitted or estimated initial states,
        on the outputs for output data), `one_step_nrmse` (state data only),
        `prediction_nrmse`, `prediction_fit_percent` and
        `predictor_spectral_radius` (loss `Prediction`), and `spectral_radius`
        for models with a transition matrix `K`.
    - `train_result`: the underlying `TrainResult`.
    - `covariance` (computed on first access): the Gauss–Newton covariance of the
        trained model parameters at the fit, a `ParameterCovariance`, or `None`
        where it cannot be computed, with the reason in `covariance_reason`. Read
        it through identifiable quantities (docs/uncertainty.md).
    """

    model: Any
    x0s: Array | None
    losses: np.ndarray
    val_losses: list[tuple[int, float]]
    best_step: int
    stop_reason: str | None
    metrics: dict[str, dict[str, float]]
    train_result: TrainResult
    converged: bool = False
    optimizer: str = ""
    steps_run: int = 0
    uncertainty: LazyCovariance | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    @property
    def covariance(self) -> ParameterCovariance | None:
        return None if self.uncertainty is None else self.uncertainty.result()[0]

    @property
    def covariance_reason(self) -> str | None:
        """Why `covariance` is `None` (else `None`)."""
        if self.uncertainty is None:
            return "not computed: no least-squares objective"
        return self.uncertainty.result()[1]


# The loss object to name where a string is given.
_LOSS_OBJECTS = {
    "simulation": "Simulation()",
    "one_step": "OneStep()",
    "prediction": "Prediction(horizon=1)",
    "shooting": "MultipleShooting(horizon)",
}


def _loss_kind(loss):
    """`fit(loss=...)` as `FitObjective.kind` (`AbstractLoss.kind`); a one-line
    error for a string or anything else."""
    if isinstance(loss, AbstractLoss):
        return loss.kind()
    if isinstance(loss, str):
        example = _LOSS_OBJECTS.get(loss, "Simulation()")
        raise ValueError(
            f"fit(loss={loss!r}): pass a loss object such as dynsys.{example}."
        )
    raise ValueError(
        "fit(loss=...): expected Simulation(), OneStep(), Prediction(horizon) or "
        f"MultipleShooting(horizon), got {loss!r}."
    )


def _has_outputs(data) -> bool:
    return getattr(data, "ys", None) is not None


def _check_loss(loss, data: Dataset):
    if isinstance(loss, MultipleShooting):
        if loss.horizon > data.num_steps:
            raise ValueError(
                f"fit(loss=MultipleShooting(horizon={loss.horizon})): the horizon is "
                f"longer than the trajectories ({data.num_steps} steps); use a "
                f"horizon <= {data.num_steps}."
            )
        return loss
    if isinstance(loss, PredictionError):
        return loss
    if loss == "one_step" and _has_outputs(data):
        raise ValueError(
            "fit(loss=OneStep()): the data have outputs (ys), not states; a one-step "
            "prediction needs the state at each step, which output data do not "
            "measure. Use loss=Simulation(), or MultipleShooting(horizon) (each "
            "window's state is estimated)."
        )
    return loss


def _check_compatible(call: str, model: AbstractSystem, data: Dataset, name: str):
    if _has_outputs(data):
        p = data.ys.shape[-1]
        if model.output_size != p:
            raise ValueError(
                f"{call}({name}=...): the data have p = {p} output channels but the "
                f"model has output_size = {model.output_size}."
            )
    elif model.state_size != data.state_size:
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


def _model_dtype(model):
    leaves = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    return jnp.result_type(*leaves) if leaves else jnp.result_type(float)


def _batch(data: Dataset, dtype) -> dict:
    """The arrays the loss reads, each with the experiments on its leading axis, in
    the model's floating dtype (a float32 model is fitted in float32)."""
    N = data.num_trajectories
    index = np.arange(N, dtype=jax.dtypes.canonicalize_dtype(int))
    batch = {"index": device_array(index), "mask": device_array(step_mask(data))}
    if _has_outputs(data):
        batch["ys"] = device_array(data.ys, dtype)
    else:
        batch["xs"] = device_array(data.xs, dtype)
    if data.us is not None:
        batch["us"] = device_array(data.us, dtype)
    return batch


def _channel_weights(ys: np.ndarray, mask: np.ndarray, dtype) -> Array:
    """`channel_weights` on the host (NumPy, float64, then `dtype`): as JAX
    operations outside `jit`, each would compile a small program of its own."""
    weights = channel_weights(ys.astype(np.float64), mask, xp=np)
    return device_array(weights, dtype)


def _objective(loss, data, model, fit_x0, method, adjoint) -> FitObjective:
    if _has_outputs(data):
        ys = to_host(data.ys)  # gathered when spread over processes
        weights = _channel_weights(ys, step_mask(data), _model_dtype(model))
        mode = "closed_form" if is_linear(model) else "trained"
        return FitObjective(loss, True, mode, method, adjoint, weights)
    mode = "fitted" if fit_x0 else "data"
    return FitObjective(loss, False, mode, method, adjoint, None)


class _ValidationLoss(eqx.Module):
    """The loss on held-out data (from their measured or estimated initial
    states)."""

    objective: FitObjective
    batch: dict
    # `evaluate` calls it as it is: it compiles `_predict`, the program of the
    # fit's validation metrics, rather than a program of its own.
    compiles_itself = True

    def __call__(self, params):
        return _predict(self.objective, params[0], None, self.batch)[0]

    def traced(self) -> "_HeldOutLoss":
        """The same loss, to be traced inside another program (the chunk's)."""
        return _HeldOutLoss(self.objective, self.batch)


class _HeldOutLoss(eqx.Module):
    """`_ValidationLoss` traced inside the caller's program (`chunk.HeldOutEachStep`:
    the held-out loss of every Levenberg–Marquardt step)."""

    objective: FitObjective
    batch: dict

    def __call__(self, params):
        return _predictions(self.objective, params[0], None, self.batch)[0]


class _ModelCallback(eqx.Module):
    callback: Any = eqx.field(static=True)

    def __call__(self, step, params, loss):
        return self.callback(step, params[0], loss)


def _initial_x0s(objective: FitObjective, loss, data: Dataset, model):
    """The trained initial states' starting values, or `None`."""
    n = model.state_size
    N = data.num_trajectories
    if objective.x0 == "fitted":
        xs = jnp.asarray(data.xs, _model_dtype(model))
        if isinstance(loss, MultipleShooting):
            return xs[:, loss.starts(data.num_steps)]
        return xs[:, 0]
    if objective.x0 == "trained":
        dtype = _model_dtype(model)
        if isinstance(loss, MultipleShooting):
            return jnp.zeros((N, len(loss.starts(data.num_steps)), n), dtype)
        return jnp.zeros((N, n), dtype)
    return None


def _strategy(solver, objective, params, batch, batch_size, adjoint, rtol, atol):
    """The solver (`fit(solver=...)`, or the default's choice) and its default
    number of steps."""
    if solver is not None:
        if rtol is not None or atol is not None:
            raise ValueError(
                "fit(rtol=..., atol=...): tolerances apply to the default solver "
                "(solver=None) only; give them to the solver, e.g. "
                "LevenbergMarquardt(rtol=...)."
            )
        solver = as_solver(solver, "fit")
        if isinstance(solver, LevenbergMarquardt):
            problem = (objective, params, batch, batch_size, adjoint)
            return _levenberg_marquardt(solver, *problem)
        kind = "lbfgs" if isinstance(solver, LBFGS) else "optax"
        return solver, DEFAULT_MAX_STEPS[kind]
    if batch_size is not None:
        raise ValueError(
            f"fit(batch_size={batch_size}): the default solver uses all the data "
            "at each step; pass an optax transform (e.g. solver=optax.adam(1e-3)) "
            "to train on minibatches."
        )
    num_params, dtype = _parameter_count(params)
    if isinstance(adjoint, LinearAdjoint):
        # Levenberg–Marquardt builds its Jacobian in forward mode, which the
        # hand-written reverse pass of LinearAdjoint does not provide.
        default_rtol = tolerances(dtype)[0] if rtol is None else rtol
        return LBFGS(rtol=default_rtol**0.75), DEFAULT_MAX_STEPS["lbfgs"]
    num_experiments = batch["mask"].shape[0]
    strategy, kind = default_strategy(
        objective.num_residuals(batch), num_params, dtype, rtol, atol, num_experiments
    )
    return strategy, DEFAULT_MAX_STEPS[kind]


def _parameter_count(params) -> tuple[int, Any]:
    """The number of trained parameters and their dtype."""
    trainable = [leaf for leaf in jax.tree.leaves(params) if eqx.is_inexact_array(leaf)]
    return sum(leaf.size for leaf in trainable), trainable[0].dtype


def _levenberg_marquardt(solver, objective, params, batch, batch_size, adjoint):
    """A user's `LevenbergMarquardt`, checked and resolved to the problem (its
    `None` fields as the default decides them), and its default number of
    steps."""
    if batch_size is not None:
        raise ValueError(
            f"fit(batch_size={batch_size}): LevenbergMarquardt uses all the data at "
            "each step; pass an optax transform (e.g. solver=optax.adam(1e-3)) to "
            "train on minibatches."
        )
    if isinstance(adjoint, LinearAdjoint):
        raise ValueError(
            "fit(solver=LevenbergMarquardt(...)): Levenberg–Marquardt builds its "
            "Jacobian in forward mode, which adjoint=LinearAdjoint() does not "
            "provide; use solver=LBFGS() or another adjoint."
        )
    num_params, dtype = _parameter_count(params)
    sizes = (objective.num_residuals(batch), num_params, dtype, batch["mask"].shape[0])
    return resolved_levenberg_marquardt(solver, *sizes), DEFAULT_MAX_STEPS["lm"]


def _chunk(strategy, params, batch) -> int | None:
    """Steps per dispatch for Levenberg–Marquardt: between 8 and 32, fewer as the
    work of a step (about the batch's size times the number of parameters: one
    forward-mode derivative per parameter) grows. Each chunk starts with one extra
    (warm-up) evaluation of the Jacobian, so small problems gain from long chunks
    (6 states, 8 x 400 steps, 48 parameters: 24 steps, 10 % faster than 8)."""
    if not isinstance(strategy, LevenbergMarquardt):
        return None
    num_params = sum(
        leaf.size for leaf in jax.tree.leaves(params) if eqx.is_inexact_array(leaf)
    )
    size = sum(leaf.size for leaf in jax.tree.leaves(batch) if eqx.is_array(leaf))
    return int(min(32, max(8, 2**25 // max(1, size * num_params))))


def _suggestion(default: bool) -> str:
    if default:
        return (
            "try a better start (fit_subspace or fit_least_squares), "
            "StableLinearSystem.from_linear(start), or MultipleShooting(horizon)"
        )
    return (
        "try solver=None (Levenberg–Marquardt or L-BFGS, no learning rate to "
        "tune), a smaller learning rate, or StableLinearSystem"
    )


def _honest_stop_reason(result: TrainResult, default: bool, exact: float) -> str | None:
    """`result.stop_reason`, or why the fit is not to be trusted: no better than its
    start, or a loss that grew by orders of magnitude. A start whose loss is at
    round-off level (below `exact`) is already exact: nothing to report."""
    if result.stop_reason is not None:
        if result.stop_reason.startswith("non-finite"):
            return (
                f"{result.stop_reason} (step {result.best_step}); "
                f"{_suggestion(default)}"
            )
        return result.stop_reason
    losses = result.losses
    finite = losses[np.isfinite(losses)]
    if len(finite) == 0:
        return None
    start, largest = float(losses[0]), float(np.max(finite))
    if start <= exact:
        return None
    problems = []
    if result.best_step == 0 and not result.converged and result.steps_run > 1:
        problems.append("no better than the start (best step 0)")
    if largest > 100.0 * start and largest > 0:
        problems.append(
            f"the loss grew by orders of magnitude, from {start:.3g} to {largest:.3g}"
        )
    if not problems:
        return None
    return "; ".join(problems) + f"; {_suggestion(default)}"


def _exact_loss(batch) -> float:
    """A loss at round-off level for these data: (1000 eps)^2 times the mean square
    of the targets (1 for the normalised output loss)."""
    target = batch["ys"] if "ys" in batch else batch["xs"]
    eps = float(jnp.finfo(target.dtype).eps)
    scale = 1.0 if "ys" in batch else float(jnp.mean(target**2))
    return (1e3 * eps) ** 2 * scale


def _predictions(objective: FitObjective, model, x0s, batch):
    """Free-run predictions over all steps (outputs `(N, T, p)`, or states `(N, T,
    n)`) and, on state data, one-step predictions; plus the loss and the initial
    states (estimated in closed form, else `x0s`).

    One program for the final metrics and the initial states, and, on the
    validation data, for the validation loss too (`_ValidationLoss`)."""
    linear = materialise(model)
    closed_form = objective.x0 == "closed_form"
    if objective.outputs and closed_form and objective.kind == "simulation":
        residuals, predicted, x0s = objective.simulation_outputs(linear, batch)
        return jnp.sum(residuals**2), predicted, None, x0s
    loss = objective.loss((model, x0s), batch)
    if closed_form:
        x0s = objective.initial_states(model, batch)
    simulation = dataclasses.replace(objective, kind="simulation")
    mask = batch["mask"]
    us = batch.get("us")
    if us is not None:
        us = jnp.where(mask[..., None], us, 0.0)
    if objective.outputs:
        ys = jnp.where(mask[..., None], batch["ys"], 0.0)
        start = x0s
        if start is not None and start.ndim == 3:
            start = start[:, 0]
        predicted = simulation._predict_outputs(linear, start, ys, us, mask, None)
        return loss, predicted, None, x0s
    xs = batch["xs"]
    start = xs[:, 0] if x0s is None else (x0s if x0s.ndim == 2 else x0s[:, 0])
    steps = xs.shape[1] - 1
    free = rollout(linear, start, steps, inputs=us, method=objective.method).xs
    return loss, free[:, 1:], one_step_predictions(linear, xs, us), x0s


_predict = top_level_jit(_predictions)


@top_level_jit
def _initial_states(objective: FitObjective, model, batch):
    """The closed-form initial states alone (`fit` takes them from `_predict`)."""
    return objective.initial_states(model, batch)


def _masked_scores(y, y_hat, mask) -> tuple[float, float]:
    """`(NRMSE, fit %)`, each the mean over the channels (see `nrmse`), over the
    valid steps, on the host in float64."""
    # to_host: data spread over several processes are gathered (a one-off).
    valid = to_host(mask)
    y, y_hat = to_host(y).astype(np.float64), to_host(y_hat).astype(np.float64)
    return (
        float(nrmse(y, y_hat, mask=valid, xp=np)),
        float(fit_percent(y, y_hat, mask=valid, xp=np)),
    )


def _metrics(objective, model, x0s, batch) -> tuple[dict[str, float], Any]:
    """The metrics of `model` on `batch`, and the initial states they used."""
    loss, free, one_step, x0s = _predict(objective, model, x0s, batch)
    mask = batch["mask"]
    target = batch["ys"] if objective.outputs else batch["xs"][:, 1:]
    simulation, simulation_fit = _masked_scores(target, free, mask)
    metrics = {
        "loss": float(loss),
        "simulation_nrmse": simulation,
        "fit_percent": simulation_fit,
    }
    if one_step is not None:
        metrics["one_step_nrmse"] = _masked_scores(target, one_step, mask)[0]
    if isinstance(objective.kind, PredictionError):
        predicted = kalman_outputs(objective, model, batch)
        prediction, prediction_fit = _masked_scores(target, predicted, mask)
        metrics["prediction_nrmse"] = prediction
        metrics["prediction_fit_percent"] = prediction_fit
        metrics["predictor_spectral_radius"] = predictor_radius(model)
    if hasattr(model, "K"):
        metrics["spectral_radius"] = spectral_radius(model.K)
    return metrics, x0s


def _checked(model, data, loss, val_data, fit_x0, num_steps):
    """`fit`'s checks of its arguments (one-line errors naming each) and its
    warnings about the data; returns the checked `(data, loss, val_data)`."""
    if not isinstance(model, AbstractSystem):
        raise TypeError(
            f"fit(model=...): expected an AbstractSystem, got {type(model)}."
        )
    data = _check_data("fit", data)
    _check_compatible("fit", model, data, "data")
    loss = _check_loss(prediction_loss(model, data, _loss_kind(loss)), data)
    outputs = _has_outputs(data)
    if val_data is not None:
        val_data = _check_data("fit", val_data)
        _check_compatible("fit", model, val_data, "val_data")
        if _has_outputs(val_data) != outputs:
            raise ValueError(
                "fit(val_data=...): the training data have "
                + ("outputs" if outputs else "states only")
                + " but the validation data have "
                + ("outputs" if _has_outputs(val_data) else "states only")
                + "; give both the same kind of measurements."
            )
        if isinstance(loss, MultipleShooting) and loss.horizon > val_data.num_steps:
            raise ValueError(
                f"fit(val_data=...): the MultipleShooting horizon {loss.horizon} is "
                f"longer than the validation trajectories ({val_data.num_steps} "
                "steps)."
            )
        if outputs and not is_linear(model):
            raise ValueError(
                f"fit(val_data=...): the initial states of held-out output data are "
                f"estimated in closed form for linear models only, got "
                f"{type(model).__name__}; fit without val_data and validate with a "
                "known initial state."
            )
    if fit_x0 and loss == "one_step":
        raise ValueError(
            "fit(fit_x0=True): the one-step loss does not depend on the initial "
            "state; use loss=Simulation() or MultipleShooting(horizon)."
        )
    if num_steps is not None and (
        isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1
    ):
        raise ValueError(
            f"fit(num_steps=...): expected a positive integer or None, got "
            f"{num_steps!r}."
        )
    if outputs and isinstance(loss, MultipleShooting) and is_linear(model):
        p, n = data.ys.shape[-1], model.state_size
        if loss.horizon * p < n:
            raise ValueError(
                f"fit(loss=MultipleShooting(horizon={loss.horizon})): each window's "
                f"initial state is estimated from its horizon * p = "
                f"{loss.horizon * p} output samples, fewer than the n = {n} states; "
                f"use a horizon >= {math.ceil(n / p)}."
            )
    warn_findings("fit", check_data(data, order=model.state_size))
    return data, loss, val_data


def _validation_loss(loss, val_data, model, method, adjoint, batch):
    """The held-out loss that picks the best model (`None` without `val_data`).

    Shorter validation records of the simulation loss on outputs are padded (and
    masked) to the length of the training `batch`, so that the training and
    validation metrics share one `_predict` program; longer ones to their own
    `shared_length`. The padding changes no value (the masked steps enter no
    sum), only the order of summation."""
    if val_data is None:
        return None
    val_objective = _objective(loss, val_data, model, False, method, adjoint)
    val_batch = _batch(val_data, _model_dtype(model))
    if not _paddable(val_objective, loss, val_batch):
        return _ValidationLoss(val_objective, val_batch)
    steps = val_data.num_steps
    padding = batch["mask"].shape[1] - steps
    if val_data.num_trajectories == batch["mask"].shape[0] and padding > 0:
        val_objective = dataclasses.replace(val_objective, method=method)
        return _ValidationLoss(val_objective, _padded(val_batch, padding))
    return _ValidationLoss(val_objective, _padded_to_share(val_batch, steps))


def _paddable(objective, loss, batch: dict) -> bool:
    """Whether masked steps may be added after the last of `batch`'s records: the
    simulation loss on outputs from initial states solved in closed form (each
    masked step enters no sum), on arrays of one device (padding gathers them)."""
    return (
        objective.outputs
        and objective.x0 == "closed_form"
        and loss == "simulation"
        and not any(
            isinstance(array, jax.Array) and len(array.sharding.device_set) > 1
            for array in batch.values()
        )
    )


def _padded_to_share(batch: dict, steps: int) -> dict:
    """`batch` of `steps` samples padded to its `shared_length`, a length whose
    programs records of other lengths but the same shapes otherwise may share."""
    signature = ",".join(
        f"{name}:{array.shape[0]}x{'x'.join(map(str, array.shape[2:]))}:{array.dtype}"
        for name, array in sorted(batch.items())
        if name != "index"
    )
    return _padded(batch, shared_length(steps, signature) - steps)


def _padded(batch: dict, padding: int) -> dict:
    """`batch` with `padding` masked steps (zeros) after the last."""
    if padding <= 0:
        return batch

    def pad(name, array):
        if name == "index":
            return array
        widths = [(0, 0), (0, padding)] + [(0, 0)] * (array.ndim - 2)
        return device_array(np.pad(to_host(array), widths))

    return {name: pad(name, array) for name, array in batch.items()}


def _held_out_patience(managed: bool, each_step: bool) -> int | None:
    """The patience of dynsys's solvers (`_manages_stopping`) with validation data:
    in steps of held-out losses evaluated at every step (Levenberg–Marquardt) or
    every 10 (L-BFGS)."""
    if not managed:
        return None
    return HELD_OUT_STEPS if each_step else HELD_OUT_PATIENCE


def _warn_untrusted(stop_reason: str | None):
    """Warn once when the fit is not to be trusted (not when the user stopped it or
    its loss stopped changing)."""
    if stop_reason is not None and not stop_reason.startswith(
        ("stopped by", "loss flat", "held-out loss not improved")
    ):
        # stacklevel 3: the caller of `fit` (this, `fit`).
        warnings.warn(f"fit: {stop_reason}.", stacklevel=3)


def _fit_result(result, problem, evaluator, stop_reason, filter_spec) -> FitResult:
    """The `FitResult` of `optimise`'s `result`: the best model, its initial states
    and its metrics on the training (and validation) data."""
    objective, batch = problem.objective, problem.batch
    best_model, best_x0s = result.model
    width = (batch["ys"] if "ys" in batch else batch["xs"]).shape[-1]
    # The covariance of every parameter: B, D and the level are not eliminated.
    full = dataclasses.replace(objective, separable=None)
    uncertainty = LazyCovariance(full, result.model, batch, filter_spec, width)
    if isinstance(objective.kind, PredictionError) and objective.kind.horizon == 1:
        best_model = with_innovation_covariance(objective, best_model, batch)
    train_metrics, estimated_x0s = _metrics(objective, best_model, best_x0s, batch)
    if objective.x0 == "closed_form":
        best_x0s = estimated_x0s
    metrics = {"train": train_metrics}
    if evaluator is not None:
        metrics["validation"] = _metrics(
            evaluator.objective, best_model, None, evaluator.batch
        )[0]
    return FitResult(
        model=best_model,
        x0s=best_x0s,
        losses=result.losses,
        val_losses=list(result.val_losses),
        best_step=result.best_step,
        stop_reason=stop_reason,
        metrics=metrics,
        train_result=result,
        converged=result.converged,
        optimizer=result.optimizer,
        steps_run=result.steps_run,
        uncertainty=uncertainty,
    )


def _continuation_of(resume) -> Continuation:
    """The `continuation` of `fit(resume=...)`'s `FitResult` (`NotResumable`
    naming the argument where there is none)."""
    continuation = getattr(getattr(resume, "train_result", None), "continuation", None)
    if continuation is None:
        raise NotResumable(
            "fit(resume=...): expected the FitResult of a fit that can be continued "
            "(full data, no callback, not interrupted), got "
            f"{type(resume).__name__}"
            + (" without one" if isinstance(resume, FitResult) else "")
            + "."
        )
    return continuation


def _optimised(objective, strategy, params, batch, evaluator, **options):
    """`optimise` for `fit` (its `options` by keyword); a `resume` of another
    problem is `NotResumable` naming the argument."""
    try:
        return optimise(
            objective,
            strategy,
            params,
            data=batch,
            evaluator=evaluator,
            warn=False,
            caller="fit",
            **options,
        )
    except NotResumable as error:
        raise NotResumable(f"fit(resume=...): {error}.") from None


def _manages_stopping(strategy) -> bool:
    """Whether `strategy` is one of dynsys's own solvers (Levenberg–Marquardt,
    L-BFGS), which also stop on a flat loss or a held-out loss that stopped
    improving; an optax transform runs its steps."""
    return isinstance(strategy, LevenbergMarquardt | LBFGS)


def _separable(objective, strategy, params, batch, filter_spec):
    """The objective, solver and start of the separable fit (`separable.py`) where
    the solver asks for it (`LevenbergMarquardt(separable=...)`) and it applies:
    the output-error loss of a `LinearSystem` (no state offset) with closed-form
    initial states, every array trained, and Levenberg–Marquardt on the normal
    equations (float64) over all experiments at once. Elsewhere the objective and
    start are unchanged and the solver's `separable` is `None`."""
    if not isinstance(strategy, LevenbergMarquardt) or strategy.separable is None:
        return objective, strategy, params
    applicable = (
        strategy.normal_equations
        and strategy.blocks == 1
        and strategy.free is None
        and objective.outputs
        and objective.kind == "simulation"
        and objective.x0 == "closed_form"
        and params[1] is None
        and filter_spec is eqx.is_inexact_array
        and separable_applies(params[0])
    )
    if not applicable:
        return objective, dataclasses.replace(strategy, separable=None), params
    objective = dataclasses.replace(objective, separable=strategy.separable)
    trainable, static = eqx.partition(params, eqx.is_inexact_array)
    completed = objective.complete(trainable, static, batch)
    return objective, strategy, eqx.combine(completed, static)


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What the solver minimises.

    - `objective`: the `FitObjective` (loss, outputs or states, how the initial
        states are found, rollout method and adjoint, channel weights).
    - `batch`: the arrays the loss reads, experiments on the leading axis: `index`
        `(N,)`, `mask` `(N, T)`, `ys` `(N, T, p)` or `xs` `(N, T(+1), n)`, and `us`
        `(N, T, m)` when there are inputs.
    - `params`: the start, `(model, x0s)`: `x0s` the trained initial states'
        starting values, `(N, n)` (`(N, W, n)` for `MultipleShooting`), or `None`.
    """

    objective: FitObjective
    batch: dict
    params: tuple


def _problem(model, data, loss, fit_x0, method, adjoint) -> _Problem:
    """`fit`'s checked arguments as a `_Problem`: objective, batch and start. The
    records of an output-error fit are padded (and masked) to `shared_length`, so
    that records of other lengths share the fit's compiled programs."""
    objective = _objective(loss, data, model, fit_x0, method, adjoint)
    batch = _batch(data, _model_dtype(model))
    if _paddable(objective, loss, batch):
        batch = _padded_to_share(batch, data.num_steps)
    params = (model, _initial_x0s(objective, loss, data, model))
    return _Problem(objective, batch, params)


def _solver_for(problem, solver, batch_size, adjoint, rtol, atol, filter_spec):
    """The solver that runs (`fit(solver=...)`, or the default's choice), with the
    parameters frozen by `filter_spec` and the separable variant where it applies;
    returns `(problem, solver, default number of steps)`, the problem's objective
    and start changed by the separable variant only."""
    objective, batch, params = problem.objective, problem.batch, problem.params
    strategy, default_steps = _strategy(
        solver, objective, params, batch, batch_size, adjoint, rtol, atol
    )
    strategy = with_free_parameters(strategy, objective, params, filter_spec)
    objective, strategy, params = _separable(
        objective, strategy, params, batch, filter_spec
    )
    return _Problem(objective, batch, params), strategy, default_steps


def _stopping(strategy, problem: _Problem) -> dict:
    """`optimise`'s options for when the solver stops and how many steps each
    dispatch runs: dynsys's solvers (`_manages_stopping`) stop on a flat loss or
    a held-out loss that stopped improving (evaluated at every step with
    Levenberg–Marquardt); an optax transform runs its steps."""
    managed = _manages_stopping(strategy)
    each_step = managed and isinstance(strategy, LevenbergMarquardt)
    return {
        "chunk": _chunk(strategy, problem.params, problem.batch),
        "flat_steps": FLAT_STEPS if managed else None,
        "patience": _held_out_patience(managed, each_step),
        "evaluate_each_step": each_step,
    }


@on_one_blas_thread
@checks_own_arguments
def fit(
    model: AbstractSystem,
    data: Dataset,
    *,
    loss: AbstractLoss = Simulation(),
    solver: "AbstractSolver | optax.GradientTransformation | None" = None,
    num_steps: int | None = None,
    batch_size: int | None = None,
    fit_x0: bool = False,
    key: PRNGKeyArray | None = None,
    progress: bool = True,
    val_data: Dataset | None = None,
    method: AbstractMethod | None = None,
    adjoint: AbstractAdjoint | None = None,
    callback: Callable[[int, AbstractSystem, float], bool | None] | None = None,
    filter_spec: PyTree = eqx.is_inexact_array,
    rtol: float | None = None,
    atol: float | None = None,
    resume: FitResult | None = None,
) -> FitResult:
    """Fit any `AbstractSystem`'s parameters to measured states or outputs.

    Minimises the error of the model's predictions through the loop of `train`, by
    default with no learning rate to tune; how, and when it warns: docs/fitting.md.

    **Arguments:**

    - `model`: the initial `AbstractSystem` (e.g. `fit_least_squares(data)` on
        states, `fit_subspace(data)` on outputs).
    - `data`: a `Dataset`; with outputs its `output_size` must match the model's,
        else its `state_size`; its inputs the model's `input_size`.
    - `loss`: `Simulation()` (default; on outputs, output error), `OneStep()`
        (state data), `Prediction(horizon)` or `MultipleShooting(horizon)`.
        `Prediction` (output data, an `InnovationSystem`) fits the `horizon`-step
        predictions of its Kalman predictor (`horizon=1`: the prediction-error
        method), also for integrating and unstable plants: docs/noise-models.md.
    - `solver`: `None` (choose: `LevenbergMarquardt()`, or `LBFGS()` for large
        problems or with `LinearAdjoint`), one of those with its own settings,
        `OptaxSolver(transform)`, or an optax transform (`optax.adam(1e-3)`, ...).
    - `num_steps`: the maximum number of solver steps (`None`: its default, 200
        for Levenberg–Marquardt, else 1000).
    - `batch_size`: trajectories per step (`None`: all); needs an optax solver.
    - `fit_x0`: on state data, also fit each trajectory's initial state (each
        window's, for `MultipleShooting`), starting from the measured one. Not with
        `OneStep()`. (On output data the initial states are always estimated.)
    - `key`, `progress`: the PRNG key of the minibatches; show a progress bar.
    - `val_data`: an optional held-out `Dataset` of the same kind (on output data,
        linear models only); its loss picks the best model: every step with LM
        (which stops 20 steps after it last fell by 0.1 %), every 10 otherwise.
    - `method`, `adjoint`: passed to `rollout` (default `Autodiff()`). With
        `LinearAdjoint` the default solver is L-BFGS (no forward mode).
    - `callback`: `callback(step, model, loss)` after each step; return `True` to
        stop (one step per dispatch then).
    - `filter_spec`: which parts of the model train, as in `train` (e.g. freeze `B`).
    - `rtol`, `atol`: tolerances of the default solver (`solver=None`); an
        explicit solver takes its own.
    - `resume`: an earlier `FitResult` of the same problem (all else equal but a
        smaller `num_steps`, `progress`, `key`), continued: docs/fitting.md.

    **Returns:**

    A `FitResult`: the best model, its initial states, the loss histories, the best
    step, the stop reason, the solver, metrics on the training and validation data.

    **Raises:**

    `ValueError` naming the argument: widths that do not match the model's, a
    loss that is not a loss object (a string names the object to use), the
    one-step loss on output data, a shooting horizon too long for the data (or too
    short for a window's state), `fit_x0` with `OneStep()`, `batch_size` with
    Levenberg–Marquardt, `rtol`/`atol` with an explicit `solver`; for
    `Prediction`: not an `InnovationSystem`, a Kalman predictor not finite and
    stable, a `horizon` beyond the data; a `resume` that cannot continue.
    `TypeError` for a `solver` that is not a solver or an optax transform.

    **Warns:**

    When the fitted Kalman predictor is unstable, or an output-error fit starts from
    or ends at a model with spectral radius at least 0.999 (use `Prediction()`).

    **Example:**

    ```python
    true = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    data = dynsys.simulate(true, jax.random.normal(jax.random.key(0), (4, 2)), 20)
    result = dynsys.fit(dynsys.LinearSystem(K=0.5 * jnp.eye(2)), data, progress=False)
    result.optimizer, result.metrics["train"]["fit_percent"]  # LM, close to 100
    ```
    """
    data, loss, val_data = _checked(model, data, loss, val_data, fit_x0, num_steps)
    problem = _problem(model, data, loss, fit_x0, method, adjoint)
    problem, strategy, default_steps = _solver_for(
        problem, solver, batch_size, adjoint, rtol, atol, filter_spec
    )
    evaluator = _validation_loss(
        loss, val_data, model, method, adjoint, problem.batch
    )
    result = _optimised(
        problem.objective,
        strategy,
        problem.params,
        problem.batch,
        evaluator,
        num_steps=default_steps if num_steps is None else num_steps,
        batch_size=batch_size,
        key=key,
        progress=progress,
        callback=None if callback is None else _ModelCallback(callback),
        filter_spec=(filter_spec, True),
        resume=None if resume is None else _continuation_of(resume),
        **_stopping(strategy, problem),
    )
    exact = _exact_loss(problem.batch)
    stop_reason = _honest_stop_reason(result, _manages_stopping(strategy), exact)
    _warn_untrusted(stop_reason)  # the warnings point at fit's caller: called here
    warn_after_fit(model, result.model[0], loss, problem.objective.outputs)
    return _fit_result(result, problem, evaluator, stop_reason, filter_spec)
