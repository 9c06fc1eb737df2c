"""Layered controllers: tuple form, stacked form, their equivalence and depth."""

import time

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import finite_difference_gradient


def numpy_layered(controller, t, x):
    """The layered network written out in NumPy, layer by layer."""
    context = [np.asarray(x, dtype=np.float64)]
    if controller.use_time:
        context.append([float(t)])
    if controller.reference is not None:
        context.append(np.asarray(controller.reference))
    c = np.concatenate(context)
    layers = controller.layers
    h = np.zeros(0)
    for k, layer in enumerate(layers):
        z = (
            np.asarray(layer.weight) @ h
            + np.asarray(layer.context_weight) @ c
            + np.asarray(layer.bias)
        )
        h = np.tanh(z) if k < len(layers) - 1 else z
    if controller.bound is not None:
        b = np.asarray(controller.bound)
        h = b * np.tanh(h / b)
    return h


@pytest.mark.parametrize("use_time", [True, False])
@pytest.mark.parametrize("reference", [None, (1.0, -0.5, 0.2)])
@pytest.mark.parametrize("bound", [None, 1.5])
def test_layered_matches_numpy_and_stacked(getkey, use_time, reference, bound):
    key = getkey()
    kwargs = dict(use_time=use_time, reference=reference, bound=bound, key=key)
    layered = dynsys.LayeredController.mlp(2, 1, 6, 4, **kwargs)
    stacked = dynsys.StackedController.mlp(2, 1, 6, 4, **kwargs)
    assert layered.depth == stacked.depth == 4
    assert layered.context_size == 2 + use_time + (0 if reference is None else 3)
    x = np.array([0.4, -0.7])
    for t in [0.0, 2.5]:
        expected = numpy_layered(layered, t, x)
        np.testing.assert_allclose(layered(t, jnp.asarray(x)), expected, rtol=1e-12)
        np.testing.assert_allclose(stacked(t, jnp.asarray(x)), expected, rtol=1e-12)


def test_every_layer_receives_the_context(getkey):
    """Zeroing one middle layer's context weights changes the output: the context
    reaches every layer, not only the first."""
    layered = dynsys.LayeredController.mlp(2, 1, 5, 4, key=getkey())
    x = jnp.array([0.3, 0.1])
    for k in range(4):
        cut = eqx.tree_at(
            lambda c, k=k: c.layers[k].context_weight,
            layered,
            replace_fn=jnp.zeros_like,
        )
        assert not np.allclose(cut(0.0, x), layered(0.0, x))


def test_reference_is_fed_and_not_trained(getkey):
    reference = jnp.array([1.0, 0.0])
    controller = dynsys.StackedController.mlp(
        2, 1, 4, 3, reference=reference, key=getkey()
    )
    x = jnp.array([0.2, 0.1])
    moved = eqx.tree_at(lambda c: c.reference, controller, jnp.array([-1.0, 0.5]))
    assert not np.allclose(moved(0.0, x), controller(0.0, x))
    grads = eqx.filter_grad(lambda c: jnp.sum(c(0.0, x) ** 2))(controller)
    np.testing.assert_array_equal(grads.reference, 0.0)
    assert np.any(grads.first.context_weight != 0.0)


def test_stacked_round_trip_and_empty_stack(getkey):
    key = getkey()
    layered = dynsys.LayeredController.mlp(3, 2, 4, 5, bound=(1.0, 2.0), key=key)
    stacked = dynsys.StackedController.from_layered(layered)
    assert stacked.stack.weight.shape == (3, 4, 4)
    assert eqx.tree_equal(stacked.to_layered(), layered)
    assert eqx.tree_equal(
        stacked, dynsys.StackedController.mlp(3, 2, 4, 5, bound=(1.0, 2.0), key=key)
    )
    # Depth 2: no hidden layer, a stack of size 0.
    two = dynsys.StackedController.mlp(3, 2, 4, 2, key=key)
    assert two.depth == 2 and two.stack.weight.shape == (0, 4, 4)
    x = jnp.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(
        two(1.0, x), dynsys.LayeredController.mlp(3, 2, 4, 2, key=key)(1.0, x)
    )
    assert two.to_layered().depth == 2


class Residual(dynsys.AbstractContextLayer):
    """A user-defined layer: h' = h + tanh(V c)."""

    context_weight: jax.Array
    in_size: int = eqx.field(static=True)
    out_size: int = eqx.field(static=True)
    context_size: int = eqx.field(static=True)

    def __call__(self, h, context):
        return h + jnp.tanh(self.context_weight @ context)


