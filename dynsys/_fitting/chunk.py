"""The compiled chunk of training steps: a `lax.scan` over steps of an optimiser
strategy, with the running best model, in one dispatch."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .._compile.jit import top_level_jit
from .._rollout.sharding import constrain_batch


def _tree_where(pred, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(pred, a, b) if eqx.is_array(a) else a, new, old
    )


def _gather(data, indices, shardings):
    if indices is None:
        return data
    batch = jax.tree.map(
        lambda leaf: leaf[indices] if eqx.is_array(leaf) else leaf, data
    )
    return constrain_batch(batch, shardings)


class HeldOutEachStep(eqx.Module):
    """The held-out loss evaluated at every step inside the chunk, where it picks
    the best model and stops the run once it has not improved by more than
    `resolution` (relative) for `patience` steps.

    For Levenberg–Marquardt a step costs a Jacobian (one rollout per parameter
    direction); one more rollout of the held-out data costs a few per cent of it,
    while evaluating every 10 steps on the host lets the run go on up to 9 steps
    past its best model and picks that model among a tenth of the steps.

    The running best it keeps is `(score, step, params, reference score,
    reference step)`: the lowest held-out loss, its step and model, and the last
    step at which the held-out loss fell by more than `resolution` (from which
    `patience` is counted)."""

    evaluator: Any  # evaluator(model) -> scalar, traceable
    patience: int = eqx.field(static=True)
    resolution: float = eqx.field(static=True)

    def update(self, best: tuple, k, params, static, warm) -> tuple:
        """`(score, new best, exhausted)` after evaluating `params` (the model
        before step `k`); a warm-up step changes nothing."""
        best_score, best_step, best_params, reference, reference_step = best
        score = self.evaluator(eqx.combine(params, static)).astype(best_score.dtype)
        valid = jnp.isfinite(score) & jnp.logical_not(warm)
        better = valid & (score < best_score)
        # `reference * (1 - resolution)`, not `reference - ...`: inf before any.
        significant = valid & (score < reference * (1 - self.resolution))
        reference_step = jnp.where(significant, k, reference_step)
        new_best = (
            jnp.where(better, score, best_score),
            jnp.where(better, k, best_step),
            _tree_where(better, params, best_params),
            jnp.where(significant, score, reference),
            reference_step,
        )
        exhausted = (
            jnp.logical_not(warm)
            & (reference_step >= 0)
            & (k - reference_step >= self.patience)
        )
        return score, new_best, exhausted


def _best_by_loss(best: tuple, k, loss, params, warm) -> tuple:
    """The running best `(loss, step, params)` after the training loss `loss` of
    `params` (the model before step `k`)."""
    best_loss, best_step, best_params = best
    better = jnp.isfinite(loss) & (loss < best_loss) & jnp.logical_not(warm)
    return (
        jnp.where(better, loss, best_loss).astype(best_loss.dtype),
        jnp.where(better, k, best_step),
        _tree_where(better, params, best_params),
    )


@top_level_jit
def init_carry(strategy, params):
    return strategy.init(params)


def evaluate(evaluator, params, static):
    """`evaluator(model)` in one compiled program (per evaluator structure and
    shapes); an evaluator with `compiles_itself` set runs its own compiled program,
    one it shares with other callers."""
    if getattr(evaluator, "compiles_itself", False):
        return evaluator(eqx.combine(params, static))
    return _evaluate(evaluator, params, static)


@top_level_jit
def _evaluate(evaluator, params, static):
    return evaluator(eqx.combine(params, static))


@top_level_jit(repeated=True)
def run_chunk(
    strategy,
    objective,
    static,
    params,
    carry,
    best,
    data,
    indices,
    ks,
    end,
    shardings,
    track_best,
    held_out=None,
):
    """Run the steps `ks` (those below `end`) in one dispatch: a `lax.scan` over
    steps, each skipped once a step was non-finite or converged (or, with
    `held_out`, a `HeldOutEachStep`, once the held-out loss stopped improving).
    The running best is by the training loss with `track_best`, by the held-out
    loss with `held_out`, else left as it is (the host picks it by evaluations).
    Compiled once per strategy, objective structure, model structure and shapes
    (a module-level cache, shared across calls).

    Each step's outputs: its loss, whether it was finite, whether the optimiser had
    converged, the held-out loss (NaN without `held_out`) and whether the held-out
    loss had stopped improving."""
    first = _gather(data, None if indices is None else indices[0], shardings)
    state = strategy.begin(objective, params, static, carry, first)
    dynamic, state_static = eqx.partition(state, eqx.is_array)

    def body(loop, x):
        params, dynamic, best, stopped = loop
        k, index, warm = x

        def run(_):
            state = eqx.combine(dynamic, state_static)
            batch = _gather(data, index, shardings)
            loss, finite, new_params, new_state, converged = strategy.step(
                objective, params, static, state, batch
            )
            finite = finite | warm
            converged = converged & jnp.logical_not(warm)
            score = jnp.array(jnp.nan, best[0].dtype)
            exhausted = jnp.array(False)
            new_best = best
            if held_out is not None:
                score, new_best, exhausted = held_out.update(
                    best, k, params, static, warm
                )
            elif track_best:
                new_best = _best_by_loss(best, k, loss, params, warm)
            apply = finite & jnp.logical_not(converged | exhausted)
            new_params = _tree_where(apply, new_params, params)
            new_dynamic = _tree_where(
                apply, eqx.partition(new_state, eqx.is_array)[0], dynamic
            )
            stop = jnp.logical_not(finite) | converged | exhausted
            return (new_params, new_dynamic, new_best, stop), (
                loss.astype(best[0].dtype),
                finite,
                converged,
                score,
                exhausted,
            )

        def skip(_):
            nan = jnp.array(jnp.nan, best[0].dtype)
            false = jnp.array(False)
            return (params, dynamic, best, stopped), (
                nan,
                jnp.array(True),
                stopped,
                nan,
                false,
            )

        return jax.lax.cond((k < end) & jnp.logical_not(stopped), run, skip, None)

    warm = jnp.zeros(ks.shape, bool)
    if strategy.warmup:
        ks = jnp.concatenate([ks[:1], ks])
        warm = jnp.concatenate([jnp.ones(1, bool), warm])
        if indices is not None:
            indices = jnp.concatenate([indices[:1], indices])
    loop = (params, dynamic, best, jnp.array(False))
    (params, dynamic, best, _), outputs = jax.lax.scan(body, loop, (ks, indices, warm))
    if strategy.warmup:
        outputs = jax.tree.map(lambda v: v[1:], outputs)
    carry = strategy.end(eqx.combine(dynamic, state_static))
    return params, carry, best, outputs
