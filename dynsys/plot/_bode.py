"""`plot.bode`: magnitude (dB) and phase (degrees) against frequency."""

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import _bands, _layout, _responses
from ._style import line_style


if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _sample_frequencies(frequencies, dt, num: int) -> np.ndarray:
    """The frequencies in rad/sample: the given ones (times `dt` when known), else
    `num` log-spaced over three decades up to π."""
    if frequencies is None:
        return np.logspace(math.log10(math.pi) - 3, math.log10(math.pi), num)
    w_given = np.asarray(frequencies, dtype=float)
    return w_given * dt if dt else w_given


def _response(series, w_sample, given: bool, call: str, label: str) -> np.ndarray:
    """The `(F, p, m)` response of one series: a precomputed array checked (it
    needs `given` frequencies), else computed from the system."""
    if isinstance(series, np.ndarray) or (
        hasattr(series, "shape") and not hasattr(series, "K")
    ):
        if not given:
            raise ValueError(
                f"bode(frequencies=...): {label!r} is a precomputed response, "
                "so its frequencies are needed."
            )
        return _responses.check_response(
            series, w_sample.shape[0], call, label, "F frequencies, outputs, inputs"
        )
    return _responses.figure_frequency_response(series, w_sample, call, label)


def _frequency_axis(w_sample, dt, hz: bool):
    """`(x, unit, nyquist)`: the frequencies drawn, their unit, and the Nyquist
    frequency in that unit (`None` without `dt`)."""
    if hz:
        x, unit = w_sample / dt / (2 * math.pi), "Hz"
    elif dt:
        x, unit = w_sample / dt, "rad/s"
    else:
        x, unit = w_sample, "rad/sample"
    nyquist = None if not dt else (0.5 / dt if hz else math.pi / dt)
    return x, unit, nyquist


def _pair_axes(count: int, fig):
    """`(fig, [(magnitude, phase), ...])`: per pair, a magnitude axes above a phase
    axes sharing its x, in a grid; the cells not needed are removed."""
    nrows, ncols = _layout.grid_shape(count)
    width = 7.0 if ncols == 1 else 4.0 * ncols
    height = min(0.9 + 2.6 * nrows, 2.0 * width)
    fig, grid = _layout.new_figure(2 * nrows, ncols, figsize=(width, height), fig=fig)
    panels = []
    for k in range(count):
        r, c = divmod(k, ncols)
        mag, phase = grid[2 * r, c], grid[2 * r + 1, c]
        phase.sharex(mag)
        panels.append((mag, phase))
    used = [a for pair in panels for a in pair]
    for cell in grid.ravel():
        if cell not in used:
            fig.delaxes(cell)
    return fig, panels


def _draw_references(mag, phase, pair, extras, styles, x):
    """The data's spectral estimate and the models' confidence bands."""
    spectral, bands, z, level = extras
    if spectral is not None:
        _bands.draw_spectral(mag, phase, spectral[0], pair, spectral[1])
    for label, band in bands.items():
        color = styles.get(label, {}).get("color", "C0")
        label_text = _bands.level_label(label, level)
        _bands.draw_magnitude_band(mag, x, pair, band, z, color, label_text)


def _spectral_series(spectral, dt, hz: bool):
    """`(x, response)` of a `SpectralEstimate` from its third bin (the two lowest
    are biased by the segments' mean removal), or `None`."""
    if spectral is None:
        return None
    w = np.asarray(spectral.w)[2:]
    x, _, _ = _frequency_axis(w * dt if dt else w, dt, hz)
    return x, np.asarray(spectral.response)[2:]


def _draw_pair(mag, phase, pair, responses, styles, x, unit, nyquist):
    """Magnitude and phase of one (output, input) pair, with the Nyquist frequency
    marked when it is known."""
    i, j = pair
    for label, h in responses.items():
        kw = line_style(styles[label])
        values = h[:, i, j]
        mag.plot(x, 20 * np.log10(np.maximum(np.abs(values), 1e-300)), label=label,
                 **kw)  # fmt: skip
        phase.plot(x, np.degrees(np.unwrap(np.angle(values))), label=label, **kw)
    mag.set_xscale("log")
    # Minor ticks at 2 and 5 of each decade rather than at 2..9: a MIMO figure's
    # eight log axes spent half of their drawing time making minor ticks.
    from matplotlib.ticker import LogLocator

    mag.xaxis.set_minor_locator(LogLocator(base=10.0, subs=(2.0, 5.0)))
    mag.set_ylabel("|H| (dB)")
    phase.set_ylabel("phase (deg)")
    phase.set_xlabel(f"frequency ({unit})")
    if nyquist is not None:
        for a in (mag, phase):
            a.axvline(nyquist, label="Nyquist frequency", color="0.5", lw=0.9,
                      ls=(0, (1, 2)))  # fmt: skip
    mag.tick_params(labelbottom=False)
    for a in (mag, phase):
        a.grid(True, alpha=0.3)


