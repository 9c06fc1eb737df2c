"""Page layout shared by the figures: grids of panels, channel subsets, one legend."""

import math
from collections.abc import Sequence

import numpy as np

from ._style import unit_of


MAX_COLUMN = 4  # up to this many panels: one column; above: a grid
PANEL_HEIGHT = 1.75  # inches per row of panels
PAGE_CHANNELS = 12  # channels per page by `pages`


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize, fig=None, **subplot_kw):
    """A figure with a grid of axes, made without pyplot (so it works headless);
    or the grid added to a given (empty) `fig` (a `Figure` or `SubFigure`)."""
    from matplotlib.figure import Figure

    if fig is None:
        fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    return fig, axes


def grid_shape(count: int) -> tuple[int, int]:
    """Rows and columns for `count` panels: one column up to `MAX_COLUMN`, then a
    grid with up to 4 columns (the figure stays no taller than about twice as wide)."""
    if count <= MAX_COLUMN:
        return count, 1
    ncols = 2 if count <= 8 else 3 if count <= 15 else 4
    return math.ceil(count / ncols), ncols


def panel_grid(count: int, *, width: float | None = None, sharex=True):
    """A new figure with `count` panels in `grid_shape(count)`; unused cells hidden.

    **Returns:** `(fig, axes)` with `axes` a list of `count` Axes, row by row.
    """
    nrows, ncols = grid_shape(count)
    width = width or (7.5 if ncols == 1 else 4.0 * ncols)
    height = min(0.9 + PANEL_HEIGHT * nrows, 2.0 * width)
    fig, grid = new_figure(nrows, ncols, figsize=(width, height))
    cells = list(grid.ravel())
    for cell in cells[count:]:
        cell.set_visible(False)
        fig.delaxes(cell)
    axes = cells[:count]
    if sharex:
        for a in axes[1:]:
            a.sharex(axes[0])
    return fig, axes


def bottom_row(axes: Sequence, count: int) -> list:
    """The panels at the bottom of each column (they carry the x label)."""
    _, ncols = grid_shape(count)
    bottom = {}
    for k, a in enumerate(axes):
        bottom[k % ncols] = a
    return list(bottom.values())


def pages(count: int, per_page: int = PAGE_CHANNELS) -> list[list[int]]:
    """Channel indices split into pages of at most `per_page`, for multi-page figures.

    **Example:** `[plot.comparison(c, channels=p) for p in plot.pages(20)]` draws
    20 channels on two pages of 12 and 8.
    """
    if per_page < 1:
        raise ValueError(f"pages(per_page=...): expected >= 1, got {per_page}.")
    return [list(range(k, min(k + per_page, count))) for k in range(0, count, per_page)]


def select(channels, count: int, call: str) -> list[int]:
    """The channel indices asked for (`None`: all), checked against `count`."""
    if channels is None:
        return list(range(count))
    chosen = [int(c) for c in np.atleast_1d(np.asarray(channels))]
    bad = [c for c in chosen if not 0 <= c < count]
    if bad or not chosen:
        raise ValueError(
            f"{call}(channels=...): expected indices in [0, {count - 1}], got "
            f"{list(channels) if channels is not None else channels}."
        )
    return chosen


def names(given, symbol: str, count: int, call: str, argument: str) -> list[str]:
    """Channel names: the given ones (checked), else `symbol0, symbol1, ...`."""
    if given is None:
        return [f"{symbol}{i}" for i in range(count)]
    given = [str(name) for name in given]
    if len(given) != count:
        raise ValueError(
            f"{call}({argument}=...): expected {count} names, got {len(given)}."
        )
    return given


def unit_groups(names: Sequence[str], indices: Sequence[int]) -> list[list[int]]:
    """Channels that may share an axis: the same stated unit. A channel without a
    unit gets an axis of its own (its unit is unknown, so no sharing)."""
    groups: dict[str, list[int]] = {}
    out: list[list[int]] = []
    for i in indices:
        unit = unit_of(names[i])
        if unit is None:
            out.append([i])
        elif unit in groups:
            groups[unit].append(i)
        else:
            groups[unit] = [i]
            out.append(groups[unit])
    return out


def time_axis(length: int, ts=None, dt=None, call: str = "plot"):
    """Times and their label: `ts` as given, else `dt * k` (s), else steps `k`."""
    if ts is not None:
        ts = np.asarray(ts, dtype=float)
        if ts.shape != (length,):
            raise ValueError(
                f"{call}(ts=...): expected shape ({length},), got {ts.shape}."
            )
        steps = np.diff(ts)
        unit = "steps" if steps.size and np.allclose(steps, 1.0) else "s"
        return ts, f"t ({unit})"
    if dt is not None:
        return dt * np.arange(length), "t (s)"
    return np.arange(length, dtype=float), "t (steps)"


def figure_legend(
    fig, axes: Sequence, *, created: bool, ncol: int | None = None, extra=()
):
    """One legend for the figure, outside every axes: below the panels on a figure
    made here, else to the right of the first given axes. Duplicates are merged;
    `extra` adds `(handle, label)` entries that are not drawn in any axes."""
    seen: dict[str, object] = {}
    for a in axes:
        for handle, label in zip(*a.get_legend_handles_labels()):
            if not label.startswith("_") and label not in seen:
                seen[label] = handle
    for handle, label in extra:
        seen.setdefault(label, handle)
    if not seen:
        return None
    handles, labels = list(seen.values()), [_wrap(label) for label in seen]
    if created:
        ncol = ncol or _columns(labels, fig)
        return fig.legend(
            handles, labels, loc="outside lower center", ncol=ncol, fontsize="small"
        )
    return axes[0].legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize="small",
        borderaxespad=0.0,
    )


def _wrap(label: str, width: int = 60) -> str:
    import textwrap

    return textwrap.fill(label, width) if len(label) > width else label


def _columns(labels: Sequence[str], fig) -> int:
    """As many legend columns (up to 4) as fit the figure's width."""
    width = fig.get_figwidth() if hasattr(fig, "get_figwidth") else 7.0
    room = 12.0 * width  # characters of small text across the figure
    longest = [max(len(line) for line in label.split("\n")) for label in labels]
    ncol = min(len(labels), 4)
    while ncol > 1 and ncol * (max(longest) + 6) > room:
        ncol -= 1
    return ncol


def given_axes(ax, count: int, call: str, what: str) -> list:
    """The user's axes as a list of `count`, or a clear error."""
    axes = [ax] if hasattr(ax, "plot") else list(ax)
    if len(axes) != count:
        raise ValueError(
            f"{call}(ax=...): expected {count} axes ({what}), got {len(axes)}."
        )
    return axes


def io_pairs(p: int, m: int, outputs, inputs, call: str) -> list[tuple[int, int]]:
    """(output, input) index pairs to draw: the chosen outputs × the chosen inputs."""
    rows = select(outputs, p, call) if outputs is not None else list(range(p))
    cols = select(inputs, m, call) if inputs is not None else list(range(m))
    return [(i, j) for i in rows for j in cols]


def pair_title(pair, output_names, input_names) -> str:
    """`"input → output"`, the title of one input/output panel."""
    i, j = pair
    return f"{input_names[j]} → {output_names[i]}"


def suptitle(fig, title: str | None):
    """The figure title, each of its lines wrapped to the figure's width."""
    if not title:
        return
    import textwrap

    width = fig.get_figwidth() if hasattr(fig, "get_figwidth") else 7.0
    columns = max(30, int(11 * width))
    fig.suptitle("\n".join(textwrap.fill(line, columns) for line in title.split("\n")))
