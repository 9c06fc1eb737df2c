"""`plot.comparison`: measured against predicted channels, with fit % per channel."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import ArrayLike

from . import _bands, _layout
from ._style import line_style, model_styles, style


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _is_comparison(value) -> bool:
    return hasattr(value, "fit_percent") and hasattr(value, "predicted")


def _is_system(value) -> bool:
    return callable(getattr(value, "step", None)) and hasattr(value, "state_size")


def _compared(systems: Mapping, data, call: str) -> dict:
    """label -> `dynsys.compare(system, data)` for a mapping of systems."""
    from .._sysid.validation import compare

    if data is None or getattr(data, "lengths", None) is None:
        raise ValueError(
            f"{call}(measured=...): with systems ({{label: model}}) pass the data "
            f"(a Dataset) as measured, got {type(data).__name__}."
        )
    return {label: compare(system, data) for label, system in systems.items()}


def _from_comparisons(comparisons: Mapping, experiment: int, call: str):
    """Measured, predictions, fit % and names from `dynsys.compare` results."""
    first = next(iter(comparisons.values()))
    measured_all = np.asarray(first.measured)
    N = measured_all.shape[0]
    if not 0 <= experiment < N:
        raise ValueError(
            f"{call}(experiment=...): expected an index in [0, {N - 1}], got "
            f"{experiment}."
        )
    lengths = getattr(first, "lengths", None)
    T = int(lengths[experiment]) if lengths is not None else measured_all.shape[1]
    measured = measured_all[experiment, :T]
    predictions, fit_percent = {}, {}
    for label, c in comparisons.items():
        predictions[label] = np.asarray(c.predicted)[experiment, :T]
        # The fit % of the experiment drawn (as the figure shows it).
        fit = getattr(c, "fit_percent_per_experiment", None)
        fit = np.asarray(c.fit_percent if fit is None else fit, dtype=float)
        fit_percent[label] = fit[experiment] if fit.ndim == 2 else fit
    names = getattr(first, "names", None)
    return measured, predictions, fit_percent, names


def _unpacked(ts, measured, predictions, fit_percent, names, experiment, call):
    """`(ts, measured, predictions, fit_percent, names)` as given, or taken from the
    `Comparison` (or label → `Comparison`) in `ts`, with `ts` then `None`."""
    if not _is_comparison(ts) and not (
        isinstance(ts, Mapping) and ts and all(_is_comparison(v) for v in ts.values())
    ):
        return ts, measured, predictions, fit_percent, names
    if measured is not None or predictions is not None:
        raise ValueError(
            "comparison(measured=..., predictions=...): give either a Comparison "
            "or arrays, not both."
        )
    comparisons = ts if isinstance(ts, Mapping) else {"model": ts}
    measured, predictions, found_fit, found_names = _from_comparisons(
        comparisons, experiment, call
    )
    fit_percent = fit_percent if fit_percent is not None else found_fit
    names = names if names is not None else found_names
    return None, measured, predictions, fit_percent, names


def _from_systems(ts, measured, predictions, dt, call: str):
    """`(ts, measured, dt)`: label -> model with a `Dataset` become label ->
    `Comparison`; `dt` defaults to the comparisons' sample time."""
    if isinstance(ts, Mapping) and ts and all(_is_system(v) for v in ts.values()):
        if predictions is not None:
            raise ValueError(
                f"{call}(predictions=...): with systems ({{label: model}}) and data, "
                "the predictions come from the systems; pass no predictions."
            )
        ts, measured = _compared(ts, measured, call), None
    if dt is None and (_is_comparison(ts) or isinstance(ts, Mapping)):
        dt = _comparison_dt(ts)
    return ts, measured, dt


def _comparison_dt(ts):
    """The sample time a `Comparison` (or label -> `Comparison`) carries."""
    first = next(iter(ts.values())) if isinstance(ts, Mapping) else ts
    return getattr(first, "dt", None)


def _zoomed(times, measured, predictions, truth, max_points):
    """The last `max_points` samples of a longer record (else all), and words for
    the title (`""` when all are drawn)."""
    T = measured.shape[0]
    if max_points is None or T <= max_points:
        return times, measured, predictions, truth, ""
    keep = slice(T - max_points, T)
    predictions = {k: np.asarray(v)[keep] for k, v in predictions.items()}
    truth = None if truth is None else np.asarray(truth)[keep]
    words = f"last {max_points} of {T} samples shown"
    return times[keep], measured[keep], predictions, truth, words


def _fit_text(value: float) -> str:
    return f"{value:.1f} %" if np.isfinite(value) else "n/a"


