"""fit_least_squares: exact recovery and agreement with textbook OLS formulas."""

import jax
import numpy as np
import pytest

import dynsys


def _system(seed=0, n=3, m=2):
    rng = np.random.default_rng(seed)
    K = rng.normal(size=(n, n))
    K *= 0.9 / np.max(np.abs(np.linalg.eigvals(K)))
    B = None if m == 0 else rng.normal(size=(n, m))
    return K, B, rng


@pytest.mark.parametrize("m", [0, 2])
def test_recovers_K_and_B_from_noise_free_data(m):
    K, B, rng = _system(m=m)
    x0s = rng.normal(size=(4, 3))
    inputs = None if m == 0 else rng.normal(size=(4, 20, m))
    data = dynsys.simulate(dynsys.LinearSystem(K, B), x0s, 20, inputs=inputs)
    estimate = dynsys.fit_least_squares(data)
    np.testing.assert_allclose(estimate.K, K, atol=1e-12)
    if m:
        np.testing.assert_allclose(estimate.B, B, atol=1e-12)
    else:
        assert estimate.B is None
    assert estimate.offset is None


def test_recovers_offset():
    K, B, rng = _system(m=1)
    c = np.array([0.3, -0.2, 0.1])
    data = dynsys.simulate(
        dynsys.LinearSystem(K, B, offset=c),
        rng.normal(size=(3, 3)),
        15,
        inputs=rng.normal(size=(3, 15, 1)),
    )
    estimate = dynsys.fit_least_squares(data, offset=True)
    np.testing.assert_allclose(estimate.offset, c, atol=1e-12)
    np.testing.assert_allclose(estimate.K, K, atol=1e-12)


@pytest.mark.parametrize("ridge", [0.0, 0.7])
@pytest.mark.parametrize("offset", [False, True])
def test_equals_normal_equations_on_noisy_data(ridge, offset):
    K, B, rng = _system(seed=1, m=1)
    data = dynsys.simulate(
        dynsys.LinearSystem(K, B),
        rng.normal(size=(5, 3)),
        12,
        inputs=rng.normal(size=(5, 12, 1)),
        process_noise=0.1,
        measurement_noise=0.2,
        key=jax.random.key(0),
    )
    xs, us = np.asarray(data.xs), np.asarray(data.us)
    # Textbook: regressors z_t = [x_t; u_t; 1], theta = (Z^T Z + ridge D)^-1 Z^T Y,
    # built with an explicit Python loop over every transition.
    rows, targets = [], []
    for i in range(xs.shape[0]):
        for t in range(xs.shape[1] - 1):
            rows.append(np.concatenate([xs[i, t], us[i, t], [1.0] if offset else []]))
            targets.append(xs[i, t + 1])
    Z, Y = np.array(rows), np.array(targets)
    D = np.diag([1.0] * 4 + ([0.0] if offset else []))
    theta = np.linalg.solve(Z.T @ Z + ridge * D, Z.T @ Y)
    estimate = dynsys.fit_least_squares(data, ridge=ridge, offset=offset)
    np.testing.assert_allclose(estimate.K, theta[:3].T, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(estimate.B, theta[3:4].T, rtol=1e-9, atol=1e-11)
    if offset:
        np.testing.assert_allclose(estimate.offset, theta[4], rtol=1e-9, atol=1e-11)


def test_var1_estimate_without_inputs():
    K, _, rng = _system(seed=2, m=0)
    data = dynsys.simulate(
        dynsys.LinearSystem(K),
        rng.normal(size=(2, 3)),
        30,
        process_noise=0.3,
        key=jax.random.key(1),
    )
    xs = np.asarray(data.xs)
    # VAR(1) OLS: K = (sum x_{t+1} x_t^T)(sum x_t x_t^T)^{-1}.
    cross = sum(np.outer(x[t + 1], x[t]) for x in xs for t in range(30))
    gram = sum(np.outer(x[t], x[t]) for x in xs for t in range(30))
    np.testing.assert_allclose(
        dynsys.fit_least_squares(data).K, cross @ np.linalg.inv(gram), rtol=1e-9
    )


def test_dt_from_uniform_times():
    data = dynsys.Dataset(
        np.random.default_rng(0).normal(size=(2, 8, 2)), ts=0.25 * np.arange(8)
    )
    assert dynsys.fit_least_squares(data).dt == pytest.approx(0.25)


def test_errors():
    K, B, rng = _system(m=1)
    # Zero inputs do not excite B: the estimate is not unique.
    data = dynsys.simulate(
        dynsys.LinearSystem(K, B),
        rng.normal(size=(3, 3)),
        10,
        inputs=np.zeros((3, 10, 1)),
    )
    with pytest.raises(
        ValueError,
        match=r"the regressors \[x_t, u_t\] have rank 3 < 4 over 30 transitions",
    ):
        dynsys.fit_least_squares(data)
    assert dynsys.fit_least_squares(data, ridge=1e-3).B.shape == (3, 1)
    with pytest.raises(ValueError, match="rank 2 < 3 over 2 transitions"):
        dynsys.fit_least_squares(dynsys.Dataset(rng.normal(size=(1, 3, 3))))
    with pytest.raises(
        ValueError, match=r"ridge=...\): expected a finite number >= 0, got -1.0"
    ):
        dynsys.fit_least_squares(data, ridge=-1.0)
    with pytest.raises(TypeError, match="expected a dynsys.Dataset"):
        dynsys.fit_least_squares(np.zeros((2, 3, 3)))
