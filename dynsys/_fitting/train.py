"""The one training loop of dynsys: `train` (used by `fit` and controller training)."""

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree, Scalar

from .. import _interrupt_flag
from .._compile.jit import device_array, host_key
from .._type_checks import checks_own_arguments
from .._rollout.sharding import leading_axis_shardings
from .batches import chunk_indices, on_device
from .chunk import evaluate, HeldOutEachStep, init_carry, run_chunk
from .continuation import Continuation, NotResumable, same
from .flat_loss import (
    flat_resolution,
    flat_steps_at_end,
    flat_stop_reason,
    HELD_OUT_RESOLUTION,
    held_out_stop_reason,
)
from .progress import Progress
from .levenberg_marquardt import LevenbergMarquardt
from .optax_solver import OptaxSolver
from .solver_base import AbstractSolver
from .solvers import as_solver, LossFunction


if TYPE_CHECKING:
    import optax


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `train` returns.

    **Fields:**

    - `model`: the best model seen (lowest validation loss if `val_fn` was given,
        else lowest training loss).
    - `final_model`: the model after the last completed update.
    - `losses`: training loss of each step, shape `(steps_run,)`; `losses[k]` is the
        loss of the model *before* update `k`.
    - `val_losses`: `(step, validation loss)` pairs, when `val_fn` was given.
    - `full_losses`: `(step, loss on all of data)` pairs, when training on minibatches
        without `val_fn` (then these choose the best model, not the noisy minibatch
        losses).
    - `best_step`: the step whose model is `model`; `best_loss` its loss.
    - `steps_run`: the number of steps run.
    - `stop_reason`: `None` if all `num_steps` ran, else why training stopped early
        (a non-finite loss or gradient, naming the step; the callback; an interrupt;
        a loss flat for `flat_steps` steps).
    - `converged`: whether the optimiser's tolerances stopped it (only optimisers
        with a convergence test, such as `fit`'s defaults).
    - `optimizer`: the optimiser's name.
    - `continuation`: what a longer run of the same problem continues from
        (`optimise(..., resume=...)`), or `None` where it cannot (minibatches, a
        callback, an interrupt).
    """

    model: Any
    final_model: Any
    losses: np.ndarray
    val_losses: list[tuple[int, float]]
    full_losses: list[tuple[int, float]]
    best_step: int
    best_loss: float
    steps_run: int
    stop_reason: str | None
    converged: bool = False
    optimizer: str = ""
    continuation: "Continuation | None" = dataclasses.field(
        default=None, repr=False, compare=False
    )


def _strong(leaf):
    """Drop JAX's weak type, so that the updated parameters keep the input's types
    (a weakly typed leaf would otherwise cause one retrace)."""
    if eqx.is_array(leaf):
        return jnp.asarray(leaf, dtype=leaf.dtype)
    return leaf


class _UserFunction(eqx.Module):
    fn: Any = eqx.field(static=True)

    def __call__(self, model):
        return self.fn(model)


class _FullLoss(eqx.Module):
    objective: Any
    data: Any

    def __call__(self, model):
        return self.objective.loss(model, self.data)


_CHUNK = 32  # at most this many steps per dispatch


def chunk_length(data, extra_work: int = 1) -> int:
    """Steps per dispatch: many for small problems (Python overhead dominates), few
    for large ones (the progress bar and Ctrl-C stay responsive)."""
    size = sum(
        int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(data) if eqx.is_array(leaf)
    )
    return int(max(1, min(_CHUNK, 2**19 // max(1, size * extra_work))))


def _trainable(model, filter_spec, caller: str):
    """`(params, static)`: what `filter_spec` selects, and of that only the inexact
    arrays, are trained (as strongly typed arrays)."""
    params, static = eqx.partition(model, filter_spec)
    params, frozen = eqx.partition(params, eqx.is_inexact_array)
    static = eqx.combine(static, frozen)
    if not jax.tree.leaves(params):
        raise ValueError(
            f"{caller}(model=..., filter_spec=...): no trainable inexact arrays are "
            "left (the model has none, or filter_spec froze them all)."
        )
    return jax.tree.map(_strong, params), static


def _steps_per_dispatch(chunk, data, callback, evaluator, eval_every: int) -> int:
    """The chunk length: `chunk` (default by the data's size), one step with a
    callback, at most `eval_every` with an evaluation. Not shortened to
    `num_steps`: the length is part of what is compiled, and steps past
    `num_steps` are skipped at run time."""
    if chunk is None:
        chunk = chunk_length(data)
    if callback is not None:
        chunk = 1
    if evaluator is not None:
        chunk = min(chunk, eval_every)
    return chunk


@dataclasses.dataclass
class _Recorded:
    """What a chunk's outputs say (`_record`): its losses, up to the first
    non-finite, converged or held-out-exhausted step; the held-out losses of those
    steps when it evaluated them; why it stopped; whether it converged."""

    losses: list[float]
    val_losses: list[tuple[int, float]]
    stop_reason: str | None = None
    converged: bool = False
    exhausted: bool = False


def _record(outputs, count: int, first_step: int, held_out: bool) -> _Recorded:
    """A chunk's first `count` steps, up to the first non-finite, converged or
    (with `held_out`) held-out-exhausted one. Changes nothing (see `_dispatch`)."""
    chunk_losses, chunk_finite, chunk_converged, scores, exhausted = (
        np.asarray(v) for v in outputs
    )
    recorded = _Recorded([], [])
    for j in range(count):
        loss = float(chunk_losses[j])
        recorded.losses.append(loss)
        if held_out:
            recorded.val_losses.append((first_step + j, float(scores[j])))
        if not chunk_finite[j]:
            what = "loss" if not math.isfinite(loss) else "gradient"
            recorded.stop_reason = (
                f"non-finite {what} at step {first_step + j}; kept the best model"
            )
            break
        if chunk_converged[j]:
            recorded.converged = True
            break
        if exhausted[j]:
            recorded.exhausted = True
            break
    return recorded


def _best(best, params):
    """`(loss, step, params)` of the best model, from the device's running best
    (arrays) or the host's (by evaluation); the last `params` when no loss was
    finite."""
    loss, step, best_params = float(best[0]), int(best[1]), best[2]
    if step < 0:  # the very first loss was non-finite
        return loss, 0, params
    return loss, step, best_params


@dataclasses.dataclass
class _Loop:
    """What `optimise`'s loop reads (the first fields, fixed) and updates between
    chunks (the parameters, optimiser state, running best and histories)."""

    strategy: Any
    objective: Any
    static: Any
    data: Any
    shardings: Any
    batches: Iterator[np.ndarray] | None
    evaluator: Callable | None
    full_data: bool  # the evaluator is the loss on all of data (minibatches)
    chunk: int
    eval_every: int
    callback: Callable | None
    bar: Progress | None
    params: Any
    carry: Any
    # (loss, step, params) as arrays, tracked by `run_chunk` (by the training loss,
    # or by the held-out loss with `held_out`: then also its reference loss, step)
    best_device: tuple
    best_host: tuple  # (loss, step, params), chosen by evaluations
    flat_steps: int | None = None  # stop after this many steps of a flat loss
    resolution: float = 0.0  # the relative change per step that counts as flat
    patience: int | None = None  # stop after this many steps without a better val
    # the held-out loss of every step, in the chunk (`evaluator` is then None), and
    # on the host that of the model after the last step (`_evaluate_last_held_out`)
    held_out: HeldOutEachStep | None = None
    held_out_last: Callable | None = None
    best_before_last: tuple | None = None  # the running best before that evaluation
    losses: list[float] = dataclasses.field(default_factory=list)
    val_losses: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    full_losses: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    stop_reason: str | None = None
    converged: bool = False
    evaluated_last: int = -1

    @property
    def track_best(self) -> bool:
        """Whether the device tracks the best model by the training loss (no
        evaluator)."""
        return self.evaluator is None and self.held_out is None

    @property
    def best_on_device(self) -> bool:
        """Whether the best model is the device's (by the training loss or by the
        held-out loss of every step), not the host's evaluations'."""
        return self.evaluator is None


def _best_model_evaluator(objective, data, batches, evaluator):
    """`(evaluator, full_data)`: how the best model is chosen. By `evaluator`
    (validation loss) if given; else, on minibatches, by the loss on all of data
    every `eval_every` steps; else (`None`) by each step's loss."""
    if evaluator is None and batches is not None:
        return _FullLoss(objective, data), True
    return evaluator, False


