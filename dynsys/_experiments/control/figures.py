"""The figure of a set-point run: the trained controller's and the LQG baseline's
closed-loop responses (outputs against their set points, inputs against the
bound) from the operating point."""

import numpy as np


def responses_figure(task, trajectories: dict, names, bound, dt, title: str):
    """One row per output, then one per input; `trajectories` maps a controller's
    name to its nominal `Trajectory` (batch of one)."""
    from matplotlib.figure import Figure

    output_names, input_names = names
    p, m = len(output_names), len(input_names)
    T = task.references.shape[0]
    times = np.arange(T) * (dt if dt is not None else 1.0)
    fig = Figure(figsize=(7.0, 2.0 * (p + m) + 0.6), layout="constrained")
    axes = fig.subplots(p + m, 1, sharex=True, squeeze=False)[:, 0]
    for k, (label, trajectory) in enumerate(trajectories.items()):
        style = {"linestyle": ("-", "--", ":")[k % 3], "label": label}
        ys, us = np.asarray(trajectory.ys)[0], np.asarray(trajectory.us)[0]
        for i in range(p):
            axes[i].plot(times, ys[:, i], **style)
        for j in range(m):
            axes[p + j].step(times, us[:, j], where="post", **style)
    for i in range(p):
        axes[i].plot(times, task.output_targets[:, i], color="0.4", lw=0.8,
                     linestyle="-.", label="set point")  # fmt: skip
        axes[i].set_ylabel(output_names[i])
    for j in range(m):
        axes[p + j].set_ylabel(input_names[j])
        if bound is not None:
            for sign in (-1, 1):
                label = "input bound" if sign < 0 else None
                level = task.input_level[j] + sign * bound
                axes[p + j].axhline(level, color="0.5", lw=0.8, label=label)
    axes[0].legend(fontsize="small")
    axes[-1].set_xlabel("time (s)" if dt is not None else "step")
    fig.suptitle(title)
    return fig
