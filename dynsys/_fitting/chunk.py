"""The compiled chunk of training steps: a `lax.scan` over steps of an optimiser
strategy, with the running best model, in one dispatch."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._jit import top_level_jit
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
):
    """Run the steps `ks` (those below `end`) in one dispatch: a `lax.scan` over
    steps, each skipped once a step was non-finite or converged. Compiled once per
    strategy, objective structure, model structure and shapes (a module-level cache,
    shared across calls)."""
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
            apply = finite & jnp.logical_not(converged)
            new_params = _tree_where(apply, new_params, params)
            new_dynamic = _tree_where(
                apply, eqx.partition(new_state, eqx.is_array)[0], dynamic
            )
            best_loss, best_step, best_params = best
            new_best = best
            if track_best:
                better = jnp.isfinite(loss) & (loss < best_loss) & jnp.logical_not(warm)
                new_best = (
                    jnp.where(better, loss, best_loss).astype(best_loss.dtype),
                    jnp.where(better, k, best_step),
                    _tree_where(better, params, best_params),
                )
            stop = jnp.logical_not(finite) | converged
            return (new_params, new_dynamic, new_best, stop), (
                loss.astype(best_loss.dtype),
                finite,
                converged,
            )

        def skip(_):
            nan = jnp.array(jnp.nan, best[0].dtype)
            return (params, dynamic, best, stopped), (nan, jnp.array(True), stopped)

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
