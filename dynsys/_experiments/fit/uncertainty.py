"""The uncertainty part of a `fit` run on input–output data: the standard
deviations of the fitted model's poles and static gains (for `metrics.json` and
`summary.md`), and the references its Bode figure draws (the data's spectral
estimate, the model's confidence band): `assess_uncertainty`."""

import dataclasses

import numpy as np

from ..runtime.compile_clock import stage


# The confidence level of the run folder's bands.
LEVEL = 0.99


@dataclasses.dataclass(frozen=True)
class Uncertainty:
    """The uncertainty stage's result."""

    metrics: dict  # `{"uncertainty": {...}}` for metrics.json
    references: dict  # figure file -> more keyword arguments of its plot function
    notes: list[str]  # the summary.md section


def assess_uncertainty(report, estimate, delayed: bool = False) -> Uncertainty:
    """The fitted model's covariance (from `estimate`, an `Estimate`), what it says
    of the poles and static gains, and the references the figures of `report` (the
    data scored on) draw. With an input delay (`delayed`) the covariance is of the
    plant behind it: its poles and static gains are the model's (the delay adds
    exact poles at 0 and keeps the gains), but its bands would be drawn without
    the delay, so the figures get none."""
    with stage("uncertainty"):
        covariance, reason = covariance_of(estimate.result)
        metrics = uncertainty_metrics(covariance, reason)
        if delayed:
            metrics["uncertainty"]["bands"] = (
                "not drawn: the covariance is of the plant without its input delay"
            )
            covariance = None
        references = {
            "bode.png": bode_references(report, covariance),
            "comparison.png": comparison_band(report, covariance),
            "step_response.png": step_references(report, covariance),
            "eigenvalues.png": confidence_of(covariance),
        }
    notes = uncertainty_notes(
        metrics, list(report.output_names), list(report.input_names)
    )
    return Uncertainty(metrics, references, notes)


def covariance_of(result):
    """`(covariance or None, reason or None)` of a `FitResult`; a failure to
    compute it is a reason, never an error of the run."""
    try:
        return result.covariance, result.covariance_reason
    except (ArithmeticError, ValueError, TypeError, np.linalg.LinAlgError) as error:
        return None, f"not computed: {error}"


def uncertainty_metrics(covariance, reason) -> dict:
    """`{"uncertainty": {...}}` for `metrics.json`: each pole's eigenvalue, natural
    frequency and damping with their standard deviations, the static gains and
    theirs (one standard deviation, by linearisation), or the reason there are
    none."""
    from ..._sysid.bands import pole_uncertainty, static_gain_uncertainty

    if covariance is None:
        return {"uncertainty": {"covariance": reason}}
    try:
        poles = pole_uncertainty(covariance)
        gain, gain_std = static_gain_uncertainty(covariance)
    except (ArithmeticError, ValueError, TypeError, np.linalg.LinAlgError) as error:
        return {"uncertainty": {"covariance": f"not propagated: {error}"}}
    eigenvalues = np.asarray(poles.eigenvalues)
    return {
        "uncertainty": {
            "covariance": "Gauss–Newton at the fit (one standard deviation)",
            "identifiable_parameters": covariance.rank,
            "poles": [
                {
                    "eigenvalue": [float(z.real), float(z.imag)],
                    "natural_frequency": float(f),
                    "natural_frequency_std": float(fs),
                    "damping_ratio": float(d),
                    "damping_std": float(ds),
                }
                for z, f, fs, d, ds in zip(
                    eigenvalues,
                    np.asarray(poles.natural_frequency),
                    np.asarray(poles.natural_frequency_std),
                    np.asarray(poles.damping_ratio),
                    np.asarray(poles.damping_std),
                )
            ],
            "static_gain": np.asarray(gain).tolist(),
            "static_gain_std": np.asarray(gain_std).tolist(),
            "band_level": LEVEL,
        }
    }


