"""The `fit` kind of experiment: data in, a fitted model and its validation out.

Two paths share the data handling:

- data whose states are measured (`xs`, no `ys`): one-step least squares, then the
  fit of the free run, as in the first release;
- input–output data (`ys`): the subspace start, the output-error fit and the
  validation views (`compare`, residuals, Bode) of the system-identification
  workflow.
"""

import time

import numpy as np

from .._distributed import share_between_processes
from .._jit import host_key
from . import figure_helper, fit_checks
from .compile_clock import stage
from .config import ConfigError
from .data_checks import run_data_checks, split_overlap
from .fit_data import _columns, _from_file, _simulated, _split
from .fit_figures import _output_figures, _plain_figures, _state_figures
from .fit_order import (
    refined_size,
    scan_figure,
    scan_metrics,
    scan_notes,
    scan_structure,
    wants_scan,
)
from .fit_uncertainty import (
    bode_references,
    comparison_band,
    confidence_of,
    covariance_of,
    step_references,
    uncertainty_metrics,
    uncertainty_notes,
)
from .heap import earlier_objects_frozen
from .outcome import loss_history_lines, Outcome


SUMMARY_LABEL = "free-run fit % (100 = perfect)"


# ---------------------------------------------------------------------------------
# The optimiser and loss of the config.


def _solver(fit_cfg: dict):
    """`fit`'s `solver` from the config key `fit.optimizer` (None for the
    default), num_steps or None, a description."""
    name, steps = fit_cfg["optimizer"], fit_cfg["steps"]
    if name == "default":
        return None, steps, "the default optimiser"
    import optax

    if name == "lbfgs":
        return optax.lbfgs(), steps or 200, "L-BFGS"
    return optax.adam(fit_cfg["lr"]), steps or 400, f"Adam (lr {fit_cfg['lr']:g})"


def _loss(fit_cfg: dict, train_data):
    """`fit`'s loss object from the config key `fit.loss`."""
    from .._fitting.losses import MultipleShooting, OneStep, Simulation

    if fit_cfg["loss"] == "simulation":
        return Simulation()
    if fit_cfg["loss"] == "one_step":
        return OneStep()
    if fit_cfg["horizon"] > train_data.num_steps:
        raise ConfigError(
            f"config key 'fit.horizon': the shooting window ({fit_cfg['horizon']} "
            f"steps) is longer than the training experiments ({train_data.num_steps} "
            "steps)."
        )
    return MultipleShooting(fit_cfg["horizon"])


def _stable_if_asked(fit_cfg: dict, model):
    from .._systems.stable import StableLinearSystem

    if fit_cfg["model"] == "stable":
        return StableLinearSystem.from_linear(model)
    return model


def _as_linear(model):
    return model.to_linear() if hasattr(model, "to_linear") else model


def _fit_model(
    config, start_model, train_data, val_data, progress, size=None, resume=None
):
    """The output-error fit; padded to `size` (`(order, feedthrough)`, the
    structure scan's: `refined_size`) where given, so that it runs in the scan's
    compiled program; continuing `resume` (the scan's refinement of the same
    start, a `FitResult`) where it is a run of the same problem, else afresh.
    `(result, seconds, optimiser, steps continued)`."""
    import functools

    from .._fitting.continuation import NotResumable
    from .._fitting.fit import fit
    from .._fitting.fit_padded import fit_padded

    fit_cfg = config["fit"]
    solver, num_steps, described = _solver(fit_cfg)
    started = time.perf_counter()
    fitter = functools.partial(
        fit if size is None else fit_padded,
        **({} if size is None else {"size": size[0], "feedthrough": size[1]}),
        loss=_loss(fit_cfg, train_data),
        solver=solver,
        num_steps=num_steps,
        batch_size=fit_cfg["batch_size"],
        key=host_key(config["seed"] + 1),
        progress=progress,
        val_data=val_data,
    )
    data = share_between_processes(train_data)  # several processes: each its slice
    with stage("fit"):
        try:
            result = fitter(start_model, data, resume=resume)
            continued = 0 if resume is None else len(resume.losses)
        except NotResumable:  # another problem (a stabilised start, other options)
            result, continued = fitter(start_model, data), 0
    seconds = time.perf_counter() - started
    used = getattr(result, "optimizer", None) or described
    return result, seconds, used, continued