def _params_dtype(params):
    return jnp.result_type(*[leaf.dtype for leaf in jax.tree.leaves(params)])


def _has_tolerance(strategy) -> bool:
    """Whether `strategy` stops at its own tolerance, so that `num_steps` is a cap
    rather than the number of steps it will run."""
    return strategy.stops_at_tolerance


def _initial_best(params, held_out: bool = False) -> tuple[tuple, tuple]:
    """The running best before any step: on the device (with `held_out`, also the
    reference of its patience) and on the host."""
    dtype = _params_dtype(params)
    index_dtype = jax.dtypes.canonicalize_dtype(int)
    none = (device_array(np.inf, dtype), device_array(-1, index_dtype))
    best_device = (*none, params, *none) if held_out else (*none, params)
    best_host = (math.inf, -1, params)  # chosen by evaluations
    return best_device, best_host


def _evaluate_at(loop: _Loop, step: int):
    """Evaluate the current model, record the value, and keep it if it is the
    best so far."""
    value = float(evaluate(loop.evaluator, loop.params, loop.static))
    (loop.full_losses if loop.full_data else loop.val_losses).append((step, value))
    loop.evaluated_last = step
    if math.isfinite(value) and value < loop.best_host[0]:
        loop.best_host = (value, step, loop.params)


