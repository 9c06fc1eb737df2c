"""`plot.eigenvalues`: eigenvalues against the unit circle, and their modes."""

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from . import _layout
from ._style import model_styles, style


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def eigenvalues_of(system, call: str = "eigenvalues", label: str = "") -> np.ndarray:
    """The eigenvalues of a system (its `K`), a matrix `(n, n)`, a `Modes`
    (its `eigenvalues`) or eigenvalues given directly `(n,)`."""
    value = getattr(system, "eigenvalues", None)
    if value is None or callable(value):
        value = getattr(system, "K", system)
    value = np.asarray(value)
    if value.ndim == 1:
        return value.astype(complex)
    if value.ndim == 2 and value.shape[0] == value.shape[1]:
        return np.linalg.eigvals(value)
    raise ValueError(
        f"{call}(systems=...): {label!r} must be a system with K, a square matrix "
        f"or eigenvalues (n,), got shape {value.shape}."
    )


def continuous_modes(eigs: np.ndarray, dt: float):
    """Natural frequency (rad/s) and damping ratio of each discrete eigenvalue
    $z = e^{s\\,dt}$: $s = \\log(z)/dt$, $\\omega_n = |s|$, $\\zeta = -\\mathrm{Re}\\,s
    / |s|$. Eigenvalues at 0 (no continuous-time counterpart) are left out, and of
    a conjugate pair only the one with $\\mathrm{Im} \\ge 0$ is kept."""
    eigs = eigs[(np.abs(eigs) > 0) & (eigs.imag >= 0)]
    s = np.log(eigs.astype(complex)) / dt
    wn = np.abs(s)
    zeta = np.where(wn > 0, -s.real / np.where(wn > 0, wn, 1.0), -1.0)
    return wn, zeta


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
) -> "Figure":
    """Eigenvalues of transition matrices against the unit circle, and their modes.

    Panels: the whole unit disc; a close-up of the eigenvalues (finely sampled
    systems crowd them near 1); and, when the sample time `dt` is known, each
    mode's damping ratio against its natural frequency ($z = e^{s\\,dt}$). The
    hollow black circle is used only for `truth`, a known true model.

    **Arguments:**

    - `systems`: label → a system with a transition matrix `K`, a matrix `(n, n)`,
        a `Modes` or the eigenvalues `(n,)`.
    - `truth`: optional known true system (simulated data only), same kinds.
    - `roles`: optional label → `"fit"` / `"estimate"` (see `plot.STYLES`);
        default: the model styles in order.
    - `dt`: the sample time (s); default the `dt` of the first system having one.
    - `hz`: natural frequencies in Hz instead of rad/s.
    - `bound`: the radius of the circle drawn (1: the stability boundary).
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw only the unit-disc panel into.

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
    values = {label: eigenvalues_of(s, call, label) for label, s in systems.items()}
    markers = {
        label: _marker(kw)
        for label, kw in model_styles(list(systems), roles, call).items()
    }
    if truth is not None:
        values = {"true system": eigenvalues_of(truth, call, "truth")} | values
        markers = {"true system": _marker(style("truth"), big=True)} | markers
    created = ax is None
    if created:
        count = 3 if dt else 2
        fig, grid = _layout.new_figure(1, count, figsize=(4.6 * count, 4.9))
        panels = list(grid[0])
    else:
        fig, panels = ax.figure, [ax]
    theta = np.linspace(0.0, 2.0 * np.pi, 721)
    for index, a in enumerate(panels[:2]):
        a.plot(bound * np.cos(theta), bound * np.sin(theta), color="0.5", lw=1.0,
               label=f"|z| = {bound:g} (stability boundary)")  # fmt: skip
        for label, eig in values.items():
            a.plot(eig.real, eig.imag, label=label, **markers[label])
        a.axhline(0.0, color="0.85", lw=0.8, zorder=0)
        a.axvline(0.0, color="0.85", lw=0.8, zorder=0)
        a.set_xlabel("Re z")
        a.set_ylabel("Im z")
        a.grid(True, alpha=0.3)
        if index == 0:
            a.set_aspect("equal", adjustable="datalim")
            a.set_title("unit disc", fontsize="medium")
        else:
            both = np.concatenate(list(values.values()))
            re, im = both.real, both.imag
            # A square window around every eigenvalue, so the circle stays round.
            half = 0.6 * max(np.ptp(re), np.ptp(im), 0.02)
            centre = (0.5 * (re.min() + re.max()), 0.5 * (im.min() + im.max()))
            a.set_xlim(centre[0] - half, centre[0] + half)
            a.set_ylim(centre[1] - half, centre[1] + half)
            a.set_aspect("equal", adjustable="box")
            a.set_title("close-up", fontsize="medium")
    if created and dt:
        a = panels[2]
        scale, unit = (1 / (2 * np.pi), "Hz") if hz else (1.0, "rad/s")
        for label, eig in values.items():
            wn, zeta = continuous_modes(eig, dt)
            a.plot(scale * wn, zeta, label=label, **markers[label])
        a.axhline(0.0, color="0.5", lw=1.0)
        a.set_xlabel(f"natural frequency ({unit})")
        a.set_ylabel("damping ratio ζ")
        a.set_title(f"modes (dt = {dt:g} s; ζ < 0: unstable)", fontsize="medium")
        a.grid(True, alpha=0.3)
    _layout.figure_legend(fig, panels, created=created)
    _layout.suptitle(fig, title)
    return fig