# ---------------------------------------------------------------------------------
# Shared reporting.


def _format_complex(z) -> str:
    sign = "+" if z.imag >= 0 else "-"
    return f"{z.real:.4f}{sign}{abs(z.imag):.4f}j"


def _match_eigenvalues(reference, others):
    """Reorder each array of eigenvalues to pair with `reference` (nearest first)."""
    matched = []
    for values in others:
        remaining = list(values)
        order = []
        for target in reference:
            k = int(np.argmin([abs(v - target) for v in remaining]))
            order.append(remaining.pop(k))
        matched.append(np.asarray(order))
    return matched


def _eigenvalue_table(models: dict, echo) -> dict:
    """Print the models' eigenvalues side by side (paired when the orders match)."""
    columns = {
        name: np.linalg.eigvals(np.asarray(_as_linear(model).K))
        for name, model in models.items()
    }
    first = next(iter(columns.values()))
    order = np.lexsort((-first.imag, -np.abs(first)))
    reference = first[order]
    same = all(len(v) == len(reference) for v in columns.values())
    if same:
        values = [reference, *_match_eigenvalues(reference, list(columns.values())[1:])]
    else:
        values = [np.sort_complex(v)[::-1] for v in columns.values()]
    width = 20
    echo(f"  {'eigenvalues':<16}" + "".join(f"{c:>{width}}" for c in columns))
    for k in range(max(len(v) for v in values)):
        cells = [_format_complex(v[k]) if k < len(v) else "" for v in values]
        echo(f"  {'':<16}" + "".join(f"{c:>{width}}" for c in cells))
    echo(
        f"  {'max |eigenvalue|':<16}"
        + "".join(f"{np.max(np.abs(v)):>{width}.4f}" for v in values)
    )
    return {
        name: [[float(z.real), float(z.imag)] for z in v]
        for name, v in zip(columns, values)
    }


def _fit_table(rows: dict, channels: list[str], echo) -> None:
    """rows: label -> model name -> per-channel fit % (a list)."""
    for label, by_model in rows.items():
        echo(f"  {label}")
        names = list(by_model)
        echo(f"    {'channel':<20}" + "".join(f"{n:>16}" for n in names))
        for c, channel in enumerate(channels):
            echo(
                f"    {channel:<20}"
                + "".join(f"{by_model[n][c]:>16.1f}" for n in names)
            )
        if len(channels) > 1:
            echo(
                f"    {'mean':<20}"
                + "".join(f"{np.mean(by_model[n]):>16.1f}" for n in names)
            )


def _outcome(run, result, metrics, summary, figures, notes) -> Outcome:
    """What the run folder gets; a simulated run also keeps its data."""
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABEL,
        history=loss_history_lines(result.losses, result.val_losses, "validation_loss"),
        model=result.model,
        figures=figures,
        notes=notes,
        files={"data.npz": run.data.save} if run.true_system is not None else {},
    )


def _stop_notes(result, echo) -> list[str]:
    if result.stop_reason is None:
        return []
    echo(f"  note: {result.stop_reason}")
    return [f"Note: {result.stop_reason}.", ""]


def _check_order(config: dict, train, val) -> None:
    """Refuse, before any work, an order above what the estimation data allow,
    held-out experiments too short for it, or data too short for subspace
    identification at all."""
    from .._sysid.subspace import largest_order

    fit_cfg, data_cfg = config["fit"], config["data"]
    try:
        largest = largest_order(train)
    except ValueError as error:
        raise ConfigError(f"config key 'data.file': {error}") from None
    order = fit_cfg["order"]
    if order is not None and order > largest and fit_cfg["subspace_horizon"] is None:
        raise ConfigError(
            f"config key 'fit.order': the estimation data ({sum(train.lengths)} "
            f"samples, {train.output_size} outputs) allow at most order {largest}, "
            f"got {order}."
        )
    if order is not None and val is not None and min(val.lengths) <= order:
        key = "data." + (
            "validation_file"
            if data_cfg["validation_file"] is not None
            else "validation_split"
            if data_cfg["file"] is not None
            else "validation"
        )
        raise ConfigError(
            f"config key '{key}': the held-out data keep {min(val.lengths)} samples "
            f"of an experiment, too few to validate a model of order {order} (its "
            "initial state alone has that many unknowns); hold out more."
        )


