"""`fit_neural`: nonlinear identification with a neural state-space model, the
linear model first, then truncated-simulation training with an initial-state
encoder, minibatches of windows and validation-based early stopping."""

import dataclasses
import math
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from .._type_checks import checks_own_arguments
from .._data.dataset import Dataset
from .._fitting.encoder import StateEncoder
from .._fitting.fit import fit
from .._fitting.metrics import channel_mean
from .._fitting.optax_solver import LBFGS, OptaxSolver
from .._fitting.solvers import LossFunction
from .._fitting.train import optimise, train_solver
from .._fitting.windows import (
    free_run_windows,
    truncated_simulation_loss,
    window_starts,
    WindowLoss,
    windows,
)
from .._rollout.rollout import rollout
from .._rollout.sharding import shard_batch
from .._systems.neural_state_space import NeuralStateSpace
from .._systems.system import AbstractSystem, LinearSystem
from .in_range import in_range_part
from .initial_state import estimate_x0
from .neural_start import neural_initial_state
from .signals import linear_of, signals
from .subspace import fit_subspace
from .validation import compare, Comparison


@dataclasses.dataclass(frozen=True)
class NeuralFit:
    """What `fit_neural` returns.

    **Fields:**

    - `model`: the best `NeuralStateSpace` (lowest validation free-run loss).
    - `encoder`: its `StateEncoder` (the state after `past` samples).
    - `linear`: the linear model fitted first (the base of `model` before training).
    - `past`: the number of samples each free run and window uses to start.
    - `losses`: the training (window) loss of each step; `val_losses`: `(step,
        validation loss)` pairs; `best_step`; `steps_run`.
    - `stop_reason`: `None`, or why training stopped early (no validation gain for
        `patience` validation evaluations, a non-finite loss, a diverging
        validation run).
    - `seconds`: the wall time of the linear fit and of the training (all
        restarts).
    - `restart_losses`: the best validation loss of each restart (`restarts`
        entries); `restart`: the one returned (the lowest, the first on ties).
    - `val_scored`: the samples of each validation record that the early
        stopping scored (its first `past` start the free run): its length, or
        fewer where its input leaves the training range (`validate_in_range`;
        0 for a record dropped for leaving it before a sample could be scored).
    """

    model: NeuralStateSpace
    encoder: StateEncoder
    linear: AbstractSystem
    past: int
    losses: np.ndarray
    val_losses: list[tuple[int, float]]
    best_step: int
    steps_run: int
    stop_reason: str | None
    seconds: dict[str, float]
    restart_losses: list[float]
    restart: int
    val_scored: tuple[int, ...]

    def initial_state(self, data) -> Float[Array, "N n"]:
        """Each experiment's state at sample `past`, from the encoder reading its
        first `past` samples; shape `(N, n)`."""
        return neural_initial_state(self.encoder, data)

    def compare(self, data) -> Comparison:
        """`compare` of the free run from sample `past` on (the first `past`
        samples start it), as the benchmarks score a model."""
        return compare(self.model, data, encoder=self.encoder)


def _masked_mean_std(values, mask):
    """Per-channel mean and standard deviation over valid steps (std 1 if 0)."""
    values = np.asarray(values, np.float64)
    valid = np.asarray(mask, bool)
    picked = values[valid]
    mean, std = picked.mean(axis=0), picked.std(axis=0)
    return mean, np.where(std > 1e-12 * (1 + np.abs(mean)), std, 1.0)


def _linear_start(data, order, base, refine_linear, progress):
    """The base model: `base`, or `fit_subspace` refined by `fit` (output error)."""
    if base is not None:
        return base
    linear = fit_subspace(data, order)
    if refine_linear:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            refined = fit(linear, data, progress=progress).model
        if _free_run_error(refined, data) <= _free_run_error(linear, data):
            linear = refined
    return linear


def _free_run_error(model, data) -> float:
    # The mean NRMSE over the channels that have one (see `nrmse`).
    value = float(channel_mean(1.0 - compare(model, data).fit_percent / 100.0))
    return value if math.isfinite(value) else math.inf


def _base_states(base, s) -> Array:
    """The base model's states over the training records, `(N, T + 1, n)` (from
    the closed-form initial states of a linear base, else from 0)."""
    N = s.ys.shape[0]
    if linear_of(base) is not None:
        x0 = estimate_x0(base, _dataset_of(s))
    else:
        x0 = jnp.zeros((N, base.state_size), s.ys.dtype)
    return rollout(base, x0, s.ys.shape[1], inputs=s.us).xs