def _evaluate_last_held_out(loop: _Loop, step: int):
    """Evaluate the model after the last step (which no chunk evaluated) by the
    held-out loss, record the value, and let it compete for the best model and the
    reference of the patience as the chunk's steps do (`HeldOutEachStep.update`)."""
    value = float(evaluate(loop.held_out_last, loop.params, loop.static))
    loop.val_losses.append((step, value))
    loop.evaluated_last, loop.best_before_last = step, loop.best_device
    if not math.isfinite(value):
        return
    score, best_step, params, reference, reference_step = loop.best_device
    here = device_array(value, score.dtype), device_array(step, best_step.dtype)
    if value < float(score):
        score, best_step, params = (*here, loop.params)
    if value < float(reference) * (1 - loop.held_out.resolution):
        reference, reference_step = here
    loop.best_device = (score, best_step, params, reference, reference_step)


def _undo_last_held_out(loop: _Loop, k: int):
    """Before a resumed run's chunk at step `k`: forget the host's evaluation of
    the model at `k`, which the chunk evaluates itself, so that the resumed run
    takes the steps of one longer run."""
    if loop.best_before_last is not None and loop.evaluated_last == k:
        loop.val_losses.pop()
        loop.best_device, loop.best_before_last = loop.best_before_last, None
        loop.evaluated_last = -1


def _dispatch(loop: _Loop, k: int, num_steps: int) -> int:
    """Run the chunk that starts at step `k` (after an evaluation, when one is
    due) and record its losses; the number of steps it ran."""
    if loop.held_out is not None:
        _undo_last_held_out(loop, k)
    if (
        loop.evaluator is not None
        and k % loop.eval_every == 0
        and loop.evaluated_last != k  # a resumed run evaluated it last
    ):
        _evaluate_at(loop, k)
    count = min(loop.chunk, num_steps - k)
    if loop.evaluator is not None:
        count = min(count, loop.eval_every - k % loop.eval_every)
    indices = chunk_indices(loop.batches, count, loop.chunk)
    # Built on the host: `jnp.arange` would compile a small program of its own.
    index_dtype = jax.dtypes.canonicalize_dtype(int)
    ks = device_array(np.arange(k, k + loop.chunk, dtype=index_dtype))
    new_params, new_carry, best_device, outputs = run_chunk(
        loop.strategy,
        loop.objective,
        loop.static,
        loop.params,
        loop.carry,
        loop.best_device,
        loop.data,
        indices,
        ks,
        jax.device_put(k + count),  # weakly typed, as `jnp.asarray`, compiling nothing
        loop.shardings,
        loop.track_best,
        loop.held_out,
    )
    recorded = _record(outputs, count, k, loop.held_out is not None)
    # Ctrl-C (a `KeyboardInterrupt` between any two statements) keeps what was
    # recorded: the losses go in first, in one call, so that the running best never
    # names a step past them.
    loop.losses.extend(recorded.losses)
    loop.val_losses.extend(recorded.val_losses)
    loop.best_device = best_device
    loop.params, loop.carry = new_params, new_carry
    loop.stop_reason, loop.converged = recorded.stop_reason, recorded.converged
    if recorded.exhausted:
        loop.stop_reason = _held_out_exhausted(loop)
    return len(recorded.losses)


