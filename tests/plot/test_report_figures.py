"""Issue 50, item 6: figures that show what matters at any record length: a zoom on
a long record with the zoomed fit %, a band listed only when it can be seen, a step
response long enough for the slowest pole, one time-label convention."""

import math

import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

import dynsys
from dynsys import plot
from dynsys._experiments.fit import figures as fit_figures
from dynsys.plot import _layout, _step


matplotlib.use("Agg")


@pytest.mark.parametrize("radius", [0.5, 0.9, 0.99, 0.999, 0.9996])
def test_step_length_lets_the_slowest_pole_settle(radius):
    K = jnp.diag(jnp.array([0.3, radius]))
    system = dynsys.LinearSystem(K, jnp.ones((2, 1)), jnp.ones((1, 2)))
    expected = min(max(math.ceil(math.log(0.01) / math.log(radius)), 50), 5000)
    assert _step.settling_steps(system) == expected
    fig = plot.step_response({"fitted": system})
    assert len(fig.axes[0].lines[0].get_xdata()) == expected
    unstable = dynsys.LinearSystem(jnp.array([[1.2]]), jnp.ones((1, 1)))
    assert _step.settling_steps(unstable) == 50


def _band_legend(std: float) -> list[str]:
    ts = np.arange(100.0)
    y = np.sin(ts / 10)[:, None]
    fig = plot.comparison(
        ts, y, {"fitted": y}, bands={"fitted": np.full((100, 1), std)}
    )
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_a_band_is_listed_only_when_it_can_be_seen():
    assert any("99 % confidence" in t for t in _band_legend(0.05))
    assert not any("confidence" in t for t in _band_legend(1e-5))


class _Report:
    """The parts of a report `Dataset` that `_zoomed_comparison` reads."""

    dt = 2.0
    output_names = ("temp_C",)


def test_a_long_record_gets_a_zoom_with_its_own_fit_percent():
    rng = np.random.default_rng(0)
    T = 1334
    u = rng.normal(size=(1, T, 1))
    data = dynsys.Dataset(us=jnp.asarray(u), ys=jnp.zeros((1, T, 1)))
    true = dynsys.LinearSystem(jnp.array([[0.9]]), jnp.array([[1.0]]), jnp.eye(1))
    ys = np.array(dynsys.compare(true, data).predicted)
    ys[0, 700, 0] += 20.0  # the largest error: the zoom is centred here
    data = dynsys.Dataset(us=jnp.asarray(u), ys=jnp.asarray(ys))
    fitted = dynsys.LinearSystem(jnp.array([[0.85]]), jnp.array([[1.0]]), jnp.eye(1))
    comparisons = {"fitted": dynsys.compare(fitted, data)}
    (figure,) = fit_figures._zoomed_comparison(
        _Report(), comparisons, fit_figures.ROLES, "held-out data", {}
    ).values()
    title = figure._suptitle.get_text().replace("\n", " ")
    assert "samples 600–799" in title and "fit % over these samples" in title
    window = slice(600, 800)
    y = np.asarray(comparisons["fitted"].measured)[0, window, 0]
    y_hat = np.asarray(comparisons["fitted"].predicted)[0, window, 0]
    fit = 100 * (1 - np.linalg.norm(y - y_hat) / np.linalg.norm(y - y.mean()))
    assert f"fit {fit:.1f} %" in " ".join(t.get_text() for t in figure.legends[0].texts)
    assert figure.axes[0].get_xlabel() == "t (s)"
    short = {"fitted": dynsys.compare(fitted, data.window(0, 500))}
    assert fit_figures._zoomed_comparison(_Report(), short, {}, "", {}) == {}


def test_one_time_label_convention():
    for dt, ts in ((2.0, None), (None, None)):
        report = type("R", (), {"dt": dt})()
        _, label = _layout.time_axis(10, ts=ts, dt=dt, call="test")
        assert fit_figures._time_label(report) == label
