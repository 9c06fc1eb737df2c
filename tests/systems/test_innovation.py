"""InnovationSystem: the model, its Kalman predictor (against plain Python loops),
k-step prediction, conversions and errors."""

import warnings

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import dynsys

from ..helpers import finite_difference_gradient


def _predictions(model, x0, ys, us, horizon):
    """The `horizon`-step predictions `(N, T, p)` of `model`'s Kalman predictor
    from `x0` `(N, n)` on the outputs `ys` `(N, T, p)` and inputs `us` `(N, T, m)`:
    `dynsys.predict`."""
    return dynsys.predict(model, dynsys.Dataset(us=us, ys=ys), horizon=horizon, x0=x0)


def _model(dtype=jnp.float64, levels=True):
    rng = np.random.default_rng(3)
    K = np.array([[1.0, 0.1, 0.0], [0.0, 0.7, 0.2], [0.0, -0.2, 0.6]])
    B = rng.standard_normal((3, 2))
    C = rng.standard_normal((2, 3))
    D = rng.standard_normal((2, 2))
    # the steady-state Kalman gain for process noise 0.1 I, measurement noise I
    P = scipy.linalg.solve_discrete_are(K.T, C.T, 0.1 * np.eye(3), np.eye(2))
    L = K @ P @ C.T @ np.linalg.inv(C @ P @ C.T + np.eye(2))
    return dynsys.InnovationSystem(
        jnp.asarray(K, dtype),
        jnp.asarray(B, dtype),
        jnp.asarray(C, dtype),
        jnp.asarray(D, dtype),
        kalman_gain=jnp.asarray(L, dtype),
        input_level=jnp.asarray([0.5, -1.0], dtype) if levels else None,
        output_level=jnp.asarray([2.0, 3.0], dtype) if levels else None,
    )


def _loop_predictions(model, x0, ys, us, horizon):
    """ŷ_{t|t-k} by a plain Python loop over each experiment and step (numpy)."""
    K, B, C, D, L = (
        np.asarray(a, np.float64)
        for a in (model.K, model.B, model.C, model.D, model.kalman_gain)
    )
    u_bar = np.zeros(B.shape[1]) if model.input_level is None else model.input_level
    y_bar = np.zeros(C.shape[0]) if model.output_level is None else model.output_level
    N, T, p = ys.shape
    out = np.zeros((N, T, p))
    for i in range(N):
        u = np.asarray(us[i]) - np.asarray(u_bar)
        y = np.asarray(ys[i]) - np.asarray(y_bar)
        filtered = [np.asarray(x0[i], np.float64)]  # x̂_{t|t-1}
        for t in range(T):
            x = filtered[t]
            e = y[t] - C @ x - D @ u[t]
            filtered.append(K @ x + B @ u[t] + L @ e)
        for t in range(T):
            start = max(t - horizon + 1, 0)
            x = filtered[start] if t - horizon + 1 >= 0 else np.asarray(x0[i])
            for j in range(start, t):
                x = K @ x + B @ u[j]
            out[i, t] = C @ x + D @ u[t] + np.asarray(y_bar)
    return out


@pytest.mark.parametrize("horizon", [1, 3])
def test_predictor_equals_python_loop(horizon):
    model = _model()
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((2, 3))
    ys = rng.standard_normal((2, 12, 2))
    us = rng.standard_normal((2, 12, 2))
    ours = _predictions(model, jnp.asarray(x0), ys, us, horizon)
    np.testing.assert_allclose(
        ours, _loop_predictions(model, x0, ys, us, horizon), rtol=1e-10, atol=1e-10
    )


