"""StableLinearSystem: the spectral-radius guarantee, conversion, and a stable fit."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys


@pytest.mark.parametrize("bound", [1.0, 0.8])
def test_any_parameters_give_spectral_radius_below_bound(bound):
    rng = np.random.default_rng(0)
    worst = 0.0
    for k in range(200):
        scale = 10.0 ** rng.uniform(-2, 3)
        n = int(rng.integers(1, 6))
        W = scale * rng.normal(size=(n, n))
        L = 10.0 ** rng.uniform(-1, 1) * rng.normal(size=(n, n))
        model = dynsys.StableLinearSystem(W, L, bound=bound)
        # Independent check in NumPy of the eigenvalues of K.
        rho = np.max(np.abs(np.linalg.eigvals(np.asarray(model.K))))
        worst = max(worst, rho / bound)
        assert rho < bound, (k, rho)
    assert worst > 0.99  # the search did reach close to the bound


def test_from_linear_reproduces_a_stable_K_and_rolls_out_the_same():
    K = np.array([[0.95, 0.3], [-0.2, 0.9]])
    B = np.array([[0.0], [1.0]])
    system = dynsys.LinearSystem(K, B, offset=np.array([0.1, 0.0]), dt=0.1)
    stable = dynsys.StableLinearSystem.from_linear(system)
    np.testing.assert_allclose(stable.K, K, atol=1e-10)
    linear = stable.to_linear()
    assert isinstance(linear, dynsys.LinearSystem) and linear.dt == 0.1
    x0, us = jnp.array([1.0, -1.0]), jnp.ones((10, 1))
    np.testing.assert_allclose(
        dynsys.rollout(stable, x0, 10, inputs=us).xs,
        dynsys.rollout(system, x0, 10, inputs=us).xs,
        atol=1e-10,
    )


def test_from_linear_pulls_an_unstable_K_inside():
    K = np.array([[1.2, 0.0], [0.0, 0.5]])
    stable = dynsys.StableLinearSystem.from_linear(dynsys.LinearSystem(K), margin=0.01)
    assert dynsys.spectral_radius(stable) == pytest.approx(0.99, rel=1e-9)


def test_errors():
    with pytest.raises(
        ValueError,
        match=r"StableLinearSystem\(L=...\): L must have shape \(n, n\) = \(2, 2\), got \(3, 3\)",
    ):
        dynsys.StableLinearSystem(np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match=r"W must have shape \(n, n\)"):
        dynsys.StableLinearSystem(np.ones((2, 3)), np.eye(2))
    with pytest.raises(ValueError, match=r"B must have shape \(n, m\) = \(2, m\)"):
        dynsys.StableLinearSystem(np.eye(2), np.eye(2), np.ones((3, 1)))
    with pytest.raises(ValueError, match="bound must be a positive number"):
        dynsys.StableLinearSystem(np.eye(2), np.eye(2), bound=0.0)
    with pytest.raises(ValueError, match=r"margin must be in \(0, 1\)"):
        dynsys.StableLinearSystem.from_linear(
            dynsys.LinearSystem(np.eye(2)), margin=0.0
        )
    with pytest.raises(
        ValueError,
        match=r"StableLinearSystem\(C=...\): C must have shape \(p, n\) = \(p, 2\), got \(1, 3\)",
    ):
        dynsys.StableLinearSystem(np.eye(2), np.eye(2), C=np.ones((1, 3)))
    with pytest.raises(
        ValueError,
        match=r"StableLinearSystem\(D=...\): D must have shape \(p, m\) = \(1, 1\), got \(2, 1\)",
    ):
        dynsys.StableLinearSystem(
            np.eye(2), np.eye(2), np.ones((2, 1)), np.ones((1, 2)), np.ones((2, 1))
        )


def test_output_map_carried_and_used():
    """from_linear keeps C and D; the outputs equal those of the LinearSystem (and
    of y = C x + D u written out)."""
    K = np.array([[0.8, 0.3], [-0.2, 0.7]])
    B, C, D = np.array([[0.0], [1.0]]), np.array([[1.0, -0.5]]), np.array([[0.25]])
    linear = dynsys.LinearSystem(K, B, C, D)
    stable = dynsys.StableLinearSystem.from_linear(linear)
    assert stable.output_size == 1 and stable.to_linear().output_size == 1
    np.testing.assert_array_equal(stable.C, C)
    np.testing.assert_array_equal(stable.D, D)
    us = jax.random.normal(jax.random.key(0), (12, 1))
    x0 = jnp.array([1.0, -1.0])
    a = dynsys.rollout(stable, x0, 12, inputs=us)
    b = dynsys.rollout(linear, x0, 12, inputs=us)
    np.testing.assert_allclose(a.ys, b.ys, atol=1e-5)
    expected = np.asarray(b.xs[:-1]) @ C.T + np.asarray(us) @ D.T
    np.testing.assert_allclose(a.ys, expected, atol=1e-5)


def _nearly_unstable_data(seed):
    # A lightly damped rotation (|eigenvalues| = 0.999), short and noisy data.
    r, angle = 0.999, 0.3
    K = r * jnp.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    key_x0, key_noise = jax.random.split(jax.random.key(seed))
    x0s = jax.random.normal(key_x0, (2, 2))
    return dynsys.simulate(
        dynsys.LinearSystem(K), x0s, 20, process_noise=0.2, key=key_noise
    )


@pytest.mark.slow
def test_least_squares_can_be_unstable_the_stable_model_never_is():
    least_squares_radii, stable_radii = [], []
    for seed in range(3):
        data = _nearly_unstable_data(seed)
        estimate = dynsys.fit_least_squares(data)
        least_squares_radii.append(dynsys.spectral_radius(estimate))
        # Minimise the same one-step loss that least squares minimises exactly: it
        # pulls K towards the unstable estimate, the parameterisation holds it back.
        result = dynsys.fit(
            dynsys.StableLinearSystem.from_linear(estimate),
            data,
            loss=dynsys.OneStep(),
            solver=optax.adam(1e-2),
            num_steps=150,
            progress=False,
        )
        stable_radii.append(dynsys.spectral_radius(result.model))
    assert max(least_squares_radii) > 1.0, least_squares_radii
    assert max(stable_radii) < 1.0, stable_radii
    assert min(stable_radii) > 0.95  # and it does fit: near the boundary, inside