def test_heterogeneous_tuple_with_custom_layer(getkey):
    k1, k2 = jax.random.split(getkey())
    first = dynsys.ContextLayer(0, 3, 3, key=k1)
    residual = Residual(jnp.full((3, 3), 0.1), 3, 3, 3)
    last = dynsys.ContextLayer(3, 1, 3, activation=None, key=k2)
    controller = dynsys.LayeredController((first, residual, last), state_size=2)
    x, t = jnp.array([0.5, -0.5]), 0.3
    c = jnp.array([0.5, -0.5, 0.3])
    h = first(jnp.zeros(0), c)
    h = h + jnp.tanh(residual.context_weight @ c)
    np.testing.assert_allclose(controller(t, x), last(h, c), rtol=1e-12)
    traj = dynsys.rollout(zoo.Pendulum(), jnp.zeros((3, 2)), 5, controller=controller)
    assert traj.us.shape == (3, 5, 1)


def _closed_loop_loss(controller, num_steps=20):
    x0s = jnp.array([[0.3, 0.0], [-0.2, 0.5], [0.1, -0.4]])
    traj = dynsys.rollout(zoo.Pendulum(), x0s, num_steps, controller=controller)
    return dynsys.quadratic_cost(traj, 1.0, 0.1, Q_final=5.0)


def test_gradient_through_rollout_matches_finite_differences(getkey):
    controller = dynsys.StackedController.mlp(2, 1, 3, 4, bound=2.0, key=getkey())
    loss = eqx.filter_jit(_closed_loop_loss)
    grads = eqx.filter_grad(loss)(controller)
    W = controller.stack.weight

    def loss_of_W(w):
        return loss(eqx.tree_at(lambda c: c.stack.weight, controller, jnp.asarray(w)))

    np.testing.assert_allclose(
        grads.stack.weight,
        finite_difference_gradient(loss_of_W, W),
        rtol=1e-6,
        atol=1e-9,
    )


def _compile_once(controller) -> float:
    """Seconds to lower and compile the gradient of a closed-loop loss."""

    # A fresh function each time, so that nothing is served from a cache.
    def loss(c):
        return _closed_loop_loss(c)

    grad = eqx.filter_jit(eqx.filter_grad(loss))
    start = time.perf_counter()
    grad.lower(controller).compile()
    return time.perf_counter() - start


def _compile_ratio(deep, shallow, rounds=5) -> float:
    """min(deep) / min(shallow) over interleaved rounds.

    Interleaving exposes both to the same machine load (other test workers may be
    compiling at the same time), so the ratio is stable where single times are not.
    """
    deep_best = shallow_best = np.inf
    for _ in range(rounds):
        shallow_best = min(shallow_best, _compile_once(shallow))
        deep_best = min(deep_best, _compile_once(deep))
    return deep_best / shallow_best


@pytest.mark.slow
@pytest.mark.usefixtures("no_persistent_cache")  # counts or times compilations
def test_depth_64_compiles_like_depth_2_and_matches_tuple_form(getkey):
    key = getkey()
    shallow = dynsys.StackedController.mlp(2, 1, 8, 2, bound=2.0, key=key)
    deep = dynsys.StackedController.mlp(2, 1, 8, 64, bound=2.0, key=key)
    ratio = _compile_ratio(deep, shallow)
    # The requirement: at most twice (the scan body is the same at any
    # depth; measured ratio ~1).
    assert ratio <= 2.0, f"depth 64 took {ratio:.2f}x the compile time of depth 2"

    # Same outputs and gradients as the unrolled tuple form with the same weights.
    unrolled = deep.to_layered()
    assert unrolled.depth == 64
    x0s = jax.random.normal(getkey(), (4, 2))
    for t in [0.0, 1.0]:
        np.testing.assert_allclose(
            jax.vmap(lambda x, t=t: deep(t, x))(x0s),
            jax.vmap(lambda x, t=t: unrolled(t, x))(x0s),
            rtol=1e-12,
        )
    value_deep, grad_deep = eqx.filter_jit(
        eqx.filter_value_and_grad(_closed_loop_loss)
    )(deep)
    value_tuple, grad_tuple = eqx.filter_jit(
        eqx.filter_value_and_grad(_closed_loop_loss)
    )(unrolled)
    np.testing.assert_allclose(value_deep, value_tuple, rtol=1e-12)
    # The gradient of the stacked form, unstacked, is that of the tuple form.
    for a, b in zip(
        jax.tree.leaves(grad_deep.to_layered()),
        jax.tree.leaves(grad_tuple),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-14)


