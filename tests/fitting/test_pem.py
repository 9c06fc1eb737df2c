"""Noise models from data: fit_subspace(noise_model=True) and the prediction-error
fit (fit(..., loss=dynsys.Prediction())), against the Riccati solution and the true
predictor; integrating plants; bad input."""

import functools
import warnings

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import dynsys
from dynsys._fitting.fit import _batch, _objective
from dynsys._fitting.losses import PredictionError

from ..helpers import finite_difference_gradient


# ----- a 4-state, 2-output plant with process and measurement noise ---------------

_K = np.array(
    [
        [0.9, 0.2, 0.0, 0.0],
        [-0.2, 0.9, 0.0, 0.0],
        [0.0, 0.0, 0.7, 0.3],
        [0, 0, -0.1, 0.6],
    ]
)
_B = np.array([[1.0], [0.0], [0.5], [1.0]])
_C = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.5]])
_Q = 0.05 * np.eye(4)  # process noise covariance
_R = 0.1 * np.eye(2)  # measurement noise covariance


def _riccati(K, C, Q, R):
    """The steady-state Kalman gain and innovation covariance (scipy's DARE)."""
    P = scipy.linalg.solve_discrete_are(K.T, C.T, Q, R)
    covariance = C @ P @ C.T + R
    return K @ P @ C.T @ np.linalg.inv(covariance), covariance


@functools.cache
def _process_noise_data(T: int, seed: int = 1):
    """x+ = K x + B u + w, y = C x + v: process noise w and measurement noise v."""
    rng = np.random.default_rng(seed)
    us = rng.standard_normal((T, 1))
    w = rng.multivariate_normal(np.zeros(4), _Q, T)
    v = rng.multivariate_normal(np.zeros(2), _R, T)
    x, ys = np.zeros(4), []
    for t in range(T):
        ys.append(_C @ x + v[t])
        x = _K @ x + _B @ us[t] + w[t]
    return dynsys.Dataset(ys=np.array(ys)[None], us=us[None])


def _noise_response(model_or_arrays, w=np.linspace(0.1, 3.0, 8)):
    """H(e^{iw}) = I + C (e^{iw} I - K)^{-1} L (invariant to the state basis)."""
    K, C, L = (np.asarray(a, np.float64) for a in model_or_arrays)
    n = K.shape[0]
    return np.array(
        [
            np.eye(C.shape[0]) + C @ np.linalg.solve(np.exp(1j * f) * np.eye(n) - K, L)
            for f in w
        ]
    )


def _gain_error(model, L_true):
    ours = _noise_response((model.K, model.C, model.kalman_gain))
    true = _noise_response((_K, _C, L_true))
    return np.max(np.abs(ours - true)) / np.max(np.abs(true))


def test_subspace_gain_converges_to_riccati_gain():
    L_true, covariance = _riccati(_K, _C, _Q, _R)
    errors = []
    for T in (1000, 10000):
        model = dynsys.fit_subspace(_process_noise_data(T), 4, noise_model=True)
        assert isinstance(model, dynsys.InnovationSystem)
        errors.append(_gain_error(model, L_true))
    assert errors[1] < errors[0]
    assert errors[1] < 0.1
    np.testing.assert_allclose(
        model.innovation_covariance, covariance, rtol=0.1, atol=0.01
    )


@pytest.mark.slow
def test_pem_innovation_variance_and_gain():
    """PEM from the subspace start on 10 000 samples: innovation covariance within
    5 % of the Riccati one, gain close to the Riccati gain."""
    L_true, covariance = _riccati(_K, _C, _Q, _R)
    data = _process_noise_data(10000)
    start = dynsys.fit_subspace(data, 4, noise_model=True)
    result = dynsys.fit(start, data, loss=dynsys.Prediction(), progress=False)
    model = result.model
    diagonal = np.diag(np.asarray(model.innovation_covariance))
    np.testing.assert_allclose(diagonal, np.diag(covariance), rtol=0.05)
    assert _gain_error(model, L_true) < 0.1
    assert result.metrics["train"]["predictor_spectral_radius"] < 1.0
    # the innovation covariance is that of the fitted predictor's one-step errors
    errors = np.asarray(data.ys) - np.asarray(dynsys.predict(model, data))
    np.testing.assert_allclose(
        model.innovation_covariance,
        errors[0].T @ errors[0] / 10000,
        rtol=1e-2,
        atol=1e-5,
    )


