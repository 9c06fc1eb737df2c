"""The fit stage of a `fit` experiment: the optimiser and loss of the config, and
the fit from a start (`fit_model`; `fit_outputs_model` for input–output data, with
its warnings and console line)."""

import dataclasses
import time
from typing import Any

from ..._distributed import share_between_processes
from ..._compile.jit import host_key
from ..runtime.compile_clock import stage
from . import checks as fit_checks
from .order import final_size, refined_size
from .typed_config import FitConfig


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The fit stage's result."""

    result: Any  # the `FitResult`
    fitted: Any  # its model as a linear system
    seconds: float
    optimiser: str  # the optimiser, in words (metrics.json "optimizer")
    continued: int  # steps continued from the structure scan's refinement
    stop_reason: str | None  # for metrics.json
    # The output-error loss's window where the start has an unstable mode
    # (`unstable_window.py`), else `None`.
    window: int | None = None
    # Where the fit from a stable start drifted unstable: the stable refit's
    # scores and which model was kept (`stable_drift.py`), else `None`.
    stable_refit: Any = None


def stable_if_asked(fit_cfg: dict, model):
    """`model` as a `StableLinearSystem` when the config asks for one."""
    from ..._systems.stable import StableLinearSystem

    if fit_cfg["model"] == "stable":
        return StableLinearSystem.from_linear(model)
    return model


def as_linear(model):
    """A stable linear model as the linear system it is; other models (an
    `InnovationSystem`, whose noise model the validation's residuals use) as they
    are."""
    from ..._systems.innovation import InnovationSystem

    if isinstance(model, InnovationSystem):
        return model
    return model.to_linear() if hasattr(model, "to_linear") else model


def fit_model(
    config,
    start_model,
    train_data,
    val_data,
    progress,
    size=None,
    resume=None,
    stage_name="fit",
) -> Estimate:
    """The output-error fit; padded to `size` (`(order, feedthrough)`, the
    structure scan's: `refined_size`) where given, so that it runs in the scan's
    compiled program; continuing `resume` (the scan's refinement of the same
    start, a `FitResult`) where it is a run of the same problem, else afresh;
    its time charged to the stage `stage_name`. The simulation loss of a start
    with an unstable mode that a free run over the record could not hold is taken
    over windows (`unstable_window.py`), as the scan refined it."""
    import functools

    from ..._fitting.continuation import NotResumable
    from ..._fitting.fit import fit
    from ..._fitting.fit_padded import fit_padded
    from ..._fitting.unstable_window import windowed_loss

    options = FitConfig.from_section(config["fit"], train_data)
    arguments = options.arguments()
    windows = None
    if config["fit"]["loss"] == "simulation":
        windows = windowed_loss(start_model, train_data, val_data)
    if windows is not None:
        arguments["loss"] = windows
    started = time.perf_counter()
    fitter = functools.partial(
        fit if size is None else fit_padded,
        **({} if size is None else {"size": size[0], "feedthrough": size[1]}),
        **arguments,
        key=host_key(config["seed"] + 1),
        progress=progress,
        val_data=val_data,
    )
    data = share_between_processes(train_data)  # several processes: each its slice
    with stage(stage_name):
        try:
            result = fitter(start_model, data, resume=resume)
            continued = 0 if resume is None else len(resume.losses)
        except NotResumable:  # another problem (a stabilised start, other options)
            result, continued = fitter(start_model, data), 0
    seconds = time.perf_counter() - started
    used = getattr(result, "optimizer", None) or options.described
    fitted = as_linear(result.model)
    window = None if windows is None else windows.horizon
    return Estimate(
        result, fitted, seconds, used, continued, result.stop_reason, window
    )


def fit_outputs_model(config, start, train, val, progress, found, echo) -> Estimate:
    """The output-error fit from `start` (a `Start`), continuing the structure
    scan's refinement where it can; where it drifted unstable from a stable start,
    the stable refit of `stable_drift.py` when it validates as well. The warnings
    (of the fit kept) go to `found`."""
    from .stable_drift import drifted, stable_refit

    fit_cfg = config["fit"]
    scan, begin = start.scan, start.begin
    resume = None
    if scan is not None and begin is start.subspace:
        resume = scan[0].fit_result  # the scan refined this very start
    said: list[str] = []  # the warnings of the fit kept
    with fit_checks.captured_warnings(said):
        estimate = fit_model(
            config,
            stable_if_asked(fit_cfg, begin),
            train,
            val,
            progress,
            refined_size(scan, begin, train),
            resume,
        )
    _echo_fit(fit_cfg, estimate, echo)
    if drifted(fit_cfg, begin, estimate, train, val):
        stable_said: list[str] = []
        with fit_checks.captured_warnings(stable_said):
            kept, refit = stable_refit(
                fit_model, config, estimate, train, val, progress
            )
        if refit.kept_stable:
            said = stable_said
        echo(f"  {refit.line()}")
        estimate = dataclasses.replace(kept, stable_refit=refit)
    for line in said:
        fit_checks.add(found, line)
    stop_reason = fit_checks.stop_reason(estimate.result)
    fit_checks.fit_warnings(estimate.result, stop_reason, found)
    fit_checks.model_warnings("fitted", estimate.fitted, train, found)
    return dataclasses.replace(estimate, stop_reason=stop_reason)