def _subspace_start(fit_cfg: dict, train, val, echo):
    """The subspace estimate, its singular values, the time it took, how its order
    was chosen and the structure scan (`None` when order and feedthrough are given;
    `fit_order.py`)."""
    from .._sysid.subspace import fit_subspace, subspace_singular_values

    started = time.perf_counter()
    horizon = fit_cfg["subspace_horizon"]
    offset = fit_cfg["offset"]
    try:
        singular_values = np.asarray(
            subspace_singular_values(train, horizon=horizon, offset=offset)
        )
    except ValueError as error:
        key = "fit.subspace_horizon" if "(horizon=" in str(error) else "fit.order"
        raise ConfigError(f"config key '{key}': {error}") from None
    scan = None
    if wants_scan(fit_cfg):
        with stage("structure scan"):
            scan, start, scan_seconds = scan_structure(fit_cfg, train, val, echo)
        scan = (scan, scan_seconds)
        by = "the held-out data" if val is not None else "AIC"
        chosen = f"chosen by a structure scan on {by}"
        if fit_cfg["order"] is not None:
            chosen = f"given; feedthrough chosen by a scan on {by}"
    else:
        try:
            start = fit_subspace(
                train,
                fit_cfg["order"],
                horizon=horizon,
                feedthrough=fit_cfg["feedthrough"],
                offset=offset,
            )
        except ValueError as error:
            key = "fit.subspace_horizon" if "(horizon=" in str(error) else "fit.order"
            raise ConfigError(f"config key '{key}': {error}") from None
        chosen = "given"
    if start.state_size > singular_values.size - train.output_size:
        # a scanned order above what the default horizon shows: a longer horizon
        horizon = -(-start.state_size // train.output_size) + 1
        singular_values = np.asarray(
            subspace_singular_values(train, horizon=horizon, offset=offset)
        )
    seconds = time.perf_counter() - started
    echo(f"  subspace start: order {start.state_size} ({chosen}), {seconds:.2f} s")
    return start, singular_values, seconds, chosen, scan


def _levels_note(start, echo) -> list[str]:
    """Say that the estimation data's means were removed and kept in the model."""
    if start.output_level is None:
        return []

    def values(levels) -> str:
        return ", ".join(f"{v:.4g}" for v in np.asarray(levels))

    line = (
        "operating point: the estimation data's means were removed and are kept in "
        f"the model (output level {values(start.output_level)}"
        + (
            f"; input level {values(start.input_level)})"
            if start.input_level is not None
            else ")"
        )
        + "; it simulates raw data in their units"
    )
    echo(f"  {line}")
    return [line[0].upper() + line[1:] + ".", ""]


def _stabilised_if_needed(fit_cfg: dict, start, train, found, echo):
    """The subspace start, or when it is unstable while the data look bounded (and
    `fit.stabilise`), the stabilised start; and a note saying which."""
    from .._sysid.stabilise import stabilised_start

    rho = fit_checks.spectral_radius(start)
    if rho < 1.0 or not fit_checks.looks_bounded(train):
        return start, []
    if not fit_cfg["stabilise"]:
        fit_checks.add(
            found,
            f"the subspace start is unstable (max |eigenvalue| {rho:.4f}) while the "
            "data look bounded; not stabilised (fit.stabilise = false)",
        )
        return start, []
    stable = stabilised_start(start, train)
    line = (
        f"the subspace start was unstable (max |eigenvalue| {rho:.4f}) while the "
        "data look bounded: the fit starts from it with the unstable eigenvalues "
        "reflected into the unit disc and B, D re-estimated (turn off with "
        "--no-stabilise)"
    )
    echo(f"  {line}")
    return stable, [line[0].upper() + line[1:] + ".", ""]


def _validate_outputs(models: dict, report, clean_val, which: str):
    """Each model's `compare` on the report data, the fit % rows (against the
    measurements, and the noise-free outputs when known), and the fitted model's
    residual analysis."""
    from .._sysid.validation import compare, residual_analysis

    comparisons = {name: compare(m, report) for name, m in models.items()}
    rows = {
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


def _fit_outputs(config, run, train, val, clean_val, progress, echo) -> Outcome:
    """Input–output data: the subspace start, the output-error fit, and the models'
    validation on the held-out (or else the training) data."""
    fit_cfg = config["fit"]
    found: list[str] = []  # the run's warnings
    _check_order(config, train, val)
    with stage("subspace"):
        start, singular_values, subspace_seconds, chosen, scan = _subspace_start(
            fit_cfg, train, val, echo
        )
    order = start.state_size
    first_notes = _levels_note(start, echo)
    first_notes += scan_notes(scan, held_out=val is not None)
    begin, stabilised = _stabilised_if_needed(fit_cfg, start, train, found, echo)
    first_notes += stabilised
    fit_checks.model_warnings("subspace start", begin, train, found)
    timing = {"subspace_seconds": subspace_seconds}
    with fit_checks.captured_warnings(found):
        result, timing["fit_seconds"], optimizer, continued = _fit_model(
            config,
            _stable_if_asked(fit_cfg, begin),
            train,
            val,
            progress,
            refined_size(scan, begin, train),
            scan[0].fit_result if scan is not None and begin is start else None,
        )
    fitted = _as_linear(result.model)
    stop_reason = fit_checks.stop_reason(result)
    fit_checks.fit_warnings(result, stop_reason, found)
    fit_checks.model_warnings("fitted", fitted, train, found)
    scanned = f" ({continued} of them the structure scan's)" if continued else ""
    echo(
        f"  output-error fit ({fit_cfg['loss']} loss, {optimizer}): "
        f"{len(result.losses)} steps{scanned}, {timing['fit_seconds']:.1f} s, best "
        f"step {result.best_step}"
    )

    report = val if val is not None else train
    which = "held-out" if val is not None else "training"
    models = {"subspace": start, "fitted": fitted}
    if begin is not start:
        models = {"subspace": start, "stabilised": begin, "fitted": fitted}
    if run.true_system is not None:
        models = {"true": run.true_system, **models}
    comparisons, rows, residuals = _validation_stage(
        models, report, clean_val, which, val is not None, timing, found
    )

    described = (
        f"Subspace start of order {order} ({chosen}); output-error fit with "
        f"{optimizer}, {fit_cfg['loss']} loss."
    )
    channels = list(report.output_names)
    notes, eigenvalues = _echo_outputs(
        run, result, described, models, rows, channels, timing, echo
    )
    notes[4:4] = first_notes
    notes += [f"Warning: {line}" for line in found] + [""] * bool(found)
    summary = _output_summary(rows, which, clean_val)
    metrics = {
        "source": run.source,
        "columns": _column_names(run.data),
        "model": fit_cfg["model"],
        "order": order,
        "order_chosen": fit_cfg["order"] is None,
        **scan_metrics(scan, start, fit_cfg),
        "singular_values": singular_values.tolist(),
        "loss": fit_cfg["loss"],
        "optimizer": optimizer,
        "steps_run": int(len(result.losses)),
        "steps_continued": continued,
        "best_step": int(result.best_step),
        "stop_reason": stop_reason,
        "warnings": found,
        "dt": report.dt,
        "offset_removed": start.output_level is not None,
        "stabilised_start": begin is not start,
        "input_level": _levels(fitted.input_level),
        "output_level": _levels(fitted.output_level),
        "fit_metrics": result.metrics,
        "fit_percent": rows,
        "fit_percent_channels": channels,
        "residuals": _residual_metrics(residuals),
        "eigenvalues": eigenvalues,
        **_matrices(fitted),
        "timing": timing,
    }
    with stage("figures"), earlier_objects_frozen():  # drawn during the uncertainty
        plain = _plain_figures(report, singular_values, order, residuals, result)
        plain |= scan_figure(scan, held_out=val is not None)
        plain = {name: figure_helper.submit(f) for name, f in plain.items()}
    with stage("uncertainty"):
        covariance, reason = covariance_of(result)
        uncertainty = uncertainty_metrics(covariance, reason)
        references = _uncertainty_figures(report, covariance)
    metrics |= uncertainty
    notes += uncertainty_notes(uncertainty, channels, list(report.input_names))
    truth = None if clean_val is None else np.asarray(clean_val.ys[0])
    with stage("figures"), earlier_objects_frozen():
        figures = _output_figures(
            report, comparisons, models, truth, which, plain, references
        )
    outcome = _outcome(run, result, metrics, summary, figures, notes)
    if fit_cfg["model"] == "neural":
        from .fit_neural import add_neural_stage

        with stage("neural"):
            add_neural_stage(
                config, outcome, report, train, val, fitted, which, progress, echo
            )
    return outcome


def _column_names(data) -> dict[str, list[str]]:
    return {
        "states": list(data.state_names),
        "inputs": list(data.input_names),
        "outputs": list(data.output_names),
    }


def _residual_metrics(residuals) -> dict[str, float]:
    """The largest residual auto-correlation past lag 0, and its bound."""
    autocorrelation = np.asarray(residuals.autocorrelation)[1:]
    return {
        "max_autocorrelation": float(np.max(np.abs(autocorrelation))),
        "bound": float(residuals.bound),
    }


def _validation_stage(models, report, clean_val, which, held_out, timing, found):
    """Every model's comparison with `report` (the held-out or else the training
    data), the fit-% rows and the fitted model's residual analysis; the time taken
    goes to `timing` and the warnings to `found`."""
    started = time.perf_counter()
    with stage("validation"), fit_checks.captured_warnings(found):
        comparisons, rows, residuals = _validate_outputs(
            models, report, clean_val, which
        )
    timing["validation_seconds"] = time.perf_counter() - started
    if held_out:
        fitted_fit = np.asarray(comparisons["fitted"].fit_percent)
        fit_checks.validation_warnings(which, report.output_names, fitted_fit, found)
    return comparisons, rows, residuals


def _uncertainty_figures(report, covariance) -> dict:
    """The extra arguments of the run folder's figures from the fitted model's
    covariance and the data's non-parametric estimates, by file name."""
    return {
        "bode.png": bode_references(report, covariance),
        "comparison.png": comparison_band(report, covariance),
        "step_response.png": step_references(report, covariance),
        "eigenvalues.png": confidence_of(covariance),
    }


def _echo_outputs(run, result, described, models, rows, channels, timing, echo):
    """Print the stop note, eigenvalues, fit % table and times of input–output data;
    returns `(notes for summary.md, eigenvalues)`."""
    echo("")
    notes = [
        f"Data: {run.source}.",
        "",
        f"Columns: {_columns(run.data)}.",
        "",
        described,
        "",
    ]
    notes += _stop_notes(result, echo)
    eigenvalues = _eigenvalue_table(models, echo)
    echo("")
    _fit_table(rows, channels, echo)
    echo("")
    echo(
        "  time: subspace {subspace_seconds:.2f} s, fit {fit_seconds:.1f} s, "
        "validation {validation_seconds:.2f} s".format(**timing)
    )
    return notes, eigenvalues


def _output_summary(rows: dict, which: str, clean_val) -> dict:
    """The headline numbers: each model's mean fit % in the last row (the truth's
    only against noise-free outputs)."""
    headline = list(rows.values())[-1]
    against = "noise-free outputs" if clean_val is not None else "measurements"
    return {
        f"{which} fit % vs {against}, {name}": float(np.mean(v))
        for name, v in headline.items()
        if name != "true" or clean_val is not None
    }


def _fit_percent_masked(reference, predicted, mask) -> list[float]:
    """Fit % per channel over the valid steps, as `compare` reports it."""
    values = []
    for c in range(reference.shape[-1]):
        y = reference[..., c][mask]
        e = predicted[..., c][mask] - y
        values.append(
            float(100 * (1 - np.linalg.norm(e) / np.linalg.norm(y - y.mean())))
        )
    return values


def _fit_states(config, run, train, val, clean_val, progress, echo) -> Outcome:
    from .._fitting.least_squares import fit_least_squares
    from .._fitting.metrics import fit_percent
    from .._rollout.rollout import rollout
    from .._systems.system import LinearSystem

    fit_cfg = config["fit"]
    try:
        estimate = fit_least_squares(train, ridge=fit_cfg["ridge"])
    except ValueError as error:
        raise ConfigError(f"config key 'fit.ridge': {error}") from None
    result, fit_seconds, optimizer, _ = _fit_model(
        config, _stable_if_asked(fit_cfg, estimate), train, val, progress
    )
    fitted = _as_linear(result.model)

    def free_run(system, dataset):
        return np.asarray(
            rollout(system, dataset.xs[:, 0], dataset.num_steps, inputs=dataset.us).xs
        )

    report = val if val is not None else train
    which = "held-out" if val is not None else "training"
    runs = {
        "least squares": free_run(estimate, report),
        "fitted": free_run(fitted, report),
    }
    rows = {
        f"{which} fit % vs measurements": {
            label: float(fit_percent(report.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }
    }
    if clean_val is not None:
        rows[f"{which} fit % vs noise-free truth"] = {
            label: float(fit_percent(clean_val.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }

    echo("")
    notes = [
        f"Data: {run.source}.",
        "",
        f"Columns: {_columns(run.data)}.",
        "",
        f"Least-squares start, then a {fit_cfg['loss']}-loss fit with {optimizer}.",
        "",
    ]
    notes += _stop_notes(result, echo)
    models = {"least squares": estimate, "fitted": fitted}
    if isinstance(run.true_system, LinearSystem):
        models = {"true": run.true_system, **models}
    eigenvalues = _eigenvalue_table(models, echo)
    echo("")
    label_width = max(len(label) for label in rows) + 2
    echo(f"  {'':<{label_width}}" + "".join(f"{c:>15}" for c in runs))
    for label, row in rows.items():
        echo(f"  {label:<{label_width}}" + "".join(f"{v:>15.1f}" for v in row.values()))
    echo("")
    echo(
        f"  fit time {fit_seconds:.1f} s ({optimizer}, {len(result.losses)} steps, "
        f"including compilation); best step {result.best_step}"
    )

    headline = list(rows.values())[-1]
    against = "noise-free truth" if clean_val is not None else "measurements"
    summary = {f"{which} fit % vs {against}, {k}": v for k, v in headline.items()}
    metrics = {
        "source": run.source,
        "columns": {
            "states": list(run.data.state_names),
            "inputs": list(run.data.input_names),
        },
        "model": fit_cfg["model"],
        "loss": fit_cfg["loss"],
        "optimizer": optimizer,
        "steps_run": int(len(result.losses)),
        "best_step": int(result.best_step),
        "stop_reason": result.stop_reason,
        "fit_metrics": result.metrics,
        "fit_percent": rows,
        "eigenvalues": eigenvalues,
        "K": np.asarray(fitted.K).tolist(),
        "B": None if fitted.B is None else np.asarray(fitted.B).tolist(),
        "timing": {"fit_seconds": fit_seconds},
    }
    with stage("figures"), earlier_objects_frozen():
        figures = _state_figures(
            report, runs, models, clean_val, result, fit_cfg, which
        )
    return _outcome(run, result, metrics, summary, figures, notes)


def run_fit(config: dict, *, progress: bool, echo) -> Outcome:
    """Fit a linear (or stable linear) model to simulated or recorded data."""
    figure_helper.start()  # a helper process for the figures at the end
    with stage("data"):
        simulated = config["data"]["file"] is None
        run = _simulated(config) if simulated else _from_file(config)
        train, val, clean_val, held = _split(config, run)
    echo(f"{config['name']}: {run.source}")
    echo(f"  columns: {_columns(run.data)}")
    count = train.num_trajectories
    echo(f"  {count} experiment{'s' * (count != 1)} for estimation; validation: {held}")
    with stage("data"):
        checks = run_data_checks(config, run.data, run.source, echo)
        overlap = split_overlap(train, val)
    if overlap is not None:
        echo(f"  data check (warn): {overlap['message']}")
        checks.append(overlap)
    path = _fit_outputs if run.data.ys is not None else _fit_states
    if config["fit"]["model"] == "neural" and run.data.ys is None:
        raise ConfigError(
            "config key 'fit.model': 'neural' needs data with outputs (ys), got "
            "states only; use 'linear' or 'stable'."
        )
    if config["fit"]["model"] == "neural":
        from .fit_neural import check_windows

        check_windows(config["fit"], train, val)
    outcome = path(config, run, train, val, clean_val, progress, echo)
    outcome.metrics["data_checks"] = checks
    if overlap is not None:
        warned = outcome.metrics.setdefault("warnings", [])
        warned.insert(0, overlap["message"])
    return outcome
