"""The validation stage of an input–output fit (`validate_outputs`): every model
compared with the held-out (or else the training) data, the fit % rows, and the
fitted model's residual analysis."""

import dataclasses
import time
from typing import Any

import numpy as np

from ..runtime.compile_clock import stage
from . import checks as fit_checks


@dataclasses.dataclass(frozen=True)
class Validation:
    """The validation stage's result."""

    models: dict  # name -> model, in the tables' order
    comparisons: dict  # name -> its `compare` on the report data
    rows: dict  # fit % rows: label -> model name -> per-channel list
    residuals: Any  # the fitted model's residual analysis
    seconds: float
    final: dict | None = None  # the final model's scores (`_final_scores`)


# The model fitted on the first part of the estimation data, when the final model
# is refitted on all of them: its name in the tables.
FIRST_PART = "first part"


def validate_outputs(data, start, estimate, found: list[str], final=None) -> Validation:
    """Score the models (the truth when known, the subspace start, the stabilised
    start when there is one, the fitted model) on `data.report` (`data`: a
    `FitData`); the warnings go to `found`.

    `final`: the refit on all the estimation data (an `Estimate`), when the
    held-out data were carved from them. With a clean test file it is the
    "fitted" model scored there, beside the first part's model; without one the
    tables score the first part's model on the carved part (the final model has
    seen it), and the final model's fit on the estimation data, not held out, is
    in `Validation.final`."""
    fitted = estimate.fitted
    if final is not None and data.test is not None:
        fitted = final.fitted
    models = {} if start.subspace is None else {"subspace": start.subspace}
    if start.begin is not start.subspace:
        models["stabilised"] = start.begin
    if final is not None and data.test is not None:
        models[FIRST_PART] = estimate.fitted
    models["fitted"] = fitted
    if data.run.true_system is not None:
        models = {"true": data.run.true_system, **models}
    report, which = data.report, data.which
    started = time.perf_counter()
    window = None if start.scan is None else start.scan[0].score_window
    with stage("validation"), fit_checks.captured_warnings(found):
        comparisons, rows, residuals = _compare(models, report, data.clean_val, which)
        if window is not None:  # as the scan scored: `OrderSelection.score_window`
            rows |= _windowed_rows(models, report, which, window)
        scores = _final_scores(data, estimate, final, window)
    seconds = time.perf_counter() - started
    if data.val is not None or data.test is not None:
        fitted_fit = np.asarray(comparisons["fitted"].fit_percent)
        fit_checks.validation_warnings(which, report.output_names, fitted_fit, found)
    return Validation(models, comparisons, rows, residuals, seconds, scores)


def _windowed_rows(models: dict, report, which: str, window: int) -> dict:
    """The fit % row of each model over windows of `window` steps of the report
    data, each from its own initial state: how the structure scan scored them
    where a free run of the whole held-out part cannot be scored."""
    from ..._fitting.unstable_window import in_windows
    from ..._sysid.validation import compare

    windows = in_windows(report, window)
    return {
        f"{which} fit % over windows of {window} steps vs measurements": {
            name: np.asarray(compare(m, windows).fit_percent).tolist()
            for name, m in models.items()
        }
    }


def _final_scores(data, estimate, final, window=None) -> dict | None:
    """What is known of the final model's quality, per channel: the held-out fit %
    of the first part's model on the carved part (`first_part_held_out`), the
    final model's on the clean test file (`final_test`, or `None`), and its fit %
    on all the estimation data it was fitted on (`final_estimation`: a training
    fit, not held out; over the windows it was fitted on when its start had an
    unstable mode, `final_estimation_window` steps: a free run of the whole record
    would be rounding noise). The first part's model is scored over the scan's
    windows of `window` steps where it scored over windows. `None` when there is
    no refit."""
    from ..._fitting.unstable_window import in_windows
    from ..._sysid.validation import compare

    if final is None:
        return None

    def percent(model, on) -> list[float]:
        return np.asarray(compare(model, on).fit_percent).tolist()

    return {
        "first_part_held_out": percent(estimate.fitted, in_windows(data.val, window)),
        "first_part_held_out_window": window,
        "final_test": None if data.test is None else percent(final.fitted, data.test),
        "final_estimation": percent(
            final.fitted, in_windows(data.estimation, final.window)
        ),
        "final_estimation_window": final.window,
    }


def _compare(models: dict, report, clean_val, which: str):
    """Each model's `compare` on the report data, the fit % rows (against the
    measurements, and the noise-free outputs when known), and the fitted model's
    residual analysis."""
    from ..._sysid.validation import compare, residual_analysis

    comparisons = {name: compare(m, report) for name, m in models.items()}
    rows = _prediction_rows(models, report, which)
    rows |= {
        f"{which} fit % vs measurements": {
            name: np.asarray(c.fit_percent).tolist() for name, c in comparisons.items()
        }
    }
    if clean_val is not None:
        clean_ys = np.asarray(clean_val.ys)
        mask = np.asarray(report.step_mask)
        rows[f"{which} fit % vs noise-free outputs"] = {
            name: _fit_percent_masked(clean_ys, np.asarray(c.predicted), mask)
            for name, c in comparisons.items()
        }
    max_lag = max(1, min(25, max(report.lengths) - 1))  # short data: fewer lags
    residuals = residual_analysis(models["fitted"], report, max_lag=max_lag)
    return comparisons, rows, residuals


def _prediction_rows(models: dict, report, which: str) -> dict:
    """The one-step prediction's fit % row of the models with a noise model
    (`InnovationSystem`: their Kalman predictor), first, so that the free run's
    row stays the headline; `{}` when none has one."""
    from ..._sysid.validation import compare
    from ..._systems.innovation import InnovationSystem

    noisy = {n: m for n, m in models.items() if isinstance(m, InnovationSystem)}
    if not noisy:
        return {}
    return {
        f"{which} 1-step prediction fit % (Kalman predictor)": {
            name: np.asarray(compare(m, report, horizon=1).fit_percent).tolist()
            for name, m in noisy.items()
        }
    }


def _fit_percent_masked(reference, predicted, mask) -> list[float]:
    """Fit % per channel over the valid steps, as `compare` reports it."""
    from ..._fitting.metrics import channel_fit_percent

    values = channel_fit_percent(reference, predicted, mask=mask, xp=np)
    return [float(v) for v in values]


def residual_metrics(residuals) -> dict[str, float]:
    """The largest residual auto-correlation past lag 0, and its bound."""
    autocorrelation = np.asarray(residuals.autocorrelation)[1:]
    return {
        "max_autocorrelation": float(np.max(np.abs(autocorrelation))),
        "bound": float(residuals.bound),
    }