def test_trains_with_train(getkey):
    """A few steps of `train` on a stacked controller lower the closed-loop cost."""
    controller = dynsys.StackedController.mlp(2, 1, 4, 3, bound=2.0, key=getkey())
    result = dynsys.train(_closed_loop_loss, controller, num_steps=30, progress=False)
    assert result.best_loss < result.losses[0]
    assert isinstance(result.model, dynsys.StackedController)


def test_context_layer_init_and_errors(getkey):
    layer = dynsys.ContextLayer(4, 6, 5, key=getkey())
    limit = 1 / np.sqrt(9)
    for w in [layer.weight, layer.context_weight, layer.bias]:
        assert np.all(np.abs(w) <= limit) and np.std(w) > limit / 4
    with pytest.raises(
        ValueError,
        match=r"ContextLayer\(out_size=...\): expected an integer >= 1, got 0",
    ):
        dynsys.ContextLayer(2, 0, 3, key=getkey())
    with pytest.raises(ValueError, match="got in_size=0 and context_size=0"):
        dynsys.ContextLayer(0, 2, 0, key=getkey())


def test_layered_errors(getkey):
    k = getkey()
    a = dynsys.ContextLayer(0, 4, 3, key=k)
    b = dynsys.ContextLayer(4, 1, 3, key=k)
    with pytest.raises(ValueError, match=r"layers\[1\].in_size must be 4, got 5"):
        dynsys.LayeredController((a, dynsys.ContextLayer(5, 1, 3, key=k)), state_size=2)
    with pytest.raises(ValueError, match=r"layers\[0\].in_size must be 0"):
        dynsys.LayeredController((b,), state_size=2)
    with pytest.raises(
        ValueError,
        match=r"context_size must be the context size n \+ use_time \+ r = 2, got 3",
    ):
        dynsys.LayeredController((a, b), state_size=2, use_time=False)
    with pytest.raises(ValueError, match="expected a non-empty sequence"):
        dynsys.LayeredController((), state_size=2)
    with pytest.raises(
        ValueError, match=r"reference must have shape \(r,\), got \(1, 2\)"
    ):
        dynsys.LayeredController((a, b), state_size=2, reference=jnp.ones((1, 2)))
    with pytest.raises(
        ValueError,
        match=r"LayeredController.mlp\(depth=...\): expected an integer >= 2, got 1",
    ):
        dynsys.LayeredController.mlp(2, 1, 4, 1, key=k)
    with pytest.raises(
        ValueError, match=r"bound must be a scalar or have shape \(m,\) = \(1,\)"
    ):
        dynsys.LayeredController((a, b), state_size=2, bound=(1.0, 1.0))


def test_stacked_errors(getkey):
    k = getkey()
    layered = dynsys.LayeredController.mlp(2, 1, 4, 4, key=k)
    first, hidden, _, last = layered.layers
    with pytest.raises(ValueError, match=r"must map width -> width = 4 -> 4"):
        dynsys.StackedController(first, first, last, state_size=2)
    stack = jax.tree.map(lambda a: jnp.stack([a, a]), hidden)
    bad = eqx.tree_at(lambda s: s.bias, stack, jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match="same leading"):
        dynsys.StackedController(first, bad, last, state_size=2)
    with pytest.raises(
        ValueError,
        match=r"StackedController\(stack=...\): expected an AbstractContextLayer",
    ):
        dynsys.StackedController(first, "nope", last, state_size=2)
    mixed = dynsys.LayeredController(
        (first, hidden, dynsys.ContextLayer(4, 4, 3, activation=None, key=k), last),
        state_size=2,
    )
    with pytest.raises(ValueError, match=r"layers\[2\] differs in structure"):
        dynsys.StackedController.from_layered(mixed)
    with pytest.raises(ValueError, match="at least 2 layers"):
        dynsys.StackedController.from_layered(
            dynsys.LayeredController(
                (dynsys.ContextLayer(0, 1, 3, key=k),), state_size=2
            )
        )
    with pytest.raises(
        ValueError, match=r"x must have shape \(n,\) = \(2,\), got \(3,\)"
    ):
        layered(0.0, jnp.zeros(3))
