"""Gradients through a rollout are exact: closed forms, finite differences, vmap."""

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import finite_difference_gradient


def adjoint_reference(K, B, x0, inputs, num_steps):
    """dL/dx0, dL/dK, dL/dB, dL/du for L = sum of all states x_0 … x_T.

    The adjoint recursion lambda_T = 1, lambda_t = 1 + K^T lambda_{t+1} gives
    dL/dx0 = lambda_0, dL/dK = sum_t lambda_{t+1} x_t^T, dL/dB = sum_t lambda_{t+1}
    u_t^T and dL/du_t = B^T lambda_{t+1}. Plain NumPy loops, float64.
    """
    K = np.asarray(K, np.float64)
    xs = [np.asarray(x0, np.float64)]
    for t in range(num_steps):
        x_next = K @ xs[-1]
        if B is not None:
            x_next = x_next + np.asarray(B) @ np.asarray(inputs[t])
        xs.append(x_next)
    lambdas = [None] * (num_steps + 1)
    lambdas[num_steps] = np.ones(K.shape[0])
    for t in reversed(range(num_steps)):
        lambdas[t] = 1.0 + K.T @ lambdas[t + 1]
    dK = sum(
        (np.outer(lambdas[t + 1], xs[t]) for t in range(num_steps)), np.zeros_like(K)
    )
    dB = du = None
    if B is not None:
        B = np.asarray(B)
        dB = sum(
            (np.outer(lambdas[t + 1], inputs[t]) for t in range(num_steps)),
            np.zeros_like(B),
        )
        du = np.stack([B.T @ lambdas[t + 1] for t in range(num_steps)])
    return lambdas[0], dK, dB, du


# The seed case: a 3x3 K, a 3-vector x0, 10 and 50 recorded states (9 and 49 steps).
@pytest.mark.parametrize("num_steps", [9, 49])
def test_seed_case_gradient_matches_adjoint_recursion(getkey, num_steps):
    K = 0.3 * jax.random.normal(getkey(), (3, 3))
    x0 = jax.random.normal(getkey(), (3,))

    def loss(K, x0):
        return jnp.sum(dynsys.rollout(dynsys.LinearSystem(K), x0, num_steps).xs)

    dK, dx0 = jax.jit(jax.grad(loss, argnums=(0, 1)))(K, x0)
    ref_dx0, ref_dK, _, _ = adjoint_reference(K, None, x0, None, num_steps)
    np.testing.assert_allclose(dx0, ref_dx0, rtol=1e-11)
    np.testing.assert_allclose(dK, ref_dK, rtol=1e-11)
    # The accumulate bug: a dropped x0 gradient leaves only the direct term, ones.
    assert not np.allclose(dx0, np.ones(3))


