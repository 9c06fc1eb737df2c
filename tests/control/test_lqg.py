"""`lqr_gain` and `kalman_gain` against the Riccati recursions iterated in NumPy,
and a controller trained through the observer loop against the LQG controller."""

import dynsys.models as zoo
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys


def _lqr_by_recursion(A, B, Q, R, S):
    """The cost-to-go recursion with a cross term, iterated to its fixed point."""
    P = Q.copy()
    for _ in range(100_000):
        G = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A + S.T)
        P_next = Q + A.T @ P @ A - (A.T @ P @ B + S) @ G
        if np.max(np.abs(P_next - P)) < 1e-13 * max(1.0, np.max(np.abs(P))):
            return np.linalg.solve(R + B.T @ P_next @ B, B.T @ P_next @ A + S.T)
        P = P_next
    raise RuntimeError("no convergence")


def _kalman_by_recursion(A, C, W, V):
    """The predictor's error-covariance recursion, iterated to its fixed point."""
    P = W.copy()
    for _ in range(100_000):
        L = A @ P @ C.T @ np.linalg.inv(C @ P @ C.T + V)
        P_next = A @ P @ A.T + W - L @ C @ P @ A.T
        if np.max(np.abs(P_next - P)) < 1e-13 * max(1.0, np.max(np.abs(P))):
            return A @ P_next @ C.T @ np.linalg.inv(C @ P_next @ C.T + V)
        P = P_next
    raise RuntimeError("no convergence")


def _plant():
    system = zoo.mass_spring_damper()  # n = 4, m = 1, lightly damped
    C = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])  # positions only
    return dynsys.LinearSystem(system.K, system.B, C, [[0.2], [0.0]])


def test_lqr_gain_equals_the_riccati_recursion_with_the_feedthrough_cross_term():
    plant = _plant()
    A, B = np.asarray(plant.K, np.float64), np.asarray(plant.B, np.float64)
    C, D = np.asarray(plant.C, np.float64), np.asarray(plant.D, np.float64)
    Qy, R = np.diag([1.0, 2.0]), np.array([[0.1]])
    expected = _lqr_by_recursion(A, B, C.T @ Qy @ C, R + D.T @ Qy @ D, C.T @ Qy @ D)
    G = dynsys.lqr_gain(plant, output_weight=Qy, input_weight=0.1)
    np.testing.assert_allclose(G, expected, rtol=1e-6, atol=1e-9)
    assert np.max(np.abs(np.linalg.eigvals(A - B @ G))) < 1.0


def test_kalman_gain_equals_the_filter_recursion():
    plant = _plant()
    A, C = np.asarray(plant.K, np.float64), np.asarray(plant.C, np.float64)
    W, V = 0.01 * np.eye(4), np.diag([0.02, 0.05])
    L = dynsys.kalman_gain(plant, process_noise=0.01, measurement_noise=V)
    np.testing.assert_allclose(L, _kalman_by_recursion(A, C, W, V), rtol=1e-6, atol=1e-9)
    assert np.max(np.abs(np.linalg.eigvals(A - L @ C))) < 1.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: dynsys.lqr_gain(p, input_weight=np.eye(2)), r"lqr_gain\(input_weight"),
        (
            lambda p: dynsys.kalman_gain(p, measurement_noise=np.eye(3)),
            r"kalman_gain\(measurement_noise=.*\(2, 2\)",
        ),
        (lambda p: dynsys.lqr_gain(dynsys.LinearSystem(np.eye(2))), r"no inputs"),
    ],
)
def test_bad_weights_are_refused_in_one_line(call, message):
    with pytest.raises(ValueError, match=message):
        call(_plant())


@pytest.mark.slow
def test_a_gain_trained_through_the_observer_loop_reaches_the_lqg_cost():
    """With the observer started at the plant's state the loop is LQR's problem:
    gradient descent on the feedback gain reaches LQG's cost within 1 %. Started
    from zero, the trained gain may beat LQG on this noise-free cost (LQG is
    optimal for the noisy problem, not for one initial estimation error), by a
    little."""
    jax.config.update("jax_enable_x64", True)
    plant = dynsys.LinearSystem(_plant().K, _plant().B, _plant().C)
    G = dynsys.lqr_gain(plant, output_weight=1.0, input_weight=0.1)
    L = dynsys.kalman_gain(plant, process_noise=0.01, measurement_noise=0.01)
    loop = dynsys.ObservedPlant(plant, plant, L)
    x0 = np.random.default_rng(0).standard_normal((32, 4))

    def cost(gain, estimate0):
        controller = dynsys.OutputFeedback(dynsys.LinearFeedback(gain), 4)
        z0 = jnp.concatenate([x0, estimate0], axis=1)
        trajectory = dynsys.rollout(loop, z0, 200, controller=controller)
        ys, us = trajectory.ys, trajectory.us
        return jnp.mean(jnp.sum(ys**2, axis=(-1, -2)) + 0.1 * jnp.sum(us**2, axis=(-1, -2)))

    for estimate0, low in ((x0, 0.999), (np.zeros_like(x0), 0.95)):
        lqg = float(cost(jnp.asarray(G), estimate0))
        value_and_grad = jax.jit(jax.value_and_grad(lambda g: cost(g, estimate0)))
        gain = jnp.zeros_like(jnp.asarray(G))
        optimiser = optax.adam(0.05)
        state = optimiser.init(gain)
        for _ in range(800):
            _, grad = value_and_grad(gain)
            updates, state = optimiser.update(grad, state)
            gain = optax.apply_updates(gain, updates)
        ratio = float(cost(gain, estimate0)) / lqg
        assert low <= ratio <= 1.01, (ratio, np.asarray(gain), G)
