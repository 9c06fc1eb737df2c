"""`plot.step_response`: outputs after a unit step on each input, from rest."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _layout, _responses
from ._style import line_style


if TYPE_CHECKING:
    from matplotlib.figure import Figure


def step_response(
    systems,
    num_steps: int | None = None,
    *,
    dt: float | None = None,
    truth=None,
    roles: Mapping[str, str] | None = None,
    outputs: Sequence[int] | None = None,
    inputs: Sequence[int] | None = None,
    output_names: Sequence[str] | None = None,
    input_names: Sequence[str] | None = None,
    title: str | None = None,
    fig: "Figure | None" = None,
) -> "Figure":
    """Step responses: each output after a unit step on each input, from $x_0 = 0$.

    One panel per (input, output) pair, in a grid when there are several; the
    samples are drawn as held values (a staircase), against time in s when the
    sample time is known, else in steps.

    **Arguments:**

    - `systems`: a system (any `AbstractSystem` with inputs), or a mapping label →
        system or precomputed response `(num_steps, p, m)` (e.g. from
        `dynsys.step_response`).
    - `num_steps`: the number of steps (default 50, or the arrays' length).
    - `dt`: the sample time (s); default a system's `dt`.
    - `truth`: optional known true system (simulated data only), drawn black.
    - `roles`: optional label → `"fit"` / `"estimate"` (see `plot.STYLES`).
    - `outputs`, `inputs`: the indices to draw (default: all).
    - `output_names`, `input_names`: labels with units (default `y0, ...`, `u0, ...`).
    - `title`: the figure title.
    - `fig`: optional empty `Figure` (or `SubFigure`) to draw into.

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for a system without input or a response of the wrong shape.

    **Example:**

    ```python
    import dynsys.models as zoo
    chain = zoo.mass_spring_damper(num_masses=2, dt=0.1)
    names = zoo.names("mass_spring_damper")
    fig = dynsys.plot.step_response({"fitted": chain}, 100, outputs=[0, 1],
                                    output_names=names.outputs,
                                    input_names=names.inputs)
    ```
    """
    call = "step_response"
    systems, series = _responses.labelled(systems, truth)
    dt = _responses.system_dt(series.values(), dt)
    arrays = [v for v in series.values() if hasattr(v, "shape")]
    if num_steps is None:
        num_steps = np.shape(arrays[0])[0] if arrays else 50
    responses = {}
    for label, s in series.items():
        if hasattr(s, "shape") and not hasattr(s, "state_size"):
            responses[label] = _responses.check_response(
                s, num_steps, call, label, "steps, outputs, inputs"
            )
        else:
            responses[label] = _responses.step_response(s, num_steps, call, label)
    out_names, in_names, pairs, styles = _responses.io_panels(
        responses,
        systems,
        roles,
        truth,
        output_names,
        input_names,
        outputs,
        inputs,
        call,
    )
    times, time_label = _layout.time_axis(num_steps, dt=dt, call=call)
    if fig is None:
        fig, axes = _layout.panel_grid(len(pairs))
    else:
        nrows, ncols = _layout.grid_shape(len(pairs))
        fig, grid = _layout.new_figure(nrows, ncols, figsize=None, fig=fig)
        axes = list(grid.ravel())[: len(pairs)]
        for cell in list(grid.ravel())[len(pairs) :]:
            fig.delaxes(cell)
    for a, pair in zip(axes, pairs):
        i, j = pair
        for label, h in responses.items():
            kw = line_style(styles[label])
            a.plot(times, h[:, i, j], drawstyle="steps-post", label=label, **kw)
        a.set_title(_layout.pair_title(pair, out_names, in_names), fontsize="small")
        a.set_ylabel(out_names[i])
        a.grid(True, alpha=0.3)
    for a in _layout.bottom_row(axes, len(axes)):
        a.set_xlabel(time_label)
    _layout.figure_legend(fig, axes, created=True)
    _layout.suptitle(fig, title)
    return fig