@pytest.mark.parametrize("num_steps", [1, 9, 30])
def test_input_gradients_match_adjoint_recursion(getkey, num_steps):
    K = 0.3 * jax.random.normal(getkey(), (3, 3))
    B = jax.random.normal(getkey(), (3, 2))
    x0 = jax.random.normal(getkey(), (3,))
    inputs = jax.random.normal(getkey(), (num_steps, 2))

    def loss(K, B, x0, inputs):
        return jnp.sum(
            dynsys.rollout(dynsys.LinearSystem(K, B), x0, num_steps, inputs=inputs).xs
        )

    grads = jax.grad(loss, argnums=(0, 1, 2, 3))(K, B, x0, inputs)
    ref_dx0, ref_dK, ref_dB, ref_du = adjoint_reference(K, B, x0, inputs, num_steps)
    for got, want in zip(grads, (ref_dK, ref_dB, ref_dx0, ref_du)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_feedback_gain_gradient_matches_closed_form(getkey):
    K = 0.4 * jax.random.normal(getkey(), (3, 3))
    B = jax.random.normal(getkey(), (3, 2))
    G = 0.2 * jax.random.normal(getkey(), (2, 3))
    x0 = jax.random.normal(getkey(), (3,))
    T = 15

    def loss(G):
        system = dynsys.LinearSystem(K, B)
        return jnp.sum(
            dynsys.rollout(system, x0, T, controller=dynsys.LinearFeedback(G)).xs
        )

    # Closed loop x_{t+1} = (K - B G) x_t: the adjoint of L = sum x_t w.r.t. G is
    # -sum_t B^T lambda_{t+1} x_t^T with lambda from the closed-loop matrix.
    closed = np.asarray(K) - np.asarray(B) @ np.asarray(G)
    _, d_closed, _, _ = adjoint_reference(closed, None, x0, None, T)
    np.testing.assert_allclose(
        jax.grad(loss)(G), -np.asarray(B).T @ d_closed, rtol=1e-11
    )


def test_every_array_matches_finite_differences(getkey):
    """A quadratic loss on states, inputs and outputs of an affine system with C, D."""
    n, m, p, T = 3, 2, 2, 12
    arrays = dict(
        K=0.4 * jax.random.normal(getkey(), (n, n)),
        B=jax.random.normal(getkey(), (n, m)),
        C=jax.random.normal(getkey(), (p, n)),
        D=jax.random.normal(getkey(), (p, m)),
        offset=jax.random.normal(getkey(), (n,)),
        gain=0.2 * jax.random.normal(getkey(), (m, n)),
        x0=jax.random.normal(getkey(), (n,)),
        inputs=jax.random.normal(getkey(), (T, m)),
    )

    def loss(**a):
        system = dynsys.LinearSystem(a["K"], a["B"], a["C"], a["D"], a["offset"])
        traj = dynsys.rollout(
            system,
            a["x0"],
            T,
            controller=dynsys.LinearFeedback(a["gain"]),
            inputs=a["inputs"],
        )
        return jnp.mean(traj.xs**2) + jnp.mean(traj.us**2) + jnp.mean(jnp.sin(traj.ys))

    grads = jax.grad(lambda a: loss(**a))(arrays)
    for name, value in arrays.items():
        # Jitted once per argument, so the finite differences do not retrace.
        @jax.jit
        def partial(v, name=name):
            return loss(**{**arrays, name: v})

        reference = finite_difference_gradient(partial, value)
        np.testing.assert_allclose(
            grads[name], reference, rtol=1e-6, atol=1e-8, err_msg=name
        )


def test_nonlinear_parameters_match_finite_differences():
    pendulum = zoo.Pendulum(damping=0.2)
    inputs = jnp.sin(jnp.arange(30.0))[:, None]

    def loss(params):
        gravity, length, damping, x0 = params[0], params[1], params[2], params[3:]
        system = eqx.tree_at(
            lambda s: (s.gravity, s.length, s.damping),
            pendulum,
            (gravity, length, damping),
        )
        return jnp.sum(dynsys.rollout(system, x0, 30, inputs=inputs).xs[..., 0] ** 2)

    params = jnp.array([9.81, 1.0, 0.2, 1.0, -0.5])
    np.testing.assert_allclose(
        jax.grad(loss)(params), finite_difference_gradient(loss, params), rtol=1e-6
    )


def test_grad_of_vmap_equals_vmap_of_grad(getkey):
    K = 0.3 * jax.random.normal(getkey(), (3, 3))
    x0s = jax.random.normal(getkey(), (5, 3))

    def loss(K, x0):
        return jnp.sum(dynsys.rollout(dynsys.LinearSystem(K), x0, 10).xs ** 2)

    dK_total, dx0s = jax.grad(
        lambda K, x0s: jnp.sum(jax.vmap(loss, in_axes=(None, 0))(K, x0s)),
        argnums=(0, 1),
    )(K, x0s)
    dK_each, dx0_each = jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(None, 0))(
        K, x0s
    )
    np.testing.assert_allclose(dK_total, dK_each.sum(0), rtol=1e-12)
    np.testing.assert_allclose(dx0s, dx0_each, rtol=1e-12)
    # The rollout's own batch dimension gives the same gradients.
    dK_batch, dx0_batch = jax.grad(
        lambda K, x0s: jnp.sum(dynsys.rollout(dynsys.LinearSystem(K), x0s, 10).xs ** 2),
        argnums=(0, 1),
    )(K, x0s)
    np.testing.assert_allclose(dK_batch, dK_total, rtol=1e-12)
    np.testing.assert_allclose(dx0_batch, dx0s, rtol=1e-12)


@pytest.mark.parametrize("batch", [(), (4,)])
def test_x0_gradient_is_never_silently_zero(getkey, batch):
    """Each x0 gets its own exact gradient, also through broadcast inputs."""
    K = 0.5 * jax.random.normal(getkey(), (3, 3))
    B = jax.random.normal(getkey(), (3, 1))
    x0 = jax.random.normal(getkey(), batch + (3,))
    inputs = jax.random.normal(getkey(), (8, 1))

    def loss(x0):
        traj = dynsys.rollout(dynsys.LinearSystem(K, B), x0, 8, inputs=inputs)
        return jnp.sum(traj.xs[..., -1, :])

    dx0 = jax.grad(loss)(x0)
    # d sum(x_T) / d x0 = (K^T)^T 1, for every trajectory of the batch.
    expected = np.linalg.matrix_power(np.asarray(K).T, 8) @ np.ones(3)
    np.testing.assert_allclose(dx0, np.broadcast_to(expected, batch + (3,)), rtol=1e-11)
    assert np.all(np.abs(dx0) > 0)


def test_float32_gradients_agree_with_float64(getkey):
    K = 0.3 * jax.random.normal(getkey(), (3, 3))
    x0 = jax.random.normal(getkey(), (3,))

    def loss(K, x0):
        return jnp.sum(dynsys.rollout(dynsys.LinearSystem(K), x0, 49).xs)

    g32 = jax.grad(loss, argnums=(0, 1))(K.astype(jnp.float32), x0.astype(jnp.float32))
    ref_dx0, ref_dK, _, _ = adjoint_reference(K, None, x0, None, 49)
    assert g32[0].dtype == jnp.float32 and g32[1].dtype == jnp.float32
    np.testing.assert_allclose(g32[0], ref_dK, rtol=1e-4)
    np.testing.assert_allclose(g32[1], ref_dx0, rtol=1e-4)
