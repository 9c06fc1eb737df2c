"""Issue 50, item 1: a fit whose residuals fail the whiteness or independence test
says that its bands are too narrow (console, summary.md, metrics.json, figures),
and the modes' error bars stay in their physical ranges."""

import json
import pathlib
import statistics

import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys import cli
from dynsys._experiments.fit import uncertainty
from dynsys.plot import _bands


REAL = pathlib.Path(__file__).parents[2] / "data" / "real"


def _first_order(a: float = 0.8, b: float = 0.5):
    return dynsys.LinearSystem(
        jnp.array([[a]]), jnp.array([[b]]), jnp.array([[1.0]])
    )


def _data(noise: np.ndarray, seed: int = 0) -> dynsys.Dataset:
    """The true first-order system's free run on white inputs, plus `noise`
    `(T,)`, computed by a plain loop."""
    T = len(noise)
    u = np.random.default_rng(seed).normal(size=T)
    x, y = 0.0, np.empty(T)
    for t in range(T):
        y[t] = x + noise[t]
        x = 0.8 * x + 0.5 * u[t]
    return dynsys.Dataset(
        us=jnp.asarray(u[None, :, None]), ys=jnp.asarray(y[None, :, None])
    )


def test_white_residuals_give_no_caveat():
    noise = 0.1 * np.random.default_rng(1).normal(size=2000)
    residuals = dynsys.residual_analysis(_first_order(), _data(noise))
    assert uncertainty.band_caveat(residuals) is None


def test_coloured_residuals_give_the_caveat():
    white = np.random.default_rng(1).normal(size=2000)
    coloured = np.empty_like(white)  # AR(1), lag-1 auto-correlation 0.9
    coloured[0] = white[0]
    for t in range(1, len(white)):
        coloured[t] = 0.9 * coloured[t - 1] + 0.1 * white[t]
    residuals = dynsys.residual_analysis(_first_order(), _data(coloured))
    caveat = uncertainty.band_caveat(residuals)
    assert caveat is not None and "not white" in caveat and "too narrow" in caveat
    e = np.asarray(residuals.residuals)[0, :, 0]
    reference = np.corrcoef(e[1:], e[:-1])
    assert f"auto-correlation {reference[0, 1]:.2f} at lag 1" in caveat


def test_a_model_that_misses_the_input_dynamics_is_flagged():
    noise = 0.1 * np.random.default_rng(1).normal(size=2000)
    wrong = _first_order(a=0.2, b=0.5)  # far too fast: residuals follow the input
    caveat = uncertainty.band_caveat(dynsys.residual_analysis(wrong, _data(noise)))
    assert caveat is not None and "correlated with input u0" in caveat


def test_family_bound_is_the_bonferroni_quantile():
    normal = statistics.NormalDist()
    expected = 0.1 * normal.inv_cdf(1 - 0.01 / 100) / normal.inv_cdf(0.995)
    assert uncertainty._family_bound(0.1, 50) == pytest.approx(expected, rel=1e-12)
    assert uncertainty._family_bound(0.1, 1) == pytest.approx(0.1, rel=1e-12)


def test_lag_ranges():
    assert uncertainty._lag_ranges([-25, -24, 6, 7, 9]) == "-25 to -24, 6 to 7, 9"


def test_mode_bars_stay_in_physical_ranges():
    bars = _bands.physical_bars([1.0, 0.5, 3.0], [2.0, 0.2, 1.0], 0.0, np.inf)
    np.testing.assert_allclose(bars, [[1.0, 0.2, 1.0], [2.0, 0.2, 1.0]])
    damping = _bands.physical_bars([0.9, -0.5], [0.5, 1.0], -1.0, 1.0)
    np.testing.assert_allclose(damping, [[0.5, 0.5], [0.1, 1.0]])


@pytest.mark.slow
def test_fit_with_coloured_residuals_shows_the_caveat(tmp_path, capsys, monkeypatch):
    from dynsys._experiments.fit import order as fit_order

    monkeypatch.setattr(fit_order, "SCAN_REFINE_STEPS", 10)
    out = tmp_path / "run"
    argv = ["fit", str(REAL / "heating.csv"), "--inputs", "drive_V"]
    argv += ["--outputs", "temp_C", "--steps", "20", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    caveat = metrics["uncertainty"]["caveat"]
    assert caveat and "not white" in caveat
    assert printed.count(f"  bands: {caveat}.") == 1
    assert f"Caveat: {caveat}." in (out / "summary.md").read_text()
    # The residuals the run reports fail the one-lag bound by far (independently).
    one_lag = metrics["residuals"]
    assert one_lag["max_autocorrelation"] > 3 * one_lag["bound"]


def test_figure_titles_carry_the_caveat():
    import matplotlib

    matplotlib.use("Agg")
    from dynsys._experiments.fit.figures import _band_flag

    flag = _band_flag({"bode.png": {"confidence": {"fitted": object()}}}, "why")
    assert flag("bode.png", "confidence") == f"\n{uncertainty.FIGURE_CAVEAT}"
    assert flag("comparison.png", "bands") == ""  # no band drawn: no caveat
    unflagged = _band_flag({"bode.png": {"confidence": 1}}, None)
    assert unflagged("bode.png", "confidence") == ""
