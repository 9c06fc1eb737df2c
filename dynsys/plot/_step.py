"""`plot.step_response`: outputs after a unit step on each input, from rest."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _bands, _layout, _responses
from ._style import line_style


if TYPE_CHECKING:
    from matplotlib.figure import Figure


# The default number of steps: enough for the slowest stable pole to settle (its
# mode down to 1 % of its start), at least `_FEWEST_STEPS`, at most `_MOST_STEPS`.
_FEWEST_STEPS, _MOST_STEPS = 50, 5000


def _default_num_steps(series) -> int:
    """The length of the first precomputed response, else the steps the systems'
    slowest stable pole takes to settle (`settling_steps`)."""
    arrays = [v for v in series.values() if hasattr(v, "shape")]
    if arrays:
        return np.shape(arrays[0])[0]
    return max(settling_steps(s) for s in series.values())


def settling_steps(system) -> int:
    """Steps until the slowest stable eigenvalue's mode falls to 1 %
    ($|\\lambda|^k \\le 0.01$), within [50, 5000]; 50 for what has no `K` or no
    eigenvalue inside the unit circle."""
    linear = system.to_linear() if hasattr(system, "to_linear") else system
    K = getattr(linear, "K", None)
    if K is None or np.size(K) == 0:
        return _FEWEST_STEPS
    radius = np.abs(np.linalg.eigvals(np.asarray(K, np.float64)))
    stable = radius[(radius < 1.0) & (radius > 0.0)]
    if stable.size == 0:
        return _FEWEST_STEPS
    steps = int(np.ceil(np.log(0.01) / np.log(np.max(stable))))
    return int(np.clip(steps, _FEWEST_STEPS, _MOST_STEPS))


def _response(series, num_steps: int, call: str, label: str) -> np.ndarray:
    """The `(num_steps, p, m)` response of one series: a precomputed array checked,
    else simulated from the system."""
    if hasattr(series, "shape") and not hasattr(series, "state_size"):
        return _responses.check_response(
            series, num_steps, call, label, "steps, outputs, inputs"
        )
    return _responses.figure_step_response(series, num_steps, call, label)


def _pair_axes(count: int, fig) -> tuple:
    """`(fig, axes)`: one axes per pair, in a grid on a new figure (sharing x) or on
    the given `fig`; the cells not needed are removed."""
    if fig is None:
        return _layout.panel_grid(count)
    nrows, ncols = _layout.grid_shape(count)
    fig, grid = _layout.new_figure(nrows, ncols, figsize=None, fig=fig)
    axes = list(grid.ravel())[:count]
    for cell in list(grid.ravel())[count:]:
        fig.delaxes(cell)
    return fig, axes


def _draw_pair(a, pair, responses, styles, times, out_names, in_names):
    """One (output, input) pair on `a`: each response as held values."""
    i, j = pair
    for label, h in responses.items():
        kw = line_style(styles[label])
        a.plot(times, h[:, i, j], drawstyle="steps-post", label=label, **kw)
    a.set_title(_layout.pair_title(pair, out_names, in_names), fontsize="small")
    a.set_ylabel(out_names[i])
    a.grid(True, alpha=0.3)


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
    names=None,
    title: str | None = None,
    fig: "Figure | None" = None,
    confidence: Mapping | None = None,
    level: float = 0.99,
    impulse=None,
) -> "Figure":
    """Step responses: each output after a unit step on each input, from $x_0 = 0$.

    One panel per (input, output) pair, in a grid when there are several; the
    samples are drawn as held values (a staircase), against time in s when the
    sample time is known, else in steps.

    **Arguments:**

    - `systems`: a system (any `AbstractSystem` with inputs), or a mapping label →
        system or precomputed response `(num_steps, p, m)` (e.g. from
        `dynsys.step_response`); an `Identified` (`dynsys.identify`'s answer)
        stands for its model and names the channels after its data.
    - `num_steps`: the number of steps (default: the arrays' length, else enough
        for the slowest stable pole to settle to 1 %, between 50 and 5000).
    - `dt`: the sample time (s); default a system's `dt`.
    - `truth`: optional known true system (simulated data only), drawn black.
    - `roles`: optional label → `"fit"` / `"estimate"` (see `plot.STYLES`).
    - `outputs`, `inputs`: the indices to draw (default: all).
    - `output_names`, `input_names`: labels with units (default: those of
        `names`, else of an `Identified` among `systems`, else `y0, ...`, `u0, ...`).
    - `names`: a `Dataset` (or an `Identified`) whose channel names to use.
    - `title`: the figure title.
    - `fig`: optional empty `Figure` (or `SubFigure`) to draw into.
    - `confidence`: optional label → `ParameterCovariance` (`FitResult.covariance`):
        a shaded band of ± the `level` quantile of the step response's standard
        deviation around that label's model (the covariance's own model).
    - `level`: the bands' confidence level (default 0.99), stated in the legend.
    - `impulse`: optional `ImpulseEstimate` of the data (`dynsys.impulse_estimate`):
        the step response it implies, drawn as grey dots (a reference that needs
        no model).

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for a system without input, a response of the wrong shape or a
    level outside (0, 1); `TypeError` for a confidence entry that is not a
    `ParameterCovariance`.

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
    systems, input_names, output_names = _responses.named(
        systems, names, input_names, output_names, call
    )
    systems, series = _responses.labelled(systems, truth)
    dt = _responses.system_dt(series.values(), dt)
    if num_steps is None:
        num_steps = _default_num_steps(series)
    responses = {
        label: _response(s, num_steps, call, label) for label, s in series.items()
    }
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
    bands = _bands.step_bands(confidence, num_steps, level, call)
    fig, axes = _pair_axes(len(pairs), fig)
    for a, pair in zip(axes, pairs):
        for label, band in bands.items():
            color = styles.get(label, {}).get("color", "C0")
            text = _bands.level_label(label, level)
            z = _bands.quantile(level, call)
            _bands.draw_step_band(a, times, pair, band, z, color, text)
        if impulse is not None:
            _bands.draw_step_estimate(a, times, pair, impulse)
        _draw_pair(a, pair, responses, styles, times, out_names, in_names)
    for a in _layout.bottom_row(axes, len(axes)):
        a.set_xlabel(time_label)
    _layout.figure_legend(fig, axes, created=True)
    _layout.suptitle(fig, title)
    return fig
