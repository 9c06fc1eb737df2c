"""The `fit` kind of experiment: data in, a fitted model and its validation out.

Two paths share the data handling:

- data whose states are measured (`xs`, no `ys`): one-step least squares, then the
  fit of the free run, as in the first release;
- input–output data (`ys`): the subspace start, the output-error fit and the
  validation views (`compare`, residuals, Bode) of the system-identification
  workflow.
"""

import dataclasses
import time
import zipfile
from typing import Any

import numpy as np

from .config import ConfigError
from .._distributed import share_between_processes
from .run import _zoo, config_vector as _vector, loss_history_lines, Outcome


SUMMARY_LABEL = "free-run fit % (100 = perfect)"


# ---------------------------------------------------------------------------------
# Data: simulated from a zoo model or read from a file.


@dataclasses.dataclass(frozen=True)
class _Data:
    """The data of a fit run, and what is known about how they were made."""

    data: Any  # the Dataset
    source: str  # one line saying where the data came from
    true_system: Any = None  # the simulating model, when simulated
    clean: Any = None  # the same data without noise, when simulated


def _measured_system(system, measured: list[int] | None, state_names):
    """The zoo system with `C` selecting the measured states (or as it is)."""
    import jax.numpy as jnp

    import dynsys

    if measured is None:
        return system, None
    n = system.state_size
    bad = [k for k in measured if not 0 <= k < n]
    if bad or len(set(measured)) != len(measured) or not measured:
        raise ConfigError(
            "config key 'data.measured_states': expected distinct state indices in "
            f"0..{n - 1}, got {measured}."
        )
    if not isinstance(system, dynsys.LinearSystem):
        raise ConfigError(
            "config key 'data.measured_states': only linear zoo models can be "
            f"measured through outputs; {type(system).__name__} is not linear."
        )
    C = jnp.eye(n)[jnp.asarray(measured)]
    names = [state_names[k] for k in measured] if state_names else None
    return (
        dynsys.LinearSystem(system.K, system.B, C, None, system.offset, dt=system.dt),
        names,
    )


def _simulated(config: dict) -> _Data:
    import jax

    import dynsys

    data_cfg, system_cfg = config["data"], config["system"]
    seed = config["seed"]
    key_x0, key_u, key_noise = jax.random.split(jax.random.key(seed), 3)
    zoo_system = _zoo().get(system_cfg["model"], **system_cfg["params"])
    n, m = zoo_system.state_size, zoo_system.input_size
    state_names = _channel_names(config, "states", n)
    system, output_names = _measured_system(
        zoo_system, data_cfg["measured_states"], state_names
    )
    N, T = data_cfg["trajectories"], data_cfg["length"]
    mean = _vector(config, "data", "x0_mean", n, "state")
    x0s = mean[None] + data_cfg["x0_scale"] * jax.random.normal(key_x0, (N, n))
    inputs = None
    if m:
        inputs = data_cfg["input_scale"] * jax.random.normal(key_u, (N, T, m))
    noise = dict(
        process_noise=data_cfg["process_noise"],
        measurement_noise=data_cfg["measurement_noise"],
    )
    data = dynsys.simulate(system, x0s, T, inputs=inputs, key=key_noise, **noise)
    clean = dynsys.simulate(system, x0s, T, inputs=inputs)
    input_names = _channel_names(config, "inputs", m)
    if output_names is not None:  # only the outputs are measured: drop the states
        data, clean = _outputs_only(data), _outputs_only(clean)
        state_names = None
    data = _named(data, state_names, input_names, output_names)
    measured = (
        f", outputs {', '.join(output_names or [])}"
        if data_cfg["measured_states"] is not None
        else ""
    )
    source = (
        f"{system_cfg['model']} (zoo), {N} simulated trajectories x {T} steps"
        f"{measured}, measurement noise {noise['measurement_noise']:g}"
        + (f", process noise {noise['process_noise']:g}") * bool(noise["process_noise"])
        + f" (seed {seed})"
    )
    return _Data(data, source, true_system=system, clean=clean)


# Figure roles of the models a fit run draws (see `dynsys.plot.STYLES`).
ROLES = {"least squares": "estimate", "subspace": "estimate", "fitted": "fit"}


def _outputs_only(data):
    """The inputs and outputs of `data`, without its states."""
    import dynsys

    ts = None if data.ts is None else data.ts[: data.num_steps]
    return dynsys.Dataset(us=data.us, ts=ts, ys=data.ys)


def _zoo_names(config: dict, which: str):
    """The zoo model's channel names with units, of one role (`"states"`, ...)."""
    from .kinds import zoo_names  # that module imports this one

    return list(getattr(zoo_names(config), which)) or None


