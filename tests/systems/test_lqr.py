"""Gradient descent through closed-loop rollouts finds the optimal LQR gain.

The reference gain comes from iterating the discrete Riccati recursion in NumPy,
independently of dynsys:

    P <- Q + A^T P A - A^T P B (R + B^T P B)^{-1} B^T P A,   G = (R + B^T P B)^{-1} B^T P A,

and `u = -G x` minimises sum_t x_t^T Q x_t + u_t^T R u_t over an infinite horizon.
"""

import dynsys.models as zoo
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys


def riccati_gain(A, B, Q, R, tol=1e-14, max_iter=100_000):
    """Iterate the Riccati recursion to a fixed point; return (G, P)."""
    P = Q.copy()
    for _ in range(max_iter):
        G = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
        P_next = Q + A.T @ P @ (A - B @ G)
        if np.max(np.abs(P_next - P)) < tol * max(1.0, np.max(np.abs(P))):
            P = P_next
            break
        P = P_next
    else:
        raise RuntimeError("Riccati recursion did not converge")
    G = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
    return G, P


@pytest.fixture(scope="module")
def problem():
    system = zoo.mass_spring_damper()  # n = 4, m = 1, dt = 0.1, lightly damped
    A, B = np.asarray(system.K), np.asarray(system.B)
    n, m = B.shape
    Q, R = np.eye(n), np.eye(m)
    G, P = riccati_gain(A, B, Q, R)
    # The Riccati fixed point: P solves the DARE, and the closed loop is stable.
    np.testing.assert_allclose(
        P,
        Q + A.T @ P @ A - A.T @ P @ B @ np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A),
        atol=1e-10,
    )
    rho = np.max(np.abs(np.linalg.eigvals(A - B @ G)))
    assert rho < 0.97
    # Initial states covering the state space: +-e_i, so that the average of
    # x0 x0^T is full rank and the minimiser is unique.
    x0s = jnp.concatenate([jnp.eye(n), -jnp.eye(n)])
    return dict(system=system, G=G, P=P, Q=Q, R=R, x0s=x0s, rho=rho, n=n, m=m)


def _loss(problem, num_steps, Q_final):
    def loss(controller):
        traj = dynsys.rollout(
            problem["system"], problem["x0s"], num_steps, controller=controller
        )
        return dynsys.quadratic_cost(traj, problem["Q"], problem["R"], Q_final=Q_final)

    return loss


def test_lqr_gain_is_a_stationary_point_of_the_rollout_cost(problem):
    """First-order check, no optimiser involved: the exact gradient through the
    rollout vanishes at the Riccati gain (to rounding with the terminal weight P,
    where the finite-horizon optimum is exactly G; to O(rho^(2T)) without)."""
    G = dynsys.LinearFeedback(jnp.asarray(problem["G"]))
    grad_P = jax.grad(_loss(problem, 30, problem["P"]))(G).gain
    assert np.max(np.abs(grad_P)) < 1e-10
    # Without it, the gradient is exactly minus that of the dropped tail
    # E[x_T^T P x_T] (the two add up to the stationary cost above), which is
    # O(T rho^(2T)) small.
    grad_long = jax.grad(_loss(problem, 200, None))(G).gain

    def tail(controller):
        traj = dynsys.rollout(
            problem["system"], problem["x0s"], 200, controller=controller
        )
        return dynsys.quadratic_cost(traj, 0.0, Q_final=problem["P"])

    np.testing.assert_allclose(grad_long, -jax.grad(tail)(G).gain, atol=1e-12)
    assert np.max(np.abs(grad_long)) < 1e-4
    # A short horizon is not stationary at G: the check above can fail.
    grad_short = jax.grad(_loss(problem, 10, None))(G).gain
    assert np.max(np.abs(grad_short)) > 1e-2


def test_gradient_descent_with_terminal_weight_finds_lqr_gain(problem):
    """With the terminal weight P, the LQR gain minimises the finite-horizon cost
    exactly for any horizon (dynamic programming from the terminal cost P gives P at
    every step), so only the optimiser's accuracy limits the match."""
    result = dynsys.train(
        _loss(problem, 60, problem["P"]),
        dynsys.LinearFeedback(jnp.zeros((problem["m"], problem["n"]))),
        solver=optax.adam(optax.exponential_decay(0.05, 500, 0.3)),
        num_steps=1500,
        progress=False,
    )
    assert result.stop_reason is None
    # Measured error ~1e-5 (Adam's resolution after 1500 steps); the gain's entries
    # are O(1), so 1e-4 is a relative accuracy of ~1e-4.
    np.testing.assert_allclose(result.model.gain, problem["G"], atol=1e-4)
    # The optimal cost from x0 is x0^T P x0; averaged over +-e_i it is trace(P)/n.
    np.testing.assert_allclose(
        result.best_loss, np.trace(problem["P"]) / problem["n"], rtol=1e-8
    )


def test_gradient_descent_long_horizon_finds_lqr_gain(problem):
    """No terminal weight: the finite-horizon optimal static gain differs from the
    infinite-horizon one by O(rho^(2T)) with rho ~ 0.964 the closed-loop spectral
    radius; at T = 200 that is ~5e-7, far below the tolerance."""
    num_steps = 200
    assert problem["rho"] ** (2 * num_steps) < 1e-6
    result = dynsys.train(
        _loss(problem, num_steps, None),
        dynsys.LinearFeedback(jnp.zeros((problem["m"], problem["n"]))),
        solver=optax.adam(optax.exponential_decay(0.05, 1000, 0.3)),
        num_steps=3000,
        progress=False,
    )
    assert result.stop_reason is None
    # Measured error ~6e-6 (optimiser-limited); tolerance 1e-4 as above.
    np.testing.assert_allclose(result.model.gain, problem["G"], atol=1e-4)
    np.testing.assert_allclose(
        result.best_loss, np.trace(problem["P"]) / problem["n"], rtol=1e-6
    )
