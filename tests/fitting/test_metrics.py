"""NRMSE, fit percentage and spectral radius against hand computations."""

import numpy as np
import pytest

import dynsys


def test_nrmse_and_fit_percent_by_hand():
    y = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 4.0]])
    y_hat = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 4.0]])
    # Channel 0: error norm sqrt(2), spread norm sqrt(8) -> 0.5.
    # Channel 1: error norm 1, mean 2, spread norm sqrt(1 + 1 + 4) = sqrt(6).
    expected = np.array([0.5, 1 / np.sqrt(6)])
    np.testing.assert_allclose(dynsys.nrmse(y, y_hat, per_channel=True), expected)
    assert float(dynsys.nrmse(y, y_hat)) == pytest.approx(expected.mean())
    np.testing.assert_allclose(
        dynsys.fit_percent(y, y_hat, per_channel=True), 100 * (1 - expected)
    )
    assert float(dynsys.fit_percent(y, y_hat)) == pytest.approx(
        100 * (1 - expected).mean()
    )


def test_metrics_pool_leading_axes_and_extremes():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(3, 10, 2))
    assert float(dynsys.fit_percent(y, y)) == 100.0
    mean = np.broadcast_to(y.reshape(-1, 2).mean(axis=0), y.shape)
    assert float(dynsys.nrmse(y, mean)) == pytest.approx(1.0)
    flat = float(dynsys.nrmse(y.reshape(-1, 2), 0.5 * y.reshape(-1, 2)))
    assert float(dynsys.nrmse(y, 0.5 * y)) == pytest.approx(flat)


def test_metric_shape_errors():
    with pytest.raises(
        ValueError,
        match=r"nrmse\(y, y_hat\): y and y_hat must have the same shape, got \(3, 2\) and \(3, 1\)",
    ):
        dynsys.nrmse(np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="fit_percent.*same shape"):
        dynsys.fit_percent(np.zeros((3, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="non-empty"):
        dynsys.nrmse(np.zeros(()), np.zeros(()))


def test_spectral_radius():
    K = np.array([[0.5, 3.0], [0.0, -0.8]])  # triangular: eigenvalues on the diagonal
    assert dynsys.spectral_radius(K) == pytest.approx(0.8)
    rotation = 0.9 * np.array([[np.cos(1.0), -np.sin(1.0)], [np.sin(1.0), np.cos(1.0)]])
    assert dynsys.spectral_radius(dynsys.LinearSystem(rotation)) == pytest.approx(0.9)
    with pytest.raises(
        ValueError, match=r"expected a square matrix \(n, n\), got \(2, 3\)"
    ):
        dynsys.spectral_radius(np.zeros((2, 3)))
    import dynsys.models as zoo

    with pytest.raises(ValueError, match="Pendulum has no transition matrix K"):
        dynsys.spectral_radius(zoo.Pendulum())


@pytest.mark.parametrize(
    "value, text",
    [
        (80.94, "80.9"),
        (-219.01, "-219.0"),  # worse than the mean, still a number
        (-4500.0, "-4500.0"),  # a nearly flat output: explained, not hidden
        (-0.99e6, "-990000.0"),
        (-1e6, "diverged"),  # an error 10^4 times the spread: a runaway free run
        (-7.3e20, "diverged"),  # the free run of an unstable model
        (-np.inf, "diverged"),
        (np.nan, "undefined"),  # a channel without variance
    ],
)
def test_a_fit_percent_is_printed_as_a_number_or_as_what_it_means(value, text):
    from dynsys._fitting.metrics import fit_percent_text

    assert fit_percent_text(value) == text