def _channel_names(config: dict, role: str, count: int):
    """`system.state_names` or `system.input_names` (`role` `"states"` or
    `"inputs"`) checked against `count`, else the zoo model's names."""
    key = f"{role[:-1]}_names"
    names = config["system"][key]
    if names is None:
        return _zoo_names(config, role)
    if len(names) != count:
        raise ConfigError(
            f"config key 'system.{key}': expected {count} names, got {len(names)}."
        )
    return list(names)


def _named(data, state_names, input_names, output_names):
    """`data` with the given column names (where given and the columns exist)."""
    import dynsys

    def role(field: str, names, current):
        """The field's experiments and names (the given ones, else the current)."""
        if getattr(data, field) is None:
            return None, None
        return _experiments(data, field), tuple(names) if names else current

    xs, state_names = role("xs", state_names, data.state_names)
    us, input_names = role("us", input_names, data.input_names)
    ys, output_names = role("ys", output_names, data.output_names)
    return dynsys.Dataset(
        xs,
        us,
        data.ts,
        ys=ys,
        state_names=state_names,
        input_names=input_names,
        output_names=output_names,
    )


def _experiments(data, field: str):
    """The field's values, one unpadded array per experiment (ragged-safe)."""
    values = np.asarray(getattr(data, field))
    extra = 1 if field == "xs" else 0
    return [values[i, : T + extra] for i, T in enumerate(data.lengths)]


def _from_file(config: dict) -> _Data:
    import dynsys

    data_cfg = config["data"]
    roles = {
        "states": data_cfg["states"],
        "inputs": data_cfg["inputs"],
        "outputs": data_cfg["outputs"],
        "trajectory": data_cfg["trajectory_column"],
        "time": data_cfg["time_column"],
    }
    try:
        data = dynsys.load_dataset(data_cfg["file"], **roles)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ConfigError(f"config key 'data.file': {error}") from None
    lengths = sorted(set(data.lengths))
    steps = (
        f"{lengths[0]} steps"
        if len(lengths) == 1
        else f"{lengths[0]} to {lengths[-1]} steps"
    )
    source = f"{data_cfg['file']}: {data.num_trajectories} experiments x {steps}"
    return _Data(data, source)


def _columns(data) -> str:
    """What the run detected in the data: the state, input and output columns."""

    def part(count: int, what: str, names) -> str:
        if not count:
            return f"no {what}s"
        return f"{count} {what}{'s' * (count != 1)} ({', '.join(names)})"

    parts = [
        part(data.state_size, "state", data.state_names),
        part(data.input_size, "input", data.input_names),
    ]
    if data.output_size:
        parts.append(part(data.output_size, "output", data.output_names))
    return ", ".join(parts)


def _split(config: dict, run: _Data):
    """Training and held-out data (and the held-out noise-free data, if known)."""
    data, fraction = run.data, config["data"]["validation"]
    if fraction <= 0 or data.num_trajectories < 2:
        return data, None, None
    train, val = data.split(fraction)
    clean_val = None
    if run.clean is not None:
        clean_val = run.clean[np.arange(train.num_trajectories, data.num_trajectories)]
    return train, val, clean_val


# ---------------------------------------------------------------------------------
# The optimiser and loss of the config.


def _optimizer(fit_cfg: dict):
    """(optimizer or None for the default, num_steps or None, a description)."""
    import optax

    name, steps = fit_cfg["optimizer"], fit_cfg["steps"]
    if name == "default":
        return None, steps, "the default optimiser"
    if name == "lbfgs":
        return optax.lbfgs(), steps or 200, "L-BFGS"
    return optax.adam(fit_cfg["lr"]), steps or 400, f"Adam (lr {fit_cfg['lr']:g})"


def _loss(fit_cfg: dict, train_data):
    import dynsys

    if fit_cfg["loss"] != "shooting":
        return fit_cfg["loss"]
    if fit_cfg["horizon"] > train_data.num_steps:
        raise ConfigError(
            f"config key 'fit.horizon': the shooting window ({fit_cfg['horizon']} "
            f"steps) is longer than the training experiments ({train_data.num_steps} "
            "steps)."
        )
    return dynsys.MultipleShooting(fit_cfg["horizon"])


def _stable_if_asked(fit_cfg: dict, model):
    import dynsys

    if fit_cfg["model"] == "stable":
        return dynsys.StableLinearSystem.from_linear(model)
    return model


def _as_linear(model):
    return model.to_linear() if hasattr(model, "to_linear") else model


def _fit_model(config, start_model, train_data, val_data, progress):
    import jax

    import dynsys

    fit_cfg = config["fit"]
    optimizer, num_steps, described = _optimizer(fit_cfg)
    loss = _loss(fit_cfg, train_data)
    key = jax.random.key(config["seed"] + 1)
    started = time.perf_counter()
    result = dynsys.fit(
        start_model,
        share_between_processes(train_data),  # several processes: each its slice
        loss=loss,
        optimizer=optimizer,
        num_steps=num_steps,
        batch_size=fit_cfg["batch_size"],
        key=key,
        progress=progress,
        val_data=val_data,
    )
    seconds = time.perf_counter() - started
    used = getattr(result, "optimizer", None) or described
    return result, seconds, used


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


