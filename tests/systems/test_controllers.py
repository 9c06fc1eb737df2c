"""MLPController: forward pass, saturation, closed-loop rollouts and gradients."""

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import finite_difference_gradient


def numpy_mlp(controller, t, x):
    """The MLP written out in NumPy from the controller's weights."""
    h = np.asarray(x, dtype=np.float64)
    if controller.use_time:
        h = np.concatenate([h, [float(t)]])
    layers = controller.mlp.layers
    for k, layer in enumerate(layers):
        h = np.asarray(layer.weight) @ h + np.asarray(layer.bias)
        if k < len(layers) - 1:
            h = np.tanh(h)
    if controller.bound is not None:
        b = np.asarray(controller.bound)
        h = b * np.tanh(h / b)
    return h


@pytest.mark.parametrize("use_time", [True, False])
@pytest.mark.parametrize("bound", [None, 0.5, (0.5, 2.0)])
def test_mlp_matches_numpy(getkey, use_time, bound):
    controller = dynsys.MLPController(
        3, 2, width_size=5, depth=2, use_time=use_time, bound=bound, key=getkey()
    )
    x = np.array([0.3, -1.2, 2.0])
    for t in [0, 1.5]:
        np.testing.assert_allclose(
            controller(t, jnp.asarray(x)), numpy_mlp(controller, t, x), rtol=1e-12
        )
    changes_with_t = not np.allclose(controller(0.0, x), controller(3.0, x))
    assert changes_with_t == use_time


def test_bound_saturates_with_unit_slope(getkey):
    controller = dynsys.MLPController(2, 1, 4, 1, bound=2.0, key=getkey())
    # Huge last-layer weights: the output is pushed into saturation, never past it.
    big = eqx.tree_at(
        lambda c: c.mlp.layers[-1].weight, controller, replace_fn=lambda w: 1e3 * w
    )
    xs = jax.random.normal(getkey(), (50, 2))
    us = jax.vmap(lambda x: big(0.0, x))(xs)
    assert np.all(np.abs(us) <= 2.0) and np.max(np.abs(us)) > 1.99
    # Near zero the saturation is the identity: u = z + O(z^3).
    z = jnp.array([1e-4])
    np.testing.assert_allclose(
        dynsys._systems.controller.saturate(z, (2.0,)), z, rtol=1e-8
    )


def test_key_based_initialisation(getkey):
    key = getkey()
    a = dynsys.MLPController(2, 1, 8, 2, key=key)
    b = dynsys.MLPController(2, 1, 8, 2, key=key)
    c = dynsys.MLPController(2, 1, 8, 2, key=getkey())
    assert eqx.tree_equal(a, b)
    assert not np.allclose(a.mlp.layers[0].weight, c.mlp.layers[0].weight)
    f32 = dynsys.MLPController(2, 1, 8, 2, dtype=jnp.float32, key=key)
    assert f32(0, jnp.zeros(2, jnp.float32)).dtype == jnp.float32


def test_closed_loop_batched_rollout_matches_python_loop(getkey):
    system = zoo.Pendulum()
    controller = dynsys.MLPController(2, 1, 6, 2, bound=3.0, key=getkey())
    x0s = jax.random.normal(getkey(), (4, 2))
    traj = dynsys.rollout(system, x0s, 25, controller=controller)
    assert traj.xs.shape == (4, 26, 2) and traj.us.shape == (4, 25, 1)
    # A plain Python loop with the times the rollout uses (t_k = k * dt).
    for i in range(4):
        x = np.asarray(x0s[i])
        for k in range(25):
            t = k * system.dt
            u = numpy_mlp(controller, t, x)
            np.testing.assert_allclose(traj.us[i, k], u, rtol=1e-10, atol=1e-12)
            x = np.asarray(system.step(t, jnp.asarray(x), jnp.asarray(u)))
            np.testing.assert_allclose(traj.xs[i, k + 1], x, rtol=1e-10, atol=1e-12)


def test_gradient_through_rollout_matches_finite_differences(getkey):
    system = zoo.Pendulum()
    controller = dynsys.MLPController(2, 1, 4, 1, bound=2.0, key=getkey())
    x0s = jnp.array([[0.5, 0.0], [-0.3, 0.4]])

    @eqx.filter_jit
    def loss(c):
        traj = dynsys.rollout(system, x0s, 20, controller=c)
        return dynsys.quadratic_cost(traj, 1.0, 0.1)

    grads = eqx.filter_grad(loss)(controller)
    W = controller.mlp.layers[0].weight

    def loss_of_W(w):
        return loss(
            eqx.tree_at(lambda c: c.mlp.layers[0].weight, controller, jnp.asarray(w))
        )

    np.testing.assert_allclose(
        grads.mlp.layers[0].weight,
        finite_difference_gradient(loss_of_W, W),
        rtol=1e-6,
        atol=1e-9,
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(state_size=0),
            r"MLPController\(state_size=...\): expected an integer >= 1",
        ),
        (dict(input_size=1.0), r"MLPController\(input_size=...\)"),
        (dict(depth=-1), r"MLPController\(depth=...\): expected an integer >= 0"),
        (
            dict(bound=(1.0, 2.0)),
            r"bound must be a scalar or have shape \(m,\) = \(1,\), got \(2,\)",
        ),
        (dict(bound=0.0), "bound must be positive and finite"),
        (dict(bound=np.inf), "bound must be positive and finite"),
    ],
)
def test_mlp_errors(getkey, kwargs, match):
    args = dict(state_size=2, input_size=1, width_size=4, depth=1) | kwargs
    with pytest.raises(ValueError, match=match):
        dynsys.MLPController(**args, key=getkey())


def test_wrong_state_shape_errors_under_jit(getkey):
    controller = dynsys.MLPController(2, 1, 4, 1, key=getkey())
    with pytest.raises(
        ValueError, match=r"x must have shape \(n,\) = \(2,\), got \(3,\)"
    ):
        eqx.filter_jit(controller)(0.0, jnp.zeros(3))
    with pytest.raises(
        ValueError, match=r"x must have shape \(n,\) = \(3,\), got \(2,\)"
    ):
        dynsys.rollout(
            zoo.mass_spring_damper(num_masses=1),
            jnp.zeros(2),
            3,
            controller=dynsys.MLPController(3, 1, 4, 1, key=getkey()),
        )