def uncertainty_notes(section: dict, output_names, input_names) -> list[str]:
    """The `summary.md` section of `uncertainty_metrics`'s dictionary."""
    body = section["uncertainty"]
    lines = ["## Uncertainty of the fitted model", ""]
    if "poles" not in body:
        return lines + [f"Covariance {body['covariance']}.", ""]
    lines += [
        f"{body['covariance']}; {body['identifiable_parameters']} identifiable "
        "parameters.",
        "",
        "| pole | natural frequency | damping ratio |",
        "| --- | --- | --- |",
    ]
    for pole in body["poles"]:
        re, im = pole["eigenvalue"]
        lines.append(
            f"| {re:.4g} {'+' if im >= 0 else '-'} {abs(im):.4g}j "
            f"| {pole['natural_frequency']:.4g} ± {pole['natural_frequency_std']:.2g} "
            f"| {pole['damping_ratio']:.4g} ± {pole['damping_std']:.2g} |"
        )
    lines += ["", "| static gain | value ± std |", "| --- | --- |"]
    gains, stds = body["static_gain"], body["static_gain_std"]
    for i, row in enumerate(gains):
        for j, value in enumerate(row):
            pair = f"{input_names[j] if input_names else f'u{j}'} → " + (
                output_names[i] if output_names else f"y{i}"
            )
            lines.append(f"| {pair} | {value:.4g} ± {stds[i][j]:.2g} |")
    return lines + [""]


def confidence_of(covariance) -> dict:
    """The keyword arguments of `plot.step_response` and `plot.eigenvalues` that
    add the fitted model's confidence band or regions (none without a
    covariance)."""
    if covariance is None:
        return {}
    return {"confidence": {"fitted": covariance}, "level": LEVEL}


def step_references(data, covariance, num_steps: int = 50) -> dict:
    """The keyword arguments of `plot.step_response`: the fitted model's band and
    the step response of the data's FIR estimate (when the data allow one)."""
    from ..._sysid.impulse import impulse_estimate

    extras = confidence_of(covariance)
    try:
        extras["impulse"] = impulse_estimate(data, num_steps)
    except ValueError:
        pass  # too short or without inputs: no reference
    return extras


def comparison_band(data, covariance) -> dict:
    """The keyword arguments of `plot.comparison` that add the fitted model's band
    around its free run on `data` (not for a problem whose Jacobian would pass
    2**24 entries)."""
    from ..._sysid.bands import simulation_band

    if covariance is None:
        return {}
    size = data.num_trajectories * data.num_steps * data.output_size
    if size * covariance.num_parameters > 2**24:
        return {}
    try:
        _, std = simulation_band(covariance, data)
    except (ArithmeticError, ValueError, TypeError, np.linalg.LinAlgError):
        return {}
    return {"bands": {"fitted": np.asarray(std)[0]}, "level": LEVEL}


def bode_references(data, covariance) -> dict:
    """The keyword arguments of `plot.bode` that add the data's spectral estimate
    (when the data allow one) and the fitted model's confidence band."""
    from ..._sysid.spectral import spectral_estimate

    extras: dict = {"level": LEVEL}
    try:
        extras["spectral"] = spectral_estimate(data)
    except ValueError:
        pass  # too short or without inputs: no reference
    if covariance is not None:
        extras["confidence"] = {"fitted": covariance}
    return extras


# The figures' one line when the residual tests fail (`band_caveat`).
FIGURE_CAVEAT = "bands too narrow: the residual tests fail (see summary.md)"