def _held_out_exhausted(loop: _Loop) -> str:
    """The stop reason of a run whose held-out loss (of every step) stopped
    improving."""
    best_step = int(loop.best_device[1])
    return held_out_stop_reason(
        loop.held_out.patience, best_step, loop.held_out.resolution
    )


def _after_chunk(loop: _Loop, k: int, ran: int) -> bool:
    """Advance the progress bar and call the callback after a chunk that ran `ran`
    steps up to step `k`; whether to stop."""
    if loop.bar is not None:
        loop.bar.update(ran, loop.losses[-1])
    if loop.stop_reason is not None or loop.converged:
        return True
    if loop.flat_steps is not None and (
        flat_steps_at_end(loop.losses, loop.resolution, loop.flat_steps)
        >= loop.flat_steps
    ):
        loop.stop_reason = flat_stop_reason(loop.flat_steps, loop.resolution)
        return True
    if _out_of_patience(loop):
        return True
    if loop.callback is not None and loop.callback(
        k - 1, eqx.combine(loop.params, loop.static), loop.losses[-1]
    ):
        loop.stop_reason = f"stopped by the callback after step {k - 1}"
        return True
    return False


def _out_of_patience(loop: _Loop) -> bool:
    """Whether the validation loss has not improved for `loop.patience` steps (and
    record why)."""
    if loop.patience is None or loop.full_data or not loop.val_losses:
        return False
    best_step, last = loop.best_host[1], loop.val_losses[-1][0]
    if best_step < 0 or last - best_step < loop.patience:
        return False
    loop.stop_reason = held_out_stop_reason(last - best_step, best_step)
    return True


def _run_steps(loop: _Loop, num_steps: int, warn: bool, caller: str):
    """Run chunks from the steps already run (none, or a resumed run's) until
    `num_steps`, a stop or convergence, then evaluate the last model; Ctrl-C keeps
    what ran. Closes the progress bar."""
    try:
        k = len(loop.losses)
        finished = loop.stop_reason is not None or loop.converged
        while k < num_steps and not finished:
            ran = _dispatch(loop, k, num_steps)
            k += ran
            if _after_chunk(loop, k, ran):
                break
            if _interrupt_flag.pending():  # a signal whose exception was lost
                raise KeyboardInterrupt
        if loop.stop_reason is None and loop.evaluated_last != k:
            # The model after the last update has no step loss; it competes only
            # where models are compared by evaluation.
            if loop.evaluator is not None:
                _evaluate_at(loop, k)
            elif loop.held_out is not None:
                _evaluate_last_held_out(loop, k)
    except KeyboardInterrupt:
        _interrupt_flag.clear()  # acted on
        loop.stop_reason = (
            f"interrupted at step {len(loop.losses)}; kept the best model"
        )
        if warn:
            # stacklevel 4: the caller of `train` (this, `optimise`, `train`).
            warnings.warn(f"{caller}: {loop.stop_reason}.", stacklevel=4)
    finally:
        if loop.bar is not None:
            loop.bar.close()


