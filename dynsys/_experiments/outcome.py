"""What a kind of experiment hands back (`Outcome`) and the helpers every kind
uses to read its config and write its history."""

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

from .config import (
    ConfigError,
)


def config_vector(config: dict, section: str, key: str, size: int, what: str):
    """A scalar or list config value as an array of `size`, or `None` if unset."""
    import jax.numpy as jnp

    value = config[section][key]
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != size:
            raise ConfigError(
                f"config key '{section}.{key}': expected a number or a list of "
                f"{size} numbers (one per {what}), got a list of {len(value)}."
            )
        return jnp.asarray(value, dtype=float)
    return jnp.full((size,), value, dtype=float)


def loss_history_lines(losses, extra: list[tuple[int, float]], name: str) -> list[str]:
    """`history.csv`: the loss of every step and the `extra` (step, value) column."""
    by_step = dict(extra)
    lines = [f"step,train_loss,{name}"]
    for k, value in enumerate(losses):
        v = by_step.get(k)
        lines.append(f"{k},{float(value)!r},{'' if v is None else repr(float(v))}")
    if len(losses) in by_step:
        lines.append(f"{len(losses)},,{float(by_step[len(losses)])!r}")
    return lines


@dataclasses.dataclass
class Outcome:
    """What one kind of experiment hands back to be written into its run folder."""

    metrics: dict
    summary: dict[str, float]  # the headline metrics, also plotted by a sweep
    summary_label: str  # what the headline metrics are (the sweep figure's y label)
    history: list[str]  # CSV lines, header first
    model: Any
    figures: dict[str, Any]  # file name -> matplotlib Figure
    notes: list[str] = dataclasses.field(default_factory=list)  # lines for summary.md
    files: dict[str, Callable[[pathlib.Path], None]] = dataclasses.field(
        default_factory=dict
    )  # extra files: name -> writer(path)
    # The data's channel names recorded in model.dynsys (`ChannelNames`), or None.
    names: Any = None
