"""`spectral_estimate`: Welch's cross-spectral estimate of the frequency response,
against scipy's `csd`/`welch`/`coherence`, and its convergence to the true
response as the record grows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.signal

import dynsys


def _data(num_inputs=1, num_outputs=1, T=2048, seed=0, noise=0.1, N=1):
    key1, key2, key3 = jax.random.split(jax.random.key(seed), 3)
    n = 3
    K = 0.8 * jnp.diag(jnp.array([0.9, 0.5, -0.3]))
    B = jax.random.normal(key1, (n, num_inputs))
    C = jax.random.normal(key2, (num_outputs, n))
    system = dynsys.LinearSystem(K=K, B=B, C=C)
    us = jax.random.normal(key3, (N, T, num_inputs))
    ys = dynsys.rollout(system, jnp.zeros((N, n)), T, inputs=us).ys
    ys = ys + noise * jax.random.normal(jax.random.key(seed + 100), ys.shape)
    return system, dynsys.Dataset(us=us, ys=ys + 5.0)


@pytest.mark.parametrize("window", ["hann", "hamming", "boxcar"])
@pytest.mark.parametrize("nperseg", [64, 101])
def test_spectra_match_scipy(window, nperseg):
    _, data = _data(num_inputs=2, num_outputs=2, T=1000)
    est = dynsys.spectral_estimate(data, nperseg=nperseg, window=window)
    u, y = np.asarray(data.us[0]), np.asarray(data.ys[0])
    for i in range(2):
        f, Pyy = scipy.signal.welch(y[:, i], window=window, nperseg=nperseg)
        np.testing.assert_allclose(
            est.output_spectrum[:, i], Pyy, rtol=1e-10, atol=1e-14
        )
        np.testing.assert_allclose(est.w, 2 * np.pi * f, rtol=1e-12)
        for j in range(2):
            _, Pxy = scipy.signal.csd(u[:, j], y[:, i], window=window, nperseg=nperseg)
            np.testing.assert_allclose(
                est.cross_spectrum[:, i, j], Pxy, rtol=1e-10, atol=1e-14
            )
            _, Puu = scipy.signal.csd(u[:, i], u[:, j], window=window, nperseg=nperseg)
            np.testing.assert_allclose(
                est.input_spectrum[:, j, i], Puu, rtol=1e-10, atol=1e-14
            )


def test_single_input_response_and_coherence_match_scipy():
    _, data = _data(T=1500, noise=0.5)
    data = dynsys.Dataset(us=data.us, ys=data.ys, ts=0.1 * jnp.arange(1500))
    est = dynsys.spectral_estimate(data, nperseg=128)
    u, y = np.asarray(data.us[0, :, 0]), np.asarray(data.ys[0, :, 0])
    fs = 10.0
    _, Puy = scipy.signal.csd(u, y, fs=fs, nperseg=128)
    f, Puu = scipy.signal.welch(u, fs=fs, nperseg=128)
    np.testing.assert_allclose(est.response[:, 0, 0], Puy / Puu, rtol=1e-10)
    _, coherence = scipy.signal.coherence(u, y, fs=fs, nperseg=128)
    np.testing.assert_allclose(est.coherence[:, 0], coherence, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.w, 2 * np.pi * f, rtol=1e-12)  # rad/s with dt


def _error(T, seed, nperseg=128):
    """The RMS error against the true response, above the two lowest bins (the
    segments' mean removal biases those)."""
    system, data = _data(num_inputs=2, num_outputs=1, T=T, seed=seed, noise=1.0)
    est = dynsys.spectral_estimate(data, nperseg=nperseg)
    true = np.asarray(dynsys.frequency_response(system, jnp.asarray(est.w)))
    return np.sqrt(np.mean(np.abs(est.response - true)[2:] ** 2))


def test_error_falls_as_the_square_root_of_the_record_length():
    """With `nperseg` fixed the variance falls as 1 / (number of segments): 16
    times the record, a quarter of the error (measured: 4.4; the window's bias,
    about a fifth of the error at the longer record, is the same at both)."""
    short = np.mean([_error(1024, seed) for seed in range(6)])
    long = np.mean([_error(16384, seed) for seed in range(6)])
    assert 3.0 < short / long < 5.5, short / long


def test_multiple_experiments_are_pooled():
    _, data = _data(T=512, N=3)
    est = dynsys.spectral_estimate(data, nperseg=64)
    single = [
        dynsys.spectral_estimate(
            dynsys.Dataset(us=data.us[i : i + 1], ys=data.ys[i : i + 1]), nperseg=64
        )
        for i in range(3)
    ]
    np.testing.assert_allclose(
        est.cross_spectrum,
        np.mean([s.cross_spectrum for s in single], axis=0),
        rtol=1e-12,
    )
    assert est.num_segments == 3 * single[0].num_segments == 3 * 15


def test_coherence_is_one_without_noise_and_default_nperseg():
    _, data = _data(T=4096, noise=0.0)
    est = dynsys.spectral_estimate(data)
    assert est.nperseg == 512
    assert est.response.shape == (257, 1, 1) and est.coherence.shape == (257, 1)
    assert np.all(est.coherence[1:] > 0.95)


def test_real_data_file():
    data = dynsys.load_dataset(
        "data/real/dryer.csv",
        inputs=["fuel_flow", "fan_speed", "material_flow"],
        outputs=["dry_bulb_temp", "wet_bulb_temp", "moisture"],
        dt=10.0,
    )
    est = dynsys.spectral_estimate(data)
    assert est.response.shape == (est.w.shape[0], 3, 3)
    assert np.all(np.isfinite(est.response))
    assert np.all((est.coherence >= 0) & (est.coherence <= 1))
    np.testing.assert_allclose(est.w[-1], np.pi / 10.0)  # Nyquist, rad/s


def test_errors():
    _, data = _data(T=100)
    with pytest.raises(ValueError, match="nperseg = 200 is longer"):
        dynsys.spectral_estimate(data, nperseg=200)
    with pytest.raises(ValueError, match="nperseg=...\\): expected an int"):
        dynsys.spectral_estimate(data, nperseg=1.5)
    with pytest.raises(ValueError, match="window=...\\): expected one of"):
        dynsys.spectral_estimate(data, window="nope")
    with pytest.raises(ValueError, match="must have shape \\(nperseg,\\) = \\(32,\\)"):
        dynsys.spectral_estimate(data, nperseg=32, window=np.ones(5))
    with pytest.raises(ValueError, match="no inputs"):
        dynsys.spectral_estimate(dynsys.Dataset(ys=data.ys))


def test_impulse_estimate_exact_for_a_finite_impulse_response():
    """A nilpotent K: the impulse response ends after n + 1 steps, so a FIR of 8
    taps holds it exactly; without noise and ridge the estimate is exact."""
    K = jnp.diag(jnp.ones(3), k=-1)  # shift: K^4 = 0
    B = jnp.array([[1.0, 0.0], [0.5, -1.0], [0.0, 0.3], [0.2, 0.1]])
    C = jnp.array([[1.0, -0.5, 0.3, 0.7]])
    system = dynsys.LinearSystem(K=K, B=B, C=C, D=jnp.array([[0.4, -0.2]]))
    us = jax.random.normal(jax.random.key(4), (2, 300, 2))
    ys = dynsys.rollout(system, jnp.zeros((2, 4)), 300, inputs=us).ys
    est = dynsys.impulse_estimate(dynsys.Dataset(us=us, ys=ys), 8, ridge=0.0)
    np.testing.assert_allclose(
        est.response, dynsys.impulse_response(system, 8), atol=1e-10
    )
    np.testing.assert_allclose(est.step, dynsys.step_response(system, 8), atol=1e-10)


def test_impulse_estimate_std_matches_its_error():
    system, data = _data(T=3000, noise=1.0)
    est = dynsys.impulse_estimate(data, 30)
    truth = np.asarray(dynsys.impulse_response(system, 30))
    z = (est.response - truth) / est.std
    assert 0.7 < np.std(z) < 1.3  # the error is as large as its std says
    with pytest.raises(ValueError, match="too few samples"):
        dynsys.impulse_estimate(data, 3000)
    with pytest.raises(ValueError, match="ridge=...\\): expected a number"):
        dynsys.impulse_estimate(data, 10, ridge=-1.0)