def _checked_measured(measured, ts, predictions: dict, truth) -> np.ndarray:
    """`measured` as `(T, p)` floats, checked against `ts` `(T,)`, and every
    prediction and `truth` checked to have its shape (or `(T,)` for one channel)."""
    if measured is None:
        raise ValueError("comparison(measured=...): the measured channels are needed.")
    measured = np.asarray(measured, dtype=float)
    if measured.ndim == 1:
        measured = measured[:, None]
    if measured.ndim != 2:
        raise ValueError(
            f"comparison(measured=...): expected shape (T, p), got {measured.shape}."
        )
    T, p = measured.shape
    if ts is not None and np.shape(ts) != (T,):
        raise ValueError(
            f"comparison(measured=...): expected shape (T, p) = ({np.shape(ts)[0]}, "
            f"p) like ts, got {measured.shape}."
        )
    series = dict(predictions)
    if truth is not None:
        series["truth"] = truth
    allowed = {measured.shape, (T,)} if p == 1 else {measured.shape}
    for label, values in series.items():
        if np.shape(values) not in allowed:
            where = "truth" if label == "truth" and truth is not None else "predictions"
            raise ValueError(
                f"comparison({where}=...): {label!r} has shape {np.shape(values)}, "
                f"expected {measured.shape} like measured."
            )
    return measured


def _checked_fits(fit_percent, p: int) -> dict:
    """label → fit % per channel `(p,)`."""
    fits = {
        label: np.asarray(values, dtype=float)
        for label, values in (fit_percent or {}).items()
    }
    for label, values in fits.items():
        if values.shape != (p,):
            raise ValueError(
                f"comparison(fit_percent=...): {label!r} has shape {values.shape}, "
                f"expected ({p},) (one per channel)."
            )
    return fits


