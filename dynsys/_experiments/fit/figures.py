"""The figures of a `fit` experiment: comparison, residuals, Bode, step and
singular values for input-output data; trajectories, eigenvalues, loss and phase
portraits for measured states; `submit_plain_figures`, `output_figures` and
`state_figures` are the stages that make them."""

import numpy as np

from ..runtime import figure_helper
from ..runtime.compile_clock import stage
from ..runtime.heap import earlier_objects_frozen
from .order import scan_figure


def _time_label(data) -> str:
    return "t (s)" if data.dt is not None else "t (steps)"  # as plot's time axes


def _times(data) -> np.ndarray:
    if data.ts is not None:
        return np.asarray(data.ts)
    return np.arange(data.num_steps + 1)


# ---------------------------------------------------------------------------------
# The path for input-output data.


# Figure roles of the models a fit run draws (see `dynsys.plot.STYLES`).
ROLES = {"least squares": "estimate", "subspace": "estimate", "fitted": "fit"}


def _plain_figures(report, singular_values, order, residuals, result) -> dict:
    """The figures of input-output data that do not show the fitted model's
    uncertainty (drawn while it is computed: `figure_helper.submit`)."""
    from ... import plot

    p = report.output_size
    figures = {}
    if singular_values is not None:  # none for a polynomial structure
        figures["singular_values.png"] = plot.singular_values(
            singular_values, order=order
        )
    figures["residuals.png"] = plot.residuals(
        residuals, channels=None if p <= 8 else range(8)
    )
    if len(result.losses):  # a polynomial fit has no optimiser history
        figures["loss.png"] = _loss_figure(
            result,
            "output-error loss",
            "output error (each channel's squared error / its variance)",
        )
    return figures


def _output_figures(
    report, comparisons, models, truth, which, plain, extras=None, caveat=None
):
    """Every figure of input-output data, in the run folder's order: those that
    show the model's uncertainty, drawn here, with the `plain` ones
    (`_plain_figures`, and the structure scan's last). `extras`: figure file → more
    keyword arguments of its plot function (the data's spectral estimate, the fitted
    model's confidence bands); `caveat`: a line under the title of each figure that
    draws a band (`band_caveat`: the residual tests failed), or `None`."""
    from ... import plot

    extras = extras or {}
    flag = _band_flag(extras, caveat)
    estimated = {k: v for k, v in models.items() if k != "true"}
    true_system = models.get("true")
    T0 = report.lengths[0]
    dt = report.dt
    p = report.output_size
    responses = dict(  # the Bode and step-response figures' common settings
        truth=true_system,
        roles=ROLES,
        dt=dt,
        output_names=list(report.output_names),
        input_names=list(report.input_names) or None,
        outputs=None if p <= 4 else range(4),
    )
    figures = {}
    pages = plot.pages(p)  # several pages for many outputs
    shown = {k: v for k, v in comparisons.items() if k != "true"}
    N = report.num_trajectories
    # The fit % the console prints: over every held-out experiment.
    printed = {label: np.asarray(c.fit_percent) for label, c in shown.items()}
    where = (
        f"{which} data" if N == 1 else f"{which} experiment 0 of {N} (fit % over all)"
    )
    for k, page in enumerate(pages):
        of = f", page {k + 1} of {len(pages)}" if len(pages) > 1 else ""
        figures[_page_file("comparison", k)] = plot.comparison(
            shown,
            experiment=0,
            truth=None if truth is None else truth[:T0],
            fit_percent=printed,
            roles=ROLES,
            channels=page,
            dt=dt,
            title=f"{where}: free run from the estimated initial state{of}"
            + flag("comparison.png", "bands"),
            **extras.get("comparison.png", {}),
        )
    figures |= _zoomed_comparison(
        report, shown, ROLES, where, extras.get("comparison.png", {})
    )
    figures |= {
        "singular_values.png": plain.get("singular_values.png"),
        "bode.png": plot.bode(
            estimated,
            **responses,
            title=flag("bode.png", "confidence").strip() or None,
            **extras.get("bode.png", {}),
        ),
        "step_response.png": plot.step_response(
            estimated,
            **responses,
            title=flag("step_response.png", "confidence").strip() or None,
            **extras.get("step_response.png", {}),
        ),
        "residuals.png": plain["residuals.png"],
        "eigenvalues.png": plot.eigenvalues(
            estimated,
            truth=true_system,
            roles=ROLES,
            dt=dt,
            title="eigenvalues of K" + flag("eigenvalues.png", "confidence"),
            **extras.get("eigenvalues.png", {}),
        ),
        "loss.png": plain.get("loss.png"),
    }
    figures = {name: f for name, f in figures.items() if f is not None}
    return figures | plain  # the rest of `plain` (the structure scan's) last


# A drawn record longer than this also gets comparison_zoom.png: `_ZOOM_STEPS`
# samples where the fitted model's error is largest, so that errors can be read.
_ZOOM_AFTER, _ZOOM_STEPS = 600, 200