def _time_label(data) -> str:
    return "time (s)" if data.dt not in (None, 1.0) else "time (steps)"


def _times(data) -> np.ndarray:
    if data.ts is not None:
        return np.asarray(data.ts)
    return np.arange(data.num_steps + 1)


# ---------------------------------------------------------------------------------
# The path for input-output data.


def _subspace_start(fit_cfg: dict, train, echo):
    """The subspace estimate, its singular values, the time it took and how its
    order was chosen."""
    import dynsys

    started = time.perf_counter()
    horizon = fit_cfg["subspace_horizon"]
    try:
        singular_values = np.asarray(
            dynsys.subspace_singular_values(train, horizon=horizon)
        )
        start = dynsys.fit_subspace(
            train,
            fit_cfg["order"],
            horizon=horizon,
            feedthrough=fit_cfg["feedthrough"],
        )
    except ValueError as error:
        key = "fit.subspace_horizon" if "(horizon=" in str(error) else "fit.order"
        raise ConfigError(f"config key '{key}': {error}") from None
    seconds = time.perf_counter() - started
    chosen = "chosen from the singular values" if fit_cfg["order"] is None else "given"
    echo(f"  subspace start: order {start.state_size} ({chosen}), {seconds:.2f} s")
    return start, singular_values, seconds, chosen


def _validate_outputs(models: dict, report, clean_val, which: str):
    """Each model's `compare` on the report data, the fit % rows (against the
    measurements, and the noise-free outputs when known), and the fitted model's
    residual analysis."""
    import dynsys

    comparisons = {name: dynsys.compare(m, report) for name, m in models.items()}
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
    residuals = dynsys.residual_analysis(models["fitted"], report)
    return comparisons, rows, residuals


def _matrices(model) -> dict:
    """The model's matrices as lists (`None` for those it does not have)."""
    return {
        name: None
        if getattr(model, name) is None
        else np.asarray(getattr(model, name)).tolist()
        for name in ("K", "B", "C", "D")
    }


def _fit_outputs(config, run, train, val, clean_val, progress, echo) -> Outcome:
    fit_cfg = config["fit"]
    start, singular_values, subspace_seconds, chosen = _subspace_start(
        fit_cfg, train, echo
    )
    order = start.state_size
    timing = {"subspace_seconds": subspace_seconds}
    result, timing["fit_seconds"], optimizer = _fit_model(
        config, _stable_if_asked(fit_cfg, start), train, val, progress
    )
    fitted = _as_linear(result.model)
    echo(
        f"  output-error fit ({fit_cfg['loss']} loss, {optimizer}): "
        f"{len(result.losses)} steps, {timing['fit_seconds']:.1f} s, best step "
        f"{result.best_step}"
    )

    started = time.perf_counter()
    report = val if val is not None else train
    which = "held-out" if val is not None else "training"
    models = {"subspace": start, "fitted": fitted}
    if run.true_system is not None:
        models = {"true": run.true_system, **models}
    comparisons, rows, residuals = _validate_outputs(models, report, clean_val, which)
    timing["validation_seconds"] = time.perf_counter() - started

    echo("")
    notes = [
        f"Data: {run.source}.",
        "",
        f"Columns: {_columns(run.data)}.",
        "",
        f"Subspace start of order {order} ({chosen}); output-error fit with "
        f"{optimizer}, {fit_cfg['loss']} loss.",
        "",
    ]
    notes += _stop_notes(result, echo)
    eigenvalues = _eigenvalue_table(models, echo)
    echo("")
    channels = list(report.output_names)
    _fit_table(rows, channels, echo)
    echo("")
    echo(
        "  time: subspace {subspace_seconds:.2f} s, fit {fit_seconds:.1f} s, "
        "validation {validation_seconds:.2f} s".format(**timing)
    )

    headline = list(rows.values())[-1]
    against = "noise-free outputs" if clean_val is not None else "measurements"
    summary = {
        f"{which} fit % vs {against}, {name}": float(np.mean(v))
        for name, v in headline.items()
        if name != "true" or clean_val is not None
    }
    metrics = {
        "source": run.source,
        "columns": {
            "states": list(run.data.state_names),
            "inputs": list(run.data.input_names),
            "outputs": list(run.data.output_names),
        },
        "model": fit_cfg["model"],
        "order": order,
        "order_chosen": fit_cfg["order"] is None,
        "singular_values": singular_values.tolist(),
        "loss": fit_cfg["loss"],
        "optimizer": optimizer,
        "steps_run": int(len(result.losses)),
        "best_step": int(result.best_step),
        "stop_reason": result.stop_reason,
        "fit_metrics": result.metrics,
        "fit_percent": rows,
        "fit_percent_channels": channels,
        "residuals": {
            "max_autocorrelation": float(
                np.max(np.abs(np.asarray(residuals.autocorrelation)[1:]))
            ),
            "bound": float(residuals.bound),
        },
        "eigenvalues": eigenvalues,
        **_matrices(fitted),
        "timing": timing,
    }
    figures = _output_figures(
        report,
        comparisons,
        models,
        None if clean_val is None else np.asarray(clean_val.ys[0]),
        singular_values,
        order,
        residuals,
        result,
        which,
    )
    return _outcome(run, result, metrics, summary, figures, notes)


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


