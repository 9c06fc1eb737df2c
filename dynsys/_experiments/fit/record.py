"""What a `fit` run records: its `metrics.json` entries, headline numbers and
summary.md lines, gathered from the stages' results into one `Outcome`
(`output_outcome` for input–output data, `state_outcome` for measured states).
The run folder's files are written from it by `_experiments/report.py`."""

import numpy as np

from ..._sysid.channel_names import names_of
from ..outcome import loss_history_lines, Outcome
from .assumptions import assumption_lines
from .data import _columns
from .order import scan_metrics
from .tables import mean_fit_percent
from .uncertainty import with_caveat
from .validation import residual_metrics


SUMMARY_LABEL = "free-run fit % (100 = perfect)"


def _levels(levels) -> list[float] | None:
    return None if levels is None else np.asarray(levels).tolist()


def _matrices(model) -> dict:
    """The model's matrices as lists (`None` for those it does not have)."""
    return {
        name: None
        if getattr(model, name) is None
        else np.asarray(getattr(model, name)).tolist()
        for name in ("K", "B", "C", "D")
    }


def _column_names(data) -> dict[str, list[str]]:
    return {
        "states": list(data.state_names),
        "inputs": list(data.input_names),
        "outputs": list(data.output_names),
    }


def _head_notes(data, described: str, start_notes, result) -> list[str]:
    """The first lines of summary.md: the data, their columns, what was fitted."""
    notes = [
        f"Data: {data.run.source}.",
        "",
        f"Columns: {_columns(data.run.data)}.",
        "",
        *start_notes,
        described,
        "",
    ]
    if result.stop_reason is not None:
        notes += [f"Note: {result.stop_reason}.", ""]
    return notes


def _with_data_checks(metrics: dict, checks) -> dict:
    """`metrics` with the data checks, the split's overlap warning and an unused
    option's note first."""
    metrics["data_checks"] = checks.findings
    first = [f["message"] for f in checks.findings if f["kind"] == "unused_option"]
    if checks.overlap is not None:
        first.insert(0, checks.overlap["message"])
    if first:
        warned = metrics.setdefault("warnings", [])
        warned[:0] = [line.rstrip(".") + "." for line in first]
    return metrics


def _outcome(
    data, estimate, metrics, summary, figures, notes, neural, model=None
) -> Outcome:
    """What the run folder gets (the model `model`, else `estimate`'s; the loss
    history `estimate`'s); a simulated run also keeps its data."""
    result = estimate.result
    files = {"data.npz": data.run.data.save} if data.run.true_system is not None else {}
    if neural is not None:
        summary["neural_fit_percent"] = float(
            np.mean(neural.metrics["fit_percent"]["neural"])
        )
        figures = {**figures, **neural.figures}
        notes = [*notes, *neural.notes]
        files = {**files, **neural.files}
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABEL,
        history=loss_history_lines(result.losses, result.val_losses, "validation_loss"),
        model=result.model if model is None else model,
        figures=figures,
        notes=notes,
        files=files,
        names=names_of("fit", data.run.data),
    )


def _output_summary(rows: dict, which: str, clean_val) -> dict:
    """The headline numbers: each model's mean fit % in the last row (the truth's
    only against noise-free outputs)."""
    headline = list(rows.values())[-1]
    against = "noise-free outputs" if clean_val is not None else "measurements"
    return {
        f"{which} fit % vs {against}, {name}": mean_fit_percent(v)
        for name, v in headline.items()
        if name != "true" or clean_val is not None
    }


