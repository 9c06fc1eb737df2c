"""What a `fit` run assumed or found that a reader would not guess, one line each
(console `note: ...`, summary.md `Note: ...`): no sample time, the operating point
refined by the fit, and a held-out output too flat for fit % to mean much."""

import numpy as np

from ..._fitting.metrics import RUNAWAY_FIT_PERCENT


# Fit % below which a note explains it (fit % = 100 (1 - RMS / spread): at -50
# the error is 1.5 times the output's own spread).
FLAT_FIT = -50.0


def no_dt_line(dt) -> list[str]:
    """A line when the data have no sample time."""
    if dt:
        return []
    return [
        "no sample time (no time column and no --dt): time axes are in steps, "
        "frequencies in rad/sample and natural frequencies per sample"
    ]


def refined_levels_line(
    subspace, fitted, input_names, output_names, data_means=None
) -> list[str]:
    """A line when the fit moved the operating point away from the subspace start's
    levels: the model holds the refined levels. `data_means`: the estimation data's
    `(ū (m,) or None, ȳ (p,))`, which the start's levels equal unless the subspace
    estimate fitted a constant offset on top of them (then both are named)."""
    means = dict(zip(("input", "output"), data_means or (None, None)))
    pairs = []
    for what, names in (("output", output_names), ("input", input_names)):
        start = getattr(subspace, f"{what}_level", None)
        end = getattr(fitted, f"{what}_level", None)
        if start is None or end is None:
            continue
        start, end = np.asarray(start), np.asarray(end)
        if np.allclose(start, end, rtol=1e-4, atol=0.0):
            continue
        mean = start if means[what] is None else np.asarray(means[what])
        values = ", ".join(
            f"{name} {b:.4g} ({_level_origin(a, m)})"
            for name, a, b, m in zip(names, start, end, mean)
        )
        pairs.append(f"{what} level {values}")
    if not pairs:
        return []
    return [
        "operating point refined by the fit: the model holds " + "; ".join(pairs)
    ]


def _level_origin(start: float, mean: float) -> str:
    """Where a refined level started: the data's mean, or the mean plus the
    subspace estimate's constant offset."""
    if np.isclose(start, mean, rtol=1e-4, atol=0.0):
        return f"data mean {mean:.4g}"
    start, mean = distinct_digits(start, mean)
    return f"subspace start {start}, data mean {mean}"


def distinct_digits(a: float, b: float) -> tuple[str, str]:
    """`a` and `b` with the fewest significant digits (4 to 10) that tell them
    apart (4 when they are equal)."""
    if np.isclose(a, b, rtol=1e-9, atol=0.0):
        return f"{a:.4g}", f"{b:.4g}"
    for digits in range(4, 11):
        left, right = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if left != right:
            break
    return left, right


def flat_output_lines(comparison, which: str) -> list[str]:
    """A line per channel whose fit % is below `FLAT_FIT`: its RMS error and the
    held-out output's spread, which fit % compares (`comparison`: a `Comparison`)."""
    fit = np.asarray(comparison.fit_percent)
    measured = np.asarray(comparison.measured)
    predicted = np.asarray(comparison.predicted)
    T = measured.shape[1]
    valid = np.arange(T)[None, :] < np.asarray(comparison.lengths)[:, None]
    y, y_hat = measured[valid], predicted[valid]
    rms = np.sqrt(np.mean((y - y_hat) ** 2, axis=0))
    spread = np.sqrt(np.mean((y - y.mean(axis=0)) ** 2, axis=0))
    lines = []
    for j, name in enumerate(comparison.names):
        # (a free run that ran away is printed as such: `fit_percent_text`)
        if RUNAWAY_FIT_PERCENT < fit[j] < FLAT_FIT:
            lines.append(
                f"{which} fit % of {name} is {fit[j]:.1f} with an RMS error of "
                f"{rms[j]:.4g}: the {which} {name} varies little (RMS {spread[j]:.4g} "
                "about its mean), and fit % = 100 (1 - RMS error / that spread)"
            )
    return lines


def assumption_lines(start, estimate, validation) -> list[str]:
    """Every line above for an input–output fit (`start` a `Start`, `estimate` an
    `Estimate`, `validation` a `Validation`)."""
    fitted = validation.comparisons["fitted"]
    which = list(validation.rows)[-1].split(" fit %")[0]
    residuals = validation.residuals
    return [
        *no_dt_line(estimate.fitted.dt),
        *refined_levels_line(
            start.subspace,
            estimate.fitted,
            residuals.input_names,
            fitted.names,
            start.data_means,
        ),
        *flat_output_lines(fitted, which),
    ]


def worse_neural_lines(channels, linear, neural) -> list[str]:
    """A line when the neural model's RMS error is above the linear model's on
    every channel (`linear`, `neural`: `(fit %, RMS)` lists per channel)."""
    if not channels or not all(n > l for n, l in zip(neural[1], linear[1])):
        return []
    pairs = ", ".join(
        f"{name} RMS {n:.4g} against {l:.4g}"
        for name, n, l in zip(channels, neural[1], linear[1])
    )
    return [
        f"the neural model is worse than the linear one ({pairs}): keep the linear "
        "model (model.dynsys), or train the neural one longer (config key "
        "'fit.neural_steps')"
    ]
