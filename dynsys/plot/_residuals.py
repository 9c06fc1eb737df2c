"""`plot.residuals`: residual auto- and cross-correlations with confidence bounds."""

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _layout
from ._style import CHANNEL_LINESTYLES, style


if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _stems(a, lags, values, bound, *, color, ls, label, skip_zero=False):
    a.vlines(lags, 0.0, values, color=color, ls=ls, lw=1.0)
    a.plot(lags, values, "o", color=color, ms=3, label=label)
    outside = (np.abs(values) > bound) & ~((lags == 0) & skip_zero)
    if np.any(outside):
        a.plot(lags[outside], values[outside], "o", color="tab:red", ms=5, mfc="none",
               mew=1.4, label="outside the bound")  # fmt: skip


def residuals(
    result=None,
    *,
    autocorrelation=None,
    cross_correlation=None,
    bound=None,
    output_names: Sequence[str] | None = None,
    input_names: Sequence[str] | None = None,
    channels: Sequence[int] | None = None,
    title: str | None = None,
    fig: "Figure | None" = None,
    level: float | None = None,
) -> "Figure":
    """Residual analysis: the auto-correlation of each output's residual (lags
    $0 \\dots L$) and its cross-correlation with the inputs (lags $-L \\dots L$),
    with the confidence bound of white, input-independent residuals. A good model
    leaves every value but the lag-0 auto-correlation inside the bound; values
    outside are circled.

    **Arguments:**

    - `result`: a `Residuals` from `dynsys.residual_analysis` (with
        `autocorrelation (L+1, p)`, `cross_correlation (2L+1, p, m) | None`,
        `bound`, `names`); or give the arrays:
    - `autocorrelation`: `(L+1, p)`, normalised (1 at lag 0).
    - `cross_correlation`: optional `(2L+1, p, m)`.
    - `bound`: the confidence bound (a number), e.g. $2.58/\\sqrt{N}$ for 99 %.
    - `output_names`, `input_names`: labels (default `y0, ...`, `u0, ...`).
    - `channels`: the outputs to draw (default: all).
    - `title`: the figure title.
    - `fig`: optional empty `Figure` (or `SubFigure`) to draw into.
    - `level`: the bound's confidence level, stated in the legend (e.g. 0.99:
        "99 % confidence bound"); default 0.99 for a `result` (its bound is the
        99 % one), else not stated.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for missing or inconsistent arrays.

    **Example:**

    ```python
    rng = np.random.default_rng(0)
    e, u = rng.normal(size=(400, 2)), rng.normal(size=(400, 1))
    L = 20
    auto = np.stack([[np.dot(e[k:, i], e[:400 - k, i]) for i in range(2)]
                     for k in range(L + 1)]) / (e**2).sum(0)
    fig = dynsys.plot.residuals(autocorrelation=auto, bound=2.58 / np.sqrt(400))
    ```
    """
    names_found = None
    if result is not None:
        level = 0.99 if level is None and bound is None else level
        autocorrelation, cross_correlation, bound, names_found, input_names = (
            _from_result(result, bound, input_names)
        )
    auto, cross = _checked_arrays(autocorrelation, cross_correlation, bound)
    bound = float(np.max(np.asarray(bound, dtype=float)))
    stated = "" if level is None else f"{100 * level:g} % "
    bound_label = f"{stated}confidence bound ±{bound:.3g}"
    out_names, in_names = _channel_names(
        output_names, input_names, names_found, auto, cross
    )
    chosen = _layout.select(channels, auto.shape[1], "residuals")
    fig, grid, blocks = _blocks(len(chosen), cross is not None, fig)
    for i, block in zip(chosen, blocks):
        _draw_auto(block[0], auto[:, i], bound, out_names[i])
        _draw_bound(block[0], bound, bound_label)
        if cross is not None:
            _draw_cross(block[1], cross[:, i], bound, out_names[i], in_names)
            _draw_bound(block[1], bound, bound_label)
    used = [a for block in blocks for a in block]
    for cell in grid.ravel():
        if cell not in used:
            fig.delaxes(cell)
    _layout.figure_legend(fig, used, created=True)
    _layout.suptitle(fig, title)
    return fig


def _from_result(result, bound, input_names) -> tuple:
    """The auto- and cross-correlations, bound, output and input names of a
    `Residuals`; a given `bound` or `input_names` takes precedence."""
    autocorrelation = result.autocorrelation
    cross_correlation = getattr(result, "cross_correlation", None)
    bound = result.bound if bound is None else bound
    names_found = getattr(result, "names", None)
    if input_names is None:
        input_names = getattr(result, "input_names", None)
    return autocorrelation, cross_correlation, bound, names_found, input_names


