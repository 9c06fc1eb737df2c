"""`plot.phase_portrait`: two states against each other, over the vector field."""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._rollout.rollout import Trajectory
from . import _layout


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


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
    xs = np.asarray(traj.xs).reshape((-1,) + traj.xs.shape[-2:])
    n = xs.shape[-1]
    i, j = dims
    _check_arguments(n, dims, u, controller)
    names = _layout.names(state_names, "x", n, "phase_portrait", "state_names")
    created = ax is None
    if created:
        fig, axes = _layout.new_figure(1, 1, figsize=(6.4, 5.6))
        ax = axes[0, 0]
    else:
        fig = ax.figure
    lim_i, lim_j = _limits(xs[..., i]), _limits(xs[..., j])
    if system is not None:
        mesh = _field_on_grid(system, controller, u, t, dims, lim_i, lim_j, grid)
        _draw_arrows(fig, ax, mesh, grid, *_field_label(system, controller, u))
    _draw_trajectories(ax, xs, i, j)
    _layout.figure_legend(fig, [ax], created=created, ncol=1)
    ax.set_xlim(*lim_i)
    ax.set_ylim(*lim_j)
    ax.set_xlabel(names[i])
    ax.set_ylabel(names[j])
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    return fig


def _check_arguments(n: int, dims, u, controller) -> None:
    """Raise for `dims` not two different indices into `n` states, or for both `u`
    and `controller`."""
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


def _limits(values: np.ndarray) -> tuple:
    """The axis limits for `values`: their range, padded by 8 % on each side."""
    pad = 0.08 * max(np.ptp(values), 1e-3)
    return (values.min() - pad, values.max() + pad)


def _field_on_grid(system, controller, u, t, dims, lim_i, lim_j, grid: int) -> tuple:
    """The field on a `grid` x `grid` mesh over the limits: the mesh `a, b` and the
    field's components `du, dv` along `dims`, each `(grid, grid)`."""
    import jax
    import jax.numpy as jnp

    if system.state_size != 2:
        raise ValueError(
            "phase_portrait(system=...): the vector field needs a system with "
            f"two states, got state_size = {system.state_size}."
        )
    i, j = dims
    a, b = np.meshgrid(np.linspace(*lim_i, grid), np.linspace(*lim_j, grid))
    points = np.zeros((grid * grid, 2))
    points[:, i], points[:, j] = a.ravel(), b.ravel()
    field = _field(system, controller, u, t)
    velocity = np.asarray(jax.vmap(field)(jnp.asarray(points)))
    du, dv = velocity[:, i].reshape(a.shape), velocity[:, j].reshape(a.shape)
    return a, b, du, dv


def _field_label(system, controller, u) -> tuple[str, str]:
    """What the arrows show (`ẋ` or the step), and under which input."""
    label = "$\\dot x$" if hasattr(system, "vector_field") else "$x_{t+1} - x_t$"
    if controller is not None:
        where = ", closed loop"
    elif system.input_size:
        where = ", u = 0" if u is None else ", constant u"
    else:
        where = ""
    return label, where


def _draw_arrows(fig, ax, mesh: tuple, grid: int, label: str, where: str) -> None:
    """The field's arrows on `mesh = (a, b, du, dv)`, with a legend entry and a
    colorbar for their shade."""
    a, b, du, dv = mesh
    # Arrows of one length show the direction; their shade shows the speed.
    speed = np.hypot(du, dv)
    unit = np.where(speed > 0, speed, 1.0)
    arrows = ax.quiver(
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
    ax.plot(
        [],
        [],
        marker="$\\rightarrow$",
        ms=12,
        ls="none",
        color="0.4",
        label=f"direction of {label}{where} (arrows of one length)",
    )
    bar = fig.colorbar(arrows, ax=ax, shrink=0.8, pad=0.02)
    bar.set_label(f"log10 speed |{label}| (arrow shade)")


def _draw_trajectories(ax, xs: np.ndarray, i: int, j: int) -> None:
    """Each trajectory of `xs (B, T+1, n)` as a line in the plane of states `i, j`,
    with a dot at its start."""
    colors = [f"C{k % 10}" for k in range(xs.shape[0])]
    for k in range(xs.shape[0]):
        ax.plot(xs[k, :, i], xs[k, :, j], color=colors[k], lw=1.3)
        ax.plot(xs[k, 0, i], xs[k, 0, j], "o", color=colors[k], ms=4)
    ax.plot([], [], "o-", color="0.3", ms=4, lw=1.3,
            label=f"trajectory, dot at its start ({xs.shape[0]})")  # fmt: skip


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
