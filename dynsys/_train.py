"""The one training loop of dynsys: `train` (used by `fit` and controller training)."""

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, PRNGKeyArray, PyTree, Scalar

from ._sharding import constrain_batch, leading_axis_shardings


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
        (a non-finite loss or gradient, naming the step; the callback; an interrupt).
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


def _leading_size(data: PyTree) -> int:
    leaves = [leaf for leaf in jax.tree.leaves(data) if eqx.is_array(leaf)]
    if not leaves:
        raise ValueError("train(data=...): data has no arrays.")
    sizes = {leaf.shape[0] if getattr(leaf, "ndim", 0) else None for leaf in leaves}
    if len(sizes) != 1 or None in sizes:
        shapes = [tuple(getattr(leaf, "shape", ())) for leaf in leaves]
        raise ValueError(
            "train(data=...): every array in data must share its leading (batch) "
            f"axis, got shapes {shapes}."
        )
    (size,) = sizes
    if size == 0:
        raise ValueError("train(data=...): data is empty (leading axis of size 0).")
    return size


def _iter_batches(
    key: PRNGKeyArray, size: int, batch_size: int, num_steps: int
) -> Iterator[np.ndarray]:
    """Yield `num_steps` index arrays of shape `(batch_size,)`: shuffled epochs.

    Epoch `e` is the permutation drawn with `jax.random.fold_in(key, e)`, cut into
    `size // batch_size` batches; its last incomplete batch is dropped so that every
    batch has the same shape (one compilation). Epochs are drawn lazily, so memory does
    not grow with `num_steps`.
    """
    per_epoch = size // batch_size
    step, epoch = 0, 0
    while step < num_steps:
        order = np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), size))
        for b in range(min(per_epoch, num_steps - step)):
            yield order[b * batch_size : (b + 1) * batch_size]
        step += per_epoch
        epoch += 1


def _batch_indices(
    key: PRNGKeyArray, size: int, batch_size: int, num_steps: int
) -> np.ndarray:
    """All of `_iter_batches` at once, shape `(num_steps, batch_size)`."""
    return np.stack(list(_iter_batches(key, size, batch_size, num_steps)))


def _strong(leaf):
    """Drop JAX's weak type, so that the updated parameters keep the input's types
    (a weakly typed leaf would otherwise cause one retrace)."""
    if eqx.is_array(leaf):
        return jnp.asarray(leaf, dtype=leaf.dtype)
    return leaf


