"""Matplotlib figures: trajectories, fits, phase portraits, eigenvalues, loss curves.

Every function returns the matplotlib `Figure` it drew on and takes an optional `ax`
to draw into an existing figure instead. Figures are made without `pyplot` (so they
work headless, whatever the backend, and are not kept alive by pyplot's registry);
nothing here calls `plt.show()`. Save one with `fig.savefig("name.png")`.

matplotlib is imported lazily, on the first call.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ._rollout import Trajectory


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _new_figure(nrows: int = 1, ncols: int = 1, *, figsize):
    """A figure with a grid of axes, made without pyplot (so it works headless)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _default_time_label(ts: np.ndarray) -> str:
    steps = np.diff(ts)
    if steps.size and np.allclose(steps, 1.0):
        return "t (steps)"
    return "t (s)"


def _names(given, symbol: str, count: int, argument: str) -> list[str]:
    if given is None:
        return [f"{symbol}{i}" for i in range(count)]
    given = [str(name) for name in given]
    if len(given) != count:
        raise ValueError(
            f"trajectory({argument}=...): expected {count} names, got {len(given)}."
        )
    return given


def trajectory(
    traj: Trajectory,
    *,
    outputs: bool = False,
    state_names: Sequence[str] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    reference=None,
    quantiles: tuple[float, float] = (0.1, 0.9),
    time_label: str | None = None,
    title: str | None = None,
    ax: "Sequence[Axes] | None" = None,
) -> "Figure":
    """States, inputs (if any) and optionally outputs against time, one panel each.

    A batch of trajectories is drawn as its median (a line) and a quantile band
    (default 10–90 %); a single trajectory as a line.

    **Arguments:**

    - `traj`: a `Trajectory`, `xs` of shape `(T+1, n)` or `(..., T+1, n)`.
    - `outputs`: also draw the outputs `ys` (in their own panel).
    - `state_names`, `input_names`, `output_names`: one label per column, with its
        unit, e.g. `["θ (rad)", "ω (rad/s)"]` (default `x0, x1, ...`).
    - `reference`: optional target state `(n,)`, drawn as dashed lines.
    - `quantiles`: the lower and upper quantile of the band.
    - `time_label`: the x-axis label; default `"t (steps)"` when the times are the
        step indices, else `"t (s)"`.
    - `title`: the figure title.
    - `ax`: optional sequence of matplotlib `Axes`, one per panel (states, then
        inputs if the trajectory has any, then outputs if asked for).

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for a wrong number of names or axes, a `reference` of the wrong
    shape, or quantiles outside `[0, 1]`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    traj = dynsys.rollout(system, jax.random.normal(jax.random.key(0), (16, 2)), 30)
    fig = dynsys.plot.trajectory(traj, title="16 trajectories")
    fig.savefig("trajectory.png")
    ```
    """
    low_q, high_q = quantiles
    if not 0.0 <= low_q < high_q <= 1.0:
        raise ValueError(
            f"trajectory(quantiles=...): expected 0 <= low < high <= 1, got "
            f"{quantiles}."
        )
    ts = np.asarray(traj.ts)
    xs = np.asarray(traj.xs).reshape((-1,) + traj.xs.shape[-2:])
    n = xs.shape[-1]
    panels = [("state", xs, ts, _names(state_names, "x", n, "state_names"))]
    if traj.us is not None:
        us = np.asarray(traj.us).reshape((-1,) + traj.us.shape[-2:])
        names = _names(input_names, "u", us.shape[-1], "input_names")
        panels.append(("input", us, ts[:-1], names))
    if outputs:
        ys = np.asarray(traj.ys).reshape((-1,) + traj.ys.shape[-2:])
        names = _names(output_names, "y", ys.shape[-1], "output_names")
        panels.append(("output", ys, ts[:-1], names))
    if reference is not None:
        reference = np.asarray(reference, dtype=float)
        if reference.shape != (n,):
            raise ValueError(
                f"trajectory(reference=...): expected shape (n,) = ({n},), got "
                f"{reference.shape}."
            )
    if ax is None:
        fig, grid = _new_figure(len(panels), 1, figsize=(7.5, 0.8 + 2.3 * len(panels)))
        axes = list(grid[:, 0])
        for a in axes[:-1]:
            a.sharex(axes[-1])
    else:
        axes = list(ax)
        if len(axes) != len(panels):
            kinds = ", ".join(kind + "s" for kind, *_ in panels)
            raise ValueError(
                f"trajectory(ax=...): expected {len(panels)} axes (one per panel: "
                f"{kinds}), got {len(axes)}."
            )
        fig = axes[0].figure
    batch = xs.shape[0]
    for a, (kind, values, times, names) in zip(axes, panels):
        for i in range(values.shape[-1]):
            median = np.median(values[..., i], axis=0)
            (line,) = a.plot(times, median, lw=1.5, label=names[i])
            if batch > 1:
                low, high = np.quantile(values[..., i], [low_q, high_q], axis=0)
                a.fill_between(times, low, high, color=line.get_color(), alpha=0.2)
            if kind == "state" and reference is not None:
                a.axhline(reference[i], color=line.get_color(), ls="--", lw=0.9)
        what = kind if batch == 1 else f"{kind} (median, {low_q:.0%}–{high_q:.0%})"
        a.set_ylabel(what)
        a.grid(True, alpha=0.3)
        a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1].set_xlabel(time_label or _default_time_label(ts))
    if title:
        fig.suptitle(title)
    return fig