def _zoomed_comparison(report, comparisons, roles, where, band) -> dict:
    """`{"comparison_zoom.png": figure}` for a long first experiment (one page of
    at most 4 channels), else `{}`: `_ZOOM_STEPS` samples centred on the fitted
    model's largest error, each model's fit % over those samples in the legend."""
    from ... import plot
    from ..._fitting.metrics import channel_fit_percent

    first = next(iter(comparisons.values()))
    T = int(first.lengths[0])
    if T <= _ZOOM_AFTER:
        return {}
    measured = np.asarray(first.measured)[0, :T]
    error = np.abs(measured - np.asarray(comparisons["fitted"].predicted)[0, :T])
    scale = np.maximum(np.std(measured, axis=0), 1e-300)
    centre = int(np.argmax(np.max(error / scale, axis=1)))
    start = int(np.clip(centre - _ZOOM_STEPS // 2, 0, T - _ZOOM_STEPS))
    window = slice(start, start + _ZOOM_STEPS)
    predictions = {
        k: np.asarray(c.predicted)[0, :T][window] for k, c in comparisons.items()
    }
    fits = {
        k: np.asarray(channel_fit_percent(measured[window], v, xp=np))
        for k, v in predictions.items()
    }
    times = np.arange(T)[window] * (report.dt or 1.0)  # as comparison.png's axis
    bands = {k: np.asarray(v)[:T][window] for k, v in band.get("bands", {}).items()}
    p = measured.shape[1]
    figure = plot.comparison(
        times,
        measured[window],
        predictions,
        fit_percent=fits,
        roles=roles,
        names=list(report.output_names),
        channels=None if p <= 4 else range(4),
        time_label=_time_label(report),
        title=f"{where}, samples {start}–{start + _ZOOM_STEPS - 1} (zoom on the "
        "largest error): fit % over these samples",
        **({"bands": bands, "level": band["level"]} if bands else {}),
    )
    return {"comparison_zoom.png": figure}


def _band_flag(extras: dict, caveat):
    """`flag(file, key)`: a new title line with the caveat for a figure whose
    `extras` hold a band (`key`), else `""`."""
    from .uncertainty import FIGURE_CAVEAT

    def flag(file: str, key: str) -> str:
        drawn = caveat is not None and extras.get(file, {}).get(key)
        return f"\n{FIGURE_CAVEAT}" if drawn else ""

    return flag


def _loss_figure(result, title, ylabel):
    from ... import plot

    return plot.loss_history(
        result.losses,
        result.val_losses,
        best_step=result.best_step,
        stop_reason=result.stop_reason,
        ylabel=ylabel,
        title=title,
    )


def _page_file(stem: str, k: int) -> str:
    """`stem.png` for the first page of a figure, `stem_<k+1>.png` after it."""
    return f"{stem}.png" if k == 0 else f"{stem}_{k + 1}.png"


# ---------------------------------------------------------------------------------
# The path for measured states.


def _state_figures(report, runs, models, clean_val, result, fit_cfg, which):
    """The figures of a fit to measured states: trajectory 0 against each model's
    free run (in pages for many states), the eigenvalues, the loss."""
    from ... import plot
    from ..._fitting.metrics import fit_percent

    predictions = {label: xs[0] for label, xs in runs.items()}
    per_channel = {
        label: np.asarray(fit_percent(report.xs[0, 1:], xs[0, 1:], per_channel=True))
        for label, xs in runs.items()
    }
    estimated = {k: v for k, v in models.items() if k != "true"}
    dt = report.dt
    figures = {}
    pages = plot.pages(report.state_size)  # several pages for many states
    for k, page in enumerate(pages):
        of = f", page {k + 1} of {len(pages)}" if len(pages) > 1 else ""
        figures[_page_file("trajectories", k)] = plot.comparison(
            _times(report),
            np.asarray(report.xs[0]),
            predictions,
            truth=None if clean_val is None else np.asarray(clean_val.xs[0]),
            roles=ROLES,
            fit_percent=per_channel,
            names=list(report.state_names),
            channels=page,
            time_label=_time_label(report),
            title=f"{which} trajectory 0: free run from its first state "
            f"(fit % vs measurements){of}",
        )
    figures |= {
        "eigenvalues.png": plot.eigenvalues(
            estimated,
            truth=models.get("true"),
            roles=ROLES,
            dt=dt,
            title="eigenvalues of K",
        ),
        "loss.png": _loss_figure(
            result,
            f"{fit_cfg['loss']} loss ({fit_cfg['model']} model)",
            "mean squared state error (units² of the states)",
        ),
    }
    return figures


# ---------------------------------------------------------------------------------
# The figures stages.


def submit_plain_figures(data, start, validation, estimate) -> dict:
    """The figures of input–output data that need not wait for the uncertainty,
    handed to the figure helper (`figure_helper.submit`), which draws them while
    the uncertainty is computed (`data` a `FitData`, `start` a `Start`, ...)."""
    with stage("figures"), earlier_objects_frozen():
        plain = _plain_figures(
            data.report,
            start.singular_values,
            None if start.subspace is None else start.structure.state_size,
            validation.residuals,
            estimate.result,
        )
        plain |= scan_figure(start.scan, held_out=data.val is not None)
        return {name: figure_helper.submit(f) for name, f in plain.items()}


def output_figures(data, validation, uncertainty, plain) -> dict:
    """Every figure of input–output data, `plain` (`submit_plain_figures`) among
    them, by file name."""
    from .uncertainty import band_caveat

    truth = None if data.clean_val is None else np.asarray(data.clean_val.ys[0])
    with stage("figures"), earlier_objects_frozen():
        return _output_figures(
            data.report,
            validation.comparisons,
            validation.models,
            truth,
            data.which,
            plain,
            uncertainty.references,
            band_caveat(validation.residuals),
        )


def state_figures(config: dict, data, scores, estimate) -> dict:
    """The figures of measured states, by file name (`scores` a `StateScores`)."""
    with stage("figures"), earlier_objects_frozen():
        return _state_figures(
            data.report,
            scores.runs,
            scores.models,
            data.clean_val,
            estimate.result,
            config["fit"],
            data.which,
        )
