"""`plot.singular_values`: the subspace singular values, for choosing the order."""

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from . import _layout
from ._style import MODEL_CYCLE, style


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def singular_values(
    values,
    order: int | None = None,
    *,
    max_order: int | None = None,
    title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """Singular values of a subspace identification, relative to the largest, on a
    log scale, for choosing the model order: a gap after the $n$-th value
    suggests order $n$. The chosen `order` is marked.

    **Arguments:**

    - `values`: the singular values `(k,)` (e.g. `dynsys.subspace_singular_values(
        data)`), largest first; or a mapping label → values to compare datasets.
    - `order`: the chosen model order, marked (e.g. `fit_subspace(...).state_size`).
    - `max_order`: draw only the first `max_order` values.
    - `title`: the figure title.
    - `ax`: optional `Axes` to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for values that are not a non-empty 1-D array, or an `order`
    outside `[0, k]`.

    **Example:**

    ```python
    fig = dynsys.plot.singular_values([3.1, 1.2, 0.4, 0.2, 1e-3, 8e-4], order=4)
    ```
    """
    if isinstance(values, Mapping):
        series = dict(values)
    else:
        series = {"singular values": values}
    arrays = {}
    for label, v in series.items():
        v = np.asarray(v, dtype=float)
        if v.ndim != 1 or v.size == 0:
            raise ValueError(
                f"singular_values(values=...): {label!r} must be a non-empty 1-D "
                f"array, got shape {v.shape}."
            )
        arrays[label] = v[:max_order] if max_order else v
    k = max(v.size for v in arrays.values())
    if order is not None and not 0 <= order <= k:
        raise ValueError(
            f"singular_values(order=...): expected an order in [0, {k}], got {order}."
        )
    created = ax is None
    if created:
        fig, grid = _layout.new_figure(1, 1, figsize=(6.5, 4.6))
        ax = grid[0, 0]
    else:
        fig = ax.figure
    for n, (label, v) in enumerate(arrays.items()):
        s = MODEL_CYCLE[n % len(MODEL_CYCLE)] if len(arrays) > 1 else style("fit")
        relative = v / v[0] if v[0] > 0 else v
        index = np.arange(1, v.size + 1)
        ax.plot(index, np.maximum(relative, 1e-300), color=s["color"],
                ls=s["linestyle"], marker=s["marker"], mfc="none", ms=6, lw=1.0,
                label=label)  # fmt: skip
    if order is not None:
        bound = style("bound")
        ax.axvline(order + 0.5, color=bound["color"], ls=bound["linestyle"], lw=1.4,
                   label=f"chosen order n = {order}")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("index $i$ (order $n$ keeps $\\sigma_1 \\dots \\sigma_n$)")
    ax.set_ylabel("$\\sigma_i / \\sigma_1$")
    ax.set_xlim(0.5, k + 0.5)
    if k <= 30:
        ax.set_xticks(np.arange(1, k + 1, max(1, k // 15)))
    ax.grid(True, which="both", alpha=0.3)
    _layout.figure_legend(fig, [ax], created=created, ncol=3)
    _layout.suptitle(fig, title)
    return fig
