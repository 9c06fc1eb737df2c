"""`plot.trajectory`: states, inputs and outputs against time."""

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._rollout.rollout import Trajectory
from . import _layout
from ._style import BAND_ALPHA, CHANNEL_LINESTYLES, strip_unit, style, THIN, unit_of


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _batch(values) -> np.ndarray:
    values = np.asarray(values)
    return values.reshape((-1,) + values.shape[-2:])


def _bound_pairs(input_bound, m: int) -> list[tuple[float, float]] | None:
    if input_bound is None:
        return None
    b = np.asarray(input_bound, dtype=float)
    if b.ndim == 0:
        return [(-float(b), float(b))] * m
    if b.shape == (m,):
        return [(-float(v), float(v)) for v in b]
    if b.shape == (m, 2):
        return [(float(lo), float(hi)) for lo, hi in b]
    raise ValueError(
        f"trajectory(input_bound=...): expected a number, shape (m,) = ({m},) or "
        f"(m, 2) = ({m}, 2), got shape {b.shape}."
    )


def group_label(names: Sequence[str], group: Sequence[int]) -> str:
    """The y label of a panel: the one name, or the names and their shared unit."""
    if len(group) == 1:
        return names[group[0]]
    unit = unit_of(names[group[0]])
    short = [strip_unit(names[i]) for i in group]
    text = ", ".join(short) if len(short) <= 3 else f"{short[0]} … {short[-1]}"
    return f"{text} ({unit})"


def trajectory(
    traj: Trajectory,
    *,
    outputs: bool = False,
    names=None,
    state_names: Sequence[str] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    reference=None,
    input_bound=None,
    channels: Sequence[int] | None = None,
    summary: str = "auto",
    max_lines: int = 20,
    quantiles: tuple[float, float] = (0.1, 0.9),
    time_label: str | None = None,
    title: str | None = None,
    ax: "Sequence[Axes] | None" = None,
) -> "Figure":
    """States, inputs (if any) and optionally outputs against time.

    Channels share an axis only when their names state the same unit
    (`"p1 (m)"`, `"p2 (m)"`); a channel without a unit, and every input and output
    group, gets its own panel. Above four panels the panels form a grid. A batch
    of up to `max_lines` trajectories is drawn as one thin line per trajectory;
    a larger batch as its median and a quantile band, labelled as such (the
    median of several trajectories is not itself a trajectory).

    **Arguments:**

    - `traj`: a `Trajectory`, `xs` of shape `(T+1, n)` or `(..., T+1, n)`.
    - `outputs`: also draw the outputs `ys`.
    - `names`: optional; all the names at once, e.g. `dynsys.models.names(name)`
        (anything with `states`, `inputs`, `outputs`), for the names not given.
    - `state_names`, `input_names`, `output_names`: one label per column, with its
        unit, e.g. `["θ (rad)", "ω (rad/s)"]` (default `x0, x1, ...`; for a zoo
        model, `dynsys.models.names(name)`).
    - `reference`: optional target state `(n,)`, drawn dashed.
    - `input_bound`: optional known input limit: a number `b` (drawn at `±b`),
        one per input `(m,)`, or `(m, 2)` lower and upper limits.
    - `channels`: the state indices to draw (default: all), e.g. for a page of a
        large system.
    - `summary`: `"auto"` (lines up to `max_lines` trajectories, else a band),
        `"lines"` or `"band"`.
    - `max_lines`: the largest batch drawn line by line under `"auto"`.
    - `quantiles`: the lower and upper quantile of the band.
    - `time_label`: the x label; default `"t (steps)"` when the times are the
        step indices, else `"t (s)"`.
    - `title`: the figure title.
    - `ax`: optional sequence of `Axes`, one per panel.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for a wrong number of names or axes, a bad `reference`,
    `input_bound`, `channels`, `summary` or `quantiles`.

    **Example:**

    ```python
    import dynsys.models as zoo
    names = zoo.names("pendulum")
    system = zoo.Pendulum()
    x0s = jnp.stack([jnp.linspace(0.5, 2.0, 6), jnp.zeros(6)], axis=1)
    traj = dynsys.rollout(system, x0s, 40, inputs=jnp.zeros((6, 40, 1)))
    fig = dynsys.plot.trajectory(traj, names=names, input_bound=15.0)
    fig.savefig("trajectory.png")
    ```
    """
    state_names, input_names, output_names = _fill_names(
        names, state_names, input_names, output_names
    )
    _check_summary(summary, quantiles)
    ts = np.asarray(traj.ts, dtype=float)
    xs = _batch(traj.xs)
    panels, chosen = _state_panels(xs, ts, state_names, channels)
    reference = _checked_reference(reference, xs.shape[-1])
    bounds = None
    if traj.us is not None:
        input_panels, bounds = _input_panels(traj.us, ts, input_names, input_bound)
        panels += input_panels
    if outputs:
        panels += _output_panels(traj.ys, ts, output_names)
    created = ax is None
    fig, axes = _figure(ax, len(panels))
    batch = xs.shape[0]
    band = summary == "band" or (summary == "auto" and batch > max_lines)
    band_quantiles = quantiles if band else None
    for a, panel in zip(axes, panels):
        _draw_panel(a, panel, chosen, batch, band_quantiles, reference, bounds)
    _label_time(axes, ts, time_label, created)
    extra = _summary_key(band_quantiles, batch)
    _layout.figure_legend(fig, axes, created=created, extra=extra)
    _layout.suptitle(fig, title)
    return fig


