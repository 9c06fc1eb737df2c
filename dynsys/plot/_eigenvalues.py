"""`plot.eigenvalues`: eigenvalues against the unit circle, and their modes."""

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from . import _bands, _layout
from ._style import model_styles, style


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _matrix(system, call: str, label: str) -> np.ndarray:
    from .._sysid.signals import linear_of

    linear = None if hasattr(system, "shape") else linear_of(system)
    value = np.asarray(system if linear is None else linear.K)
    if value.ndim == 2 and value.shape[0] == value.shape[1]:
        return value
    raise ValueError(
        f"{call}(systems=...): {label!r} must be a linear system, a square matrix "
        f"or a Modes, got {type(system).__name__} of shape {np.shape(value)}."
    )


def _modes(system, dt, call: str, label: str):
    """`dynsys.modes` of a system, matrix (with `dt`) or a given `Modes`."""
    from .._sysid.response import modes
    from .._systems.system import LinearSystem

    if hasattr(system, "damping_ratio"):
        return system
    return modes(LinearSystem(_matrix(system, call, label), dt=dt))


def _marker(kw: dict, big: bool = False) -> dict:
    return {
        "marker": kw["marker"] if kw["marker"] != "none" else "o",
        "ms": 9 if big else 7,
        "mfc": "none",
        "mew": 1.5,
        "color": kw["color"],
        "ls": "none",
        "zorder": kw["zorder"] + 1,
    }


def _markers(labels, truth, roles, call: str) -> dict:
    """label → marker style: the model styles (by `roles`), and the big hollow
    circle for `"true system"` when `truth` is given."""
    models = [k for k in labels if k != "true system" or truth is None]
    markers = {
        label: _marker(kw) for label, kw in model_styles(models, roles, call).items()
    }
    if truth is not None:
        markers["true system"] = _marker(style("truth"), big=True)
    return markers


def _panels(ax, dt):
    """`(fig, panels)`: the unit disc, the close-up and (with `dt`) the modes on a
    new figure; or only the given `ax`."""
    if ax is None:
        count = 3 if dt else 2
        fig, grid = _layout.new_figure(1, count, figsize=(4.6 * count, 4.9))
        return fig, list(grid[0])
    return ax.figure, [ax]


def _draw_z_plane(a, values: dict, markers: dict, bound: float, close_up: bool):
    """The eigenvalues against the circle of radius `bound`: the whole disc, or a
    close-up around the eigenvalues."""
    theta = np.linspace(0.0, 2.0 * np.pi, 721)
    a.plot(bound * np.cos(theta), bound * np.sin(theta), color="0.5", lw=1.0,
           label=f"|z| = {bound:g} (stability boundary)")  # fmt: skip
    for label, eig in values.items():
        a.plot(eig.real, eig.imag, label=label, **markers[label])
    a.axhline(0.0, color="0.85", lw=0.8, zorder=0)
    a.axvline(0.0, color="0.85", lw=0.8, zorder=0)
    a.set_xlabel("Re z")
    a.set_ylabel("Im z")
    a.grid(True, alpha=0.3)
    if not close_up:
        a.set_aspect("equal", adjustable="datalim")
        a.set_title("unit disc", fontsize="medium")
        return
    both = np.concatenate(list(values.values()))
    re, im = both.real, both.imag
    # A square window around every eigenvalue, so the circle stays round.
    half = 0.6 * max(np.ptp(re), np.ptp(im), 0.02)
    centre = (0.5 * (re.min() + re.max()), 0.5 * (im.min() + im.max()))
    a.set_xlim(centre[0] - half, centre[0] + half)
    a.set_ylim(centre[1] - half, centre[1] + half)
    a.set_aspect("equal", adjustable="box")
    a.set_title("close-up", fontsize="medium")