def _output_figures(
    report, comparisons, models, truth, singular_values, order, residuals, result, which
):
    from dynsys import plot

    estimated = {k: v for k, v in models.items() if k != "true"}
    true_system = models.get("true")
    T0 = report.lengths[0]
    dt = report.dt if report.dt not in (None, 1.0) else None
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
    for k, page in enumerate(pages):
        of = f", page {k + 1} of {len(pages)}" if len(pages) > 1 else ""
        figures[_page_file("comparison", k)] = plot.comparison(
            {k: v for k, v in comparisons.items() if k != "true"},
            experiment=0,
            truth=None if truth is None else truth[:T0],
            roles=ROLES,
            channels=page,
            dt=dt,
            title=f"{which} experiment 0: free run from the estimated initial state "
            f"(fit % over all {which} experiments){of}",
        )
    return figures | {
        "singular_values.png": plot.singular_values(singular_values, order=order),
        "bode.png": plot.bode(estimated, **responses),
        "step_response.png": plot.step_response(estimated, **responses),
        "residuals.png": plot.residuals(
            residuals, channels=None if p <= 8 else range(8)
        ),
        "eigenvalues.png": plot.eigenvalues(
            estimated, truth=true_system, roles=ROLES, dt=dt, title="eigenvalues of K"
        ),
        "loss.png": _loss_figure(
            result,
            "output-error loss",
            "output error (each channel's squared error / its variance)",
        ),
    }


def _loss_figure(result, title, ylabel):
    from dynsys import plot

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
    import dynsys
    from dynsys import plot

    predictions = {label: xs[0] for label, xs in runs.items()}
    per_channel = {
        label: np.asarray(
            dynsys.fit_percent(report.xs[0, 1:], xs[0, 1:], per_channel=True)
        )
        for label, xs in runs.items()
    }
    estimated = {k: v for k, v in models.items() if k != "true"}
    dt = report.dt if report.dt not in (None, 1.0) else None
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


def _fit_states(config, run, train, val, clean_val, progress, echo) -> Outcome:
    import dynsys

    fit_cfg = config["fit"]
    try:
        estimate = dynsys.fit_least_squares(train, ridge=fit_cfg["ridge"])
    except ValueError as error:
        raise ConfigError(f"config key 'fit.ridge': {error}") from None
    result, fit_seconds, optimizer = _fit_model(
        config, _stable_if_asked(fit_cfg, estimate), train, val, progress
    )
    fitted = _as_linear(result.model)

    def free_run(system, dataset):
        return np.asarray(
            dynsys.rollout(
                system, dataset.xs[:, 0], dataset.num_steps, inputs=dataset.us
            ).xs
        )

    report = val if val is not None else train
    which = "held-out" if val is not None else "training"
    runs = {
        "least squares": free_run(estimate, report),
        "fitted": free_run(fitted, report),
    }
    rows = {
        f"{which} fit % vs measurements": {
            label: float(dynsys.fit_percent(report.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }
    }
    if clean_val is not None:
        rows[f"{which} fit % vs noise-free truth"] = {
            label: float(dynsys.fit_percent(clean_val.xs[:, 1:], xs[:, 1:]))
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
    if isinstance(run.true_system, dynsys.LinearSystem):
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
    figures = _state_figures(report, runs, models, clean_val, result, fit_cfg, which)
    return _outcome(run, result, metrics, summary, figures, notes)


def run_fit(config: dict, *, progress: bool, echo) -> Outcome:
    """Fit a linear (or stable linear) model to simulated or recorded data."""
    run = _simulated(config) if config["data"]["file"] is None else _from_file(config)
    train, val, clean_val = _split(config, run)
    held = "no held-out data" if val is None else f"{val.num_trajectories} held out"
    echo(f"{config['name']}: {run.source}")
    echo(f"  columns: {_columns(run.data)}")
    echo(f"  {train.num_trajectories} experiments for training, {held}")
    path = _fit_outputs if run.data.ys is not None else _fit_states
    return path(config, run, train, val, clean_val, progress, echo)
