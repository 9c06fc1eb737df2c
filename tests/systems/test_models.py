"""The zoo models against independent references."""

import dynsys.models as zoo
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def test_mass_spring_damper_is_the_exact_zero_order_hold():
    """K = exp(A dt), B_d = A^{-1}(exp(A dt) - I) B, by eigen-decomposition in NumPy."""
    system = zoo.mass_spring_damper(num_masses=3, stiffness=2.0, damping=0.3, dt=0.2)
    A, B = (np.asarray(a) for a in zoo.mass_spring_damper_matrices(3, 1.0, 2.0, 0.3))
    eigenvalues, V = np.linalg.eig(A)
    V_inv = np.linalg.inv(V)
    K_ref = (V * np.exp(eigenvalues * 0.2)) @ V_inv
    B_ref = (V * ((np.exp(eigenvalues * 0.2) - 1) / eigenvalues)) @ V_inv @ B
    np.testing.assert_allclose(system.K, K_ref.real, atol=1e-12)
    np.testing.assert_allclose(system.B, B_ref.real, atol=1e-12)
    assert system.state_size == 6 and system.input_size == 1 and system.dt == 0.2


def test_mass_spring_damper_is_stable_and_at_rest_at_the_origin():
    system = zoo.mass_spring_damper()
    assert np.max(np.abs(np.linalg.eigvals(np.asarray(system.K)))) < 1
    traj = dynsys.rollout(system, jnp.zeros(4), 10, inputs=jnp.zeros((10, 1)))
    np.testing.assert_array_equal(traj.xs, 0.0)


def test_pendulum_conserves_energy_without_damping_for_small_steps():
    pendulum = zoo.Pendulum(damping=0.0, dt=1e-3)
    traj = dynsys.rollout(
        pendulum, jnp.array([1.0, 0.0]), 2000, inputs=jnp.zeros((2000, 1))
    )
    theta, omega = traj.xs[:, 0], traj.xs[:, 1]
    energy = 0.5 * omega**2 - 9.81 * np.cos(theta)
    assert np.ptp(np.asarray(energy)) < 1e-2 * abs(float(energy[0]))


def test_pendulum_small_angle_period():
    """Small oscillations have period 2 pi sqrt(l / g)."""
    pendulum = zoo.Pendulum(damping=0.0, length=1.0, dt=1e-3)
    traj = dynsys.rollout(
        pendulum, jnp.array([0.01, 0.0]), 6000, inputs=jnp.zeros((6000, 1))
    )
    theta = np.asarray(traj.xs[:, 0])
    upward = np.nonzero((theta[:-1] < 0) & (theta[1:] >= 0))[0]
    period = (upward[1] - upward[0]) * 1e-3
    assert period == pytest.approx(2 * np.pi * np.sqrt(1.0 / 9.81), rel=2e-3)


def test_zoo_lookup():
    assert isinstance(zoo.get("pendulum", damping=0.5), zoo.Pendulum)
    assert zoo.get("mass_spring_damper", num_masses=3).state_size == 6
    with pytest.raises(
        ValueError,
        match=r"unknown model 'nope'; allowed: lotka_volterra, mass_spring_damper, "
        r"pendulum, pendulum_ode, van_der_pol",
    ):
        zoo.get("nope")
    with pytest.raises(ValueError, match=r"Pendulum\(dt=\.\.\.\): dt must be positive"):
        zoo.Pendulum(dt=-1.0)
