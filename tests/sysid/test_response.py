import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def _system(getkey, n=4, m=2, p=3, dt=None):
    K = jax.random.normal(getkey(), (n, n))
    K = 0.9 * K / jnp.max(jnp.abs(jnp.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K,
        jax.random.normal(getkey(), (n, m)),
        jax.random.normal(getkey(), (p, n)),
        jax.random.normal(getkey(), (p, m)),
        dt=dt,
    )


@pytest.mark.parametrize("dt", [None, 0.05])
def test_frequency_response_closed_form(getkey, dt):
    system = _system(getkey, dt=dt)
    w = jnp.linspace(0.0, np.pi / (dt or 1.0), 7)
    H = dynsys.frequency_response(system, w)
    assert H.shape == (7, 3, 2)
    K, B, C, D = (np.asarray(a) for a in (system.K, system.B, system.C, system.D))
    for f, omega in enumerate(np.asarray(w)):
        z = np.exp(1j * omega * (dt or 1.0))
        expected = C @ np.linalg.solve(z * np.eye(4) - K, B) + D
        np.testing.assert_allclose(H[f], expected, rtol=1e-10, atol=1e-12)


def test_first_order_analytic():
    a, b, c = 0.8, 0.5, 2.0
    system = dynsys.LinearSystem(jnp.array([[a]]), jnp.array([[b]]), jnp.array([[c]]))
    w = jnp.array([0.0, 0.3, np.pi])
    expected = c * b / (np.exp(1j * np.asarray(w)) - a)
    np.testing.assert_allclose(
        dynsys.frequency_response(system, w)[:, 0, 0], expected, rtol=1e-12
    )
    t = np.arange(30)
    step = c * b * (1 - a**t) / (1 - a)  # y_t = c x_t, x_t = b (1 - a^t) / (1 - a)
    np.testing.assert_allclose(
        dynsys.step_response(system, 30)[:, 0, 0], step, rtol=1e-12, atol=1e-14
    )
    impulse = np.where(t == 0, 0.0, c * b * a ** np.maximum(t - 1, 0))
    np.testing.assert_allclose(
        dynsys.impulse_response(system, 30)[:, 0, 0], impulse, rtol=1e-12, atol=1e-14
    )


def test_step_and_impulse_against_rollout_and_markov(getkey):
    system = _system(getkey)
    T = 12
    impulse = dynsys.impulse_response(system, T)
    step = dynsys.step_response(system, T)
    K, B, C, D = (np.asarray(a) for a in (system.K, system.B, system.C, system.D))
    markov = [D] + [C @ np.linalg.matrix_power(K, k) @ B for k in range(T - 1)]
    np.testing.assert_allclose(impulse, np.stack(markov), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        step, np.cumsum(np.stack(markov), 0), rtol=1e-10, atol=1e-12
    )
    for j in range(2):  # an independent simulation: unit step on input j
        inputs = jnp.zeros((T, 2)).at[:, j].set(1.0)
        ys = dynsys.rollout(system, jnp.zeros(4), T, inputs=inputs).ys
        np.testing.assert_allclose(step[:, :, j], ys, rtol=1e-10, atol=1e-12)


def test_continuous_time_frequency_response():
    ode = dynsys.LinearODE(
        jnp.array([[0.0, 1.0], [-4.0, -0.8]]),
        jnp.array([[0.0], [1.0]]),
        jnp.array([[1.0, 0.0]]),
    )
    w = jnp.array([0.5, 2.0, 10.0])
    expected = 1.0 / (-(np.asarray(w) ** 2) + 0.8j * np.asarray(w) + 4.0)
    np.testing.assert_allclose(
        dynsys.frequency_response(ode, w)[:, 0, 0], expected, rtol=1e-12
    )


def test_modes_of_a_discretised_system():
    wn, zeta, real_pole = 2.0, 0.2, -3.0
    A = jnp.array(
        [[0.0, 1.0, 0.0], [-(wn**2), -2 * zeta * wn, 0.0], [0.0, 0.0, real_pole]]
    )
    ode = dynsys.LinearODE(A, jnp.ones((3, 1)))
    dt = 0.1
    result = dynsys.modes(dynsys.discretize(ode, dt))
    assert result.dt == dt
    np.testing.assert_allclose(result.natural_frequency, [wn, wn, 3.0], rtol=1e-10)
    np.testing.assert_allclose(result.damping_ratio, [zeta, zeta, 1.0], rtol=1e-10)
    # Without dt: rad per sample.
    stripped = dynsys.LinearSystem(dynsys.discretize(ode, dt).K)
    np.testing.assert_allclose(
        dynsys.modes(stripped).natural_frequency,
        [wn * dt, wn * dt, 3.0 * dt],
        rtol=1e-10,
    )
    continuous = dynsys.modes(ode)
    assert continuous.dt == 0.0
    np.testing.assert_allclose(continuous.damping_ratio, [zeta, zeta, 1.0], rtol=1e-12)


def test_modes_of_an_eigenvalue_exactly_zero_warn_nothing():
    # A deadbeat mode (eigenvalue 0: s = -inf) next to a real pole at 0.5 and a
    # complex pair; NumPy used to warn "invalid value encountered in divide".
    K = jnp.zeros((4, 4)).at[1:3, 1:3].set(jnp.array([[0.8, 0.3], [-0.3, 0.8]]))
    K = K.at[3, 3].set(0.5)
    system = dynsys.LinearSystem(K, jnp.ones((4, 1)), dt=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = dynsys.modes(system)
    pair = np.log(0.8 + 0.3j) / 0.1  # the reference, pole by pole
    np.testing.assert_allclose(
        result.natural_frequency, [abs(pair), abs(pair), -np.log(0.5) / 0.1, np.inf],
        rtol=1e-6,
    )  # fmt: skip
    damping = -pair.real / abs(pair)
    np.testing.assert_allclose(
        result.damping_ratio, [damping, damping, 1.0, 1.0], rtol=1e-6
    )


class _Logistic(dynsys.AbstractSystem):
    state_size: int = eqx.field(static=True, default=1)
    input_size: int = eqx.field(static=True, default=0)

    def step(self, t, x, u):
        return 3.0 * x * (1 - x)


def test_bad_input():
    with pytest.raises(TypeError, match="expected a linear discrete-time system"):
        dynsys.step_response(_Logistic(), 5)
    ode = dynsys.LinearODE(-jnp.eye(1), jnp.ones((1, 1)))
    with pytest.raises(TypeError, match=r"impulse_response.*dynsys.discretize"):
        dynsys.impulse_response(ode, 5)
    with pytest.raises(ValueError, match="has no input"):
        dynsys.frequency_response(dynsys.LinearSystem(jnp.eye(2)), jnp.ones(3))
    with pytest.raises(ValueError, match="num_steps must be a positive int, got 0"):
        dynsys.step_response(dynsys.LinearSystem(jnp.eye(1), jnp.ones((1, 1))), 0)
    with pytest.raises(ValueError, match=r"frequencies must have shape \(F,\)"):
        dynsys.frequency_response(ode, jnp.ones((2, 2)))
