"""The `train_controller` sections as typed, frozen configs, one per library call
they drive, each field one argument of that call (named as the argument):
`ControllerConfig` for `MLPController` / `StackedController.mlp`, `TrainConfig` for
`dynsys.train`, `ObserverConfig` for `dynsys.kalman_gain` and `WeightsConfig` for
`dynsys.lqr_gain`. The TOML a user writes is validated by `schema.py`; these are
built from the resolved sections, so that the runner passes arguments, not keys."""

import dataclasses
from typing import Any

from ..config import ConfigError


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    """The controller's constructor arguments from `[controller]`: `type` picks
    the call (`"linear"` and `"mlp"`: `MLPController`, depth 0 for linear;
    `"stacked"`: `StackedController.mlp`); the other fields are its arguments."""

    type: str
    width_size: int
    depth: int
    use_time: bool
    bound: float | None

    @classmethod
    def from_section(cls, section: dict) -> "ControllerConfig":
        depth = 0 if section["type"] == "linear" else section["depth"]
        if section["type"] == "stacked" and depth < 2:
            raise ConfigError(
                f"config key 'controller.depth': a stacked controller needs depth >= 2 "
                f"(first and last layer), got {depth}."
            )
        return cls(
            section["type"],
            section["width"],
            depth,
            section["use_time"],
            section["bound"],
        )

    def arguments(self) -> dict:
        """The keyword arguments of the constructor (all but `type`)."""
        fields = _fields(self)
        del fields["type"]
        return fields

    def build(self, features: int, inputs: int, key):
        """The controller of `features` inputs and `inputs` outputs."""
        from ..._systems.controller import MLPController
        from ..._systems.layered import StackedController

        build = StackedController.mlp if self.type == "stacked" else MLPController
        return build(features, inputs, **self.arguments(), key=key)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`train(loss_fn, model, data=, batch_size=, solver=, num_steps=)`'s arguments
    from `[train]`: Adam at `train.lr` (constant or cosine decay over the steps),
    with `train.clip` gradient clipping; or (`train.optimizer = "lbfgs"`) L-BFGS."""

    solver: Any
    num_steps: int
    batch_size: int | None

    @classmethod
    def from_section(cls, section: dict) -> "TrainConfig":
        import optax

        if section["optimizer"] == "lbfgs":
            from ..._fitting.optax_solver import LBFGS

            return cls(LBFGS(), section["steps"], section["batch_size"])
        schedule = section["lr"]
        if section["schedule"] == "cosine":
            schedule = optax.cosine_decay_schedule(section["lr"], section["steps"])
        solver = optax.adam(schedule)
        if section["clip"] is not None:
            solver = optax.chain(optax.clip_by_global_norm(section["clip"]), solver)
        return cls(solver, section["steps"], section["batch_size"])

    def arguments(self) -> dict:
        """The keyword arguments of `train`."""
        return _fields(self)

    @staticmethod
    def described(section: dict) -> str:
        """The optimiser in words."""
        if section["optimizer"] == "lbfgs":
            return f"{section['steps']} L-BFGS steps"
        return (
            f"{section['steps']} Adam steps (lr {section['lr']:g}, "
            f"{section['schedule']})"
        )


@dataclasses.dataclass(frozen=True)
class ObserverConfig:
    """`kalman_gain(model, process_noise=, measurement_noise=)`'s arguments from
    `[observer]` (a `LinearSystem` plant; an `InnovationSystem` has its own)."""

    process_noise: float
    measurement_noise: float

    @classmethod
    def from_section(cls, section: dict) -> "ObserverConfig":
        return cls(section["process_noise"], section["measurement_noise"])

    def arguments(self) -> dict:
        return _fields(self)


@dataclasses.dataclass(frozen=True)
class WeightsConfig:
    """`lqr_gain(model, output_weight=, input_weight=)`'s arguments from `cost.Q`
    and `cost.R` (diagonal weights, one per output and input), which also weigh
    the trained controller's cost."""

    output_weight: Any
    input_weight: Any

    @classmethod
    def from_section(cls, section: dict, outputs: int, inputs: int) -> "WeightsConfig":
        import numpy as np

        return cls(
            np.diag(_per_channel(section, "Q", outputs, "output")),
            np.diag(_per_channel(section, "R", inputs, "input")),
        )

    def arguments(self) -> dict:
        return _fields(self)


def _per_channel(section: dict, key: str, size: int, what: str):
    """A number or a list of `size` numbers as a NumPy vector of `size`."""
    import numpy as np

    value = section[key]
    if isinstance(value, list) and len(value) != size:
        raise ConfigError(
            f"config key 'cost.{key}': expected a number or a list of {size} numbers "
            f"(one per {what} of the model), got a list of {len(value)}."
        )
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (size,)).copy()


def _fields(config) -> dict:
    """A typed config's fields by name (as they are: no copies)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