def phase_portrait(
    traj: Trajectory,
    *,
    system=None,
    controller=None,
    u=None,
    dims: tuple[int, int] = (0, 1),
    t: float = 0.0,
    grid: int = 21,
    state_names: Sequence[str] | None = None,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Two states against each other, with the vector field where it is defined.

    Each trajectory of the batch is a line from a dot (its start). With a `system`
    of two states that is autonomous here — no input, or a constant input `u`, or a
    time-independent `controller` closing the loop — the field is drawn under the
    trajectories as arrows on a `grid` x `grid` mesh: the velocity
    $\\dot x = f(t, x, u)$ for an `AbstractODE` (anything with `vector_field`), else
    the step $x_{t+1} - x_t$ of the difference system, both evaluated at time `t`.

    **Arguments:**

    - `traj`: a `Trajectory` (one or a batch), `xs (..., T+1, n)` with `n >= 2`.
    - `system`: optional; an `AbstractSystem` or `AbstractODE` with two states.
    - `controller`: optional; closes the loop, $u = \\mathrm{controller}(t, x)$.
    - `u`: optional constant input `(m,)` (default: zero for a system with inputs).
    - `dims`: the two state indices to draw.
    - `t`: the time at which the field is evaluated.
    - `grid`: arrows per side.
    - `state_names`: one label (with its unit) per state.
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for bad `dims`, a `system` without two states, or both `u` and
    `controller`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.95, 0.2], [-0.2, 0.95]]))
    traj = dynsys.rollout(system, jnp.array([[1.0, 0.0], [0.0, -1.5]]), 60)
    fig = dynsys.plot.phase_portrait(traj, system=system)
    ```
    """
    import jax
    import jax.numpy as jnp

    xs = np.asarray(traj.xs).reshape((-1,) + traj.xs.shape[-2:])
    n = xs.shape[-1]
    i, j = dims
    if n < 2 or not (0 <= i < n and 0 <= j < n and i != j):
        raise ValueError(
            f"phase_portrait(dims=...): expected two different state indices in "
            f"[0, {n - 1}], got {dims}."
        )
    if u is not None and controller is not None:
        raise ValueError(
            "phase_portrait(u=..., controller=...): give a constant input or a "
            "controller, not both."
        )
    names = list(state_names) if state_names else [f"x{k}" for k in range(n)]
    if len(names) != n:
        raise ValueError(
            f"phase_portrait(state_names=...): expected {n} names, got {len(names)}."
        )
    if ax is None:
        fig, axes = _new_figure(1, 1, figsize=(6, 5.4))
        ax = axes[0, 0]
    else:
        fig = ax.figure
    pad_i = 0.08 * max(np.ptp(xs[..., i]), 1e-3)
    pad_j = 0.08 * max(np.ptp(xs[..., j]), 1e-3)
    lim_i = (xs[..., i].min() - pad_i, xs[..., i].max() + pad_i)
    lim_j = (xs[..., j].min() - pad_j, xs[..., j].max() + pad_j)
    if system is not None:
        if system.state_size != 2:
            raise ValueError(
                "phase_portrait(system=...): the vector field needs a system with "
                f"two states, got state_size = {system.state_size}."
            )
        a, b = np.meshgrid(np.linspace(*lim_i, grid), np.linspace(*lim_j, grid))
        points = np.zeros((grid * grid, 2))
        points[:, i], points[:, j] = a.ravel(), b.ravel()
        field = _field(system, controller, u, t)
        velocity = np.asarray(jax.vmap(field)(jnp.asarray(points)))
        du, dv = velocity[:, i].reshape(a.shape), velocity[:, j].reshape(a.shape)
        # Arrows of one length show the direction; their shade shows the speed.
        speed = np.hypot(du, dv)
        unit = np.where(speed > 0, speed, 1.0)
        ax.quiver(
            a,
            b,
            du / unit,
            dv / unit,
            np.log10(speed + 1e-300),
            cmap="Greys",
            clim=(np.log10(speed.max() + 1e-300) - 2.5, np.log10(speed.max() + 1e-300)),
            angles="xy",
            pivot="mid",
            scale=1.6 * grid,
            width=0.004,
            alpha=0.7,
            zorder=0,
        )
        label = "$\\dot x$" if hasattr(system, "vector_field") else "$x_{t+1} - x_t$"
        if controller is not None:
            where = ", closed loop"
        elif system.input_size:
            where = ", u = 0" if u is None else ", constant u"
        else:
            where = ""
        ax.plot(
            [],
            [],
            marker="$\\rightarrow$",
            ms=12,
            ls="none",
            color="0.4",
            label=f"direction of {label}{where}",
        )
    colors = [f"C{k % 10}" for k in range(xs.shape[0])]
    for k in range(xs.shape[0]):
        ax.plot(xs[k, :, i], xs[k, :, j], color=colors[k], lw=1.3)
        ax.plot(xs[k, 0, i], xs[k, 0, j], "o", color=colors[k], ms=4)
    ax.plot([], [], "o-", color="0.3", ms=4, lw=1.3, label="trajectory (• start)")
    ax.legend(loc="upper right", fontsize="small", framealpha=0.9)
    ax.set_xlim(*lim_i)
    ax.set_ylim(*lim_j)
    ax.set_xlabel(names[i])
    ax.set_ylabel(names[j])
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    return fig


def _field(system, controller, u, t) -> Callable:
    """The autonomous field $x \\mapsto f(x)$ drawn by `phase_portrait`."""
    import jax.numpy as jnp

    m = system.input_size
    if controller is None and m:
        u = jnp.zeros(m) if u is None else jnp.asarray(u, dtype=float)
        if u.shape != (m,):
            raise ValueError(
                f"phase_portrait(u=...): expected shape (m,) = ({m},), got "
                f"{tuple(u.shape)}."
            )

    def field(x):
        x = x.astype(jnp.result_type(float))
        inp = controller(t, x) if controller is not None else (u if m else None)
        if hasattr(system, "vector_field"):
            return system.vector_field(t, x, inp)
        return system.step(t, x, inp) - x

    return field


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
    ylabel: str = "loss (mean squared error)",
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Training (and validation) loss against the step, on a log scale.

    **Arguments:**

    - `losses`: the training loss of each step, shape `(steps,)`, or a `FitResult` /
        `TrainResult` (then `val_losses` is taken from it; for a `TrainResult`
        trained on minibatches without validation, its loss on all the training
        data is drawn instead).
    - `val_losses`: `(step, loss)` pairs.
    - `ylabel`: the y-axis label (what the loss is, and its unit).
    - `title`: the axes title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Example:**

    ```python
    fig = dynsys.plot.loss_history(jnp.exp(-jnp.arange(100) / 20.0),
                                   [(0, 1.1), (50, 0.1), (99, 0.01)])
    ```
    """
    other_label = "validation"
    if hasattr(losses, "losses"):
        if val_losses is None:
            val_losses = getattr(losses, "val_losses", None)
            if not val_losses and getattr(losses, "full_losses", None):
                val_losses, other_label = losses.full_losses, "all training data"
        losses = losses.losses
    losses = np.asarray(losses, dtype=float)
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(7, 4))
        ax = grid[0, 0]
    else:
        fig = ax.figure
    label = "training" if other_label == "validation" else "training (minibatch)"
    ax.plot(np.arange(losses.shape[0]), losses, color="tab:blue", lw=1.2, label=label)
    if val_losses:
        steps, values = zip(*val_losses)
        ax.plot(steps, values, "o-", ms=3, color="tab:orange", label=other_label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right")
    if title:
        ax.set_title(title)
    return fig


def sweep(
    key: str,
    values: Sequence,
    metrics: Mapping[str, Sequence[float]],
    *,
    ylabel: str = "metric",
    log_x: bool | None = None,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Metrics against the swept value of one config key (the summary of a sweep).

    **Arguments:**

    - `key`: the swept config key, e.g. `"data.measurement_noise"` (the x label).
    - `values`: the swept values, numbers or strings (then evenly spaced).
    - `metrics`: label → one value per swept value.
    - `ylabel`: the y-axis label.
    - `log_x`: logarithmic x axis; default when the values are positive numbers
        spanning more than a factor of 20.
    - `title`: the axes title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` if a metric does not have one value per swept value.

    **Example:**

    ```python
    fig = dynsys.plot.sweep("data.measurement_noise", [0.01, 0.1, 0.3],
                            {"fit %": [99.0, 95.0, 80.0]}, ylabel="fit (%)")
    ```
    """
    values = list(values)
    for label, ys in metrics.items():
        if len(ys) != len(values):
            raise ValueError(
                f"sweep(metrics=...): {label!r} has {len(ys)} values, expected "
                f"{len(values)} (one per swept value)."
            )
    numeric = all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    )
    xs = np.asarray(values, dtype=float) if numeric else np.arange(len(values))
    if log_x is None:
        log_x = bool(numeric and np.all(xs > 0) and xs.max() > 20 * xs.min())
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(6.5, 4))
        ax = grid[0, 0]
    else:
        fig = ax.figure
    for label, ys in metrics.items():
        ax.plot(xs, np.asarray(ys, dtype=float), "o-", ms=5, label=label)
    if not numeric:
        ax.set_xticks(xs, [str(v) for v in values])
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(key)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    if title:
        ax.set_title(title)
    return fig
