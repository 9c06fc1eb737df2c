"""`plot.loss_history`: the loss against the step, with the returned step marked."""

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _layout
from ._style import style


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


DIVERGED = 1e6  # a loss this many times the first is off the drawn scale


def loss_history(
    losses,
    val_losses: Sequence[tuple[int, float]] | None = None,
    *,
    best_step: int | None = None,
    stop_reason: str | None = None,
    ylabel: str = "loss (mean squared error)",
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Training (and validation) loss against the step, on a log scale.

    The returned (best) step is marked; the reason a fit stopped early (e.g. it
    diverged) is written above the axes; losses more than a million times the
    first are left off the scale (and the figure says so), so a divergence does
    not squash the useful part of the curve.

    **Arguments:**

    - `losses`: the training loss of each step, shape `(steps,)`, or a `FitResult`
        / `TrainResult` (then `val_losses`, `best_step` and `stop_reason` come from
        it; for a `TrainResult` trained on minibatches without validation, its
        loss on all the training data is drawn as the second curve).
    - `val_losses`: `(step, loss)` pairs.
    - `best_step`: the step of the returned model, marked on the curve.
    - `stop_reason`: why the fit stopped (e.g. a divergence warning), shown.
    - `ylabel`: the y label (what the loss is, and its unit).
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure` (with a note above the axes, and no curve, for an empty
    history: a run stopped before its first step).

    **Raises:**

    `ValueError` if `best_step` is outside the history.

    **Example:**

    ```python
    fig = dynsys.plot.loss_history(jnp.exp(-jnp.arange(100) / 20.0),
                                   [(0, 1.1), (50, 0.1), (99, 0.01)], best_step=99)
    ```
    """
    other_label = "validation"
    if hasattr(losses, "losses"):
        losses, val_losses, other_label, best_step, stop_reason = _from_result(
            losses, val_losses, best_step, stop_reason
        )
    losses = np.asarray(losses, dtype=float)
    created = ax is None
    if created:
        fig, grid = _layout.new_figure(1, 1, figsize=(7, 4.6))
        ax = grid[0, 0]
    else:
        fig = ax.figure
    val_steps, val_values = _draw_curves(ax, losses, val_losses, other_label)
    ax.set_yscale("log")
    notes = _clip_divergence(ax, losses, val_values)
    if not losses.size:  # e.g. interrupted while the first step compiled
        notes.append("no training step ran: the history is empty")
    if best_step is not None and (losses.shape[0] or best_step in val_steps):
        # (A run stopped before its first step has no loss to mark.)
        _mark_best(ax, best_step, losses, val_steps, val_values)
    _write_notes(ax, stop_reason, notes)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    _layout.figure_legend(fig, [ax], created=created, ncol=3)
    _layout.suptitle(fig, title)
    return fig


def _from_result(result, val_losses, best_step, stop_reason) -> tuple:
    """The losses, second curve and its label, best step and stop reason of a
    `FitResult` / `TrainResult`; the ones given take precedence."""
    other_label = "validation"
    if val_losses is None:
        val_losses = getattr(result, "val_losses", None)
        if not val_losses and getattr(result, "full_losses", None):
            val_losses, other_label = result.full_losses, "all training data"
    best_step = best_step if best_step is not None else result.best_step
    if stop_reason is None:
        stop_reason = getattr(result, "stop_reason", None)
    return result.losses, val_losses, other_label, best_step, stop_reason


def _draw_curves(ax, losses: np.ndarray, val_losses, other_label: str) -> tuple:
    """The training loss `(steps,)` and the second curve (validation, or all the
    training data); returns the second curve's steps and values, each `(k,)`."""
    steps = np.arange(losses.shape[0])
    label = "training" if other_label == "validation" else "training (minibatch)"
    fit = style("fit")
    ax.plot(steps, losses, color=fit["color"], lw=1.2, label=label)
    val_steps = val_values = np.zeros(0)
    if val_losses:
        val_steps, val_values = (np.asarray(v, dtype=float) for v in zip(*val_losses))
        est = style("estimate")
        ax.plot(val_steps, val_values, color=est["color"], ls=est["linestyle"],
                marker=est["marker"], ms=4, mfc="none", label=other_label)  # fmt: skip
    return val_steps, val_values


def _clip_divergence(ax, losses: np.ndarray, val_values: np.ndarray) -> list[str]:
    """Cap the y axis at `DIVERGED` times the first loss if a loss is above it;
    returns the note saying so (or none)."""
    finite = np.concatenate([losses, val_values])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    notes = []
    if finite.size and losses.size and np.isfinite(losses[0]) and losses[0] > 0:
        top = DIVERGED * losses[0]
        if finite.max() > top:
            ax.set_ylim(0.5 * finite.min(), top)
            notes.append(f"losses up to {finite.max():.1e} are above the axis")
    return notes


def _mark_best(ax, best_step: int, losses, val_steps, val_values) -> None:
    """A vertical line and a star at the returned model's step and loss."""
    if not 0 <= best_step <= losses.shape[0]:
        raise ValueError(
            f"loss_history(best_step=...): expected a step in [0, "
            f"{losses.shape[0]}], got {best_step}."
        )
    on_val = best_step in set(val_steps.astype(int).tolist())
    value = (
        float(val_values[list(val_steps.astype(int)).index(best_step)])
        if on_val
        else float(losses[min(best_step, losses.shape[0] - 1)])
    )
    bound = style("target")
    ax.axvline(best_step, color=bound["color"], ls=bound["linestyle"], lw=1.0)
    ax.plot([best_step], [value], marker="*", ms=13, color="black", mfc="gold",
            ls="none", zorder=4,
            label=f"returned model (step {best_step})")  # fmt: skip


def _write_notes(ax, stop_reason, notes: list[str]) -> None:
    """Why the fit stopped, then `notes`, in red above the axes."""
    if stop_reason:
        notes.insert(0, f"stopped: {stop_reason}")
    if notes:
        text = "\n".join(textwrap.fill(n, 95) for n in notes)
        ax.set_title(text, loc="left", fontsize="small", color="tab:red")