def _well_scaled(base, s):
    """A `LinearSystem` base in well-conditioned coordinates, the same input-output
    map: balanced (equal, diagonal Gramians) when it is stable, else its states
    scaled to unit standard deviation over the training records. A realisation
    whose output is a near-cancellation of large states makes every Adam step (of
    about the learning rate in each parameter) blow the free run up; on the
    cascaded tanks, one step of 1e-4 took the window loss from 0.014 to 170.
    Other bases are returned as they are."""
    if type(base) is not LinearSystem or base.C is None or base.B is None:
        return base
    K, B, C = (np.asarray(a, np.float64) for a in (base.K, base.B, base.C))
    T = _balancing(K, B, C)
    if T is None:
        xs = np.asarray(_base_states(base, s))[:, :-1]
        T = np.diag(_masked_mean_std(xs, np.asarray(s.mask))[1])
    T_inv = np.linalg.inv(T)
    fields = {"K": T_inv @ K @ T, "B": T_inv @ B, "C": C @ T}
    if base.offset is not None:
        fields["offset"] = T_inv @ np.asarray(base.offset, np.float64)
    names = tuple(fields)
    return eqx.tree_at(
        lambda m: tuple(getattr(m, k) for k in names), base,
        tuple(jnp.asarray(fields[k], base.K.dtype) for k in names),
    )  # fmt: skip


def _balancing(K, B, C) -> np.ndarray | None:
    """The balancing transformation `x = T z` of a stable `(K, B, C)`, or `None`
    when it is not stable or its Gramians are singular."""
    if not np.all(np.abs(np.linalg.eigvals(K)) < 1.0 - 1e-9):
        return None
    import scipy.linalg

    try:
        Wc = scipy.linalg.solve_discrete_lyapunov(K, B @ B.T)
        Wo = scipy.linalg.solve_discrete_lyapunov(K.T, C.T @ C)
        Lc = np.linalg.cholesky(Wc + 1e-12 * np.trace(Wc) * np.eye(len(K)))
        U, hankel, _ = np.linalg.svd(Lc.T @ Wo @ Lc)
    except (np.linalg.LinAlgError, ValueError):
        return None
    if not np.all(np.isfinite(hankel)) or hankel.min() <= 1e-14 * hankel.max():
        return None
    T = Lc @ U / hankel[None, :] ** 0.25
    return T if np.linalg.cond(T) < 1e12 else None


def _dataset_of(s):
    return Dataset(ys=s.ys, us=s.us, lengths=s.lengths)


@dataclasses.dataclass
class _Setup:
    params: tuple
    windows: dict
    val_batch: dict
    loss: WindowLoss


def _setup(base, s, v, past, horizon, stride, width_size, depth, key, shard) -> _Setup:
    """The untrained model and encoder, the training windows and validation run."""
    xs = np.asarray(_base_states(base, s))
    mask = np.asarray(s.mask)
    state_mean, state_scale = _masked_mean_std(xs[:, :-1], mask)
    _, output_scale = _masked_mean_std(s.ys, mask)
    kwargs = {}
    if s.us is not None:
        kwargs["input_mean"], kwargs["input_scale"] = _masked_mean_std(s.us, mask)
    k_model, k_encoder = jax.random.split(key)
    model = NeuralStateSpace(
        base, width_size=width_size, depth=depth, state_mean=state_mean,
        state_scale=state_scale, output_scale=output_scale, key=k_model, **kwargs,
    )  # fmt: skip
    batch = windows(s.ys, s.us, s.lengths, past=past, horizon=horizon, stride=stride)
    rows = window_starts(s.lengths, past, horizon, stride)
    starts = jnp.asarray(xs[rows[:, 0], rows[:, 1]], s.ys.dtype)
    encoder = StateEncoder.from_states(
        batch.get("past_us"), batch["past_ys"], starts, width_size=width_size,
        depth=depth, key=k_encoder,
    )  # fmt: skip
    val_batch = free_run_windows(v.ys, v.us, v.lengths, past)
    loss = WindowLoss(tuple(float(c) for c in output_scale))
    return _Setup((model, encoder), _sharded(batch, shard), val_batch, loss)