def _draw_modes(a, found: dict, markers: dict, dt: float, hz: bool):
    """Each mode's damping ratio against its natural frequency."""
    scale, unit = (1 / (2 * np.pi), "Hz") if hz else (1.0, "rad/s")
    for label, m in found.items():
        # One of each conjugate pair; no pole for an eigenvalue at 0.
        eig = np.asarray(m.eigenvalues)
        wn, zeta = np.asarray(m.natural_frequency), np.asarray(m.damping_ratio)
        keep = (eig.imag >= 0) & np.isfinite(wn)
        a.plot(scale * wn[keep], zeta[keep], label=label, **markers[label])
    a.axhline(0.0, color="0.5", lw=1.0)
    a.set_xlabel(f"natural frequency ({unit})")
    a.set_ylabel("damping ratio ζ")
    a.set_title(f"modes (dt = {dt:g} s; ζ < 0: unstable)", fontsize="medium")
    a.grid(True, alpha=0.3)


def eigenvalues(
    systems: Mapping[str, object] | None = None,
    *,
    truth=None,
    roles: Mapping[str, str] | None = None,
    dt: float | None = None,
    hz: bool = False,
    bound: float = 1.0,
    title: str | None = None,
    ax: "Axes | None" = None,
    confidence: Mapping | None = None,
    level: float = 0.99,
) -> "Figure":
    """Eigenvalues of transition matrices against the unit circle, and their modes.

    Panels: the whole unit disc; a close-up of the eigenvalues (finely sampled
    systems crowd them near 1); and, when the sample time `dt` is known, each
    mode's damping ratio against its natural frequency ($z = e^{s\\,dt}$). The
    hollow black circle is used only for `truth`, a known true model.

    **Arguments:**

    - `systems`: label → a linear system (with `K`, or `to_linear()`), a matrix
        `(n, n)`, or a `Modes` from `dynsys.modes`.
    - `truth`: optional known true system (simulated data only), same kinds.
    - `roles`: optional label → `"fit"` / `"estimate"` (see `plot.STYLES`);
        default: the model styles in order.
    - `dt`: the sample time (s); default the `dt` of the first system having one.
    - `hz`: natural frequencies in Hz instead of rad/s.
    - `bound`: the radius of the circle drawn (1: the stability boundary).
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw only the unit-disc panel into.
    - `confidence`: optional label → `ParameterCovariance` (`FitResult.covariance`):
        each of that model's eigenvalues gets its confidence ellipse, and its
        modes error bars of natural frequency and damping, at `level`.
    - `level`: their confidence level (default 0.99), stated in the legend.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for something that has no eigenvalues, or a bad `roles`.

    **Example:**

    ```python
    import dynsys.models as zoo
    chain = zoo.mass_spring_damper(num_masses=2, dt=0.1)
    fig = dynsys.plot.eigenvalues({"fitted": 0.99 * chain.K}, truth=chain, dt=0.1)
    ```
    """
    call = "eigenvalues"
    systems = dict(systems or {})
    every = [truth] if truth is not None else []
    every += list(systems.values())
    if not every:
        raise ValueError("eigenvalues(systems=...): nothing to draw.")
    if dt is None:
        dt = next((float(s.dt) for s in every if getattr(s, "dt", None)), None)
    if truth is not None:
        systems = {"true system": truth} | systems
    found = {label: _modes(s, dt, call, label) for label, s in systems.items()}
    values = {label: np.asarray(m.eigenvalues) for label, m in found.items()}
    markers = _markers(systems, truth, roles, call)
    created = ax is None
    fig, panels = _panels(ax, dt)
    regions = _bands.pole_regions(confidence, level, call)
    for index, a in enumerate(panels[:2]):
        _draw_z_plane(a, values, markers, bound, close_up=index == 1)
        for label, poles in regions.items():
            color = markers.get(label, {}).get("color", "C0")
            text = _bands.level_label(label, level)
            _bands.draw_pole_ellipses(a, poles, level, color, text)
    if created and dt:
        _draw_modes(panels[2], found, markers, dt, hz)
        for label, poles in regions.items():
            color = markers.get(label, {}).get("color", "C0")
            z = _bands.quantile(level, call)
            _bands.draw_mode_bars(panels[2], poles, z, color, 0.5 / np.pi if hz else 1)
    _layout.figure_legend(fig, panels, created=created)
    _layout.suptitle(fig, title)
    return fig
