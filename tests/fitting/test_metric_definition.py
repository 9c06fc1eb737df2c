"""One definition of NRMSE and fit % (`_fitting/metrics.py`), in NumPy and in JAX,
against a plain Python loop; the rule for a channel without variance; and the
reports (`compare`, `select_order`) giving the numbers of that definition."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._fitting.metrics import channel_fit_percent, channel_mean, channel_nrmse


XPS = pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax.numpy"])


def _loop_nrmse(y, y_hat, mask) -> list[float]:
    """The NRMSE of each channel over the valid samples, one sample at a time."""
    y, y_hat = np.asarray(y).reshape(-1, y.shape[-1]), np.asarray(y_hat)
    y_hat, mask = y_hat.reshape(y.shape), np.asarray(mask).reshape(-1)
    values = []
    for j in range(y.shape[1]):
        samples = [(y[i, j], y_hat[i, j]) for i in range(y.shape[0]) if mask[i]]
        mean = sum(a for a, _ in samples) / len(samples)
        error = math.sqrt(sum((a - b) ** 2 for a, b in samples))
        spread = math.sqrt(sum((a - mean) ** 2 for a, _ in samples))
        values.append(error / spread)
    return values


def _arrays(shape, seed=0):
    rng = np.random.default_rng(seed)
    y = 3.0 + rng.normal(size=shape)
    return y, y + 0.3 * rng.normal(size=shape)


@XPS
@pytest.mark.parametrize("shape", [(40, 1), (25, 3), (2, 30, 2), (3, 4, 10, 2)])
def test_the_definition_equals_a_python_loop(xp, shape):
    y, y_hat = _arrays(shape)
    mask = np.random.default_rng(1).random(shape[:-1]) < 0.8
    for m in (None, mask):
        expected = _loop_nrmse(y, y_hat, np.ones(shape[:-1], bool) if m is None else m)
        values = dynsys.nrmse(y, y_hat, per_channel=True, mask=m, xp=xp)
        assert isinstance(values, np.ndarray if xp is np else jax.Array)
        np.testing.assert_allclose(values, expected, rtol=1e-12)
        np.testing.assert_allclose(
            dynsys.fit_percent(y, y_hat, per_channel=True, mask=m, xp=xp),
            100 * (1 - np.array(expected)),
            rtol=1e-12,
        )
        np.testing.assert_allclose(
            dynsys.nrmse(y, y_hat, mask=m, xp=xp), np.mean(expected), rtol=1e-12
        )
        np.testing.assert_allclose(
            dynsys.fit_percent(y, y_hat, mask=m, xp=xp),
            np.mean(100 * (1 - np.array(expected))),
            rtol=1e-12,
        )


@XPS
def test_pooled_axes_and_jit(xp):
    y, y_hat = _arrays((3, 20, 2))
    mask = np.arange(20)[None, :] < np.array([20, 12, 7])[:, None]
    per_experiment = channel_fit_percent(y, y_hat, mask=mask, axis=1, xp=xp)
    for i in range(3):
        expected = 100 * (1 - np.array(_loop_nrmse(y[i], y_hat[i], mask[i])))
        np.testing.assert_allclose(per_experiment[i], expected, rtol=1e-12)
    pooled = channel_fit_percent(y, y_hat, mask=mask, axis=(0, 1), xp=xp)
    np.testing.assert_allclose(
        pooled, channel_fit_percent(y, y_hat, mask=mask, xp=xp), rtol=1e-12
    )
    jitted = jax.jit(lambda a, b, m: channel_nrmse(a, b, mask=m, axis=1))
    np.testing.assert_allclose(
        jitted(y, y_hat, mask), (100 - per_experiment) / 100, rtol=1e-12
    )


@XPS
@pytest.mark.parametrize("level", [0.0, 3.7, -1e6])
def test_a_flat_channel_has_no_fit_and_the_mean_leaves_it_out(xp, level):
    y, y_hat = _arrays((50, 2))
    y[:, 1] = level
    y_hat[:, 1] = level + 0.1
    values = dynsys.fit_percent(y, y_hat, per_channel=True, xp=xp)
    assert np.isnan(values[1]) and np.isfinite(values[0])
    assert np.isnan(dynsys.nrmse(y, y_hat, per_channel=True, xp=xp)[1])
    np.testing.assert_allclose(dynsys.fit_percent(y, y_hat, xp=xp), values[0])
    # A perfect prediction of a flat channel is still undefined, not 100 %.
    assert np.isnan(dynsys.fit_percent(y[:, 1:], y[:, 1:], per_channel=True, xp=xp))
    # Round-off around a constant (a few ulps) is no variance either.
    wobble = y[:, 1:] * (1 + 4e-16 * np.sin(np.arange(50))[:, None])
    assert level == 0.0 or np.ptp(wobble) > 0
    assert np.isnan(dynsys.fit_percent(wobble, y_hat[:, 1:], xp=xp))
    # Every channel flat: the mean is undefined too.
    assert np.isnan(dynsys.fit_percent(y[:, 1:], y_hat[:, 1:], xp=xp))
    # A channel without a valid sample is undefined.
    mask = np.zeros(50, bool)
    assert np.all(np.isnan(dynsys.nrmse(y, y_hat, per_channel=True, mask=mask, xp=xp)))


@XPS
def test_a_diverged_prediction_scores_minus_infinity(xp):
    y, y_hat = _arrays((30, 3))
    y_hat[4, 0], y_hat[7, 1] = np.inf, np.nan
    values = dynsys.fit_percent(y, y_hat, per_channel=True, xp=xp)
    assert values[0] == -np.inf and values[1] == -np.inf and np.isfinite(values[2])
    assert dynsys.fit_percent(y, y_hat, xp=xp) == -np.inf
    # Outside the mask a non-finite value does not count.
    mask = np.ones(30, bool)
    mask[[4, 7]] = False
    values = dynsys.fit_percent(y, y_hat, per_channel=True, mask=mask, xp=xp)
    assert np.all(np.isfinite(values))


def test_channel_mean():
    assert float(channel_mean(np.array([10.0, np.nan, 30.0]), np)) == 20.0
    assert np.isnan(channel_mean(jnp.array([np.nan, np.nan])))
    np.testing.assert_allclose(
        channel_mean(np.array([[1.0, 3.0], [np.nan, 4.0]]), np), [2.0, 4.0]
    )


def test_argument_errors():
    y = np.zeros((5, 2))
    with pytest.raises(
        ValueError,
        match=r"fit_percent\(mask=...\): mask must have the shape of y without its "
        r"last axis, \(5,\), got \(4,\)",
    ):
        dynsys.fit_percent(y, y, mask=np.ones(4, bool))
    with pytest.raises(
        ValueError, match=r"nrmse\(xp=...\): expected numpy or jax.numpy, got 'math'"
    ):
        dynsys.nrmse(y, y, xp=math)


def _system(getkey, n=3, m=1, p=2):
    K = jax.random.normal(getkey(), (n, n))
    K = 0.9 * K / jnp.max(jnp.abs(jnp.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K, jax.random.normal(getkey(), (n, m)), jax.random.normal(getkey(), (p, n))
    )


def _data(system, lengths, getkey, noise):
    N, T = len(lengths), max(lengths)
    us = jax.random.normal(getkey(), (N, T, system.input_size))
    x0s = jax.random.normal(getkey(), (N, system.state_size))
    ys = dynsys.rollout(system, x0s, T, inputs=us).ys
    ys = ys + noise * jax.random.normal(getkey(), ys.shape)
    return dynsys.Dataset(us=us, ys=ys, lengths=lengths)


@pytest.mark.parametrize("horizon", [None, 3])
def test_compare_reports_the_fit_of_the_definition(getkey, horizon):
    true = _system(getkey)
    data = _data(true, (50, 20, 35), getkey, noise=0.1)
    model = dynsys.LinearSystem(0.95 * true.K, true.B, true.C)
    result = dynsys.compare(model, data, horizon=horizon)
    mask = np.asarray(data.step_mask)
    measured, predicted = np.asarray(result.measured), np.asarray(result.predicted)
    for xp in (np, jnp):
        np.testing.assert_allclose(
            result.fit_percent,
            dynsys.fit_percent(measured, predicted, per_channel=True, mask=mask, xp=xp),
            rtol=1e-12,
        )
    for i in range(3):
        T = data.lengths[i]
        np.testing.assert_allclose(
            result.fit_percent_per_experiment[i],
            dynsys.fit_percent(measured[i, :T], predicted[i, :T], per_channel=True),
            rtol=1e-12,
        )


def test_the_order_scan_reports_the_fit_of_compare(getkey):
    """`select_order` scores with a NumPy free run (no program per candidate); its
    fit % is the one `compare` reports for the chosen model, and `mean_fit` their
    mean."""
    true = _system(getkey, n=2)
    train = _data(true, (120,), getkey, noise=0.05)
    val = _data(true, (80, 60), getkey, noise=0.05)
    scan = dynsys.select_order(train, orders=[1, 2], val_data=val)
    for candidate in scan.candidates:
        reported = np.asarray(candidate.fit_percent)
        assert candidate.mean_fit == pytest.approx(np.mean(reported), rel=1e-12)
    chosen = [
        c
        for c in scan.candidates
        if c.order == scan.order and c.feedthrough == scan.feedthrough
    ][0]
    np.testing.assert_allclose(
        chosen.fit_percent, dynsys.compare(scan.model, val).fit_percent, rtol=1e-6
    )