def _continuation(loop: _Loop, problem: tuple) -> Continuation | None:
    """What a longer run of `problem` continues from, or `None` where it would
    not take the same steps: minibatches, a callback, an interrupt, or a run cut
    off inside the pattern of evaluations (or chunks) that a longer run keeps."""
    if loop.batches is not None or loop.callback is not None:
        return None
    if (loop.stop_reason or "").startswith("interrupted"):
        return None
    ran = len(loop.losses)
    if loop.stop_reason is None and not loop.converged:
        period = loop.eval_every if loop.evaluator is not None else loop.chunk
        if ran % period:
            return None
    return Continuation(problem, dataclasses.replace(loop, bar=None))


def _check_resumable(resume, problem, num_steps: int, batches, callback) -> None:
    """`NotResumable` unless `resume` is a run of `problem` (full data, no
    callback) of at most `num_steps` steps."""
    if batches is not None or callback is not None:
        raise NotResumable("a run with minibatches or a callback is not continued")
    if not same(resume.problem, problem):
        raise NotResumable(
            "the earlier run was of another problem (its model, data or options differ)"
        )
    ran = len(resume.loop.losses)
    if ran > num_steps:
        raise NotResumable(f"the earlier run took {ran} steps, more than {num_steps}")


def _resumed(resume: Continuation, bar) -> _Loop:
    """The loop of `resume`, its steps so far counted on `bar`."""
    loop = resume.resumed(bar)
    if bar is not None and loop.losses:
        bar.update(len(loop.losses), loop.losses[-1])
    return loop


def _train_result(
    loop: _Loop, warn: bool, caller: str, problem: tuple | None = None
) -> "TrainResult":
    """The `TrainResult` of a finished loop (warning of a non-finite stop)."""
    best_loss, best_step, best_params = _best(
        loop.best_device if loop.best_on_device else loop.best_host, loop.params
    )
    stop_reason = loop.stop_reason
    if warn and stop_reason is not None and stop_reason.startswith("non-finite"):
        # stacklevel 4: the caller of `train` (this, `optimise`, `train`).
        warnings.warn(f"{caller}: {stop_reason} (step {best_step}).", stacklevel=4)
    return TrainResult(
        model=eqx.combine(best_params, loop.static),
        final_model=eqx.combine(loop.params, loop.static),
        losses=np.asarray(loop.losses),
        val_losses=loop.val_losses,
        full_losses=loop.full_losses,
        best_step=best_step,
        best_loss=best_loss,
        steps_run=len(loop.losses),
        stop_reason=stop_reason,
        converged=loop.converged,
        optimizer=loop.strategy.name,
        continuation=None if problem is None else _continuation(loop, problem),
    )


