"""The registry of experiment kinds: each kind's runner (a resolved config in, an
`Outcome` out), its headline label, and what a sweep of it draws."""

from .fit.pipeline import run_fit
from .fit.record import SUMMARY_LABEL as _FIT_LABEL
from .schema import zoo_names
from .train_controller import run_train_controller, SUMMARY_LABEL as _TRAIN_LABEL


SUMMARY_LABELS = {
    "fit": _FIT_LABEL,
    "train_controller": _TRAIN_LABEL,
}


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


RUNNERS = {"fit": run_fit, "train_controller": run_train_controller}