def _sharded(batch: dict, shard: bool | None) -> dict:
    """The windows spread over every device (`shard`, default: when there are
    several), their count cut to a multiple of the number of devices."""
    count = jax.device_count()
    if shard is False or (shard is None and count == 1):
        return batch
    keep = batch["ys"].shape[0] // count * count
    if keep == 0:
        return batch
    return shard_batch({k: v[:keep] for k, v in batch.items()})


class _Validation(eqx.Module):
    """The validation free run's loss, `__call__(params)`: its windows and scale
    are arrays of the module (traced, not baked into the compiled program)."""

    batch: dict
    scale: Array

    def __init__(self, batch, output_scale):
        self.batch = batch
        self.scale = jnp.asarray(output_scale, batch["ys"].dtype)

    def __call__(self, params):
        return truncated_simulation_loss(params, self.batch, self.scale)


def _solver(solver, learning_rate: float):
    """The solver `train` runs and whether it takes minibatches (all but
    L-BFGS)."""
    if solver is None:
        return optax.adam(learning_rate), True
    if isinstance(solver, LBFGS):
        return solver, False
    if isinstance(solver, OptaxSolver | optax.GradientTransformation):
        return solver, True
    raise ValueError(
        "fit_neural(solver=...): expected None (Adam), LBFGS(), an OptaxSolver or "
        f"an optax transform, got {solver!r}."
    )


def _train_run(setup, solver, batch_size, num_steps, patience, eval_every, key,
               progress) -> dict:  # fmt: skip
    """One run of the solver on minibatches of the windows (`batch_size`: all if
    `None`), its state kept from the first step to the last, the validation free
    run scored every `eval_every` steps; the best model by validation is kept.
    Stops at `num_steps`, after `patience` evaluations without gain, or at a
    non-finite loss."""
    count = setup.windows["ys"].shape[0]
    size = None if batch_size is None else min(batch_size, count)
    result = optimise(
        LossFunction(setup.loss, True), train_solver(solver, "fit_neural"),
        setup.params, data=setup.windows, num_steps=num_steps, batch_size=size,
        key=key, progress=progress,
        evaluator=_Validation(setup.val_batch, setup.loss.output_scale),
        eval_every=eval_every, patience=patience * eval_every, warn=False,
        caller="fit_neural",
    )  # fmt: skip
    reason = result.stop_reason
    if reason is not None and reason.startswith("held-out loss not improved"):
        reason = (
            f"no validation gain for {patience} evaluations ({patience * eval_every} "
            "steps)"
        )
    elif reason is not None:
        reason = f"{reason.split(';')[0]}; kept the best model"
    if not math.isfinite(result.best_loss):
        reason = "the validation free run diverged at every evaluation"
    return dict(best=(result.best_loss, result.best_step, result.model),
                losses=result.losses.tolist(), val_losses=result.val_losses,
                done=result.steps_run, reason=reason)  # fmt: skip


def check_options(options: dict) -> None:
    """One-line `ValueError` for a `fit_neural` option out of range: the counts
    (`width_size`, `num_steps`, `patience`, `restarts`, `eval_every`,
    `stride`, `batch_size` unless `None`) positive ints, `depth` at least 2, and
    `learning_rate` finite and positive (0 trains nothing)."""
    for name, value in options.items():
        if name == "learning_rate":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"fit_neural(learning_rate=...): expected a finite number > 0, "
                    f"got {value!r}."
                )
            continue
        if name == "batch_size" and value is None:
            continue
        low = 2 if name == "depth" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(
                f"fit_neural({name}=...): expected an int >= {low}, got {value!r}."
            )


def check_arguments(data, val_data, past, horizon):
    """`fit_neural`'s checks of the data and the window sizes (one-line
    `ValueError`s); returns the estimation and validation `Signals`."""
    s = signals(data, "fit_neural")
    if s.from_states:
        raise ValueError(
            "fit_neural(data=...): expected data with measured outputs (ys), got "
            "states only."
        )
    for name, value in (("past", past), ("horizon", horizon)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"fit_neural({name}=...): expected a positive int, got {value!r}."
            )
    longest = max(s.lengths)
    if past + horizon > longest:
        raise ValueError(
            f"fit_neural(horizon=...): past + horizon = {past} + {horizon} = "
            f"{past + horizon} samples, longer than the longest record "
            f"({longest}); use a shorter horizon or past."
        )
    v = s if val_data is None else signals(val_data, "fit_neural")
    if past >= min(v.lengths):
        raise ValueError(
            f"fit_neural(past=...): the encoder window past = {past} is not shorter "
            f"than the shortest validation record ({min(v.lengths)} samples)."
        )
    return s, v


