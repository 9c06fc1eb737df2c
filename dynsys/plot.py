"""Matplotlib figures: trajectories, fits, eigenvalues, loss curves.

Nothing here calls `plt.show()`.

matplotlib is imported lazily, on the first call.
"""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ._rollout import Trajectory


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def trajectory(
    traj: Trajectory,
    *,
    state_names: list[str] | None = None,
    input_names: list[str] | None = None,
    time_label: str = "t",
    title: str | None = None,
) -> "Figure":
    """States (and inputs, if any) against time, one panel each.

    A batch of trajectories is drawn as its median and 10–90 % quantile band.

    **Arguments:**

    - `traj`: a `Trajectory`, `xs` of shape `(T+1, n)` or `(..., T+1, n)`.
    - `state_names`, `input_names`: labels for the legend.
    - `time_label`: the x-axis label (give the unit, e.g. `"t (s)"`).
    - `title`: the figure title.

    **Returns:**

    The matplotlib `Figure`.
    """
    plt = _pyplot()
    ts = np.asarray(traj.ts)
    xs = np.asarray(traj.xs).reshape((-1,) + traj.xs.shape[-2:])
    panels = [("state", "x", xs, ts, state_names)]
    if traj.us is not None:
        us = np.asarray(traj.us).reshape((-1,) + traj.us.shape[-2:])
        panels.append(("input", "u", us, ts[:-1], input_names))
    fig, axes = plt.subplots(
        len(panels), 1, sharex=True, figsize=(7, 2.6 * len(panels)), squeeze=False
    )
    for ax, (kind, symbol, values, times, names) in zip(axes[:, 0], panels):
        for i in range(values.shape[-1]):
            label = names[i] if names else f"{symbol}{i}"
            median = np.median(values[..., i], axis=0)
            (line,) = ax.plot(times, median, label=label)
            if values.shape[0] > 1:
                low, high = np.quantile(values[..., i], [0.1, 0.9], axis=0)
                ax.fill_between(times, low, high, color=line.get_color(), alpha=0.2)
        ax.set_ylabel(kind)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize="small", ncol=min(values.shape[-1], 4))
    axes[-1, 0].set_xlabel(time_label)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _new_figure(nrows: int = 1, ncols: int = 1, *, figsize):
    """A figure with a grid of axes, made without pyplot (so it works headless)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def comparison(
    ts,
    measured,
    predictions: Mapping[str, np.ndarray],
    *,
    state_names: Sequence[str] | None = None,
    time_label: str = "t",
    title: str | None = None,
    ax: "Sequence[Axes] | None" = None,
) -> "Figure":
    """Measured against predicted trajectories, one panel per state.

    The measurements are drawn as grey dots, the first prediction (e.g. the noise-free
    truth) as a black line, the others as coloured dashed lines.

    **Arguments:**

    - `ts`: times, shape `(T+1,)`.
    - `measured`: the measured states of one trajectory, shape `(T+1, n)`.
    - `predictions`: label → predicted states `(T+1, n)`, e.g.
        `{"true": ..., "fitted": ...}`.
    - `state_names`: one label per state (default `x0, x1, ...`).
    - `time_label`: the x-axis label.
    - `title`: the figure title.
    - `ax`: optional sequence of `n` matplotlib `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` if the shapes do not match.
    """
    ts = np.asarray(ts)
    measured = np.asarray(measured)
    if measured.ndim != 2 or measured.shape[0] != ts.shape[0]:
        raise ValueError(
            f"comparison(measured=...): expected shape (T+1, n) = ({ts.shape[0]}, n), "
            f"got {measured.shape}."
        )
    n = measured.shape[1]
    for label, values in predictions.items():
        if np.shape(values) != measured.shape:
            raise ValueError(
                f"comparison(predictions=...): {label!r} has shape "
                f"{np.shape(values)}, expected {measured.shape} like measured."
            )
    if ax is None:
        fig, grid = _new_figure(n, 1, figsize=(7.5, 1.5 + 1.6 * n))
        axes = list(grid[:, 0])
        for a in axes[:-1]:
            a.sharex(axes[-1])
    else:
        axes = list(ax)
        if len(axes) != n:
            raise ValueError(
                f"comparison(ax=...): expected {n} axes (one per state), got "
                f"{len(axes)}."
            )
        fig = axes[0].figure
    names = list(state_names) if state_names else [f"x{i}" for i in range(n)]
    colors = ["tab:orange", "tab:blue", "tab:green", "tab:red", "tab:purple"]
    for i, a in enumerate(axes):
        a.plot(ts, measured[:, i], ".", color="0.6", ms=3, label="measured")
        for k, (label, values) in enumerate(predictions.items()):
            values = np.asarray(values)
            if k == 0:
                a.plot(ts, values[:, i], color="black", lw=1.4, label=label)
            else:
                color = colors[(k - 1) % len(colors)]
                a.plot(ts, values[:, i], "--", color=color, lw=1.4, label=label)
        a.set_ylabel(names[i])
        a.grid(True, alpha=0.3)
    axes[-1].set_xlabel(time_label)
    if title:
        fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    if ax is None:  # below the panels, where it hides no data
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels))
    else:
        axes[0].legend(loc="best", fontsize="small")
    return fig


def _as_matrix(system) -> np.ndarray:
    K = getattr(system, "K", system)
    return np.asarray(K)


def eigenvalues(
    systems: Mapping[str, object],
    *,
    bound: float = 1.0,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Eigenvalues of transition matrices against the unit circle.

    Without `ax`, two panels: the whole unit disc, and a close-up of the eigenvalues
    (which are often bunched near 1 for finely sampled systems).

    **Arguments:**

    - `systems`: label → a system with a transition matrix `K`, or a matrix `(n, n)`.
    - `bound`: the radius of the circle drawn (1: the stability boundary).
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw the whole-disc panel into.

    **Returns:**

    The matplotlib `Figure`.
    """
    if ax is None:
        fig, grid = _new_figure(1, 2, figsize=(10, 4.8))
        panels = list(grid[0])
    else:
        fig, panels = ax.figure, [ax]
    markers = ["o", "x", "+", "s", "^", "d"]
    colors = ["black", "tab:orange", "tab:blue", "tab:green", "tab:red", "tab:purple"]
    theta = np.linspace(0.0, 2.0 * np.pi, 721)
    values = {label: np.linalg.eigvals(_as_matrix(s)) for label, s in systems.items()}
    for index, a in enumerate(panels):
        a.plot(
            bound * np.cos(theta),
            bound * np.sin(theta),
            color="0.5",
            lw=1.0,
            label=f"|z| = {bound:g}",
        )
        for k, (label, eig) in enumerate(values.items()):
            filled = markers[k % len(markers)] in "os^d"
            a.plot(
                eig.real,
                eig.imag,
                markers[k % len(markers)],
                ms=9 if k == 0 else 7,
                mfc="none" if filled else None,
                mew=1.5,
                color=colors[k % len(colors)],
                linestyle="none",
                label=label,
            )
        a.axhline(0.0, color="0.85", lw=0.8, zorder=0)
        a.axvline(0.0, color="0.85", lw=0.8, zorder=0)
        a.set_xlabel("Re λ")
        a.set_ylabel("Im λ")
        a.grid(True, alpha=0.3)
        if index == 0:
            a.set_aspect("equal", adjustable="datalim")
            a.set_title("unit disc", fontsize="medium")
            a.legend(loc="lower left", fontsize="small")
        else:
            every = np.concatenate(list(values.values()))
            re, im = every.real, every.imag
            # A square window around every eigenvalue, so the circle stays round.
            half = 0.6 * max(np.ptp(re), np.ptp(im), 0.02)
            centre = (0.5 * (re.min() + re.max()), 0.5 * (im.min() + im.max()))
            a.set_xlim(centre[0] - half, centre[0] + half)
            a.set_ylim(centre[1] - half, centre[1] + half)
            a.set_aspect("equal", adjustable="box")
            a.set_title("close-up", fontsize="medium")
    if title:
        fig.suptitle(title)
    return fig


def loss_history(
    losses,
    val_losses: Sequence[tuple[int, float]] | None = None,
    *,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Training (and validation) loss against the step, on a log scale.

    **Arguments:**

    - `losses`: the training loss of each step, shape `(steps,)`, or a `FitResult` /
        `TrainResult` (then `val_losses` is taken from it).
    - `val_losses`: `(step, loss)` pairs.
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.
    """
    if hasattr(losses, "losses"):
        if val_losses is None:
            val_losses = getattr(losses, "val_losses", None)
        losses = losses.losses
    losses = np.asarray(losses, dtype=float)
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(7, 4))
        ax = grid[0, 0]
    else:
        fig = ax.figure
    ax.plot(np.arange(losses.shape[0]), losses, color="tab:blue", label="training")
    if val_losses:
        steps, values = zip(*val_losses)
        ax.plot(steps, values, "o-", ms=3, color="tab:orange", label="validation")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean squared error)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right")
    if title:
        ax.set_title(title)
    return fig
