"""The kinds of experiment: fit a model to data (`_experiment_fit.py`), train a
controller.

Each runner takes a resolved config (see `_experiment._schema`) and returns an
`Outcome`; `_experiment.run_experiment` writes it into the run folder.
"""

import time

from .config import ConfigError
from .run import _zoo, config_vector as _vector, loss_history_lines, Outcome
from .fit import run_fit, SUMMARY_LABEL as _FIT_LABEL


SUMMARY_LABELS = {
    "fit": _FIT_LABEL,
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


# Figure roles of the models a run draws (see `dynsys.plot.STYLES`).
ROLES = {"least squares": "estimate", "fitted": "fit"}

# The physical quantity behind a swept config key (the sweep figure's x label).
SWEEP_QUANTITIES = {
    "data.measurement_noise": "std of the noise added to each measured state",
    "data.process_noise": "std of the noise added to each state per step",
    "data.trajectories": "number of simulated trajectories",
    "data.length": "steps per trajectory",
    "data.x0_scale": "std of the initial states around their mean",
    "data.input_scale": "std of the random inputs",
    "fit.steps": "optimiser steps",
    "fit.lr": "learning rate",
    "fit.horizon": "shooting window (steps)",
    "train.steps": "optimiser steps",
    "train.lr": "learning rate",
    "train.horizon": "horizon (steps)",
}


def zoo_names(config: dict):
    """The zoo model's channel names with units (`dynsys.models.names`)."""
    section = config["system"]
    return _zoo().names(section["model"], **section["params"])


def sweep_label(config: dict, key: str) -> str:
    """The x label of a sweep: the physical quantity, with its unit when the key
    is a noise level on the states (the units of the states' names)."""
    from ..plot._style import unit_of

    quantity = SWEEP_QUANTITIES.get(key)
    if quantity is None:
        return key
    if key in ("data.measurement_noise", "data.process_noise", "data.x0_scale"):
        names = config["system"]["state_names"]
        if names is None and config["data"].get("file") is None:
            names = zoo_names(config).states
        units = list(dict.fromkeys(u for u in map(unit_of, names or []) if u))
        if units:
            quantity += f" ({', '.join(units)})"
    return f"{quantity} [{key}]"


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


def _train_optimizer(train_cfg: dict):
    """Adam with the configured rate (constant or cosine decay) and optional
    gradient clipping."""
    import optax

    lr = train_cfg["lr"]
    schedule = lr
    if train_cfg["schedule"] == "cosine":
        schedule = optax.cosine_decay_schedule(lr, train_cfg["steps"])
    optimizer = optax.adam(schedule)
    if train_cfg["clip"] is not None:
        optimizer = optax.chain(optax.clip_by_global_norm(train_cfg["clip"]), optimizer)
    return optimizer


def _controller_figures(
    config, system, result, trajectories, target, state_names, input_names
) -> dict:
    """The closed loop before and after training on the held-out initial states,
    the loss, and (two states) the phase portrait after training."""
    from dynsys import plot

    c = config["controller"]
    name = config["system"]["model"]
    figures = {}
    for label, traj in zip(("before", "after"), trajectories):
        count = traj.xs.shape[0]
        figures[f"closed_loop_{label}.png"] = plot.trajectory(
            traj,
            state_names=state_names,
            input_names=input_names,
            reference=target,
            input_bound=c["bound"],
            title=f"{name}, {count} held-out initial states: {label} training",
        )
    figures["loss.png"] = plot.loss_history(
        result,
        ylabel="tracking cost",
        title=f"training a {c['type']} controller",
    )
    if system.state_size == 2:
        time_free = not c["use_time"]
        figures["phase_portrait.png"] = plot.phase_portrait(
            trajectories[1],
            system=system if time_free else None,
            controller=result.model if time_free else None,
            state_names=state_names,
            title=f"{name} in closed loop after training",
        )
    return figures


def run_train_controller(config: dict, *, progress: bool, echo) -> Outcome:
    """Train a controller to drive a zoo system to a target state."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import dynsys

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
    known = zoo_names(config)
    state_names = _names(config, "state_names", n, list(known.states))
    input_names = _names(config, "input_names", m, list(known.inputs))
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
    optimizer = _train_optimizer(train_cfg)
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
    figures = _controller_figures(
        config, system, result, (traj_before, traj_after), target,
        state_names, input_names,
    )  # fmt: skip
    extra = result.full_losses
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABELS["train_controller"],
        history=loss_history_lines(result.losses, extra, "full_loss"),
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