@checks_own_arguments
def fit_neural(
    data,
    val_data=None,
    *,
    order: int | None = None,
    base: AbstractSystem | None = None,
    horizon: int = 64,
    past: int = 20,
    width_size: int = 32,
    depth: int = 2,
    solver: "LBFGS | OptaxSolver | optax.GradientTransformation | None" = None,
    learning_rate: float = 3e-4,
    num_steps: int = 20000,
    batch_size: int | None = 64,
    patience: int = 40,
    restarts: int = 1,
    eval_every: int = 50,
    stride: int = 1,
    refine_linear: bool = True,
    balance: bool = True,
    validate_in_range: bool = True,
    shard: bool | None = None,
    key: PRNGKeyArray | None = None,
    progress: bool = False,
) -> NeuralFit:
    """Identify a nonlinear `NeuralStateSpace` model from input-output records.

    The recipe (docs/nonlinear-models.md): (1) a linear model, `fit_subspace`
    refined by `fit` (output error), unless `base` is given (any `AbstractSystem`:
    grey box); (2) the neural model built on it, equal to it before training, and
    an encoder whose affine part maps `past` samples to the linear model's state;
    (3) truncated simulation: minibatches of sub-windows of the records, each
    started from the encoder's state and simulated `horizon` steps, the model,
    its base and the encoder trained together by Adam (or the `solver` given);
    (4) every `eval_every` steps the free run over each validation record (started
    by the encoder from its first `past` samples, up to where its input leaves the
    training range: `validate_in_range`) scores the model; the best one is
    returned, and training stops after `patience` evaluations without gain (one
    run of the solver, its state kept throughout), or at a non-finite loss (with a
    one-line warning); (5) with `restarts > 1`, steps 2-4 run that many times from
    new weights and minibatch orders (keys from `key`, `restart_keys`), and the
    restart with the lowest validation loss is returned.

    **Arguments:**

    - `data`: a `Dataset` with outputs `ys (N, T, p)` (and inputs `us (N, T, m)`).
    - `val_data`: held-out records for early stopping (default: `data` itself).
    - `order`: the linear model's order (`None`: from the singular values).
    - `base`: a start model to use instead of the linear fit.
    - `horizon`, `past`: the simulated steps per window and the samples before it
        that the encoder reads; `past + horizon` must fit in a record.
    - `width_size`, `depth`: the MLPs' hidden width and number of layers.
    - `solver`: `None` (Adam with `learning_rate`, on minibatches), an optax
        transform or `OptaxSolver` (minibatches), or `LBFGS()` (all windows).
    - `num_steps`, `batch_size`, `patience`, `eval_every`: the training budget,
        windows per step, the validation evaluations without gain after which
        training stops (40: 2,000 steps at `eval_every=50`), how often the
        validation run is scored.
    - `restarts`: how many trainings from new weights to choose from by their
        validation loss (default 1; docs/nonlinear-models.md says why).
    - `stride`: samples between window starts.
    - `refine_linear`: refine the subspace model by output error first (kept only
        when its free run is better).
    - `balance`: train a linear base in balanced coordinates (`_well_scaled`: the
        same input-output map, each parameter moving the output comparably).
    - `validate_in_range`: score each validation record only up to where its
        input leaves the training range (`in_range.in_range_part`): past it the
        free run measures extrapolation, which varies from seed to seed.
    - `shard`: spread the windows over every device (`dynsys.shard_batch`; their
        number cut to a multiple of the devices'); default: when there are several.
    - `key`: PRNG key (weights and minibatches); `progress`: progress bars.

    **Returns:**

    A `NeuralFit` (`model`, `encoder`, `linear`, `past`, histories, stop reason,
    wall times); `NeuralFit.compare(data)` scores it on new records.

    **Raises:**

    `ValueError` (one line, before any fit) for data without outputs, `past +
    horizon` longer than every record, an encoder window `past` not shorter than a
    validation record, an option out of range (`learning_rate` not finite and
    positive, a count below 1, `depth` below 2), a `solver` of another kind; and,
    before any training, a start model whose loss over the training windows is
    not finite.

    **Example:**

    ```python
    result = dynsys.fit_neural(estimation, validation, order=2)
    result.compare(validation).fit_percent   # free run from sample result.past on
    ```
    """
    s, v = check_arguments(data, val_data, past, horizon)
    in_range = validate_in_range and val_data is not None
    v, val_scored = in_range_part(s, v, past, horizon) if in_range else (v, v.lengths)
    check_options(dict(
        width_size=width_size, depth=depth, learning_rate=learning_rate,
        num_steps=num_steps, batch_size=batch_size, patience=patience,
        restarts=restarts, eval_every=eval_every, stride=stride,
    ))  # fmt: skip
    transform, minibatches = _solver(solver, learning_rate)
    budget = (batch_size if minibatches else None, num_steps, patience, eval_every)
    key = jax.random.key(0) if key is None else key
    start = time.perf_counter()
    base = _linear_start(data, order, base, refine_linear, progress)
    linear_seconds = time.perf_counter() - start
    start_model = _well_scaled(base, s) if balance else base
    sizes = (past, horizon, stride, width_size, depth)
    runs = _restart_runs(start_model, s, v, sizes, restart_keys(key, restarts),
                         shard, transform, budget, progress)  # fmt: skip
    restart_losses = [run["best"][0] for run in runs]
    chosen = int(np.argmin(restart_losses))
    _warn_if_stopped_short(runs[chosen])
    neural_seconds = time.perf_counter() - start - linear_seconds
    seconds = {"linear": linear_seconds, "neural": neural_seconds}
    return _neural_fit(
        runs[chosen], base, past, seconds, restart_losses, chosen, tuple(val_scored)
    )


