"""Confidence bands and data references drawn beside models: the level's normal
quantile, a model's magnitude band on a Bode diagram, and the data's spectral
estimate."""

import statistics

import numpy as np


def quantile(level: float, call: str) -> float:
    """The two-sided normal quantile of a confidence `level` in (0, 1) (1.96 for
    0.95)."""
    if not 0.0 < level < 1.0:
        raise ValueError(
            f"{call}(level=...): expected a level in (0, 1), got {level!r}."
        )
    return statistics.NormalDist().inv_cdf(0.5 + level / 2.0)


def level_label(label: str, level: float) -> str:
    return f"{label}: {100 * level:g} % confidence"


def magnitude_bands(confidence, w_sample: np.ndarray, level: float, call: str) -> dict:
    """Label -> `(response (F, p, m), magnitude_std (F, p, m))` of each covariance's
    model at `w_sample` rad/sample (as `dynsys.frequency_response(...,
    covariance=...)`, computed on the host)."""
    from .._sysid.host_response import frequency_band, matrix_sensitivity

    quantile(level, call)
    return {
        label: frequency_band(matrix_sensitivity(covariance), w_sample)
        for label, covariance in checked_covariances(confidence, call).items()
    }


def draw_magnitude_band(mag, x, pair, band, z: float, color, label: str):
    """The band $|H| \\pm z\\,\\sigma$ in dB (its lower edge clipped above 0)."""
    i, j = pair
    response, std = band
    magnitude = np.abs(response[:, i, j])
    spread = z * std[:, i, j]
    lower = np.maximum(magnitude - spread, 1e-3 * np.maximum(magnitude, 1e-300))
    mag.fill_between(
        x,
        20 * np.log10(lower),
        20 * np.log10(magnitude + spread),
        color=color,
        alpha=0.2,
        lw=0,
        label=label,
    )


SPECTRAL_LABEL = "data: spectral estimate"


def draw_spectral(mag, phase, x, pair, response):
    """The data's spectral estimate of one (output, input) pair: small grey dots."""
    i, j = pair
    values = response[:, i, j]
    style = dict(color="0.35", ls="none", marker=".", ms=3, label=SPECTRAL_LABEL)
    mag.plot(x, 20 * np.log10(np.maximum(np.abs(values), 1e-300)), **style)
    phase.plot(x, np.degrees(np.unwrap(np.angle(values))), **style)


def checked_covariances(confidence, call: str) -> dict:
    """`confidence` (label → `ParameterCovariance`) checked."""
    from .._fitting.covariance import ParameterCovariance

    for label, covariance in (confidence or {}).items():
        if not isinstance(covariance, ParameterCovariance):
            raise TypeError(
                f"{call}(confidence=...): {label!r} must map to a ParameterCovariance "
                f"(FitResult.covariance), got {type(covariance).__name__}."
            )
    return dict(confidence or {})


def pole_regions(confidence, level: float, call: str) -> dict:
    """Label → `PoleUncertainty` of each covariance's model."""
    from .._sysid.bands import pole_uncertainty

    quantile(level, call)
    return {
        label: pole_uncertainty(covariance)
        for label, covariance in checked_covariances(confidence, call).items()
    }


def draw_pole_ellipses(a, poles, level: float, color, label: str):
    """Each eigenvalue's confidence ellipse in the z-plane (a normal region of two
    dimensions: radius $\\sqrt{-2 \\ln(1 - \\text{level})}$ standard deviations)."""
    radius = np.sqrt(-2.0 * np.log(1.0 - level))
    theta = np.linspace(0.0, 2.0 * np.pi, 121)
    circle = np.stack([np.cos(theta), np.sin(theta)])
    for k, (z, cov) in enumerate(
        zip(np.asarray(poles.eigenvalues), np.asarray(poles.eigenvalue_covariance))
    ):
        values, vectors = np.linalg.eigh(cov)
        edge = vectors @ (np.sqrt(np.maximum(values, 0.0))[:, None] * circle) * radius
        a.fill(z.real + edge[0], z.imag + edge[1], color=color, alpha=0.25, lw=0,
               label=label if k == 0 else "_")  # fmt: skip


def physical_bars(value, spread, low: float, high: float) -> np.ndarray:
    """`(2, k)` lower and upper bar lengths of `value ± spread`, cut to the
    physical range `[low, high]` (a natural frequency is at least 0, a damping
    ratio in [-1, 1])."""
    value, spread = np.asarray(value, float), np.asarray(spread, float)
    lower = np.minimum(spread, np.maximum(value - low, 0.0))
    upper = np.minimum(spread, np.maximum(high - value, 0.0))
    return np.stack([lower, upper])


def draw_mode_bars(a, poles, z: float, color, scale: float):
    """Natural frequency and damping ± `z` standard deviations of each mode (one
    of each conjugate pair), cut to their physical ranges (frequency >= 0,
    damping ratio in [-1, 1])."""
    eig = np.asarray(poles.eigenvalues)
    keep = (eig.imag >= 0) & np.isfinite(np.asarray(poles.natural_frequency))
    frequency = scale * np.asarray(poles.natural_frequency)[keep]
    damping = np.asarray(poles.damping_ratio)[keep]
    a.errorbar(
        frequency,
        damping,
        xerr=physical_bars(
            frequency, z * scale * np.asarray(poles.natural_frequency_std)[keep],
            0.0, np.inf,
        ),
        yerr=physical_bars(damping, z * np.asarray(poles.damping_std)[keep], -1, 1),
        fmt="none",
        ecolor=color,
        elinewidth=1.0,
        capsize=2,
        label="_",
    )


def step_bands(confidence, num_steps: int, level: float, call: str) -> dict:
    """Label → `(response, std)`, each `(num_steps, p, m)`, of each covariance's
    model (as `dynsys.step_response_band`, computed on the host)."""
    from .._sysid.host_response import matrix_sensitivity, step_band

    quantile(level, call)
    return {
        label: step_band(matrix_sensitivity(covariance), num_steps)
        for label, covariance in checked_covariances(confidence, call).items()
    }


def draw_step_band(a, times, pair, band, z: float, color, label: str):
    """The band response ± `z` std of one pair, held between samples."""
    i, j = pair
    response, std = band
    a.fill_between(
        times,
        response[:, i, j] - z * std[:, i, j],
        response[:, i, j] + z * std[:, i, j],
        step="post",
        color=color,
        alpha=0.2,
        lw=0,
        label=label,
    )


FIR_LABEL = "data: FIR estimate"


def draw_step_estimate(a, times, pair, impulse):
    """The step response implied by the data's FIR estimate of one pair (as many
    steps as both have): small grey dots."""
    i, j = pair
    step = np.asarray(impulse.step)[:, i, j]
    count = min(len(step), len(times))
    a.plot(times[:count], step[:count], color="0.35", ls="none", marker=".", ms=3,
           label=FIR_LABEL)  # fmt: skip