def _all_finite(tree: PyTree) -> Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def train(
    loss_fn: Callable[..., Scalar],
    model: PyTree,
    *,
    data: PyTree | None = None,
    optimizer: optax.GradientTransformation | None = None,
    num_steps: int,
    batch_size: int | None = None,
    key: PRNGKeyArray | None = None,
    progress: bool = True,
    callback: Callable[[int, PyTree, float], bool | None] | None = None,
    filter_spec: PyTree = eqx.is_inexact_array,
    val_fn: Callable[[PyTree], Scalar] | None = None,
    eval_every: int = 10,
) -> TrainResult:
    """Minimise `loss_fn` over the inexact arrays of `model` with an optax optimiser.

    One jitted step (compiled once), a progress bar with the current loss, the loss
    history, best-model tracking, and a guard: training stops at the first non-finite
    loss or gradient, warns at which step, and returns the best model so far.

    **Arguments:**

    - `loss_fn`: `loss_fn(model)` when `data` is `None`, else `loss_fn(model, batch)`;
        returns a scalar.
    - `model`: any pytree (an equinox module); its inexact arrays selected by
        `filter_spec` are trained, everything else is held fixed.
    - `data`: optional pytree of arrays sharing a leading axis of size `N`; batches are
        drawn from that axis.
    - `optimizer`: an `optax.GradientTransformation`; default `optax.adam(1e-2)`.
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

    The jitted step is compiled once per call of `train` (`loss_fn` is traced once
    for the step, and once more for the evaluation when there is one).

    **Raises:**

    `ValueError` naming the argument for a bad `num_steps`, `batch_size`,
    `eval_every`, `data`, or a model with nothing to train.

    **Returns:**

    A `TrainResult`.

    **Example:**

    ```python
    result = dynsys.train(lambda m: jnp.sum((m - 3.0) ** 2), jnp.zeros(2),
                          optimizer=optax.adam(0.1), num_steps=200, progress=False)
    result.model  # close to [3., 3.]
    ```
    """
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
    if optimizer is None:
        optimizer = optax.adam(1e-2)
    if key is None:
        key = jax.random.key(0)
    # Trainable: what filter_spec selects, and of that only the inexact arrays.
    params, static = eqx.partition(model, filter_spec)
    params, frozen = eqx.partition(params, eqx.is_inexact_array)
    static = eqx.combine(static, frozen)
    if not jax.tree.leaves(params):
        raise ValueError(
            "train(model=..., filter_spec=...): no trainable inexact arrays are left "
            "(the model has none, or filter_spec froze them all)."
        )
    params = jax.tree.map(_strong, params)
    opt_state = jax.tree.map(_strong, optimizer.init(params))

    batches = None
    if data is not None:
        size = _leading_size(data)
        # Arrays go to the device once, not at every step.
        data = jax.tree.map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, data)
        if batch_size is not None:
            if (
                isinstance(batch_size, bool)
                or not isinstance(batch_size, int)
                or not 1 <= batch_size <= size
            ):
                raise ValueError(
                    f"train(batch_size=...): batch_size must be an integer in "
                    f"[1, {size}] (the size of data), got {batch_size!r}."
                )
            batches = _iter_batches(key, size, batch_size, num_steps)

    def compute_loss(params, batch):
        model = eqx.combine(params, static)
        return loss_fn(model) if data is None else loss_fn(model, batch)

    # Minibatches of data sharded over devices stay sharded (see shard_batch).
    shardings = None if data is None else leading_axis_shardings(data)

    @eqx.filter_jit
    def step(params, opt_state, data, indices):
        batch = data
        if indices is not None:
            batch = jax.tree.map(
                lambda leaf: leaf[indices] if eqx.is_array(leaf) else leaf, data
            )
            batch = constrain_batch(batch, shardings)
        loss, grads = eqx.filter_value_and_grad(compute_loss)(params, batch)
        finite = jnp.isfinite(loss) & _all_finite(grads)
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        new_params = eqx.apply_updates(params, updates)
        # Keep the old state when anything is non-finite: nothing is lost.
        new_params, new_opt_state = jax.tree.map(
            lambda new, old: jnp.where(finite, new, old) if eqx.is_array(new) else new,
            (new_params, new_opt_state),
            (params, opt_state),
        )
        return new_params, new_opt_state, loss, finite

    losses: list[float] = []
    val_losses: list[tuple[int, float]] = []
    full_losses: list[tuple[int, float]] = []
    # How the best model is chosen: validation loss if given; else, on minibatches,
    # the loss on all of data every `eval_every` steps; else each step's loss.
    evaluate, evaluations = None, None
    if val_fn is not None:
        evaluate = eqx.filter_jit(lambda p: val_fn(eqx.combine(p, static)))
        evaluations = val_losses = []
    elif batches is not None:
        # data is an argument, not a constant: a global array spanning several
        # processes cannot be closed over.
        full_loss = eqx.filter_jit(compute_loss)
        evaluate = lambda p: full_loss(p, data)  # noqa: E731
        evaluations = full_losses = []

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_steps, desc="train", mininterval=0.5, leave=True)

    best = (math.inf, -1, params)
    stop_reason = None
    try:
        for k in range(num_steps):
            indices = None if batches is None else jnp.asarray(next(batches))
            new_params, new_opt_state, loss, finite = step(
                params, opt_state, data, indices
            )
            loss = float(loss)
            losses.append(loss)
            # `params` (the model before update k) competes for best; a finite loss
            # with a non-finite gradient still names a usable model.
            if evaluate is None and math.isfinite(loss) and loss < best[0]:
                best = (loss, k, params)
            if evaluate is not None and k % eval_every == 0:
                value = float(evaluate(params))
                evaluations.append((k, value))
                if math.isfinite(value) and value < best[0]:
                    best = (value, k, params)
            if not bool(finite):
                what = "loss" if not math.isfinite(loss) else "gradient"
                stop_reason = f"non-finite {what} at step {k}; kept the best model"
                warnings.warn(
                    f"train: {stop_reason} (step {max(best[1], 0)}).", stacklevel=2
                )
                break
            params, opt_state = new_params, new_opt_state
            if bar is not None:
                bar.update(1)
                if k % 10 == 0 or k == num_steps - 1:
                    bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
            if callback is not None and callback(k, eqx.combine(params, static), loss):
                stop_reason = f"stopped by the callback after step {k}"
                break
        else:
            # The model after the last update has no step loss; it competes only
            # where models are compared by evaluation.
            if evaluate is not None:
                value = float(evaluate(params))
                evaluations.append((num_steps, value))
                if math.isfinite(value) and value < best[0]:
                    best = (value, num_steps, params)
    except KeyboardInterrupt:
        stop_reason = f"interrupted at step {len(losses)}; kept the best model"
        warnings.warn(f"train: {stop_reason}.", stacklevel=2)
    finally:
        if bar is not None:
            bar.close()

    best_loss, best_step, best_params = best
    if best_step < 0:  # the very first loss was non-finite
        best_params, best_step = params, 0
    return TrainResult(
        model=eqx.combine(best_params, static),
        final_model=eqx.combine(params, static),
        losses=np.asarray(losses),
        val_losses=val_losses,
        full_losses=full_losses,
        best_step=best_step,
        best_loss=best_loss,
        steps_run=len(losses),
        stop_reason=stop_reason,
    )