def _echo_fit(fit_cfg: dict, estimate: Estimate, echo) -> None:
    """The console line of the fit: loss, optimiser, steps, seconds, best step."""
    result, continued = estimate.result, estimate.continued
    scanned = f" ({continued} of them the structure scan's)" if continued else ""
    kind = "prediction-error" if fit_cfg["loss"] == "prediction" else "output-error"
    echo(
        f"  {kind} fit ({fit_cfg['loss']} loss{over_windows(estimate)}, "
        f"{estimate.optimiser}): "
        f"{len(result.losses)} steps{scanned}, {estimate.seconds:.1f} s, best "
        f"step {result.best_step}"
    )


def over_windows(estimate: Estimate) -> str:
    """`" over windows of N steps, ..."` for a fit whose start has an unstable
    mode (`Estimate.window`), else `""`."""
    if estimate.window is None:
        return ""
    return (
        f" over windows of {estimate.window} steps, each from its own initial "
        "state: the start's unstable mode would swamp a free run of the whole record"
    )


# The refit on all the estimation data starts from the model fitted on their first
# part (already at a minimum of a problem of the same kind) and takes at most this
# many optimiser steps (as each refined candidate of the scan): with no data left
# to choose a step on, a long run drifts. On the shared records 200 steps drifted
# to unstable models on four of six (max |eigenvalue| 1.0007 to 1.0080), and cost
# up to 242 s (cd_player_arm).
REFIT_STEPS = 30


def _unstable_predictor(model, found: list[str], echo) -> bool:
    """Whether `model` has a noise model whose Kalman predictor is unstable (a
    prediction-error fit cannot start from it), with the warning that the refit
    is skipped."""
    from ..._fitting.prediction_fit import predictor_radius
    from ..._systems.innovation import InnovationSystem

    if not isinstance(model, InnovationSystem):
        return False
    radius = predictor_radius(model)
    if radius < 1.0:
        return False
    line = (
        f"the fitted model's Kalman predictor is unstable (spectral radius of K - L C "
        f"{radius:.4g}), so the refit on all the estimation data cannot start from "
        "it: the model fitted on their first part is kept as the final one"
    )
    echo(f"  warning: {line}")
    fit_checks.add(found, line)
    return True


def refit_config(config: dict) -> dict:
    """`config` with the refit's step cap (`REFIT_STEPS`, or fewer if asked)."""
    steps = config["fit"]["steps"]
    capped = min(steps, REFIT_STEPS) if steps is not None else REFIT_STEPS
    return {**config, "fit": {**config["fit"], "steps": capped}}


def refit_on_estimation_data(config, estimate, data, progress, found, echo, ahead=None):
    """The final model when the held-out data were carved from the estimation data
    (`data.carved`): the chosen structure refitted on all of them, from the model
    `estimate` fitted on their first part, for at most `REFIT_STEPS` steps. No
    data are left to choose a step on, so the fit keeps its lowest loss; the
    held-out part is now part of its training data, so the final model cannot be
    scored on it honestly. `None` (the first part's model kept, with a warning)
    when the refit ends unstable while the first part's model is stable.
    `ahead`: a `RefitAhead` compiling the refit's program meanwhile, waited for."""
    short = refit_config(config)
    said: list[str] = []  # the refit's own warnings: only for a refit that is kept
    if _unstable_predictor(estimate.result.model, found, echo):
        return None
    if ahead is not None:
        with stage("refit"):
            ahead.wait()
    begin = estimate.result.model
    if estimate.stable_refit is not None and estimate.stable_refit.kept_stable:
        # The stable refit of a drift (`stable_drift.py`) is refitted as the
        # linear system it is: the program compiled ahead, a cold run spared the
        # compiling of the stable one's at another length. Should it drift again,
        # the stable first part's model is kept (below).
        begin = estimate.fitted
    with fit_checks.captured_warnings(said):
        final = fit_model(
            short,
            begin,
            data.estimation,
            None,
            progress,
            final_size(begin, data.estimation),
            stage_name="refit",
        )
    rho_final = fit_checks.spectral_radius(final.fitted)
    rho_first = fit_checks.spectral_radius(estimate.fitted)
    if rho_final >= 1.0 > rho_first:
        line = (
            "the refit on all the estimation data ended unstable (max |eigenvalue| "
            f"{rho_final:.4f}) where the model fitted on their first part is stable "
            f"({rho_first:.4f}): that model is kept as the final one"
        )
        echo(f"  warning: {line}")
        fit_checks.add(found, line)
        return None
    for line in said:
        fit_checks.add(found, line)
    stop_reason = fit_checks.stop_reason(final.result)
    fit_checks.model_warnings("final", final.fitted, data.estimation, found)
    echo(
        f"  final model: the chosen structure refitted on all the estimation data "
        f"({sum(data.estimation.lengths)} samples, the held-out part included"
        f"{'' if final.window is None else f'; over windows of {final.window} steps'}"
        f"): {len(final.result.losses)} steps, {final.seconds:.1f} s"
    )
    return dataclasses.replace(final, stop_reason=stop_reason)