def _fill_names(names, state_names, input_names, output_names):
    """The state, input and output names: those given, else those of `names`."""
    if names is not None:
        state_names = names.states if state_names is None else state_names
        input_names = names.inputs if input_names is None else input_names
        output_names = names.outputs if output_names is None else output_names
    return state_names, input_names, output_names


def _check_summary(summary: str, quantiles: tuple[float, float]) -> None:
    """Raise for `quantiles` not `0 <= low < high <= 1` or an unknown `summary`."""
    low_q, high_q = quantiles
    if not 0.0 <= low_q < high_q <= 1.0:
        raise ValueError(
            f"trajectory(quantiles=...): expected 0 <= low < high <= 1, got "
            f"{quantiles}."
        )
    if summary not in ("auto", "lines", "band"):
        raise ValueError(
            f"trajectory(summary=...): expected 'auto', 'lines' or 'band', got "
            f"{summary!r}."
        )


def _state_panels(xs: np.ndarray, ts: np.ndarray, state_names, channels):
    """The state panels, one per unit group of the chosen channels, and those channels.

    A panel is `(kind, values (B, T', c), times (T',), names, group)`: `group` lists
    the channels (last axis of `values`) it draws.
    """
    n = xs.shape[-1]
    x_names = _layout.names(state_names, "x", n, "trajectory", "state_names")
    chosen = _layout.select(channels, n, "trajectory")
    groups = _layout.unit_groups(x_names, chosen)
    return [("state", xs, ts, x_names, g) for g in groups], chosen


def _checked_reference(reference, n: int) -> np.ndarray | None:
    """The target state as floats `(n,)`, or `None`."""
    if reference is not None:
        reference = np.asarray(reference, dtype=float)
        if reference.shape != (n,):
            raise ValueError(
                f"trajectory(reference=...): expected shape (n,) = ({n},), got "
                f"{reference.shape}."
            )
    return reference


def _input_panels(us, ts: np.ndarray, input_names, input_bound):
    """The input panels (one per unit group) and each input's `(low, high)` bound."""
    us = _batch(us)
    m = us.shape[-1]
    u_names = _layout.names(input_names, "u", m, "trajectory", "input_names")
    bounds = _bound_pairs(input_bound, m)
    groups = _layout.unit_groups(u_names, range(m))
    return [("input", us, ts[:-1], u_names, g) for g in groups], bounds


