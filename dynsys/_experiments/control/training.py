"""Training a controller with the `[train]` settings, timed and announced."""

import time

from .typed_config import TrainConfig


def train_timed(config, label: str, cost, controller, data, key, progress, echo):
    """Say what is trained (`label`: the controller and the plant), then train it
    on the initial states `data`: `(TrainResult, seconds)`."""
    from ..._fitting.train import train

    section = config["train"]
    typed = TrainConfig.from_section(section)
    echo(
        f"{config['name']}: {label}, {len(data)} initial states, horizon "
        f"{section['horizon']}, {TrainConfig.described(section)}"
    )
    start = time.perf_counter()
    result = train(
        cost, controller, data=data, **typed.arguments(), key=key, progress=progress
    )
    return result, time.perf_counter() - start


def training_metrics(config: dict, system: str, result, before: float, after: float):
    """The metrics every `train_controller` run reports: the plant, the controller,
    the steps and the held-out cost before and after training."""
    return {
        "system": system,
        "controller": config["controller"]["type"],
        "steps": config["train"]["steps"],
        "steps_run": result.steps_run,
        "best_step": result.best_step,
        "stop_reason": result.stop_reason,
        "cost_before": before,
        "cost_after": after,
    }