def bode(
    systems,
    frequencies=None,
    *,
    dt: float | None = None,
    hz: bool = False,
    truth=None,
    roles: Mapping[str, str] | None = None,
    outputs: Sequence[int] | None = None,
    inputs: Sequence[int] | None = None,
    output_names: Sequence[str] | None = None,
    input_names: Sequence[str] | None = None,
    names=None,
    num: int = 200,
    title: str | None = None,
    fig: "Figure | None" = None,
    spectral=None,
    confidence: Mapping | None = None,
    level: float = 0.99,
) -> "Figure":
    """Bode diagram: magnitude in dB and phase in degrees against frequency.

    One magnitude panel above one phase panel per (input, output) pair, in a grid
    when there are several. With a sample time (`dt`, or a system's `dt`) the
    frequency axis is in rad/s (or Hz with `hz=True`) and ends at the Nyquist
    frequency, marked; otherwise in rad/sample up to π.

    **Arguments:**

    - `systems`: a linear system (with `K`, `B`, and optionally `C`, `D`), or a
        mapping label → system or precomputed response `(F, p, m)` complex (e.g.
        from `dynsys.frequency_response`; then `frequencies` is needed); an
        `Identified` (`dynsys.identify`'s answer) stands for its model and names
        the channels after its data.
    - `frequencies`: `(F,)` in rad/s when `dt` is known, else rad/sample
        (default: `num` log-spaced up to Nyquist).
    - `dt`: the sample time (s).
    - `hz`: label the axis in Hz (needs `dt`).
    - `truth`: optional known true system (simulated data only), drawn black.
    - `roles`: optional label → `"fit"` / `"estimate"` (see `plot.STYLES`).
    - `outputs`, `inputs`: the output and input indices to draw (default: all).
    - `output_names`, `input_names`: labels with units (default: those of
        `names`, else of an `Identified` among `systems`, else `y0, ...`, `u0, ...`).
    - `names`: a `Dataset` (or an `Identified`) whose channel names to use.
    - `num`: the number of default frequencies.
    - `title`: the figure title.
    - `fig`: optional empty `Figure` (or `SubFigure`) to draw into.
    - `spectral`: optional `SpectralEstimate` of the data (`dynsys.spectral_estimate`),
        drawn as grey dots: a reference that needs no model.
    - `confidence`: optional mapping label → `ParameterCovariance`
        (`FitResult.covariance`): a shaded band of $|H| \\pm z\\sigma$ around that
        label's model (the covariance's own model), its level in the legend.
    - `level`: the bands' confidence level (default 0.99).

    **Returns:**

    The matplotlib `Figure`.

    **Raises:**

    `ValueError` for a system without `K`/`B`, a response of the wrong shape,
    `hz` without `dt`, or a level outside (0, 1); `TypeError` for a confidence
    entry that is not a `ParameterCovariance`.

    **Example:**

    ```python
    import dynsys.models as zoo
    chain = zoo.mass_spring_damper(num_masses=2, dt=0.1)
    fig = dynsys.plot.bode({"fitted": chain}, hz=True,
                           output_names=zoo.names("mass_spring_damper").outputs)
    fig = dynsys.plot.bode(dynsys.identify(data))  # titled "drive_V → temp_C"
    ```
    """
    call = "bode"
    systems, input_names, output_names = _responses.named(
        systems, names, input_names, output_names, call
    )
    systems, series = _responses.labelled(systems, truth)
    dt = _responses.system_dt([*systems.values(), *series.values()], dt)
    if hz and dt is None:
        raise ValueError("bode(hz=True): Hz needs the sample time; pass dt=... (s).")
    w_sample = _sample_frequencies(frequencies, dt, num)
    given = frequencies is not None
    responses = {
        label: _response(s, w_sample, given, call, label) for label, s in series.items()
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
    x, unit, nyquist = _frequency_axis(w_sample, dt, hz)
    bands = _bands.magnitude_bands(confidence, w_sample, level, call)
    extras = (
        _spectral_series(spectral, dt, hz),
        bands,
        _bands.quantile(level, call),
        level,
    )
    fig, panels = _pair_axes(len(pairs), fig)
    for (mag, phase), pair in zip(panels, pairs):
        _draw_references(mag, phase, pair, extras, styles, x)
        _draw_pair(mag, phase, pair, responses, styles, x, unit, nyquist)
        mag.set_title(_layout.pair_title(pair, out_names, in_names), fontsize="small")
    _layout.figure_legend(fig, [a for pair in panels for a in pair], created=True)
    _layout.suptitle(fig, title)
    return fig
