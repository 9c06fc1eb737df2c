"""`plot.order_scan`: the score of each candidate structure of `select_order`."""

from typing import TYPE_CHECKING

import numpy as np

from . import _layout
from ._style import MODEL_CYCLE


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


_LABELS = {
    "validation": "validation fit %\n(mean over channels, 100 = perfect)",
    "aic": "AIC (lower is better)",
    "bic": "BIC (lower is better)",
    "fpe": "FPE (lower is better)",
}


def _values(scan, criterion: str, rows) -> np.ndarray:
    """The score of each row; NaN (no point) for a diverged candidate's fit %."""
    if criterion == "validation":
        return np.array(
            [np.nan if r.mean_fit is None or r.diverged else r.mean_fit for r in rows]
        )
    return np.array([getattr(r, criterion) for r in rows], dtype=float)


def _mark_diverged(ax, rows) -> None:
    """A cross at the bottom of the axes for each candidate whose free run
    diverged (its fit % is no number to draw), labelled once."""
    gone = [r.order for r in rows if r.diverged]
    if gone:
        ax.plot(gone, [0.02] * len(gone), ls="none", marker="x", ms=8, mew=1.8,
                color="0.25", transform=ax.get_xaxis_transform(), clip_on=False,
                label="diverged free run (fit % off the chart)")  # fmt: skip


def order_scan(
    scan,
    *,
    criterion: str | None = None,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """The order scan of `select_order`: each candidate's score against its order,
    one line style and marker per feedthrough option, the chosen structure ringed.

    **Arguments:**

    - `scan`: an `OrderSelection` (from `dynsys.select_order`).
    - `criterion`: what to draw: `"validation"` (mean validation fit %; needs a
        scan with validation data), `"aic"`, `"bic"` or `"fpe"`; default the
        criterion that chose.
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for an unknown criterion or `"validation"` for a scan without
    validation data.

    **Example:**

    ```python
    scan = dynsys.select_order(train, val_data=val)
    dynsys.plot.order_scan(scan).savefig("order_scan.png")
    ```
    """
    criterion = scan.criterion if criterion is None else criterion
    if criterion not in _LABELS:
        raise ValueError(
            f"order_scan(criterion=...): expected one of {tuple(_LABELS)}, got "
            f"{criterion!r}."
        )
    if criterion == "validation" and scan.candidates[0].mean_fit is None:
        raise ValueError(
            "order_scan(criterion='validation'): the scan has no validation data; "
            "use 'aic', 'bic' or 'fpe'."
        )
    created = ax is None
    if created:
        fig, grid = _layout.new_figure(1, 1, figsize=(6.5, 4.6))
        ax = grid[0, 0]
    else:
        fig = ax.figure
    options = sorted({r.feedthrough for r in scan.candidates})
    for k, feedthrough in enumerate(options):
        rows = [r for r in scan.candidates if r.feedthrough == feedthrough]
        s = MODEL_CYCLE[k % len(MODEL_CYCLE)]
        label = "with feedthrough D" if feedthrough else "no feedthrough (D = 0)"
        ax.plot([r.order for r in rows], _values(scan, criterion, rows),
                color=s["color"], ls=s["linestyle"], marker=s["marker"], mfc="none",
                ms=7, lw=1.2, label=label)  # fmt: skip
    chosen = scan.chosen
    ax.plot([chosen.order], _values(scan, criterion, [chosen]), ls="none",
            marker="o", ms=16, mfc="none", mec="black", mew=1.8,
            label=f"chosen: order {chosen.order}"
            + (", with D" if chosen.feedthrough else ", no D"))  # fmt: skip
    orders = sorted({r.order for r in scan.candidates})
    ax.set_xlabel("model order $n$")
    ax.set_ylabel(_LABELS[criterion])
    if len(orders) <= 30:
        ax.set_xticks(orders)
    if criterion == "validation":
        _mark_diverged(ax, scan.candidates)
        values = _values(scan, criterion, scan.candidates)
        finite = values[np.isfinite(values)]
        if finite.size:  # keep a very poor candidate from flattening the rest
            low = max(finite.min(), np.max(finite) - 60.0)
            ax.set_ylim(low - 2.0, min(100.0, np.max(finite)) + 2.0)
    ax.grid(True, alpha=0.3)
    _layout.figure_legend(fig, [ax], created=created)
    _layout.suptitle(fig, title)
    return fig
