import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._sysid.initial_state import linear_x0


def _system(getkey, n=4, m=2, p=2, offset=True):
    K = jax.random.normal(getkey(), (n, n))
    K = 0.95 * K / jnp.max(jnp.abs(jnp.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K,
        jax.random.normal(getkey(), (n, m)),
        jax.random.normal(getkey(), (p, n)),
        jax.random.normal(getkey(), (p, m)),
        jax.random.normal(getkey(), (n,)) if offset else None,
    )


def _outputs(system, x0s, us):
    return dynsys.rollout(system, x0s, us.shape[1], inputs=us).ys


def _io_data(system, x0s, us, lengths=None, noise=0.0, key=None):
    """A Dataset with outputs (and inputs) only, padded after each length."""
    ys = _outputs(system, x0s, us)
    if noise:
        ys = ys + noise * jax.random.normal(key, ys.shape)
    return dynsys.Dataset(us=us, ys=ys, lengths=lengths)


def test_exact_on_noise_free_outputs(getkey):
    system = _system(getkey)
    x0s = jax.random.normal(getkey(), (3, 4))
    us = jax.random.normal(getkey(), (3, 40, 2))
    data = _io_data(system, x0s, us)
    np.testing.assert_allclose(dynsys.estimate_x0(system, data), x0s, atol=1e-9)


def test_ragged_lengths_use_only_valid_steps(getkey):
    system = _system(getkey)
    x0s = jax.random.normal(getkey(), (3, 4))
    us = jax.random.normal(getkey(), (3, 40, 2))
    lengths = (40, 7, 23)
    data = dynsys.Dataset(
        us=[us[i, :T] for i, T in enumerate(lengths)],
        ys=[_outputs(system, x0s, us)[i, :T] for i, T in enumerate(lengths)],
    )
    assert data.lengths == lengths
    np.testing.assert_allclose(dynsys.estimate_x0(system, data), x0s, atol=1e-9)
    # The array core ignores whatever lies after each experiment's end.
    mask = jnp.asarray(np.arange(40)[None] < np.asarray(lengths)[:, None])
    garbage = 1e3 * jax.random.normal(getkey(), data.ys.shape)
    ys = jnp.where(mask[..., None], data.ys, garbage)
    np.testing.assert_allclose(linear_x0(system, ys, us, mask), x0s, atol=1e-9)
    # Each experiment alone gives the same.
    for i, T in enumerate(lengths):
        alone = linear_x0(
            system, data.ys[i : i + 1, :T], us[i : i + 1, :T], jnp.ones((1, T), bool)
        )
        np.testing.assert_allclose(alone[0], x0s[i], atol=1e-9)


def test_matches_numpy_least_squares_on_noisy_data(getkey):
    system = _system(getkey, n=3, m=1, p=1, offset=False)
    x0s = jax.random.normal(getkey(), (2, 3))
    us = jax.random.normal(getkey(), (2, 30, 1))
    data = _io_data(system, x0s, us, noise=0.1, key=getkey())
    # Reference: the regression matrix column by column from rollouts of unit x0.
    K, B, C, D = (np.asarray(a) for a in (system.K, system.B, system.C, system.D))
    for i in range(2):
        obs = np.stack([C @ np.linalg.matrix_power(K, t) for t in range(30)])[:, 0]
        x, forced = np.zeros(3), []
        for t in range(30):
            forced.append(C @ x + D @ np.asarray(us[i, t]))
            x = K @ x + B @ np.asarray(us[i, t])
        target = np.asarray(data.ys[i, :, 0]) - np.asarray(forced)[:, 0]
        expected = np.linalg.lstsq(obs, target, rcond=None)[0]
        np.testing.assert_allclose(
            dynsys.estimate_x0(system, data)[i], expected, rtol=1e-8, atol=1e-10
        )


def test_states_data_and_to_linear_models(getkey):
    ode = dynsys.LinearODE(
        jnp.array([[0.0, 1.0], [-2.0, -0.3]]), jnp.array([[0.0], [1.0]])
    )
    model = dynsys.Discretized(ode, 0.1)
    x0s = jax.random.normal(getkey(), (3, 2))
    us = jax.random.normal(getkey(), (3, 25, 1))
    data = dynsys.Dataset(dynsys.rollout(model.to_linear(), x0s, 25, inputs=us).xs, us)
    np.testing.assert_allclose(dynsys.estimate_x0(model, data), x0s, atol=1e-9)
    stable = dynsys.StableLinearSystem.from_linear(model.to_linear())
    np.testing.assert_allclose(dynsys.estimate_x0(stable, data), x0s, atol=1e-7)


def test_jit_and_gradient_match_finite_differences(getkey):
    system = _system(getkey, n=3, m=1, p=2, offset=False)
    x0s = jax.random.normal(getkey(), (2, 3))
    us = jax.random.normal(getkey(), (2, 20, 1))
    data = _io_data(system, x0s, us, noise=0.05, key=getkey())
    ys, mask = data.ys, jnp.ones((2, 20), bool)

    @jax.jit
    def loss(K):
        model = eqx.tree_at(lambda s: s.K, system, K)
        return jnp.sum(linear_x0(model, ys, us, mask) ** 2)

    grad = jax.grad(loss)(system.K)
    eps, fd = 1e-6, np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            E = jnp.zeros((3, 3)).at[i, j].set(eps)
            fd[i, j] = (loss(system.K + E) - loss(system.K - E)) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


class _Logistic(dynsys.AbstractSystem):
    state_size: int = eqx.field(static=True, default=1)
    input_size: int = eqx.field(static=True, default=0)

    def step(self, t, x, u):
        return 3.0 * x * (1 - x)


def test_nonlinear_model_uses_measured_states_or_says_what_to_do():
    xs = jnp.full((2, 6, 1), 0.3)
    np.testing.assert_allclose(
        dynsys.estimate_x0(_Logistic(), dynsys.Dataset(xs)), xs[:, 0]
    )
    data = dynsys.Dataset(ys=jnp.zeros((2, 5, 1)))
    with pytest.raises(ValueError, match="linear models only, got _Logistic"):
        dynsys.estimate_x0(_Logistic(), data)


def test_size_mismatch_is_one_line_error(getkey):
    system = _system(getkey)
    data = dynsys.Dataset(ys=jnp.zeros((2, 5, 3)), us=jnp.zeros((2, 5, 2)))
    with pytest.raises(
        ValueError, match="3 output channels, but the model's output_size is 2"
    ):
        dynsys.estimate_x0(system, data)
    data = dynsys.Dataset(ys=jnp.zeros((2, 5, 2)), us=jnp.zeros((2, 5, 1)))
    with pytest.raises(
        ValueError, match="1 input channels, but the model's input_size is 2"
    ):
        dynsys.estimate_x0(system, data)


def test_simulated_data_with_states_and_outputs_uses_the_outputs(getkey):
    # simulate keeps noise-free xs and puts the noise on ys: x0 comes from ys.
    system = _system(getkey, offset=False)
    x0s = jax.random.normal(getkey(), (2, 4))
    us = jax.random.normal(getkey(), (2, 30, 2))
    data = dynsys.simulate(system, x0s, 30, inputs=us)
    assert data.xs is not None and data.ys is not None
    np.testing.assert_allclose(dynsys.estimate_x0(system, data), x0s, atol=1e-9)