def output_outcome(
    config,
    data,
    checks,
    start,
    estimate,
    validation,
    eigenvalues,
    uncertainty,
    figures,
    neural,
    found,
) -> Outcome:
    """The `Outcome` of input–output data from the results of every stage (`data`
    a `FitData`, `checks` a `DataChecks`, `start` a `Start`, `estimate` the pair
    `(Estimate, final Estimate or None)`, ...; `neural` a `NeuralStage` or None;
    `found` the run's warnings). The model kept is the final one when there is
    one."""
    fit_cfg = config["fit"]
    estimate, final = estimate  # the fit's keys describe the first (choosing) fit
    result = estimate.result
    fitted = (final if final is not None else estimate).fitted  # the saved model
    report, channels = data.report, list(data.report.output_names)
    metrics = {
        "source": data.run.source,
        "columns": _column_names(data.run.data),
        "model": fit_cfg["model"],
        **_structure_metrics(start, fitted, fit_cfg),
        "loss": fit_cfg["loss"] if start.polynomial is None else "prediction",
        "loss_window": estimate.window,
        "stable_refit": (
            None if estimate.stable_refit is None else estimate.stable_refit.metrics()
        ),
        "optimizer": estimate.optimiser,
        "steps_run": int(len(result.losses)),
        "steps_continued": estimate.continued,
        "best_step": int(result.best_step),
        "stop_reason": estimate.stop_reason,
        "warnings": list(found),
        "dt": report.dt,
        "offset_removed": fitted.output_level is not None,
        "stabilised_start": start.begin is not start.subspace,
        "input_delay": None if start.delay is None else list(start.delay.delays),
        "input_delay_estimated": None if start.delay is None else start.delay.estimated,
        "input_level": _levels(fitted.input_level),
        "output_level": _levels(fitted.output_level),
        "fit_metrics": result.metrics,
        "fit_percent": validation.rows,
        "fit_percent_channels": channels,
        "residuals": residual_metrics(validation.residuals),
        "eigenvalues": eigenvalues,
        **_matrices(fitted),
        "timing": {
            "subspace_seconds": start.seconds,
            "fit_seconds": estimate.seconds,
            "validation_seconds": validation.seconds,
        },
        **uncertainty.metrics,
        **_roles_metrics(config, data, validation.final),
    }
    if final is not None:
        metrics["timing"]["refit_seconds"] = final.seconds
        metrics["final_model"].update(
            steps_run=int(len(final.result.losses)),
            stop_reason=final.stop_reason,
            fit_metrics=final.result.metrics,
        )
    if neural is not None:
        metrics["neural"] = neural.metrics
    described = _described(start, estimate, fit_cfg)
    notes = _head_notes(data, described, start.notes, result)
    if estimate.stable_refit is not None:
        line = estimate.stable_refit.line()
        notes += [f"{line[0].upper()}{line[1:]}.", ""]
    notes += _roles_notes(config, data, validation.final)
    notes += [f"Warning: {line}" for line in found] + [""] * bool(found)
    assumed = assumption_lines(start, estimate, validation)
    notes += [f"Note: {line}." for line in assumed] + [""] * bool(assumed)
    notes += with_caveat(
        uncertainty.notes, metrics, validation.residuals, validation.models["fitted"]
    )
    summary = _output_summary(validation.rows, data.which, data.clean_val)
    summary.update(_final_summary(validation.final))
    metrics = _with_data_checks(metrics, checks)
    kept = final.result.model if final is not None else None
    return _outcome(data, estimate, metrics, summary, figures, notes, neural, kept)


def _structure_metrics(start, fitted, fit_cfg: dict) -> dict:
    """The keys of metrics.json about the model's structure: `structure`, the
    order (state size), the structure scan, the singular values; a polynomial
    structure's orders and the Kalman gain under `polynomial`."""
    if start.polynomial is None:
        return {
            "structure": "state-space",
            "order": start.structure.state_size,
            "order_chosen": fit_cfg["order"] is None,
            **scan_metrics(start.scan, start.structure, fit_cfg),
            "singular_values": start.singular_values.tolist(),
        }
    return {
        "structure": fit_cfg["structure"],
        "order": int(fitted.state_size),
        "order_chosen": start.polynomial["orders_chosen"],
        "feedthrough": fitted.D is not None,
        "feedthrough_chosen": start.polynomial["orders_chosen"],
        "structure_scan": None,
        "singular_values": None,
        "polynomial": start.polynomial,
        "kalman_gain": np.asarray(fitted.kalman_gain).tolist(),
    }


def _described(start, estimate, fit_cfg: dict) -> str:
    """summary.md's line on what was fitted."""
    from .polynomial import NAMES, orders_text

    if start.polynomial is None:
        return (
            f"Subspace start of order {start.structure.state_size} ({start.chosen}); "
            f"output-error fit with {estimate.optimiser}, {fit_cfg['loss']} loss."
        )
    described = start.polynomial
    return (
        f"{NAMES[described['structure']]} model "
        f"({orders_text(described['orders'])}; {start.chosen}), fitted by "
        f"{estimate.optimiser} of the one-step prediction errors; saved as an "
        f"InnovationSystem of state size {described['state_size']} (its Kalman "
        "predictor is the model's one-step predictor)."
    )


