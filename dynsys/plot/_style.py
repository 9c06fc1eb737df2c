"""The style vocabulary of every dynsys figure: one meaning per style.

A style is a role, not a colour: each role differs from the others by its line style
and marker as well as its colour, so a figure printed in greyscale still reads.

| role | drawn as | meaning |
| --- | --- | --- |
| `truth` | black solid line, hollow circle | a known true model (simulated data only) |
| `measured` | grey dots | measurements |
| `estimate` | orange dash-dot, hollow squares | an initial estimate (least squares) |
| `fit` | blue dashed line, hollow triangles | the fitted (returned) model |
| `model` cycle | green dotted / red dash-dot-dot / ... | further models, in order |
| `target` | dark grey dashed line | a reference or target value |
| `bound` | red dotted line | a known limit (input bound, confidence bound) |
"""

import re
from collections.abc import Mapping, Sequence


def _style(color, ls, marker, *, lw=1.5, ms=5.0, mfc="none", zorder=2.0) -> dict:
    return {
        "color": color,
        "linestyle": ls,
        "marker": marker,
        "linewidth": lw,
        "markersize": ms,
        "markerfacecolor": mfc,
        "zorder": zorder,
    }


STYLES: dict[str, dict] = {
    "truth": _style("black", "-", "o", lw=1.6, ms=8, zorder=2.5),
    "measured": _style("0.55", "none", ".", ms=4, mfc="0.55", zorder=1.5),
    "estimate": _style("tab:orange", "-.", "s", ms=5),
    "fit": _style("tab:blue", "--", "^", ms=6),
    "target": _style("0.3", (0, (5, 3)), "none", lw=1.0, zorder=1.0),
    "bound": _style("tab:red", ":", "none", lw=1.2, zorder=1.0),
}
"""Role -> matplotlib keyword arguments (`color`, `linestyle`, `marker`, ...)."""

MODEL_CYCLE: tuple[dict, ...] = (
    STYLES["fit"],
    STYLES["estimate"],
    _style("tab:green", ":", "D", ms=5),
    _style("tab:red", (0, (6, 2, 1, 2, 1, 2)), "v", ms=6),
    _style("tab:purple", (0, (1, 1)), "P", ms=6),
    _style("tab:brown", (0, (8, 2)), "X", ms=6),
)
"""Styles for models without a role, in order (the first two are `fit`, `estimate`)."""

# Channels sharing one axis (same unit) differ by colour *and* line style.
CHANNEL_LINESTYLES = ("-", "--", "-.", ":", (0, (6, 2, 1, 2, 1, 2)), (0, (1, 1)))
ROLES = tuple(STYLES)
BAND_ALPHA = 0.18
THIN = 0.8  # line width of one trajectory among several


def style(role: str) -> dict:
    """The keyword arguments of one role of `STYLES` (a copy)."""
    return dict(STYLES[role])


def line_style(kwargs: dict, *, markevery=None) -> dict:
    """A role's style for a line through many points: sparse markers."""
    out = dict(kwargs)
    if out["linestyle"] != "none" and out["marker"] != "none":
        out["markevery"] = markevery
        if markevery is None:
            out["marker"] = "none"
    return out


def model_styles(
    labels: Sequence[str], roles: Mapping[str, str] | None, call: str
) -> dict[str, dict]:
    """Label -> style: the role given in `roles`, else the next free `MODEL_CYCLE`."""
    roles = dict(roles or {})
    for label, role in roles.items():
        if role not in STYLES:
            raise ValueError(
                f"{call}(roles=...): {label!r} has role {role!r}; expected one of "
                f"{', '.join(ROLES)}."
            )
        if role == "truth":
            raise ValueError(
                f"{call}(roles=...): {label!r} cannot take the role 'truth'; pass a "
                "known true model as truth=... (only simulated data has one)."
            )
    taken = {roles[label] for label in labels if label in roles}
    free = [s for s in MODEL_CYCLE if not any(STYLES[r] is s for r in taken)]
    out, k = {}, 0
    for label in labels:
        if label in roles:
            out[label] = style(roles[label])
        else:
            out[label] = dict(free[k % len(free)])
            k += 1
    return out


_UNIT = re.compile(r"[\(\[]([^()\[\]]*)[\)\]]\s*$")


def unit_of(name: str) -> str | None:
    """The unit written at the end of a channel name, `"θ (rad)"` -> `"rad"`."""
    match = _UNIT.search(name)
    return match.group(1).strip() if match else None


def strip_unit(name: str) -> str:
    """A channel name without its unit, `"θ (rad)"` -> `"θ"`."""
    return _UNIT.sub("", name).strip()
