"""The `train_controller` kind of experiment: a controller trained to drive a zoo
system to a target through batched closed-loop rollouts, or (`system.file`) to
track output set points on an identified model through its observer
(`control/run_file.py`)."""

from .config import ConfigError
from .control.run_file import run_on_model_file
from .control.training import train_timed, training_metrics
from .control.typed_config import ControllerConfig
from .outcome import config_vector as _vector, loss_history_lines, Outcome
from .schema import zoo, zoo_names


SUMMARY_LABEL = "closed-loop cost on held-out initial states"


def _system(config: dict):
    section = config["system"]
    system = zoo().get(section["model"], **section["params"])
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


def _controller(config: dict, n: int, m: int, key):
    """The controller of `[controller]` for `n` states and `m` inputs."""
    return ControllerConfig.from_section(config["controller"]).build(n, m, key)


def _controller_figures(
    config, system, result, trajectories, target, state_names, input_names
) -> dict:
    """The closed loop before and after training on the held-out initial states,
    the loss, and (two states) the phase portrait after training."""
    from .. import plot

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
    """Train a controller to drive a zoo system to a target state, or one that
    tracks output set points on the model in `system.file`."""
    import jax

    _check_task_keys(config)
    if config["system"]["file"] is not None:
        return run_on_model_file(config, progress=progress, echo=echo)
    system = _controlled_system(config)
    n, m = system.state_size, system.input_size
    target, spread, cost = _tracking_problem(config, system)
    known = zoo_names(config)
    state_names = _names(config, "state_names", n, list(known.states))
    input_names = _names(config, "input_names", m, list(known.inputs))
    k_init, k_x0, k_test, k_batch = jax.random.split(jax.random.key(config["seed"]), 4)
    controller = _controller(config, n, m, k_init)
    train_cfg = config["train"]
    x0_train = _initial_states(k_x0, train_cfg["initial_states"], target, spread)
    x0_test = _initial_states(k_test, train_cfg["test_states"], target, spread)
    result, train_seconds = _train_timed(
        config, cost, controller, x0_train, k_batch, progress, echo
    )
    costs, trajectories, distances = _held_out(
        config, system, cost, target, (controller, result.model), x0_test
    )
    _echo_held_out(echo, costs, distances, result)
    figures = _controller_figures(
        config, system, result, trajectories, target, state_names, input_names
    )
    return _outcome(config, result, costs, distances, train_seconds, figures)


def _check_task_keys(config: dict) -> None:
    """A zoo plant's task is a target state; a model file's, output set points."""
    on_file = config["system"]["file"] is not None
    keys = ("target", "Q_final") if on_file else ("set_point",)
    for key in keys:
        if config["cost"][key] is not None:
            needs = "without" if on_file else "with"
            raise ConfigError(
                f"config key 'cost.{key}': only for a plant {needs} system.file "
                f"(a model file tracks cost.set_point; a zoo model, cost.target); "
                f"got {config['cost'][key]!r}."
            )


def _controlled_system(config: dict):
    """The zoo system, which must take inputs."""
    system = _system(config)
    if system.input_size == 0:
        raise ConfigError(
            f"config key 'system.model': {config['system']['model']!r} takes no "
            "input, so there is nothing to control; choose a model with inputs."
        )
    return system


def _tracking_problem(config: dict, system):
    """`(target, spread, cost)`: the target state (default zeros), the half-width
    of the initial-state box, and `cost(controller, x0s)`, the tracking cost of
    the closed-loop rollouts from `x0s` over `train.horizon` steps."""
    import jax.numpy as jnp

    from .._fitting.cost import tracking_cost
    from .._rollout.rollout import rollout

    n, m = system.state_size, system.input_size
    target = _vector(config, "cost", "target", n, "state")
    target = jnp.zeros(n) if target is None else target
    Q = _vector(config, "cost", "Q", n, "state")
    R = _vector(config, "cost", "R", m, "input")
    Q_final = _vector(config, "cost", "Q_final", n, "state")
    spread = _vector(config, "train", "spread", n, "state")
    horizon = config["train"]["horizon"]

    def cost(controller, x0s):
        traj = rollout(system, x0s, horizon, controller=controller)
        return tracking_cost(traj, target, Q, R, Q_final=Q_final)

    return target, spread, cost


def _initial_states(key, count: int, target, spread):
    """`count` initial states drawn uniformly in `target ± spread`."""
    import jax

    unit = jax.random.uniform(key, (count, target.shape[0]), minval=-1)
    return target[None] + spread[None] * unit


def _train_timed(config, cost, controller, x0_train, key, progress, echo):
    """Say what is trained, then train it: `(TrainResult, seconds)`."""
    label = f"{config['controller']['type']} controller on {config['system']['model']}"
    return train_timed(config, label, cost, controller, x0_train, key, progress, echo)


def _held_out(config, system, cost, target, controllers, x0_test):
    """Each controller's (before and after training) held-out cost, closed-loop
    trajectories and median final distance to the target."""
    import equinox as eqx
    import jax.numpy as jnp

    from .._rollout.rollout import rollout

    horizon = config["train"]["horizon"]
    evaluate = eqx.filter_jit(cost)
    costs = tuple(float(evaluate(c, x0_test)) for c in controllers)
    trajectories = tuple(
        rollout(system, x0_test, horizon, controller=c) for c in controllers
    )
    distances = tuple(
        float(jnp.median(jnp.linalg.norm(traj.xs[:, -1] - target[None], axis=-1)))
        for traj in trajectories
    )
    return costs, trajectories, distances


def _echo_held_out(echo, costs, distances, result) -> None:
    """One line: the held-out cost and final distance, before and after."""
    (before, after), (distance_before, distance_after) = costs, distances
    echo(
        f"  held-out cost: before {before:.4g}, after {after:.4g}; median final "
        f"distance to the target: before {distance_before:.3g}, after "
        f"{distance_after:.3g} (best step {result.best_step}, stop: "
        f"{result.stop_reason})"
    )


def _outcome(config, result, costs, distances, train_seconds, figures) -> Outcome:
    """The metrics, summary, loss history, trained controller and figures."""
    (before, after), (distance_before, distance_after) = costs, distances
    metrics = {
        **training_metrics(config, config["system"]["model"], result, before, after),
        "final_distance_before": distance_before,
        "final_distance_after": distance_after,
        "timing": {"train_seconds": train_seconds},
    }
    summary = {"cost before training": before, "cost after training": after}
    extra = result.full_losses
    return Outcome(
        metrics=metrics,
        summary=summary,
        summary_label=SUMMARY_LABEL,
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
