"""Set-point tracking through an observer: the steady state of a set point, and the
schedule read by step index whether or not the loop has a sample time."""

import jax
import numpy as np

import dynsys
from dynsys._control.set_point import (
    Clipped,
    lqg_set_point_controller,
    SetPointFeedback,
    steady_state_map,
)


K = np.array([[0.9, 0.2], [-0.1, 0.8]])
B = np.array([[0.5], [1.0]])
C = np.array([[1.0, 0.5]])
D = np.array([[0.2]])


def test_the_steady_state_map_solves_the_rest_equations():
    N_x, N_u = steady_state_map(dynsys.LinearSystem(K, B, C, D))
    r = np.array([0.7])
    x, u = N_x @ r, N_u @ r
    np.testing.assert_allclose(K @ x + B @ u, x, atol=1e-12)
    np.testing.assert_allclose(C @ x + D @ u, r, atol=1e-12)
    # Closed form for a square system: u = r / (C (I - K)^-1 B + D).
    gain = C @ np.linalg.solve(np.eye(2) - K, B) + D
    np.testing.assert_allclose(u, r / gain[0, 0], rtol=1e-12)


def test_the_schedule_is_read_by_step_with_or_without_a_sample_time():
    jax.config.update("jax_enable_x64", True)
    model = dynsys.LinearSystem(K, B, C, D, input_level=[2.0])
    sampled = dynsys.LinearSystem(K, B, C, D, dt=0.1, input_level=[2.0])
    L = np.array([[0.3], [0.1]])
    references = np.repeat(np.array([[1.0], [-0.5], [0.25]]), 4, axis=0)  # (12, 1)
    lqg = Clipped(lqg_set_point_controller(model, 1.0, 0.1), 0.8)
    z0 = np.r_[0.1, -0.2, 0.0, 0.0]
    us = []
    for plant, dt in ((model, None), (sampled, 0.1)):
        loop = dynsys.ObservedPlant(plant, model, L)
        controller = SetPointFeedback(lqg, references, np.array([2.0]), 2, dt)
        us.append(np.asarray(dynsys.rollout(loop, z0, 12, controller=controller).us))
    np.testing.assert_allclose(us[0], us[1], rtol=1e-12)
    # The plain loop: u = 2 + clip(W [x_hat; r_k]).
    W = -np.asarray(lqg.controller.gain)
    x, estimate, expected = z0[:2], z0[2:], []
    for k in range(12):
        u = 2.0 + np.clip(W @ np.r_[estimate, references[k]], -0.8, 0.8)
        y = C @ x + D @ (u - 2.0)
        expected.append(u)
        x, estimate = (
            K @ x + B @ (u - 2.0),
            K @ estimate + B @ (u - 2.0) + L @ (y - C @ estimate - D @ (u - 2.0)),
        )
    np.testing.assert_allclose(us[0], np.array(expected), rtol=1e-12, atol=1e-14)