# ----- an integrating plant (a pole at 1) with noise ------------------------------

_KI = np.array([[1.0, 0.1], [0.0, 0.7]])
_BI = np.array([[0.0], [1.0]])
_CI = np.array([[1.0, 0.0]])


@functools.cache
def _integrating(T: int, seed: int):
    L, covariance = _riccati(_KI, _CI, np.diag([1e-3, 1e-2]), np.array([[0.01]]))
    rng = np.random.default_rng(seed)
    us = rng.standard_normal((T, 1))
    e = rng.standard_normal((T, 1)) * np.sqrt(covariance[0, 0])
    x, ys = np.zeros(2), []
    for t in range(T):
        ys.append(_CI @ x + e[t])
        x = _KI @ x + _BI @ us[t] + L @ e[t]
    true = dynsys.InnovationSystem(_KI, _BI, _CI, kalman_gain=L)
    return dynsys.Dataset(ys=np.array(ys)[None], us=us[None]), true


def test_pem_fits_an_integrating_plant():
    estimation, true = _integrating(1000, 1)
    validation, _ = _integrating(1000, 2)
    start = dynsys.fit_subspace(estimation, 2, noise_model=True)
    result = dynsys.fit(start, estimation, loss=dynsys.Prediction(), progress=False)
    truth = float(dynsys.compare(true, validation, horizon=1).fit_percent[0])
    ours = float(dynsys.compare(result.model, validation, horizon=1).fit_percent[0])
    assert ours > truth - 2.0
    # the deterministic part too: the step response of the integrator's lag
    steps = dynsys.step_response(result.model, 30)[:, 0, 0]
    true_steps = dynsys.step_response(true, 30)[:, 0, 0]
    np.testing.assert_allclose(steps, true_steps, rtol=0.1, atol=0.05)


def test_output_error_on_an_integrating_plant_warns():
    estimation, _ = _integrating(1000, 1)
    start = dynsys.fit_subspace(estimation, 2)
    with pytest.warns(UserWarning, match=r"unstable or marginal.*loss=Prediction\(\)"):
        dynsys.fit(start, estimation, progress=False, num_steps=2)


def test_subspace_input_matrices_do_not_collapse_when_k_is_unstable():
    """A plant with a pole outside the unit circle: B and the frequency response
    stay right (the joint least squares with x0 has columns growing like K^t)."""
    K = np.array([[1.002, 0.1], [0.0, 0.6]])
    L, covariance = _riccati(K, _CI, np.diag([1e-3, 1e-2]), np.array([[0.01]]))
    rng = np.random.default_rng(3)
    T = 1500
    us = rng.standard_normal((T, 1))
    e = rng.standard_normal((T, 1)) * np.sqrt(covariance[0, 0])
    x, ys = np.zeros(2), []
    for t in range(T):
        ys.append(_CI @ x + e[t])
        x = K @ x + _BI @ us[t] + L @ e[t]
    data = dynsys.Dataset(ys=np.array(ys)[None], us=us[None])
    model = dynsys.fit_subspace(data, 2)
    assert np.all(np.isfinite(np.asarray(model.B)))
    w = jnp.linspace(0.3, 3.0, 6)
    true = dynsys.LinearSystem(K, _BI, _CI)
    ours = np.asarray(dynsys.frequency_response(model, w))
    theirs = np.asarray(dynsys.frequency_response(true, w))
    np.testing.assert_allclose(np.abs(ours), np.abs(theirs), rtol=0.1)


