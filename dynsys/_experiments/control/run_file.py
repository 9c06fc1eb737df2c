"""The `train_controller` kind on a model file: a controller trained through the
model's observer to track output set points, scored against LQG on the same cost."""

import numpy as np

from ..config import ConfigError
from ..outcome import config_vector, loss_history_lines, Outcome
from .figures import responses_figure
from .plant_file import load_plant
from .response import step_metrics
from .task import initial_states, set_point_task
from .training import train_timed, training_metrics
from .typed_config import ControllerConfig


SUMMARY_LABEL = "closed-loop cost on held-out initial states"


def run_on_model_file(config: dict, *, progress: bool, echo) -> Outcome:
    """Train a controller of the estimate and set point on the model in
    `system.file`, and score it and the LQG baseline on held-out initial states
    and on the step from the operating point."""
    import jax

    plant = load_plant(config)
    linear = plant.linear
    n, p, m = linear.state_size, linear.output_size, linear.input_size
    names = _channel_names(config, plant, p, m)
    task = set_point_task(config, plant)
    warnings = _warnings(config, plant, task, names[0])
    for line in warnings:
        echo(f"  warning: {line}")
    echo(f"  observer: {plant.observer}")
    typed = ControllerConfig.from_section(config["controller"])
    k_init, k_x0, k_test, k_batch = jax.random.split(jax.random.key(config["seed"]), 4)
    spread = np.asarray(config_vector(config, "train", "spread", p, "output"))
    train_cfg = config["train"]
    z_train = initial_states(k_x0, train_cfg["initial_states"], task, spread)
    z_test = initial_states(k_test, train_cfg["test_states"], task, spread)

    def cost(controller, z0s):
        return task.cost(controller, z0s)

    label = f"{typed.type} controller on {plant.path.name} (output feedback)"
    start_controller = typed.build(n + p, m, k_init)
    result, seconds = train_timed(
        config, label, cost, start_controller, z_train, k_batch, progress, echo
    )
    baselines = {} if plant.neural else _baselines(task, linear, typed.bound)
    controllers = {"trained": result.model} | baselines
    scores, nominal = _scores(task, controllers, z_test, linear.dt)
    before = float(cost(start_controller, z_test))
    _echo_scores(echo, before, scores)
    truth = _on_the_truth(task, plant, controllers, scores, echo)
    figures = _figures(config, task, result, nominal, names, typed.bound, linear.dt)
    outcome = _outcome(
        config, plant, result, before, scores, warnings, seconds, figures
    )
    if truth is not None:
        outcome.metrics["on_the_true_system"] = truth
        outcome.notes[:0] = [_truth_line(truth), ""]
    return outcome


def _channel_names(config: dict, plant, p: int, m: int):
    """`(output names, input names)`: `system.output_names` / `input_names`, else
    the identification data's columns, else `y0`, `u0`, ..."""
    section = config["system"]
    given = {"outputs": section["output_names"], "inputs": section["input_names"]}
    sizes = {"outputs": p, "inputs": m}
    names = {}
    for which, key in (("outputs", "output_names"), ("inputs", "input_names")):
        count = sizes[which]
        if given[which] is not None and len(given[which]) != count:
            raise ConfigError(
                f"config key 'system.{key}': the model in {plant.path.name} has "
                f"{count} {which}, got {len(given[which])} names."
            )
        default = plant.names.get(which) if plant.names else None
        if default is None or len(default) != count:
            prefix = "y" if which == "outputs" else "u"
            default = [f"{prefix}{i}" for i in range(count)]
        names[which] = given[which] or default
    return names["outputs"], names["inputs"]


def _warnings(config: dict, plant, task, output_names) -> list[str]:
    """One line each: an unstable model, a set point outside the data's range."""
    lines = []
    if plant.radius >= 1:
        lines.append(
            f"system.file: the identified model is not stable (largest |eigenvalue| "
            f"{plant.radius:.4g} >= 1); the controller is trained on it anyway."
        )
    if plant.output_range is not None:
        low, high = plant.output_range
        for point in task.set_points:
            outside = [
                f"{name} {value:g} not in [{lo:.4g}, {hi:.4g}]"
                for name, value, lo, hi in zip(output_names, point, low, high)
                if not lo <= value <= hi
            ]
            if outside:
                lines.append(
                    "cost.set_point outside the identification data's range ("
                    + "; ".join(outside)
                    + "): the model extrapolates there."
                )
    return lines


def _baselines(task, linear, bound) -> dict:
    """The LQG controller on the same weights (clipped to the bound, if any)."""
    from ..._control.set_point import Clipped, lqg_set_point_controller

    lqg = lqg_set_point_controller(linear, **task.weights.arguments())
    if bound is None:
        return {"LQG": lqg}
    return {"LQG, clipped": Clipped(lqg, float(bound))}