def _restart_runs(start_model, s, v, sizes, keys, shard, transform, budget,
                  progress) -> list[dict]:  # fmt: skip
    """One training (`_train_run`) from each key, all from `start_model`; the
    first start's loss is checked before any training (`_check_start_loss`).
    `sizes`: `(past, horizon, stride, width_size, depth)`."""
    runs = []
    for k in keys:
        setup = _setup(start_model, s, v, *sizes, k, shard)
        if not runs:
            _check_start_loss(setup, sizes[1])
        order_key = jax.random.fold_in(k, 1)  # the minibatches' order
        runs.append(_train_run(setup, transform, *budget, order_key, progress))
    return runs


def _warn_if_stopped_short(run: dict) -> None:
    """The one-line warning of a returned run that stopped at a non-finite loss
    (or another failure), not by its budget or its patience; attributed to the
    caller of `fit_neural`."""
    if run["reason"] is not None and run["reason"].startswith(("non-finite", "the")):
        warnings.warn(f"fit_neural: {run['reason']}.", stacklevel=3)


def restart_keys(key: PRNGKeyArray, restarts: int) -> list[PRNGKeyArray]:
    """The key of each restart: `key` itself for the first (so `restarts=1` is
    one run from `key`), then `jax.random.split(jax.random.fold_in(key, 2),
    restarts - 1)`."""
    if restarts == 1:
        return [key]
    return [key, *jax.random.split(jax.random.fold_in(key, 2), restarts - 1)]


def _check_start_loss(setup: _Setup, horizon: int) -> None:
    """One-line `ValueError`, before any training, when the untrained model's
    loss over the training windows is not finite (a start that overflows over the
    horizon: nothing could be learnt from it)."""
    value = float(setup.loss(setup.params, setup.windows))
    if not math.isfinite(value):
        raise ValueError(
            f"fit_neural(horizon=...): the start model's loss over the training "
            f"windows of {horizon} steps is {value} before any training (its free "
            "run overflows); use a shorter horizon or a stable start model."
        )


def _neural_fit(run: dict, base, past: int, seconds: dict, restart_losses: list,
                restart: int, val_scored: tuple) -> NeuralFit:  # fmt: skip
    model, encoder = run["best"][2]
    return NeuralFit(
        model=model, encoder=encoder, linear=base, past=past,
        losses=np.asarray(run["losses"]), val_losses=run["val_losses"],
        best_step=run["best"][1], steps_run=run["done"], stop_reason=run["reason"],
        seconds=seconds, restart_losses=[float(v) for v in restart_losses],
        restart=restart, val_scored=val_scored,
    )  # fmt: skip