@pytest.mark.slow
def test_k_step_prediction_loss():
    estimation, true = _integrating(1000, 1)
    validation, _ = _integrating(1000, 2)
    start = dynsys.fit_subspace(estimation, 2, noise_model=True)
    result = dynsys.fit(start, estimation, loss=dynsys.Prediction(horizon=3), progress=False)
    truth = float(dynsys.compare(true, validation, horizon=3).fit_percent[0])
    ours = float(dynsys.compare(result.model, validation, horizon=3).fit_percent[0])
    assert ours > truth - 3.0
    assert result.metrics["train"]["prediction_fit_percent"] > 0


def test_prediction_loss_gradient_matches_finite_differences():
    """The PEM loss (x0 in closed form) against central finite differences."""
    estimation, true = _integrating(60, 4)
    model = eqx.tree_at(lambda m: m.kalman_gain, true, true.kalman_gain * 0.9)
    objective = _objective(PredictionError(2), estimation, model, False, None, None)
    batch = _batch(estimation, jnp.float64)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unflatten = jax.flatten_util.ravel_pytree(params)

    @jax.jit
    def loss(theta):
        return objective.loss((eqx.combine(unflatten(theta), static), None), batch)

    np.testing.assert_allclose(
        jax.grad(loss)(flat),
        finite_difference_gradient(loss, flat),
        rtol=1e-5,
        atol=1e-8,
    )


def test_bad_input_is_one_line():
    data, true = _integrating(50, 1)
    linear = true.to_linear()
    with pytest.raises(
        ValueError, match=r"Prediction\(horizon=...\): expected a positive integer, got 0"
    ):
        dynsys.fit(true, data, loss=dynsys.Prediction(horizon=0))
    with pytest.raises(
        ValueError, match=r"fit\(loss=Prediction\(horizon=51\)\).*largest possible is 50"
    ):
        dynsys.fit(true, data, loss=dynsys.Prediction(horizon=51))
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'horizon'"):
        dynsys.fit(linear, data, horizon=2)
    with pytest.raises(ValueError, match=r"expected an InnovationSystem.*LinearSystem"):
        dynsys.fit(linear, data, loss=dynsys.Prediction())
    unstable = dynsys.InnovationSystem.from_linear(linear)  # zero gain: K - LC = K
    with pytest.raises(ValueError, match=r"K - L C must be stable.*got 1"):
        dynsys.fit(unstable, data, loss=dynsys.Prediction())
    broken = eqx.tree_at(lambda m: m.kalman_gain, true, jnp.full((2, 1), jnp.nan))
    with pytest.raises(ValueError, match=r"must be stable.*got nan"):
        dynsys.fit(broken, data, loss=dynsys.Prediction())
    states = dynsys.Dataset(np.zeros((1, 11, 2)), np.zeros((1, 10, 1)))
    with pytest.raises(ValueError, match="no outputs"):
        dynsys.fit(true, states, loss=dynsys.Prediction())
    with pytest.raises(
        ValueError, match=r"noise_model=\.\.\.\): expected True or False"
    ):
        dynsys.fit_subspace(data, 2, noise_model="yes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"fit\(loss='pem'\): pass a loss object"):
            dynsys.fit(true, data, loss="pem")


def test_time_series_without_inputs():
    """No inputs: an ARMA-like output; the noise model's one-step predictions match
    the true predictor's."""
    K, C = np.array([[0.95]]), np.array([[1.0]])
    L, covariance = _riccati(K, C, np.array([[0.1]]), np.array([[0.1]]))
    rng = np.random.default_rng(7)
    e = rng.standard_normal(1600) * np.sqrt(covariance[0, 0])
    x, ys = 0.0, []
    for t in range(1600):
        ys.append(C[0, 0] * x + e[t])
        x = K[0, 0] * x + L[0, 0] * e[t]
    ys = np.array(ys)[:, None]
    estimation = dynsys.Dataset(ys=ys[None, :800])
    validation = dynsys.Dataset(ys=ys[None, 800:])
    model = dynsys.fit_subspace(estimation, 1, noise_model=True)
    assert model.B is None
    true = dynsys.InnovationSystem(K, C=C, kalman_gain=L)
    truth = float(dynsys.compare(true, validation, horizon=1).fit_percent[0])
    ours = float(dynsys.compare(model, validation, horizon=1).fit_percent[0])
    assert ours > truth - 2.0