def optimise(
    objective,
    strategy,
    model: PyTree,
    *,
    data: PyTree | None,
    num_steps: int,
    batch_size: int | None = None,
    key: PRNGKeyArray | None = None,
    progress: bool = True,
    callback: Callable | None = None,
    filter_spec: PyTree = eqx.is_inexact_array,
    evaluator: Callable | None = None,
    eval_every: int = 10,
    warn: bool = True,
    chunk: int | None = None,
    caller: str = "train",
    flat_steps: int | None = None,
    patience: int | None = None,
    resume: Continuation | None = None,
    evaluate_each_step: bool = False,
) -> "TrainResult":
    """The loop shared by `train` and `fit`: `strategy` minimises `objective` over
    the trainable arrays of `model`, a chunk of steps per dispatch; with
    `flat_steps`, it stops once the loss has been flat that many steps, with
    `patience` (and an `evaluator`), once the evaluated loss has not improved for
    that many steps. With `evaluate_each_step` (an `evaluator`, traceable or with a
    `traced()` twin, and a `patience`), the evaluator runs inside the chunk at every
    step instead of on the host every `eval_every` steps (the model after the last
    step still on the host), and "improved" means by more than
    `HELD_OUT_RESOLUTION` (`HeldOutEachStep`). With `resume` (an earlier result's
    `continuation`, of the same problem), it continues that run instead of
    starting again: the result is that of one run of `num_steps`
    (`continuation.py`)."""
    if key is None:
        key = host_key(0)
    params, static = _trainable(model, filter_spec, caller)
    carry = jax.tree.map(_strong, init_carry(strategy, params))
    data, batches = on_device(data, batch_size, key, num_steps, caller)
    shardings = None if data is None else leading_axis_shardings(data)
    evaluator, full_data = _best_model_evaluator(objective, data, batches, evaluator)
    # Chunks of at most `eval_every` steps with an evaluator, evaluated every step
    # or not: the flat-loss rule is applied after each chunk, and a continued run
    # (a structure scan's 30 steps) takes the same steps only from a chunk's end.
    chunk = _steps_per_dispatch(chunk, data, callback, evaluator, eval_every)
    held_out, held_out_last = None, None
    if evaluate_each_step and evaluator is not None and patience is not None:
        traced = getattr(evaluator, "traced", lambda: evaluator)()
        held_out = HeldOutEachStep(traced, patience, HELD_OUT_RESOLUTION)
        # Both are the chunk's now; the model after the last step is evaluated
        # on the host, as `evaluator` (a program the caller may share).
        evaluator, patience, held_out_last = None, None, evaluator
    problem = (objective, strategy, params, static, data, shardings, evaluator)
    problem += ((chunk, eval_every, flat_steps, patience, full_data, held_out),)
    if resume is not None:
        _check_resumable(resume, problem, num_steps, batches, callback)
    bar = Progress(caller, num_steps, _has_tolerance(strategy)) if progress else None
    if resume is not None:
        loop = _resumed(resume, bar)
    else:
        loop = _Loop(
            strategy,
            objective,
            static,
            data,
            shardings,
            batches,
            evaluator,
            full_data,
            chunk,
            eval_every,
            callback,
            bar,
            params,
            carry,
            *_initial_best(params, held_out is not None),
            flat_steps,
            flat_resolution(_params_dtype(params)),
            patience,
            held_out,
            held_out_last,
        )
    _run_steps(loop, num_steps, warn, caller)
    return _train_result(loop, warn, caller, problem)


@functools.cache
def _default_solver() -> OptaxSolver:
    """`train`'s default, `optax.adam(1e-2)` (optax is imported on first use: a fit
    by Levenberg–Marquardt never needs it, and it is 0.1 s of a run's start)."""
    import optax

    return OptaxSolver(optax.adam(1e-2), "optax (adam 1e-2)")


def train_solver(solver, call: str = "train") -> AbstractSolver:
    """`train`'s `solver=`: `None` its default (`optax.adam(1e-2)`), else the
    solver (an optax transform wrapped in `OptaxSolver`, equal for equal
    transforms so that they reuse the compiled chunk). Levenberg–Marquardt is
    refused: a user's loss function has no residual vector."""
    if solver is None:
        return _default_solver()
    solver = as_solver(solver, call)
    if isinstance(solver, LevenbergMarquardt):
        raise TypeError(
            f"{call}(solver=LevenbergMarquardt(...)): Levenberg–Marquardt needs a "
            "least-squares residual vector, which a loss function does not give; "
            "use fit, LBFGS() or an optax transform."
        )
    return solver


def _check_train_arguments(num_steps, eval_every, batch_size, data, flat_steps):
    """`train`'s checks of its arguments (one-line errors naming each)."""
    if flat_steps is not None and (
        isinstance(flat_steps, bool)
        or not isinstance(flat_steps, int)
        or flat_steps < 1
    ):
        raise ValueError(
            f"train(flat_steps=...): flat_steps must be a positive integer or None, "
            f"got {flat_steps!r}."
        )
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(
            f"train(num_steps=...): num_steps must be a positive integer, got "
            f"{num_steps!r}."
        )
    if (
        isinstance(eval_every, bool)
        or not isinstance(eval_every, int)
        or eval_every < 1
    ):
        raise ValueError(
            f"train(eval_every=...): eval_every must be a positive integer, got "
            f"{eval_every!r}."
        )
    if batch_size is not None and data is None:
        raise ValueError(
            f"train(batch_size=...): batch_size={batch_size!r} was given without "
            "data; minibatches are drawn from data."
        )


