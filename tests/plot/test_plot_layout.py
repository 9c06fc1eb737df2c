"""Visual regression of `dynsys.plot`: every figure kind, headless, at 1, 4 and 20
channels, has a readable page size, a label on every axis, and a legend that hides
no data."""

import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

import dynsys
from dynsys import plot


COUNTS = (1, 4, 20)


def _stable(n: int, m: int = 1, p: int | None = None, seed: int = 0):
    """A random stable system with n states, m inputs and p outputs (C given)."""
    rng = np.random.default_rng(seed + n)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    K = Q @ np.diag(np.linspace(0.5, 0.95, n)) @ Q.T
    C = None if p is None else jnp.asarray(rng.normal(size=(p, n)))
    return dynsys.LinearSystem(
        K=jnp.asarray(K), B=jnp.asarray(rng.normal(size=(n, m))), C=C
    )


def _trajectory(count):
    system = _stable(count)
    x0 = jnp.asarray(np.random.default_rng(1).normal(size=(5, count)))
    traj = dynsys.rollout(system, x0, 30, inputs=jnp.ones((5, 30, 1)))
    names = [f"p{i} (m)" if i % 2 else f"v{i} (m/s)" for i in range(count)]
    return plot.trajectory(traj, state_names=names, input_bound=2.0, title="t")


def _comparison(count):
    ts = np.arange(40) * 0.1
    y = np.sin(ts[:, None] + np.arange(count)[None])
    return plot.comparison(
        ts,
        y + 0.05,
        {"least squares": 0.9 * y, "fitted": y},
        truth=y,
        roles={"least squares": "estimate"},
        fit_percent={"least squares": np.full(count, 80.0), "fitted": np.ones(count)},
    )


def _phase(count):
    system = _stable(max(count, 2))
    x0 = jnp.ones((3, system.state_size))
    traj = dynsys.rollout(system, x0, 20, inputs=jnp.zeros((3, 20, 1)))
    field = system if system.state_size == 2 else None
    return plot.phase_portrait(traj, system=field, grid=5)


def _eigenvalues(count):
    system = _stable(count)
    return plot.eigenvalues(
        {"least squares": 0.9 * system.K, "fitted": system}, truth=system, dt=0.1
    )


def _loss(count):
    losses = np.exp(-np.arange(10 * count + 10) / 10.0)
    return plot.loss_history(losses, [(0, 1.0), (5, 0.5)], best_step=5,
                             stop_reason="diverged at step 9")  # fmt: skip


def _sweep(count):
    values = list(np.geomspace(0.01, 1.0, count))
    metrics = {"fit, a": np.ones((3, count)), "fit, b": np.arange(count)}
    return plot.sweep("data.measurement_noise", values, metrics,
                      xlabel="noise std (m)", ylabel="fit (%)")  # fmt: skip


def _bode(count):
    system = _stable(3, p=count)
    return plot.bode({"fitted": system}, truth=system, dt=0.1, num=30)


def _step(count):
    system = _stable(3, p=count)
    return plot.step_response({"fitted": system}, 15, truth=system, dt=0.1)


def _singular_values(count):
    return plot.singular_values(np.geomspace(1.0, 1e-4, count), order=count // 2)


def _residuals(count):
    rng = np.random.default_rng(0)
    auto = np.vstack([np.ones((1, count)), 0.1 * rng.normal(size=(10, count))])
    cross = 0.1 * rng.normal(size=(21, count, 1))
    return plot.residuals(autocorrelation=auto, cross_correlation=cross, bound=0.2)


def _order_scan(count):
    """A scan of `count` orders, with and without feedthrough; the highest order's
    free run diverged (a cross and its legend entry)."""

    def fit(n, d):
        return -1e40 if n == count > 1 else 50.0 + n + d

    candidates = tuple(
        dynsys.OrderCandidate(
            order=n, feedthrough=d, parameters=3 * n + d, fit_percent=(fit(n, d),),
            mean_fit=fit(n, d), aic=-float(n), bic=-float(n), fpe=1.0 / n,
            spectral_radius=0.9, stable=True, refined=False, seconds=0.1,
        )
        for n in range(1, count + 1)
        for d in (False, True)
    )  # fmt: skip
    chosen = max(count - 1, 1)
    scan = dynsys.OrderSelection(
        candidates, order=chosen, feedthrough=True, model=_stable(chosen),
        criterion="validation", tolerance=0.2, channels=("y (m)",),
    )  # fmt: skip
    return plot.order_scan(scan)


KINDS = {
    "order_scan": _order_scan,
    "trajectory": _trajectory,
    "comparison": _comparison,
    "phase_portrait": _phase,
    "eigenvalues": _eigenvalues,
    "loss_history": _loss,
    "sweep": _sweep,
    "bode": _bode,
    "step_response": _step,
    "singular_values": _singular_values,
    "residuals": _residuals,
}


def test_every_public_figure_is_covered():
    public = {
        name
        for name in dir(plot)
        if not name.startswith("_") and callable(getattr(plot, name))
    }
    assert public - {"pages"} == set(KINDS)


def _has_xlabel(ax) -> bool:
    return any(a.get_xlabel() for a in ax.get_shared_x_axes().get_siblings(ax))


def _legends(fig):
    return list(fig.legends) + [a.get_legend() for a in fig.axes if a.get_legend()]


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_figure_layout(kind, count):
    matplotlib.use("Agg")
    fig = KINDS[kind](count)
    width, height = fig.get_size_inches()
    assert height <= 2.05 * width, f"{width} x {height} in: taller than 2x its width"
    assert width <= 17 and height <= 17, f"{width} x {height} in: not a page"
    fig.set_dpi(40)  # the checks do not depend on the resolution; faster
    FigureCanvasAgg(fig).draw()
    axes = [a for a in fig.axes if a.get_visible()]
    assert axes
    for a in axes:
        assert a.get_ylabel(), f"{kind}: an axes without a y label"
        assert _has_xlabel(a) or a.get_label() == "<colorbar>", (
            f"{kind}: an axes without an x label ({a.get_ylabel()})"
        )
    renderer = fig.canvas.get_renderer()
    for a in axes:
        for label in (a.xaxis.label, a.yaxis.label):
            box = label.get_window_extent(renderer)
            assert not label.get_text() or fig.bbox.contains(box.x0 + 1, box.y0 + 1)
            assert not label.get_text() or fig.bbox.contains(box.x1 - 1, box.y1 - 1), (
                f"{kind}: the axis label {label.get_text()!r} is cut by the page"
            )
    legends = _legends(fig)
    assert len(legends) <= 1, f"{kind}: {len(legends)} legends, expected one"
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert page.x0 <= box.x0 + 1 and box.x1 <= page.x1 + 1, (
            f"{kind}: the legend is cut by the page's side ({box.x0:.0f} to "
            f"{box.x1:.0f} of 0 to {page.x1:.0f} px)"
        )
        box = box.shrunk(0.98, 0.98)
        for a in axes:
            assert not box.overlaps(a.get_window_extent(renderer)), (
                f"{kind}: the legend overlaps the axes {a.get_ylabel()!r}"
            )


def test_pages_split_channels():
    assert plot.pages(20) == [list(range(12)), list(range(12, 20))]
    assert plot.pages(3, per_page=2) == [[0, 1], [2]]
    with pytest.raises(ValueError, match=r"pages\(per_page=...\): expected >= 1"):
        plot.pages(3, per_page=0)
