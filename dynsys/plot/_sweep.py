"""`plot.sweep`: metrics against a swept quantity, over one or several seeds."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _layout
from ._style import model_styles


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _common_head(labels: Sequence[str]) -> tuple[str | None, list[str]]:
    """`["fit % vs truth, a", "fit % vs truth, b"]` -> `("fit % vs truth", [a, b])`."""
    parts = [label.rsplit(", ", 1) for label in labels]
    if len(labels) > 1 and all(len(p) == 2 for p in parts):
        heads = {p[0] for p in parts}
        if len(heads) == 1:
            return heads.pop(), [p[1] for p in parts]
    return None, list(labels)


def _checked_metrics(metrics: Mapping, values: list) -> dict:
    """label → metric as floats, `(V,)` or `(seeds, V)` for the `V` swept values."""
    arrays = {}
    for label, ys in metrics.items():
        ys = np.asarray(ys, dtype=float)
        if ys.ndim not in (1, 2) or ys.shape[-1] != len(values):
            raise ValueError(
                f"sweep(metrics=...): {label!r} has shape {ys.shape}, expected "
                f"({len(values)},) or (seeds, {len(values)}) (one per swept value)."
            )
        arrays[label] = ys
    return arrays


def _positions(values: list) -> tuple[np.ndarray, bool]:
    """`(xs, numeric)`: the values themselves when all are numbers, else evenly
    spaced positions."""
    numeric = all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    )
    xs = np.asarray(values, dtype=float) if numeric else np.arange(len(values))
    return xs, numeric


def _axes(ax):
    """`(fig, ax)`: a new figure with one axes, or the given `ax` and its figure."""
    if ax is None:
        fig, grid = _layout.new_figure(1, 1, figsize=(6.5, 4.6))
        return fig, grid[0, 0]
    return ax.figure, ax


def _draw_metric(ax, xs, ys, label: str, style: dict):
    """One metric: a line, or with a row per seed the mean with ±1 std error bars
    and each seed as a dot."""
    kw = {"color": style["color"], "ls": style["linestyle"], "marker": style["marker"],
          "mfc": "none", "ms": 6}  # fmt: skip
    if ys.ndim == 1:
        ax.plot(xs, ys, label=label, **kw)
        return
    seeds = ys.shape[0]
    ax.errorbar(xs, ys.mean(0), yerr=ys.std(0), capsize=3,
                label=f"{label} (mean ± 1 std, {seeds} seeds)", **kw)  # fmt: skip
    for row in ys:
        ax.plot(xs, row, ls="none", marker=".", ms=3, color=style["color"], alpha=0.6)


def sweep(
    key: str,
    values: Sequence,
    metrics: Mapping[str, Sequence | np.ndarray],
    *,
    xlabel: str | None = None,
    ylabel: str = "metric",
    roles: Mapping[str, str] | None = None,
    log_x: bool | None = None,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Metrics against the swept value of one config key (the summary of a sweep).

    A metric with one value per swept value is a line with markers; one with a row
    per seed, shape `(seeds, values)`, is drawn as its mean with ±1 standard
    deviation error bars over the seeds, and each seed's value as a small dot. A
    part shared by every metric's label (`"fit % vs truth, a"`, `"fit % vs truth,
    b"`) is written once, above the axes.

    **Arguments:**

    - `key`: the swept config key, e.g. `"data.measurement_noise"` (the x label
        when `xlabel` is not given).
    - `values`: the swept values, numbers or strings (then evenly spaced).
    - `metrics`: label → one value per swept value `(V,)`, or `(seeds, V)`.
    - `xlabel`: the physical quantity swept, with its unit, e.g.
        `"measurement noise std (state units)"`.
    - `ylabel`: the y label.
    - `roles`: optional label → `"fit"` / `"estimate"` (see `plot.STYLES`), by the
        label as drawn (without the shared part); default: the model styles in
        order.
    - `log_x`: logarithmic x axis; default when the values are positive numbers
        spanning more than a factor of 20.
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` if a metric does not have one value (per seed) per swept value.

    **Example:**

    ```python
    fig = dynsys.plot.sweep(
        "data.measurement_noise", [0.01, 0.1, 0.3],
        {"fitted": [[99.0, 95.0, 80.0], [98.5, 94.0, 83.0]]},
        xlabel="measurement noise std (m, m/s)", ylabel="fit (%)")
    ```
    """
    values = list(values)
    arrays = _checked_metrics(metrics, values)
    xs, numeric = _positions(values)
    if log_x is None:
        log_x = bool(numeric and np.all(xs > 0) and xs.max() > 20 * xs.min())
    created = ax is None
    fig, ax = _axes(ax)
    head, shown = _common_head(list(arrays))
    styles = model_styles(shown, roles, "sweep")
    for label, ys in zip(shown, arrays.values()):
        _draw_metric(ax, xs, ys, label, styles[label])
    if not numeric:
        ax.set_xticks(xs, [str(v) for v in values])
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or key)
    ax.set_ylabel(ylabel)
    if head:
        ax.set_title(head, fontsize="small", loc="left")
    ax.grid(True, which="both", alpha=0.3)
    _layout.figure_legend(fig, [ax], created=created, ncol=2)
    _layout.suptitle(fig, title)
    return fig
