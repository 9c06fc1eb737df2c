"""The kinds of experiment: fit a model to data, train a controller.

Each runner takes a resolved config (see `_experiment._schema`) and returns an
`Outcome`; `_experiment.run_experiment` writes it into the run folder.
"""

import time
import zipfile

import numpy as np

from ._config import ConfigError
from ._distributed import share_between_processes
from ._experiment import _zoo, Outcome


SUMMARY_LABELS = {
    "fit": "free-run fit % (100 = perfect)",
    "train_controller": "closed-loop cost on held-out initial states",
}


def _system(config: dict):
    section = config["system"]
    system = _zoo().get(section["model"], **section["params"])
    return system


def _names(config: dict, which: str, count: int, default=None):
    names = config["system"][which]
    if names is None:
        return default
    if len(names) != count:
        raise ConfigError(
            f"config key 'system.{which}': expected {count} names, got {len(names)}."
        )
    return names


def _vector(config: dict, section: str, key: str, size: int, what: str):
    """A scalar or list config value as an array of `size`, or `None`."""
    import jax.numpy as jnp

    value = config[section][key]
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != size:
            raise ConfigError(
                f"config key '{section}.{key}': expected a number or a list of "
                f"{size} numbers (one per {what}), got {len(value)}."
            )
        return jnp.asarray(value, dtype=float)
    return jnp.full((size,), value, dtype=float)


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


def _loss_history(losses, extra: list[tuple[int, float]], name: str) -> list[str]:
    by_step = dict(extra)
    lines = [f"step,train_loss,{name}"]
    for k, value in enumerate(losses):
        v = by_step.get(k)
        lines.append(f"{k},{float(value)!r},{'' if v is None else repr(float(v))}")
    if len(losses) in by_step:
        lines.append(f"{len(losses)},,{float(by_step[len(losses)])!r}")
    return lines


def _detected(data) -> str:
    """What the data hold: the state, input and output columns used."""

    def part(count: int, what: str, names) -> str:
        if not count:
            return f"no {what}s"
        return f"{count} {what}{'s' * (count != 1)} ({', '.join(names)})"

    parts = [
        part(data.state_size, "state", data.state_names),
        part(data.input_size, "input", data.input_names),
    ]
    if getattr(data, "output_size", 0):
        parts.append(part(data.output_size, "output", data.output_names))
    return "Columns used: " + ", ".join(parts)


