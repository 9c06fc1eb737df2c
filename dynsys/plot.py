"""Matplotlib figures of trajectories. Nothing here calls `plt.show()`.

matplotlib is imported lazily, on the first call.
"""

from typing import TYPE_CHECKING

import numpy as np

from ._rollout import Trajectory


if TYPE_CHECKING:
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