def _scores(task, controllers: dict, z_test, dt):
    """Each controller's held-out cost and step metrics, and its nominal
    trajectory (from the operating point)."""
    import equinox as eqx
    import jax.numpy as jnp

    evaluate = eqx.filter_jit(task.cost)
    outputs = task.references.shape[-1]
    origin = task.at_rest(jnp.zeros((1, outputs), z_test.dtype))
    scores, nominal = {}, {}
    for name, controller in controllers.items():
        nominal[name] = task.rollout(controller, origin)
        step_cost = float(task.trajectory_cost(nominal[name]))
        scores[name] = {"held_out_cost": float(evaluate(controller, z_test))}
        scores[name] |= step_metrics(task, nominal[name], step_cost, dt)
    return scores, nominal


def _on_the_truth(task, plant, controllers: dict, scores: dict, echo):
    """For a model identified from data simulated by a zoo model: each
    controller's cost on the step from the operating point with the true system
    as the plant (the observer still the model's), and its ratio to the cost on
    the model; `None` when the truth is not known."""
    import dataclasses

    import jax.numpy as jnp

    from ..._control.observer import ObservedPlant

    if plant.truth is None:
        return None
    name, system = plant.truth
    loop = ObservedPlant(system, task.loop.model, plant.observer_gain)
    on_truth = dataclasses.replace(task, loop=loop)
    origin = jnp.zeros((1, loop.state_size))
    found = {"system": name}
    for label, controller in controllers.items():
        cost = float(on_truth.trajectory_cost(on_truth.rollout(controller, origin)))
        found[label] = {"cost": cost, "ratio_to_model": cost / scores[label]["cost"]}
    echo("  " + _truth_line(found))
    return found


def _truth_line(found: dict) -> str:
    """One line: each controller's step cost on the true system against the
    model."""
    parts = [
        f"{label} {v['cost']:.5g} ({v['ratio_to_model']:.3g} × its cost on the model)"
        for label, v in found.items()
        if label != "system"
    ]
    return f"on the true system ({found['system']}): step cost " + ", ".join(parts)


def _echo_scores(echo, before: float, scores: dict) -> None:
    """One line per controller: held-out cost and the step's figures."""
    echo(f"  held-out cost before training: {before:.5g}")
    for name, s in scores.items():
        echo(
            f"  {name}: held-out cost {s['held_out_cost']:.5g}; step from the "
            f"operating point: cost {s['cost']:.5g}, overshoot "
            f"{_numbers(s['overshoot_percent'], '%')}, settling time "
            f"{_numbers(s['settling_time'])}, input peak {_numbers(s['input_peak'])}"
        )


def _numbers(values, unit: str = "") -> str:
    """Per channel; `—` where there is no value (no step on that output, or not
    settled within the first set point's part of the horizon)."""
    return ", ".join("—" if v is None else f"{v:.3g}{unit}" for v in values)


def _figures(config, task, result, nominal, names, bound, dt) -> dict:
    from ... import plot

    title = f"{config['name']}: step from the operating point"
    return {
        "closed_loop.png": responses_figure(task, nominal, names, bound, dt, title),
        "loss.png": plot.loss_history(
            result, ylabel="set-point cost", title="training the controller"
        ),
    }


def _outcome(config, plant, result, before, scores, warnings, seconds, figures):
    """The metrics, summary (trained against LQG), history and figures."""
    after = scores["trained"]["held_out_cost"]
    baseline = next((name for name in scores if name != "trained"), None)
    metrics = {
        **training_metrics(config, str(plant.path), result, before, after),
        "observer": plant.observer,
        "spectral_radius": plant.radius,
        "controllers": scores,
        "warnings": warnings,
        "timing": {"train_seconds": seconds},
    }
    summary = {
        "cost before training": before,
        "cost after training": after,
    }
    if baseline is not None:
        summary[f"cost, {baseline}"] = scores[baseline]["held_out_cost"]
    else:
        summary["baseline"] = "none: no LQG baseline for a neural plant"
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABEL,
        history=loss_history_lines(result.losses, result.full_losses, "full_loss"),
        model=result.model,
        figures=figures,
        notes=_notes(scores, warnings, plant.linear.dt),
    )


def _notes(scores: dict, warnings: list[str], dt) -> list[str]:
    """summary.md: the comparison table (the step from the operating point)."""
    unit = "s" if dt is not None else "steps"
    lines = [
        "| controller | held-out cost | step cost | overshoot | settling time "
        f"({unit}) | input peak |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in scores.items():
        lines.append(
            f"| {name} | {s['held_out_cost']:.5g} | {s['cost']:.5g} | "
            f"{_numbers(s['overshoot_percent'], ' %')} | "
            f"{_numbers(s['settling_time'])} | {_numbers(s['input_peak'])} |"
        )
    lines += ["", *(f"- warning: {w}" for w in warnings), *([""] if warnings else [])]
    lines += [
        "`model.dynsys` holds the trained controller of the estimate and set point "
        "$[\\hat x; r]$; load it with `dynsys.load(path, like=...)`.",
        "",
    ]
    return lines