def _checked_arrays(autocorrelation, cross_correlation, bound) -> tuple:
    """The auto-correlation as floats `(L+1, p)` and the cross-correlation
    `(2L+1, p, m)` (or `None`), checked."""
    if autocorrelation is None or bound is None:
        raise ValueError(
            "residuals(result=...): give a Residuals, or autocorrelation=... and "
            "bound=...."
        )
    auto = np.asarray(autocorrelation, dtype=float)
    if auto.ndim == 1:
        auto = auto[:, None]
    if auto.ndim != 2:
        raise ValueError(
            f"residuals(autocorrelation=...): expected shape (L+1, p), got "
            f"{auto.shape}."
        )
    L, p = auto.shape[0] - 1, auto.shape[1]
    cross = None
    if cross_correlation is not None:
        cross = np.asarray(cross_correlation, dtype=float)
        if cross.ndim != 3 or cross.shape[:2] != (2 * L + 1, p):
            raise ValueError(
                f"residuals(cross_correlation=...): expected shape (2L+1, p, m) = "
                f"({2 * L + 1}, {p}, m), got {cross.shape}."
            )
    return auto, cross


def _channel_names(output_names, input_names, names_found, auto, cross) -> tuple:
    """The output names (given, else those of the result if there are `p`, else
    `y0, ...`) and the input names (given, else `u0, ...`)."""
    p = auto.shape[1]
    if output_names is None and names_found is not None and len(names_found) == p:
        output_names = names_found
    out_names = _layout.names(output_names, "y", p, "residuals", "output_names")
    m = 0 if cross is None else cross.shape[2]
    in_names = _layout.names(input_names, "u", m, "residuals", "input_names")
    return out_names, in_names


def _blocks(count: int, with_cross: bool, fig) -> tuple:
    """A figure with a block of panels per output drawn, one or two blocks a row.

    **Returns:** `(fig, grid, blocks)`: `grid` all the axes, `blocks` one list per
    output of its auto-correlation panel (and its cross-correlation panel).
    """
    per_block = 2 if with_cross else 1
    blocks_per_row = 1 if count <= 6 else 2
    nrows = math.ceil(count / blocks_per_row)
    ncols = per_block * blocks_per_row
    width = 4.2 * ncols if ncols > 1 else 7.0
    height = min(0.9 + (1.7 if nrows <= 6 else 1.45) * nrows, 2.0 * width)
    fig, grid = _layout.new_figure(nrows, ncols, figsize=(width, height), fig=fig)
    blocks = []
    for k in range(count):
        r, c = divmod(k, blocks_per_row)
        blocks.append([grid[r, c * per_block + q] for q in range(per_block)])
    return fig, grid, blocks


def _draw_auto(a, values: np.ndarray, bound: float, name: str) -> None:
    """One output's residual auto-correlation `values (L+1,)` at lags `0 ... L`."""
    lags = np.arange(values.shape[0])
    _stems(a, lags, values, bound, color="tab:blue", ls="-", label="correlation",
           skip_zero=True)  # fmt: skip
    a.set_title(f"{name}: residual auto-correlation", fontsize="small")
    a.set_xlabel("lag (steps)")


def _draw_cross(a, values: np.ndarray, bound: float, name: str, in_names) -> None:
    """One output's residual cross-correlation with each input, `values (2L+1, m)`
    at lags `-L ... L`."""
    L, m = values.shape[0] // 2, values.shape[1]
    lags = np.arange(-L, L + 1)
    for j in range(m):
        label = f"with {in_names[j]}" if m > 1 else "correlation"
        _stems(a, lags, values[:, j], bound, color=f"C{j % 10}",
               ls=CHANNEL_LINESTYLES[j % len(CHANNEL_LINESTYLES)],
               label=label)  # fmt: skip
    a.set_title(f"{name}: cross-correlation with the input"
                + ("s" if m > 1 else f" {in_names[0]}"), fontsize="small")  # fmt: skip
    a.set_xlabel("lag τ (steps): residual at t + τ, input at t")


def _draw_bound(a, bound: float, label: str) -> None:
    """The confidence band `±bound`, its two lines, the y label and the grid."""
    bound_style = style("bound")
    a.axhspan(-bound, bound, color=bound_style["color"], alpha=0.08, lw=0)
    for level in (-bound, bound):
        a.axhline(level, color=bound_style["color"], ls=bound_style["linestyle"],
                  lw=1.0, label=label)  # fmt: skip
    a.set_ylabel("correlation")
    a.grid(True, alpha=0.3)