@checks_own_arguments
def train(
    loss_fn: Callable[..., Scalar],
    model: PyTree,
    *,
    data: PyTree | None = None,
    solver: "AbstractSolver | optax.GradientTransformation | None" = None,
    num_steps: int,
    batch_size: int | None = None,
    key: PRNGKeyArray | None = None,
    progress: bool = True,
    callback: Callable[[int, PyTree, float], bool | None] | None = None,
    filter_spec: PyTree = eqx.is_inexact_array,
    val_fn: Callable[[PyTree], Scalar] | None = None,
    eval_every: int = 10,
    flat_steps: int | None = None,
) -> TrainResult:
    """Minimise `loss_fn` over the inexact arrays of `model` with an optax solver.

    Several steps per dispatch, a progress bar with the current loss, the loss
    history, best-model tracking, and a guard: training stops at the first non-finite
    loss or gradient, warns at which step, and returns the best model so far. How
    the loop runs, compiles and caches: docs/training.md.

    **Arguments:**

    - `loss_fn`: `loss_fn(model)` when `data` is `None`, else `loss_fn(model, batch)`;
        returns a scalar.
    - `model`: any pytree (an equinox module); its inexact arrays selected by
        `filter_spec` are trained, everything else is held fixed.
    - `data`: optional pytree of arrays sharing a leading axis of size `N`; batches are
        drawn from that axis.
    - `solver`: an optax transform (e.g. `optax.adam(1e-3)`), `OptaxSolver(...)`
        or `LBFGS()`; `None` (default): `optax.adam(1e-2)`.
    - `num_steps`: the number of optimiser steps.
    - `batch_size`: minibatch size (`None`: the whole of `data` each step). Batches
        are shuffled epochs without replacement (epoch `e` is the permutation drawn
        with `jax.random.fold_in(key, e)`; its last incomplete batch is dropped), so
        the same `key` gives the same batches.
    - `key`: PRNG key for the minibatches (default `jax.random.key(0)`).
    - `progress`: show a progress bar (tqdm).
    - `callback`: `callback(step, model, loss)` after each step; return `True` to stop.
    - `filter_spec`: which leaves train, as in `eqx.partition` (a bool pytree or a
        callable); of those, only inexact arrays train. Default: every inexact array.
        To freeze a part, e.g. `filter_spec = eqx.tree_at(lambda m: m.B,
        jax.tree.map(eqx.is_inexact_array, model), replace=False)`.
    - `val_fn`: optional `val_fn(model) -> scalar`, evaluated every `eval_every` steps
        and after the last; the best model is then the one with the lowest
        validation loss. (Without `val_fn` but with `batch_size`, the loss on all of
        `data` is evaluated the same way and chooses the best model.)
    - `eval_every`: how often (in steps) `val_fn` or the full-data loss is evaluated.
    - `flat_steps`: stop once the loss has been flat this many steps in a row (each
        step changing it by at most `eps ** 0.75` of its value, `eps` that of the
        parameters' dtype), with `stop_reason` `"loss flat for N steps ..."`;
        checked after each dispatch, so a few more steps may have run. `None`
        (default): run all `num_steps`.

    **Raises:**

    `ValueError` naming the argument for a bad `num_steps`, `batch_size`,
    `eval_every`, `flat_steps`, `data`, or a model with nothing to train;
    `TypeError` for a `solver` that is not a solver or optax transform (or is
    `LevenbergMarquardt`, which needs residuals: use `fit`).

    **Returns:**

    A `TrainResult`.

    **Example:**

    ```python
    result = dynsys.train(lambda m: jnp.sum((m - 3.0) ** 2), jnp.zeros(2),
                          solver=optax.adam(0.1), num_steps=200, progress=False)
    result.model  # close to [3., 3.]
    ```
    """
    _check_train_arguments(num_steps, eval_every, batch_size, data, flat_steps)
    strategy = train_solver(solver)
    return optimise(
        LossFunction(loss_fn, data is not None),
        strategy,
        model,
        data=data,
        num_steps=num_steps,
        batch_size=batch_size,
        key=key,
        progress=progress,
        callback=callback,
        filter_spec=filter_spec,
        evaluator=None if val_fn is None else _UserFunction(val_fn),
        eval_every=eval_every,
        flat_steps=flat_steps,
    )
