"""The `fit` kind of experiment: data in, a fitted model and its validation out.

`run_fit` is the recipe; each stage is a function in its own module that takes
and returns small frozen dataclasses:

    load_data → check_data → (input–output data) estimate_outputs
    (`identify.py`: the structure scan and the subspace start, the output-error
    fit, the refit on all the estimation data; the stages `dynsys.identify`
    runs) → validate_outputs → the tables → submit_plain_figures →
    assess_uncertainty → output_figures → the neural stage → output_outcome

Two paths share the data handling:

- data whose states are measured (`xs`, no `ys`): one-step least squares, then the
  fit of the free run, as in the first release;
- input–output data (`ys`): the subspace start, the output-error fit and the
  validation views (`compare`, residuals, Bode) of the system-identification
  workflow.

The run folder's `metrics.json` and `summary.md` are written from the `Outcome`
by `_experiments/report.py`.
"""

from ..config import ConfigError
from ..outcome import Outcome
from ..runtime import figure_helper
from ..runtime.compile_clock import stage
from .data import FitData, load_data
from .data_checks import check_data, DataChecks
from .estimate import fit_model, stable_if_asked
from .figures import output_figures, state_figures, submit_plain_figures
from .identify import estimate_outputs
from .input_delay import check_input_delay
from .polynomial import check_structure_choice
from .record import output_outcome, state_outcome
from .states import least_squares_start, score_free_runs
from .tables import echo_outputs, echo_states
from .uncertainty import assess_uncertainty
from .validation import validate_outputs


def run_fit(config: dict, *, progress: bool, echo) -> Outcome:
    """Fit a linear (or stable linear) model to simulated or recorded data."""
    figure_helper.start()  # a helper process for the figures at the end
    data = load_data(config, echo)
    checks = check_data(config, data, echo)
    _check_model_choice(config, data)
    check_structure_choice(config, data)
    check_input_delay(config, data)
    if data.run.data.ys is None:
        return _fit_states(config, data, checks, progress, echo)
    return _fit_outputs(config, data, checks, progress, echo)


def _check_model_choice(config: dict, data: FitData) -> None:
    """A neural model needs outputs, and windows that fit the data."""
    if config["fit"]["model"] != "neural":
        return
    if data.run.data.ys is None:
        raise ConfigError(
            "config key 'fit.model': 'neural' needs data with outputs (ys), got "
            "states only; use 'linear' or 'stable'."
        )
    from .neural import check_windows

    itemsize = 8 if config["precision"] == "float64" else 4
    check_windows(config["fit"], data.train, data.val, itemsize, data.estimation)


def _fit_outputs(
    config: dict, data: FitData, checks: DataChecks, progress: bool, echo
) -> Outcome:
    """Input–output data: the subspace start, the output-error fit, and the models'
    validation on the held-out (or else the training) data."""
    found: list[str] = []  # the run's warnings, added to by the stages
    # The estimation stages, composed once for this and `dynsys.identify`.
    stages = estimate_outputs(config, data, progress, found, echo)
    start, estimate, final = stages.start, stages.estimate, stages.final
    validation = validate_outputs(data, start, estimate, found, final)
    # The views (figures, uncertainty) show the model the tables score as "fitted".
    shown = final if final is not None and data.test is not None else estimate
    channels = list(data.report.output_names)
    eigenvalues = echo_outputs(start, shown, validation, channels, echo, final)
    plain = submit_plain_figures(data, start, validation, shown)  # drawn meanwhile
    delay = start.delay
    delayed = delay is not None and any(delay.delays)
    uncertainty = assess_uncertainty(data.report, shown, delayed)
    figures = output_figures(data, validation, uncertainty, plain)
    # The neural model builds on the model fitted on the first part: its early
    # stopping on the held-out part stays honest (the final model has seen it).
    neural = _neural_stage(config, data, estimate, final, progress, echo)
    return output_outcome(
        config,
        data,
        checks,
        start,
        (estimate, final),
        validation,
        eigenvalues,
        uncertainty,
        figures,
        neural,
        found,
    )


def _neural_stage(config: dict, data: FitData, estimate, final, progress, echo):
    """`model = "neural"`: a `NeuralStage` (a neural model on the fitted linear
    one, both scored side by side; the saved one trained again on all the
    estimation data, on the `final` linear model, when a part was carved); else
    `None`."""
    if config["fit"]["model"] != "neural":
        return None
    from .neural import neural_stage

    final_linear = None if final is None else final.fitted
    with stage("neural"):
        return neural_stage(
            config, data, estimate.fitted, final_linear, progress, echo
        )


def _fit_states(
    config: dict, data: FitData, checks: DataChecks, progress: bool, echo
) -> Outcome:
    """Measured states: the least-squares start, the fit of the free run, and both
    models' free runs scored on the held-out (or else the training) data."""
    start = least_squares_start(config, data.train)
    estimate = fit_model(
        config, stable_if_asked(config["fit"], start), data.train, data.val, progress
    )
    scores = score_free_runs(data, start, estimate)
    eigenvalues = echo_states(estimate, scores.models, scores.rows, scores.runs, echo)
    figures = state_figures(config, data, scores, estimate)
    return state_outcome(config, data, checks, estimate, scores, eigenvalues, figures)