def band_caveat(residuals) -> str | None:
    """One line when the fitted model's residuals (a `Residuals`) fail the
    whiteness test (an auto-correlation past lag 0 beyond the bound) or the
    independence test (a cross-correlation with an input beyond it), else `None`:
    the bands and ± assume white residuals independent of the inputs, and are then
    too narrow (docs/uncertainty.md). The bound is `residuals.bound` widened for
    the number of lags and channels tested (Bonferroni: white residuals cross it
    at any of them with probability at most 1 %), so a good model is not flagged
    for the one lag in a hundred that white residuals cross."""
    found = []
    auto = np.abs(np.asarray(residuals.autocorrelation)[1:])
    cross = residuals.cross_correlation
    bound = _tested_bound(residuals)
    if auto.size and np.max(auto) > bound:
        lag, i = np.unravel_index(np.argmax(auto), auto.shape)
        found.append(
            f"not white (auto-correlation {auto[lag, i]:.2f} at lag {lag + 1}"
            f"{_of(residuals.names, i)}, bound {bound:.2f})"
        )
    if cross is not None:
        cross = np.abs(np.asarray(cross))
        outside = cross > bound
        if np.any(outside):
            lags = np.asarray(residuals.cross_lags)[np.any(outside, axis=(1, 2))]
            j = int(np.argmax(np.max(cross, axis=(0, 1))))
            name = residuals.input_names[j] if residuals.input_names else f"u{j}"
            found.append(
                f"correlated with input {name} (beyond the bound at lags "
                f"{_lag_ranges(lags)})"
            )
    if not found:
        return None
    return (
        f"the residuals are {' and '.join(found)}: the model misses part of the "
        f"dynamics or the noise is coloured, so the {100 * LEVEL:g} % bands and the "
        "± values assume what the data do not show and are too narrow"
    )


def _tested_bound(residuals) -> float:
    """`residuals.bound` widened for every lag and channel `band_caveat` tests."""
    auto = np.asarray(residuals.autocorrelation)[1:]
    cross = residuals.cross_correlation
    tested = auto.size + (0 if cross is None else np.asarray(cross).size)
    return _family_bound(float(residuals.bound), tested)


def noise_model_hint(residuals, fitted) -> str | None:
    """One line when a state-space model of one output (`fitted` not an
    `InnovationSystem`) leaves residuals that are not white (`band_caveat`'s
    test): a polynomial structure with its own noise model may whiten them, and
    the option that fits one. `None` otherwise."""
    from ..._systems.innovation import InnovationSystem

    auto = np.abs(np.asarray(residuals.autocorrelation)[1:])
    if isinstance(fitted, InnovationSystem) or auto.ndim != 2 or auto.shape[1] != 1:
        return None
    if not auto.size or np.max(auto) <= _tested_bound(residuals):
        return None
    return (
        "the residuals are coloured: a model with its own noise model may explain "
        "them; fit one with config key 'fit.structure' armax or bj (one output; "
        "docs/structure-selection.md)"
    )


def _family_bound(bound: float, tested: int) -> float:
    """The 99 % bound of one lag (`Residuals.bound`, $2.58/\\sqrt{N_s}$) widened
    so that `tested` lags together stay within it with probability 99 %."""
    import statistics

    normal = statistics.NormalDist()
    one = normal.inv_cdf(1 - 0.01 / 2)
    every = normal.inv_cdf(1 - 0.01 / (2 * max(tested, 1)))
    return bound * every / one


def _of(names, i) -> str:
    return f" of {names[i]}" if names and len(names) > 1 else ""


def _lag_ranges(lags) -> str:
    """`[-3, 6, 7, 9]` as `"-3, 6 to 7, 9"`."""
    parts, run = [], []
    for lag in (int(v) for v in lags):
        if run and lag == run[-1] + 1:
            run.append(lag)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]} to {run[-1]}")
        run = [lag]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]} to {run[-1]}")
    return ", ".join(parts)


def with_caveat(notes: list[str], metrics: dict, residuals, fitted=None) -> list[str]:
    """The summary.md section `notes` (`uncertainty_notes`) with `band_caveat`'s
    line under its heading, also recorded in `metrics["uncertainty"]["caveat"]`
    (`None` when the residual tests pass), and `noise_model_hint`'s for the
    model `fitted` (`metrics["uncertainty"]["hint"]`)."""
    caveat = band_caveat(residuals)
    hint = noise_model_hint(residuals, fitted)
    metrics.setdefault("uncertainty", {})["caveat"] = caveat
    metrics["uncertainty"]["hint"] = hint
    if caveat is None:
        return notes
    hinted = [] if hint is None else [f"Hint: {hint}.", ""]
    return [*notes[:2], f"Caveat: {caveat}.", "", *hinted, *notes[2:]]
