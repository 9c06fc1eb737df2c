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
    model at `w_sample` rad/sample."""
    from .._fitting.covariance import ParameterCovariance
    from .._sysid.response import frequency_response
    from .._sysid.signals import linear_of

    quantile(level, call)
    bands = {}
    for label, covariance in (confidence or {}).items():
        if not isinstance(covariance, ParameterCovariance):
            raise TypeError(
                f"{call}(confidence=...): {label!r} must map to a ParameterCovariance "
                f"(FitResult.covariance), got {type(covariance).__name__}."
            )
        linear = linear_of(covariance.model)
        dt = getattr(linear, "dt", None) or 1.0
        response, std = frequency_response(
            covariance.model, np.asarray(w_sample) / dt, covariance=covariance
        )
        bands[label] = (np.asarray(response), np.asarray(std))
    return bands


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