def _roles_metrics(config, data, scores) -> dict:
    """metrics.json's `selection`: which data chose the structure and the kept
    step, which only scored the final model, whether the reported held-out fit %
    is optimistic; and `final_model`, the final refit's scores (`None` without)."""
    on_file = config["data"]["select_on_validation"] and data.run.validation is not None
    return {
        "selection": {
            "chosen_on": "the validation file"
            if on_file
            else "held-out part of the estimation data"
            if data.carved
            else "the estimation data (AIC)",
            "test": "the validation file" if data.test is not None else None,
            "held_out_fit_optimistic": bool(on_file),
            "refit_on_all_estimation_data": scores is not None,
        },
        "final_model": None
        if scores is None
        else {
            "first_part_held_out_fit_percent": scores["first_part_held_out"],
            "first_part_held_out_window": scores["first_part_held_out_window"],
            "test_fit_percent": scores["final_test"],
            "estimation_fit_percent": scores["final_estimation"],
            "estimation_fit_window": scores["final_estimation_window"],
            "estimation_fit_is_held_out": False,
        },
    }


def _roles_notes(config, data, scores) -> list[str]:
    """summary.md's lines on which data chose, which tested, and the final refit."""
    from .tables import final_lines

    notes = []
    if config["data"]["select_on_validation"] and data.run.validation is not None:
        notes += [
            "Optimistic: the validation file chose the structure and the kept "
            "optimiser step (config key 'data.select_on_validation'), so its "
            "held-out fit % is not a clean test.",
            "",
        ]
    elif data.test is not None:
        notes += [
            "The validation file is a clean test: the structure and the kept "
            "optimiser step were chosen on a part carved from the estimation data"
            + ("" if data.carved else " (none could be: AIC chose)")
            + "; the final model never saw the validation file.",
            "",
        ]
    lines = final_lines(scores)
    if lines:
        notes += [lines[0][0].upper() + lines[0][1:] + ":", ""]
        notes += [f"- {line}" for line in lines[1:]]
        if data.test is None:
            notes.append(
                "- the tables and figures show the model fitted on the first part "
                "(the final model cannot be scored on the held-out part honestly)"
            )
        notes.append("")
    return notes


def _final_summary(scores) -> dict:
    """The headline numbers of the final refit (none without one)."""
    if scores is None:
        return {}
    summary = {
        "held-out fit %, first part's model": mean_fit_percent(
            scores["first_part_held_out"]
        ),
        "estimation-data fit % (not held out), final": mean_fit_percent(
            scores["final_estimation"]
        ),
    }
    if scores["final_test"] is not None:
        summary["test fit %, final"] = mean_fit_percent(scores["final_test"])
    return summary


def state_outcome(config, data, checks, estimate, scores, eigenvalues, figures):
    """The `Outcome` of measured states (`scores` a `StateScores`)."""
    fit_cfg = config["fit"]
    result, fitted = estimate.result, estimate.fitted
    headline = list(scores.rows.values())[-1]
    against = "noise-free truth" if data.clean_val is not None else "measurements"
    summary = {f"{data.which} fit % vs {against}, {k}": v for k, v in headline.items()}
    metrics = {
        "source": data.run.source,
        "columns": {
            "states": list(data.run.data.state_names),
            "inputs": list(data.run.data.input_names),
        },
        "model": fit_cfg["model"],
        "loss": fit_cfg["loss"],
        "optimizer": estimate.optimiser,
        "steps_run": int(len(result.losses)),
        "best_step": int(result.best_step),
        "stop_reason": result.stop_reason,
        "fit_metrics": result.metrics,
        "fit_percent": scores.rows,
        "eigenvalues": eigenvalues,
        "K": np.asarray(fitted.K).tolist(),
        "B": None if fitted.B is None else np.asarray(fitted.B).tolist(),
        "timing": {"fit_seconds": estimate.seconds},
    }
    described = (
        f"Least-squares start, then a {fit_cfg['loss']}-loss fit with "
        f"{estimate.optimiser}."
    )
    notes = _head_notes(data, described, [], result)
    metrics = _with_data_checks(metrics, checks)
    return _outcome(data, estimate, metrics, summary, figures, notes, None)
