"""The `[fit]` section as typed, frozen configs, one per library call it drives, each
field one argument of that call: `FitConfig` for `dynsys.fit`, `NeuralConfig` for
`dynsys.fit_neural`. The TOML a user writes is unchanged (`schema.py` validates it);
these are built from the resolved section, so that the pipeline passes arguments, not
dictionary keys."""

import dataclasses
from typing import Any

from ..config import ConfigError


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """`fit(model, data, loss=, solver=, num_steps=, batch_size=)`'s arguments from
    `fit.loss`, `fit.horizon`, `fit.optimizer`, `fit.lr`, `fit.steps` and
    `fit.batch_size`.

    **Fields:**

    - `loss`: the loss object (`Simulation()`, `OneStep()`, `MultipleShooting(h)`,
        `Prediction(1)`).
    - `solver`: `None` (the default: let `fit` choose) or an optax transform.
    - `num_steps`: the step cap (`None`: the solver's own).
    - `batch_size`: trajectories per step (`None`: all).
    - `described`: the solver in words, for the console and metrics.
    """

    loss: Any
    solver: Any
    num_steps: int | None
    batch_size: int | None
    described: str

    @classmethod
    def from_section(cls, fit_cfg: dict, train_data) -> "FitConfig":
        """From the resolved `[fit]` section; `train_data` bounds the shooting
        window (`ConfigError` naming `fit.horizon` when it is longer)."""
        solver, num_steps, described = _solver(fit_cfg)
        return cls(
            _loss(fit_cfg, train_data),
            solver,
            num_steps,
            fit_cfg["batch_size"],
            described,
        )

    def arguments(self) -> dict:
        """The keyword arguments of `fit`."""
        return dict(
            loss=self.loss,
            solver=self.solver,
            num_steps=self.num_steps,
            batch_size=self.batch_size,
        )


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
    from ..._fitting.losses import MultipleShooting, OneStep, Prediction, Simulation

    if fit_cfg["loss"] == "simulation":
        return Simulation()
    if fit_cfg["loss"] == "one_step":
        return OneStep()
    if fit_cfg["loss"] == "prediction":
        return Prediction(1)  # the prediction-error method, on a noise model
    if fit_cfg["horizon"] > train_data.num_steps:
        raise ConfigError(
            f"config key 'fit.horizon': the shooting window ({fit_cfg['horizon']} "
            f"steps) is longer than the training experiments ({train_data.num_steps} "
            "steps)."
        )
    return MultipleShooting(fit_cfg["horizon"])


@dataclasses.dataclass(frozen=True)
class NeuralConfig:
    """`fit_neural(..., horizon=, past=, width_size=, depth=, num_steps=,
    learning_rate=, batch_size=)`'s arguments from the `fit.neural_*` keys, one
    field per argument (named as the argument)."""

    horizon: int
    past: int
    width_size: int
    depth: int
    num_steps: int
    learning_rate: float
    batch_size: int

    @classmethod
    def from_section(cls, fit_cfg: dict) -> "NeuralConfig":
        """From the resolved `[fit]` section."""
        return cls(
            horizon=fit_cfg["neural_horizon"],
            past=fit_cfg["neural_past"],
            width_size=fit_cfg["neural_width"],
            depth=fit_cfg["neural_depth"],
            num_steps=fit_cfg["neural_steps"],
            learning_rate=fit_cfg["neural_lr"],
            batch_size=fit_cfg["neural_batch_size"],
        )

    def arguments(self) -> dict:
        """The keyword arguments of `fit_neural` (also recorded in metrics.json
        as the neural stage's `options`)."""
        return dataclasses.asdict(self)