def _draw_channel(a, i, times, measured, truth, predictions, styles, fits, chosen):
    """Channel `i` on axes `a`: the measurements, the truth, and each prediction
    (its markers staggered, its fit % in the legend and the panel title)."""
    T, p = measured.shape
    every = max(1, T // 8)
    kw = style("measured")
    a.plot(times, measured[:, i], ls="none", marker=kw["marker"],
           ms=kw["markersize"], color=kw["color"], zorder=kw["zorder"],
           label="measured")  # fmt: skip
    if truth is not None:
        kw = line_style(style("truth"))
        a.plot(times, np.asarray(truth, dtype=float).reshape(T, p)[:, i],
               label="true system (noise-free)", **kw)  # fmt: skip
    for k, (label, values) in enumerate(predictions.items()):
        kw = line_style(styles[label], markevery=(k * every // 3, every))
        legend = label
        if label in fits:
            shown = fits[label][chosen]
            what = "fit" if len(chosen) == 1 else "mean fit"
            legend = f"{label} ({what} {_fit_text(float(np.mean(shown)))})"
        values = np.asarray(values, dtype=float).reshape(T, p)
        a.plot(times, values[:, i], label=legend, **kw)
    if fits and len(chosen) > 1:
        parts = [f"{label} {_fit_text(v[i])}" for label, v in fits.items()]
        a.set_title("fit: " + ", ".join(parts), fontsize="small", loc="left")


def _channel_axes(ax, count: int, call: str):
    """`(fig, axes)`: a new grid of `count` panels, or the given axes (checked)."""
    if ax is None:
        return _layout.panel_grid(count)
    axes = _layout.given_axes(ax, count, call, "one per channel drawn")
    return axes[0].figure, axes


def _shown_bands(bands, predictions, T: int, p: int, shown_steps: int) -> dict:
    """label -> the standard deviation `(shown_steps, p)` of each band, cut to the
    samples drawn (the last `shown_steps` of `T`)."""
    shown = {}
    for label, std in (bands or {}).items():
        if label not in predictions:
            raise ValueError(
                f"comparison(bands=...): {label!r} is not one of the predictions "
                f"{sorted(predictions)}."
            )
        shown[label] = np.asarray(std, float).reshape(-1, p)[:T][T - shown_steps :]
    return shown


def _draw_bands(a, i, p, times, shown, predictions, styles, z, level) -> None:
    """Channel `i` (of `p`): a shaded band of ± `z` standard deviations around each
    prediction in `shown`, in its model's colour; listed in the legend only when
    it can be seen (somewhere wider than `_VISIBLE` of the prediction's range)."""
    for label, std in shown.items():
        centre = np.asarray(predictions[label], dtype=float).reshape(-1, p)[:, i]
        visible = _VISIBLE * np.ptp(centre) if centre.size else 0.0
        seen = centre.size and np.max(2 * z * std[:, i]) > visible
        text = _bands.level_label(label, level) if seen else "_"
        color = styles[label]["color"]
        a.fill_between(times, centre - z * std[:, i], centre + z * std[:, i],
                       color=color, alpha=0.2, lw=0, label=text)  # fmt: skip


# The band width (as a share of the prediction's range) below which a band cannot
# be seen at figure size, and is left out of the legend.
_VISIBLE = 0.01


def comparison(
    ts,
    measured=None,
    predictions: Mapping[str, ArrayLike] | None = None,
    *,
    truth=None,
    fit_percent: Mapping[str, Sequence[float] | ArrayLike] | None = None,
    roles: Mapping[str, str] | None = None,
    experiment: int = 0,
    channels: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    state_names: Sequence[str] | None = None,
    dt: float | None = None,
    time_label: str | None = None,
    title: str | None = None,
    ax: "Sequence[Axes] | None" = None,
    max_points: int | None = 2000,
    bands: Mapping[str, ArrayLike] | None = None,
    level: float = 0.99,
) -> "Figure":
    """Measured against predicted channels, one panel per channel, with fit %.

    Measurements are grey dots, `truth` a black line, and each prediction has the
    style of its role in `roles`, else the next model style (see `plot.STYLES`).
    With `fit_percent`, each panel's title gives every model's fit % on that
    channel, and the legend its value (one channel) or mean over those shown.

    **Arguments:**

    - `ts`: times `(T,)`; or a `Comparison` from `dynsys.compare`, or a mapping
        label → `Comparison` (then `measured`, `predictions`, `names` and the fit %
        of experiment `experiment` come from it, and the times from `dt`, else
        the comparison's `dt`); or a mapping label → model with the data (a
        `Dataset`) as `measured`: each model is compared with `dynsys.compare`.
    - `measured`: the measured channels of one experiment, shape `(T, p)` (or the
        `Dataset`, with models in `ts`).
    - `predictions`: label → predicted channels `(T, p)`, e.g.
        `{"least squares": ..., "fitted": ...}`.
    - `truth`: optional `(T, p)`, the noise-free output of a known true model.
    - `fit_percent`: optional label → fit % per channel `(p,)`.
    - `roles`: optional label → `"fit"` or `"estimate"` (or another role of
        `STYLES` except `"truth"`).
    - `experiment`: which experiment of a `Comparison` to draw.
    - `channels`: the channel indices to draw (default: all; see `plot.pages`).
    - `names`: one label (with unit) per channel (default `y0, y1, ...`);
        `state_names` is accepted as another spelling.
    - `dt`: the sample time in s, for the time axis when `ts` is not given.
    - `time_label`: the x label (default from the times).
    - `title`: the figure title.
    - `ax`: optional sequence of `Axes`, one per channel drawn.
    - `max_points`: a longer record shows only its last `max_points` samples, so
        the traces stay readable (the title says so; the fit % stay those of the
        whole record); `None` draws every sample.

    - `bands`: optional label → standard deviation `(T, p)` of that label's
        prediction (e.g. from `dynsys.simulation_band`, one experiment): a shaded
        band of ± the `level` quantile around it, its level in the legend (when
        the band is wide enough to be seen: 1 % of the prediction's range).
    - `level`: the bands' confidence level (default 0.99).

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` if the shapes, `channels`, `roles` or axes do not match.

    **Example:**

    ```python
    ts = np.arange(60) * 0.1
    true_y = np.stack([np.sin(ts), np.cos(ts)], axis=1)
    noisy = true_y + 0.05 * np.random.default_rng(0).normal(size=true_y.shape)
    fig = dynsys.plot.comparison(
        ts, noisy, {"fitted": 0.98 * true_y}, truth=true_y,
        fit_percent={"fitted": [97.1, 96.4]}, names=["p (m)", "v (m/s)"])
    ```
    """
    call = "comparison"
    ts, measured, dt = _from_systems(ts, measured, predictions, dt, call)
    ts, measured, predictions, fit_percent, names = _unpacked(
        ts, measured, predictions, fit_percent, names, experiment, call
    )
    predictions = dict(predictions or {})
    measured = _checked_measured(measured, ts, predictions, truth)
    T, p = measured.shape
    times, default_label = _layout.time_axis(T, ts=ts, dt=dt, call=call)
    z = _bands.quantile(level, call)
    times, measured, predictions, truth, zoom = _zoomed(
        times, measured, predictions, truth, max_points
    )
    shown = _shown_bands(bands, predictions, T, p, len(times))
    names = names if names is not None else state_names
    channel_names = _layout.names(names, "y", p, call, "names")
    chosen = _layout.select(channels, p, call)
    styles = model_styles(list(predictions), roles, call)
    fits = _checked_fits(fit_percent, p)
    created = ax is None
    fig, axes = _channel_axes(ax, len(chosen), call)
    for a, i in zip(axes, chosen):
        _draw_bands(a, i, p, times, shown, predictions, styles, z, level)
        _draw_channel(a, i, times, measured, truth, predictions, styles, fits, chosen)
        a.set_ylabel(channel_names[i])
        a.grid(True, alpha=0.3)
    for a in _layout.bottom_row(axes, len(axes)) if created else axes[-1:]:
        a.set_xlabel(time_label or default_label)
    _layout.figure_legend(fig, axes, created=created)
    if zoom:
        title = f"{title} ({zoom})" if title else zoom
    _layout.suptitle(fig, title)
    return fig