def test_predictor_system_and_free_run_agree_with_loops():
    model = _model()
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal(3)
    ys = rng.standard_normal((10, 2))
    us = rng.standard_normal((10, 2))
    # predictor(): a LinearSystem on [u; y] whose outputs are the one-step predictions
    traj = dynsys.rollout(
        model.predictor(), jnp.asarray(x0), 10, inputs=np.concatenate([us, ys], 1)
    )
    expected = _loop_predictions(model, x0[None], ys[None], us[None], 1)[0]
    np.testing.assert_allclose(traj.ys, expected, rtol=1e-10, atol=1e-10)
    # simulate / rollout ignore e: the same as the noise-free LinearSystem
    free = dynsys.rollout(model, jnp.asarray(x0), 10, inputs=us)
    linear = dynsys.rollout(model.to_linear(), jnp.asarray(x0), 10, inputs=us)
    np.testing.assert_allclose(free.ys, linear.ys, rtol=1e-12)
    # a horizon longer than the data is the free run
    long = _predictions(model, jnp.asarray(x0)[None], ys[None], us[None], 10)
    np.testing.assert_allclose(long[0], linear.ys, rtol=1e-10, atol=1e-10)


def test_from_linear_round_trip_and_zero_gain_is_free_run():
    model = _model()
    back = dynsys.InnovationSystem.from_linear(
        model.to_linear(), model.kalman_gain, jnp.eye(2)
    )
    for name in ("K", "B", "C", "D", "kalman_gain", "input_level", "output_level"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
    zero = dynsys.InnovationSystem.from_linear(model.to_linear())
    assert np.all(np.asarray(zero.kalman_gain) == 0)
    rng = np.random.default_rng(2)
    us = rng.standard_normal((1, 8, 2))
    ys = rng.standard_normal((1, 8, 2))
    x0 = jnp.ones((1, 3))
    free = dynsys.rollout(model.to_linear(), x0, 8, inputs=us).ys
    np.testing.assert_allclose(
        _predictions(zero, x0, ys, us, 1), free, rtol=1e-10
    )


def test_predict_and_compare_use_the_kalman_predictor():
    model = _model()
    rng = np.random.default_rng(4)
    us = rng.standard_normal((2, 30, 2))
    ys = rng.standard_normal((2, 30, 2)) + np.array([2.0, 3.0])
    data = dynsys.Dataset(ys=ys, us=us)
    x0 = rng.standard_normal((2, 3))
    predicted = dynsys.predict(model, data, horizon=2, x0=x0)
    np.testing.assert_allclose(
        predicted, _loop_predictions(model, x0, ys, us, 2), rtol=1e-10, atol=1e-10
    )
    # the default x0 minimises the squared prediction errors: perturbing it is worse
    comparison = dynsys.compare(model, data, horizon=1)
    best = np.sum((ys - np.asarray(comparison.predicted)) ** 2)
    for direction in np.eye(3):
        moved = np.asarray(comparison.x0) + 0.01 * direction
        other = _loop_predictions(model, moved, ys, us, 1)
        assert np.sum((ys - other) ** 2) > best
    # residual_analysis of a model with a noise model: the one-step residuals
    residuals = dynsys.residual_analysis(model, data, max_lag=5)
    np.testing.assert_allclose(
        residuals.residuals, ys - np.asarray(comparison.predicted), atol=1e-10
    )


def test_innovations_of_the_true_model_are_white():
    """Data from the model with white e: the one-step residuals (innovations) are
    white; the free-run residuals of the same model are not."""
    model = _model(levels=False)
    rng = np.random.default_rng(5)
    T = 2000
    us = rng.standard_normal((T, 2))
    e = 0.3 * rng.standard_normal((T, 2))
    x = np.zeros(3)
    K, B, C, D, L = (
        np.asarray(a) for a in (model.K, model.B, model.C, model.D, model.kalman_gain)
    )
    ys = []
    for t in range(T):
        ys.append(C @ x + D @ us[t] + e[t])
        x = K @ x + B @ us[t] + L @ e[t]
    data = dynsys.Dataset(ys=np.array(ys)[None], us=us[None])
    innovations = dynsys.residual_analysis(model, data, max_lag=10)
    lags = np.abs(np.asarray(innovations.autocorrelation[1:]))
    assert np.mean(lags < innovations.bound) >= 0.9
    free = dynsys.residual_analysis(model.to_linear(), data, max_lag=10)
    assert np.abs(np.asarray(free.autocorrelation[1])).max() > 5 * free.bound


def test_prediction_gradient_matches_finite_differences():
    model = _model(levels=False)
    rng = np.random.default_rng(6)
    ys = jnp.asarray(rng.standard_normal((2, 15, 2)))
    us = jnp.asarray(rng.standard_normal((2, 15, 2)))
    x0 = jnp.asarray(rng.standard_normal((2, 3)))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unflatten = jax.flatten_util.ravel_pytree(params)

    def loss(theta):
        m = eqx.combine(unflatten(theta), static)
        return jnp.sum((_predictions(m, x0, ys, us, 2) - ys) ** 2)

    loss = jax.jit(loss)
    exact = jax.grad(loss)(flat)
    numeric = finite_difference_gradient(loss, flat)
    np.testing.assert_allclose(exact, numeric, rtol=1e-5, atol=1e-6)


def test_control_round_trip_with_noise_channels():
    control = pytest.importorskip("control")
    model = _model(levels=False)
    sys_ = dynsys.to_control(model, noise_inputs=True)
    assert isinstance(sys_, control.StateSpace) and sys_.ninputs == 4
    back = dynsys.from_control(sys_, noise_inputs=2)
    assert isinstance(back, dynsys.InnovationSystem)
    for name in ("K", "B", "C", "D", "kalman_gain"):
        np.testing.assert_allclose(getattr(back, name), getattr(model, name))
    # the noise channels' frequency response is I + C (zI - K)^-1 L
    z = np.exp(0.7j)
    K, C, L = (np.asarray(a) for a in (model.K, model.C, model.kalman_gain))
    expected = np.eye(2) + C @ np.linalg.solve(z * np.eye(3) - K, L)
    np.testing.assert_allclose(sys_(z)[:, 2:], expected, rtol=1e-10)
    # without noise_inputs: the noise-free model
    plain = dynsys.to_control(model)
    assert plain.ninputs == 2
    with pytest.raises(ValueError, match="noise_inputs=True"):
        dynsys.to_control(model.to_linear(), noise_inputs=True)
    with pytest.raises(ValueError, match="noise_inputs"):
        dynsys.from_control(sys_, noise_inputs=1)


def test_bad_input_is_one_line():
    model = _model()
    with pytest.raises(ValueError, match=r"kalman_gain must have shape \(n, p\)"):
        dynsys.InnovationSystem(model.K, model.B, model.C, kalman_gain=jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="innovation_covariance"):
        dynsys.InnovationSystem(
            model.K,
            model.B,
            model.C,
            kalman_gain=model.kalman_gain,
            innovation_covariance=jnp.ones(2),
        )
    with pytest.raises(ValueError, match="offset"):
        dynsys.InnovationSystem.from_linear(
            dynsys.LinearSystem(jnp.eye(2), offset=[1.0, 0])
        )
    data = dynsys.Dataset(ys=np.zeros((1, 10, 2)), us=np.zeros((1, 10, 2)))
    with pytest.raises(
        ValueError, match=r"predict\(horizon=11\).*largest possible is 10"
    ):
        dynsys.predict(model, data, horizon=11)
    with pytest.raises(ValueError, match="horizon must be a positive int"):
        dynsys.predict(model, data, horizon=0)
    with pytest.raises(ValueError, match=r"compare\(horizon=11\)"):
        dynsys.compare(model, data, horizon=11)
    for error in (ValueError,):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(error, match=r"x0 must have shape \(N, n\)"):
                dynsys.predict(model, data, x0=np.zeros((1, 2)))


def test_save_and_load_round_trip(tmp_path):
    model = eqx.tree_at(
        lambda m: m.innovation_covariance,
        _model(),
        jnp.eye(2),
        is_leaf=lambda leaf: leaf is None,
    )
    dynsys.save(tmp_path / "model.dynsys", model)
    back = dynsys.load(tmp_path / "model.dynsys")
    assert isinstance(back, dynsys.InnovationSystem)
    for name in ("K", "B", "C", "D", "kalman_gain", "innovation_covariance"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