def _output_panels(ys, ts: np.ndarray, output_names) -> list:
    """The output panels, one per unit group."""
    ys = _batch(ys)
    p = ys.shape[-1]
    y_names = _layout.names(output_names, "y", p, "trajectory", "output_names")
    groups = _layout.unit_groups(y_names, range(p))
    return [("output", ys, ts[:-1], y_names, g) for g in groups]


def _figure(ax, count: int):
    """The figure and its `count` panels: a new grid, or the given `ax` checked."""
    if ax is None:
        return _layout.panel_grid(count)
    axes = _layout.given_axes(
        ax,
        count,
        "trajectory",
        "one per panel: a unit group of states, inputs, outputs",
    )
    return axes[0].figure, axes


def _draw_panel(a, panel, chosen, batch: int, band, reference, bounds) -> None:
    """One panel: each channel of its group (see `_draw_series`), with the target
    for states and the input bounds for inputs."""
    kind, values, times, names, group = panel
    for i in group:
        # Each channel of a kind has its own colour and line style.
        j = chosen.index(i) if kind == "state" else i
        color, ls = f"C{j % 10}", CHANNEL_LINESTYLES[j % len(CHANNEL_LINESTYLES)]
        label = names[i] if len(group) > 1 else "_"
        _draw_series(a, times, values[..., i], color, ls, label, batch, band)
        if kind == "state" and reference is not None:
            a.axhline(reference[i], label="target", **_hline("target"))
        if kind == "input" and bounds is not None:
            low_b, high_b = bounds[i]
            for level in (low_b, high_b):
                if np.isfinite(level):
                    a.axhline(level, label="input bound", **_hline("bound"))
    a.set_ylabel(group_label(names, group))
    a.grid(True, alpha=0.3)


def _draw_series(a, times, series, color, ls, label, batch: int, band) -> None:
    """One channel `series (B, T')` against `times (T',)`: with `band = (low, high)`
    quantiles, its median and quantile band; else one line per trajectory."""
    if band is not None:
        low, high = np.quantile(series, list(band), axis=0)
        a.fill_between(times, low, high, color=color, alpha=BAND_ALPHA, lw=0)
        a.plot(times, np.median(series, axis=0), color=color, ls=ls, lw=1.5,
               label=label)  # fmt: skip
    elif batch == 1:
        a.plot(times, series[0], color=color, ls=ls, lw=1.5, label=label)
    else:
        for k in range(batch):
            a.plot(times, series[k], color=color, ls=ls, lw=THIN, alpha=0.75,
                   label=label if k == 0 else "_")  # fmt: skip


def _label_time(axes: list, ts: np.ndarray, time_label, created: bool) -> None:
    """The x label, under the bottom panel of each column (given axes: the last)."""
    default_label = _layout.time_axis(ts.shape[0], ts=ts, call="trajectory")[1]
    for a in _layout.bottom_row(axes, len(axes)) if created else axes[-1:]:
        a.set_xlabel(time_label or default_label)


def _summary_key(band, batch: int) -> list:
    """The legend entry saying how a batch is drawn: `(handle, text)` pairs."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    extra = []
    if band is not None:
        low_q, high_q = band
        extra.append((
            Patch(color="0.5", alpha=BAND_ALPHA * 2),
            f"median (line) and {low_q:.0%}–{high_q:.0%} range (band) of {batch} "
            "trajectories at each time",
        ))  # fmt: skip
    elif batch > 1:
        extra.append((
            Line2D([], [], color="0.3", lw=THIN),
            f"one thin line per trajectory ({batch})",
        ))  # fmt: skip
    return extra


def _hline(role: str) -> dict:
    s = style(role)
    return {"color": s["color"], "ls": s["linestyle"], "lw": s["linewidth"],
            "zorder": s["zorder"]}  # fmt: skip
