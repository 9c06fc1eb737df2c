"""`ObservedPlant` and `OutputFeedback`: the closed loop through an observer against
a plain Python loop, and its gradients against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def _systems(rng):
    """A plant (n_p = 3, m = 1, p = 2, with D), a different model of it, an
    observer gain and a state-feedback gain on the model's state."""
    K = np.diag([0.9, 0.7, -0.5]) + 0.05 * rng.standard_normal((3, 3))
    B, C, D = rng.standard_normal((3, 1)), rng.standard_normal((2, 3)), [[0.3], [0.0]]
    plant = dynsys.LinearSystem(K, B, C, D)
    model = dynsys.LinearSystem(K + 0.02, B * 1.1, C, D)
    gain = 0.1 * rng.standard_normal((3, 2))
    feedback = 0.2 * rng.standard_normal((1, 3))
    return plant, model, gain, feedback


def test_the_closed_loop_through_the_observer_matches_a_python_loop():
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    plant, model, L, G = _systems(rng)
    x0, estimate0 = rng.standard_normal(3), rng.standard_normal(3)
    loop = dynsys.ObservedPlant(plant, model, L)
    controller = dynsys.OutputFeedback(dynsys.LinearFeedback(G), plant_state_size=3)
    trajectory = dynsys.rollout(loop, np.r_[x0, estimate0], 20, controller=controller)
    A, B, C, D = (np.asarray(m) for m in (plant.K, plant.B, plant.C, plant.D))
    Am, Bm = np.asarray(model.K), np.asarray(model.B)
    x, estimate, ys, us = x0, estimate0, [], []
    for _ in range(20):
        u = -G @ estimate
        y = C @ x + D @ u
        ys.append(y)
        us.append(u)
        x, estimate = (
            A @ x + B @ u,
            Am @ estimate + Bm @ u + L @ (y - (C @ estimate + D @ u)),
        )
    np.testing.assert_allclose(np.asarray(trajectory.ys), np.array(ys), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(trajectory.us), np.array(us), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(trajectory.xs[-1]), np.r_[x, estimate], rtol=1e-12)


def test_gradients_through_the_observer_match_finite_differences():
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(1)
    plant, model, L, G = _systems(rng)
    z0 = np.r_[rng.standard_normal(3), np.zeros(3)]

    def cost(observer_gain, feedback_gain):
        loop = dynsys.ObservedPlant(plant, model, observer_gain)
        controller = dynsys.OutputFeedback(dynsys.LinearFeedback(feedback_gain), 3)
        trajectory = dynsys.rollout(loop, z0, 30, controller=controller)
        return jnp.sum(trajectory.ys**2) + 0.1 * jnp.sum(trajectory.us**2)

    grad_L, grad_G = jax.grad(cost, argnums=(0, 1))(jnp.asarray(L), jnp.asarray(G))
    step = 1e-6
    for which, (base, grad) in enumerate(((L, grad_L), (G, grad_G))):
        for index in np.ndindex(base.shape):
            bump = np.zeros_like(base)
            bump[index] = step
            args_up = [L, G]
            args_down = [L, G]
            args_up[which] = base + bump
            args_down[which] = base - bump
            numeric = (cost(*args_up) - cost(*args_down)) / (2 * step)
            np.testing.assert_allclose(grad[index], numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p, m: dynsys.ObservedPlant(p, m, np.zeros((2, 2))), r"gain=.*\(3, 2\)"),
        (
            lambda p, m: dynsys.ObservedPlant(
                p, dynsys.LinearSystem(np.eye(2), np.ones((2, 2))), np.zeros((2, 2))
            ),
            r"model=.*expected 1 inputs and 2 outputs",
        ),
        (
            lambda p, m: dynsys.OutputFeedback(dynsys.LinearFeedback([[1.0]]), -1),
            r"plant_state_size=.*integer >= 0",
        ),
    ],
)
def test_mismatched_sizes_are_refused_in_one_line(make, message):
    plant, model, _, _ = _systems(np.random.default_rng(2))
    with pytest.raises(ValueError, match=message):
        make(plant, model)