def run_fit(config: dict, *, progress: bool, echo) -> Outcome:
    """Fit a linear (or stable linear) model to simulated or recorded data."""
    import jax
    import optax

    import dynsys
    from dynsys import plot

    data_cfg, fit_cfg = config["data"], config["fit"]
    seed = config["seed"]
    key_x0, key_u, key_noise, key_batch = jax.random.split(jax.random.key(seed), 4)
    true_system = None
    clean = None
    if data_cfg["file"] is None:
        true_system = _system(config)
        n, m = true_system.state_size, true_system.input_size
        N, T = data_cfg["trajectories"], data_cfg["length"]
        mean = _vector(config, "data", "x0_mean", n, "state")
        x0s = mean[None] + data_cfg["x0_scale"] * jax.random.normal(key_x0, (N, n))
        inputs = None
        if m:
            inputs = data_cfg["input_scale"] * jax.random.normal(key_u, (N, T, m))
        data = dynsys.simulate(
            true_system,
            x0s,
            T,
            inputs=inputs,
            process_noise=data_cfg["process_noise"],
            measurement_noise=data_cfg["measurement_noise"],
            key=key_noise,
        )
        clean = dynsys.simulate(true_system, x0s, T, inputs=inputs)
        noise = data_cfg["measurement_noise"]
        source = (
            f"{config['system']['model']} (zoo), {N} simulated trajectories x {T} "
            f"steps, measurement noise {noise:g}"
            + (f", process noise {data_cfg['process_noise']:g}")
            * bool(data_cfg["process_noise"])
            + f" (seed {seed})"
        )
    else:
        try:
            data = dynsys.load_dataset(data_cfg["file"])
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
            raise ConfigError(f"config key 'data.file': {error}") from None
        source = (
            f"{data_cfg['file']}: {data.num_trajectories} trajectories x "
            f"{data.num_steps} steps"
        )
    state_names = _names(config, "state_names", data.state_size, data.state_names)
    clean_val = None
    if data_cfg["validation"] > 0 and data.num_trajectories >= 2:
        train_data, val_data = data.split(data_cfg["validation"])
        if clean is not None:
            clean_val = clean[np.arange(train_data.num_trajectories, len(clean.xs))]
    else:
        train_data, val_data = data, None
    try:
        estimate = dynsys.fit_least_squares(train_data, ridge=fit_cfg["ridge"])
    except ValueError as error:
        raise ConfigError(f"config key 'fit.ridge': {error}") from None
    if fit_cfg["model"] == "stable":
        start_model = dynsys.StableLinearSystem.from_linear(estimate)
    else:
        start_model = estimate
    if fit_cfg["loss"] == "shooting":
        if fit_cfg["horizon"] > train_data.num_steps:
            raise ConfigError(
                f"config key 'fit.horizon': the shooting horizon {fit_cfg['horizon']} "
                f"is longer than the trajectories ({train_data.num_steps} steps); "
                f"choose a horizon <= {train_data.num_steps}."
            )
        loss = dynsys.MultipleShooting(fit_cfg["horizon"])
    else:
        loss = fit_cfg["loss"]
    held = "no held-out data" if val_data is None else f"{len(val_data.xs)} held out"
    echo(f"{config['name']}: {source}")
    detected = _detected(data)
    echo(f"  {detected}")
    echo(
        f"  {train_data.num_trajectories} for training, {held}; model "
        f"{fit_cfg['model']}, loss {fit_cfg['loss']}, {fit_cfg['steps']} Adam steps "
        f"(lr {fit_cfg['lr']:g}) from the least-squares estimate"
    )
    fit_start = time.perf_counter()
    result = dynsys.fit(
        start_model,
        share_between_processes(train_data),  # several processes: each its slice
        loss=loss,
        optimizer=optax.adam(fit_cfg["lr"]),
        num_steps=fit_cfg["steps"],
        batch_size=fit_cfg["batch_size"],
        key=key_batch,
        progress=progress,
        val_data=val_data,
    )
    fit_seconds = time.perf_counter() - fit_start
    fitted = result.model
    fitted_linear = fitted.to_linear() if hasattr(fitted, "to_linear") else fitted

    def free_run(system, dataset):
        return np.asarray(
            dynsys.rollout(
                system, dataset.xs[:, 0], dataset.num_steps, inputs=dataset.us
            ).xs
        )

    report = val_data if val_data is not None else train_data
    which = "held-out" if val_data is not None else "training"
    runs = {
        "least squares": free_run(estimate, report),
        "fitted": free_run(fitted_linear, report),
    }
    fit_rows = {
        f"{which} fit % vs measurements": {
            label: float(dynsys.fit_percent(report.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }
    }
    if clean_val is not None:
        fit_rows[f"{which} fit % vs noise-free truth"] = {
            label: float(dynsys.fit_percent(clean_val.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }

    # The table.
    echo("")
    if result.stop_reason is not None:
        echo(f"  note: the fit stopped early: {result.stop_reason}")
    eig_fit = np.linalg.eigvals(np.asarray(fitted_linear.K))
    eig_ls = np.linalg.eigvals(np.asarray(estimate.K))
    columns = ["least squares", "fitted"]
    true_linear = true_system if hasattr(true_system, "K") else None
    if true_linear is not None:
        eig_true = np.linalg.eigvals(np.asarray(true_linear.K))
        order = np.lexsort((-eig_true.imag, -np.abs(eig_true)))
        eig_true = eig_true[order]
        eig_ls, eig_fit = _match_eigenvalues(eig_true, [eig_ls, eig_fit])
        columns = ["true", *columns]
        eig_columns = [eig_true, eig_ls, eig_fit]
    else:
        order = np.lexsort((-eig_fit.imag, -np.abs(eig_fit)))
        eig_fit = eig_fit[order]
        (eig_ls,) = _match_eigenvalues(eig_fit, [eig_ls])
        eig_columns = [eig_ls, eig_fit]
    width = 20
    echo(f"  {'eigenvalues':<16}" + "".join(f"{c:>{width}}" for c in columns))
    for k in range(len(eig_fit)):
        echo(
            f"  {'':<16}"
            + "".join(f"{_format_complex(col[k]):>{width}}" for col in eig_columns)
        )
    echo(
        f"  {'max |eigenvalue|':<16}"
        + "".join(f"{np.max(np.abs(col)):>{width}.4f}" for col in eig_columns)
    )
    echo("")
    label_width = max(len(label) for label in fit_rows) + 2
    echo(f"  {'':<{label_width}}" + "".join(f"{c:>15}" for c in runs))
    for label, row in fit_rows.items():
        echo(f"  {label:<{label_width}}" + "".join(f"{v:>15.1f}" for v in row.values()))
    echo("")
    echo(
        f"  fit time {fit_seconds:.1f} s ({int(result.losses.shape[0])} of "
        f"{fit_cfg['steps']} steps, including compilation); best step "
        f"{result.best_step}"
    )

    metrics = {
        "source": source,
        "model": fit_cfg["model"],
        "loss": fit_cfg["loss"],
        "steps": fit_cfg["steps"],
        "steps_run": int(result.losses.shape[0]),
        "best_step": result.best_step,
        "stop_reason": result.stop_reason,
        "fit_metrics": result.metrics,
        "fit_percent": fit_rows,
        "eigenvalues": {
            c: [[float(z.real), float(z.imag)] for z in col]
            for c, col in zip(columns, eig_columns)
        },
        "K": np.asarray(fitted_linear.K).tolist(),
        "B": None if fitted_linear.B is None else np.asarray(fitted_linear.B).tolist(),
        "timing": {"fit_seconds": fit_seconds},
    }
    headline_row = list(fit_rows.values())[-1]  # vs the truth when it is known
    against = "noise-free truth" if clean_val is not None else "measurements"
    summary = {
        f"{which} fit % vs {against}, {label}": v for label, v in headline_row.items()
    }

    times = np.asarray(report.ts) if report.ts is not None else None
    if times is None:
        times = np.arange(report.num_steps + 1)
    predictions = {}
    if clean_val is not None:
        predictions["true (noise-free)"] = np.asarray(clean_val.xs[0])
    predictions["least squares"] = runs["least squares"][0]
    predictions["fitted"] = runs["fitted"][0]
    unit = " (s)" if report.dt not in (None, 1.0) else " (steps)"
    figures = {
        "trajectories.png": plot.comparison(
            times,
            np.asarray(report.xs[0]),
            predictions,
            state_names=state_names,
            time_label="t" + unit,
            title=f"{which} trajectory 0: free run from its first state",
        ),
        "eigenvalues.png": plot.eigenvalues(
            ({"true": true_linear} if true_linear is not None else {})
            | {"least squares": estimate, "fitted": fitted_linear},
            title="eigenvalues of K",
        ),
        "loss.png": plot.loss_history(
            result, title=f"{fit_cfg['loss']} loss ({fit_cfg['model']} model)"
        ),
    }
    notes = [f"Data: {source}. {detected}.", ""]
    if result.stop_reason is not None:
        notes += [f"The fit stopped early: {result.stop_reason}.", ""]
    files = {}
    if true_system is not None:
        files["data.npz"] = data.save
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABELS["fit"],
        history=_loss_history(result.losses, result.val_losses, "validation_loss"),
        model=fitted,
        figures=figures,
        notes=notes,
        files=files,
    )


def _controller(config: dict, n: int, m: int, key):
    import dynsys

    c = config["controller"]
    kind, width, depth = c["type"], c["width"], c["depth"]
    if kind == "linear":
        # An affine state feedback u = W x + b (+ w t), saturated if bounded.
        return dynsys.MLPController(
            n, m, width, 0, use_time=c["use_time"], bound=c["bound"], key=key
        )
    if kind == "mlp":
        return dynsys.MLPController(
            n, m, width, depth, use_time=c["use_time"], bound=c["bound"], key=key
        )
    if depth < 2:
        raise ConfigError(
            f"config key 'controller.depth': a stacked controller needs depth >= 2 "
            f"(first and last layer), got {depth}."
        )
    return dynsys.StackedController.mlp(
        n, m, width_size=width, depth=depth, use_time=c["use_time"],
        bound=c["bound"], key=key,
    )  # fmt: skip


def run_train_controller(config: dict, *, progress: bool, echo) -> Outcome:
    """Train a controller to drive a zoo system to a target state."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    import dynsys
    from dynsys import plot

    system = _system(config)
    n, m = system.state_size, system.input_size
    if m == 0:
        raise ConfigError(
            f"config key 'system.model': {config['system']['model']!r} takes no "
            "input, so there is nothing to control; choose a model with inputs."
        )
    train_cfg = config["train"]
    target = _vector(config, "cost", "target", n, "state")
    target = jnp.zeros(n) if target is None else target
    Q = _vector(config, "cost", "Q", n, "state")
    R = _vector(config, "cost", "R", m, "input")
    Q_final = _vector(config, "cost", "Q_final", n, "state")
    spread = _vector(config, "train", "spread", n, "state")
    state_names = _names(config, "state_names", n)
    input_names = _names(config, "input_names", m)
    horizon = train_cfg["horizon"]

    k_init, k_x0, k_test, k_batch = jax.random.split(jax.random.key(config["seed"]), 4)
    controller = _controller(config, n, m, k_init)

    def initial_states(key, count):
        unit = jax.random.uniform(key, (count, n), minval=-1)
        return target[None] + spread[None] * unit

    x0_train = initial_states(k_x0, train_cfg["initial_states"])
    x0_test = initial_states(k_test, train_cfg["test_states"])

    def cost(controller, x0s):
        traj = dynsys.rollout(system, x0s, horizon, controller=controller)
        return dynsys.tracking_cost(traj, target, Q, R, Q_final=Q_final)

    steps, lr = train_cfg["steps"], train_cfg["lr"]
    schedule = lr
    if train_cfg["schedule"] == "cosine":
        schedule = optax.cosine_decay_schedule(lr, steps)
    optimizer = optax.adam(schedule)
    if train_cfg["clip"] is not None:
        optimizer = optax.chain(optax.clip_by_global_norm(train_cfg["clip"]), optimizer)
    c = config["controller"]
    echo(
        f"{config['name']}: {c['type']} controller on {config['system']['model']}, "
        f"{len(x0_train)} initial states, horizon {horizon}, {steps} Adam steps "
        f"(lr {lr:g}, {train_cfg['schedule']})"
    )
    start = time.perf_counter()
    result = dynsys.train(
        cost,
        controller,
        data=x0_train,
        batch_size=train_cfg["batch_size"],
        optimizer=optimizer,
        num_steps=steps,
        key=k_batch,
        progress=progress,
    )
    train_seconds = time.perf_counter() - start
    evaluate = eqx.filter_jit(cost)
    before = float(evaluate(controller, x0_test))
    after = float(evaluate(result.model, x0_test))
    traj_before = dynsys.rollout(system, x0_test, horizon, controller=controller)
    traj_after = dynsys.rollout(system, x0_test, horizon, controller=result.model)

    def final_error(traj):
        return float(
            jnp.median(jnp.linalg.norm(traj.xs[:, -1] - target[None], axis=-1))
        )

    echo(
        f"  held-out cost: before {before:.4g}, after {after:.4g}; median final "
        f"distance to the target: before {final_error(traj_before):.3g}, after "
        f"{final_error(traj_after):.3g} (best step {result.best_step}, stop: "
        f"{result.stop_reason})"
    )
    metrics = {
        "system": config["system"]["model"],
        "controller": c["type"],
        "steps": steps,
        "steps_run": result.steps_run,
        "best_step": result.best_step,
        "stop_reason": result.stop_reason,
        "cost_before": before,
        "cost_after": after,
        "final_distance_before": final_error(traj_before),
        "final_distance_after": final_error(traj_after),
        "timing": {"train_seconds": train_seconds},
    }
    summary = {"cost before training": before, "cost after training": after}
    name = config["system"]["model"]
    figures = {}
    for label, traj in (("before", traj_before), ("after", traj_after)):
        figures[f"closed_loop_{label}.png"] = plot.trajectory(
            traj,
            state_names=state_names,
            input_names=input_names,
            reference=target,
            title=f"{name}, {len(x0_test)} held-out initial states: {label} "
            "training (dashed: target)",
        )
    figures["loss.png"] = plot.loss_history(
        result,
        ylabel="tracking cost",
        title=f"training a {c['type']} controller",
    )
    if n == 2:
        time_free = not c["use_time"]
        figures["phase_portrait.png"] = plot.phase_portrait(
            traj_after,
            system=system if time_free else None,
            controller=result.model if time_free else None,
            state_names=state_names,
            title=f"{name} in closed loop after training",
        )
    extra = result.full_losses
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABELS["train_controller"],
        history=_loss_history(result.losses, extra, "full_loss"),
        model=result.model,
        figures=figures,
        notes=[
            "`model.dynsys` holds the trained controller; load it with "
            "`dynsys.load(path, like=...)` and a controller built with the same "
            "`[controller]` settings.",
            "",
        ],
    )


RUNNERS = {"fit": run_fit, "train_controller": run_train_controller}
