"""The config schema of each kind of experiment, and `resolve_config`, which
validates a config against it and fills in every default."""

import copy
import inspect
import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from .._type_checks import checks_own_arguments
from .config import (
    apply_overrides,
    check_depth,
    ConfigError,
    Option,
    read_toml,
    resolve,
    Schema,
)
from .paths import rebase_paths
from .sizes import check_sizes, MAX_DEPTH, MAX_STEPS, MAX_WIDTH


KINDS = ("fit", "train_controller")


def zoo():
    """The model zoo, `dynsys.models` (imported lazily: the zoo imports dynsys)."""
    import dynsys.models as zoo

    return zoo


def zoo_names(config: dict):
    """The zoo model's channel names with units (`dynsys.models.names`)."""
    section = config["system"]
    return zoo().names(section["model"], **section["params"])


def _schema(kind: str, models: tuple[str, ...] | None = None) -> Schema:
    """The config schema of an experiment kind (section -> key -> Option); `models`
    (default: the zoo's, which imports JAX) are the allowed `system.model`s."""
    models = tuple(sorted(zoo().ZOO)) if models is None else models
    default_model = "mass_spring_damper" if kind == "fit" else "pendulum"
    schema: Schema = {
        "": {
            "kind": Option((str,), kind, KINDS, "the kind of experiment"),
            "name": Option((str,), None, help="run folder prefix (default: kind)"),
            "seed": Option(
                (int,), 0, low=0, high=2**63 - 1, help="the one seed of the run"
            ),
            "precision": Option(
                (str,),
                "float64",
                ("float64", "float32"),
                "the floating-point precision of the whole run",
            ),
            "description": Option((str,), "", help="one line for summary.md"),
            "compile_cache": Option(
                (str,),
                None,
                help="JAX's compilation cache folder, or 'off' (default: "
                "DYNSYS_CACHE_DIR, else ~/.cache/dynsys/jax)",
            ),
        },
        "system": {
            "model": Option((str,), default_model, models, "a zoo model"),
            "params": Option((dict,), {}, help="the zoo model's parameters"),
            "state_names": Option((list,), None, items=str),
            "input_names": Option((list,), None, items=str),
        },
    }
    if kind == "fit":
        schema["data"] = _fit_data_options()
        schema["fit"] = _fit_options()
    else:
        schema["system"] |= _plant_file_options()
        schema |= _train_options()
    return schema


def _plant_file_options() -> dict[str, Option]:
    """The `[system]` keys of a controller experiment on a model file."""
    return {
        "file": Option(
            (str,), None, help="a model file (dynsys fit's model.dynsys); else the zoo"
        ),
        "encoder": Option(
            (str,), None, help="a neural model's encoder (default: beside the file)"
        ),
        "output_names": Option((list,), None, items=str),
    }


def _fit_data_options() -> dict[str, Option]:
    """The `[data]` keys of a fit experiment."""
    return {
        "file": Option((str,), None, help=".npz/.csv dataset; else simulated"),
        "trajectories": Option((int,), 16, low=1, high=MAX_STEPS),
        "length": Option(
            (int,), 100, low=1, high=MAX_STEPS, help="steps per trajectory"
        ),
        "measurement_noise": Option((float,), 0.1, low=0),
        "process_noise": Option((float,), 0.0, low=0),
        "x0_mean": Option((float, list), 0.0, items=float),
        "x0_scale": Option((float,), 1.0, low=0),
        "input_scale": Option((float,), 1.0, low=0),
        "validation": Option(
            (float,),
            None,
            low=0,
            high=0.9,
            help="share of experiments held out (default: 0.25 of several)",
        ),
        "validation_file": Option(
            (str,), None, help="held-out data in their own file (same channels)"
        ),
        "select_on_validation": Option(
            (bool,),
            False,
            help="the validation file also chooses structure and step (optimistic)",
        ),
        "validation_split": Option(
            (float,),
            None,
            low=0.01,
            high=0.9,
            help="hold out the last part of each experiment by time",
        ),
        "dt": Option(
            (float,), None, low=0, above=True, help="sample time (s), if no times"
        ),
        "states": Option((list,), None, items=str, help="state columns"),
        "inputs": Option((list,), None, items=str, help="input columns"),
        "outputs": Option((list,), None, items=str, help="output columns"),
        "trajectory_column": Option((str,), "trajectory", help="CSV column"),
        "time_column": Option((str,), "time", help="CSV column"),
        "measured_states": Option(
            (list,), None, items=int, help="simulated outputs: these states"
        ),
    }


def _fit_options() -> dict[str, Option]:
    """The `[fit]` keys of a fit experiment."""
    return {
        "model": Option((str,), "linear", ("linear", "stable", "neural")),
        "loss": Option(
            (str,),
            "simulation",
            ("simulation", "one_step", "shooting", "prediction"),
            "prediction: a noise model, the one-step prediction error (PEM)",
        ),
        "horizon": Option((int,), 20, low=1, high=MAX_STEPS, help="shooting window"),
        "optimizer": Option(
            (str,), "default", ("default", "adam", "lbfgs"), "see fit()"
        ),
        "steps": Option(
            (int,), None, low=1, high=MAX_STEPS, help="default: the optimiser's"
        ),
        "lr": Option((float,), 3e-3, low=0, help="Adam's learning rate"),
        "batch_size": Option((int,), None, low=1, high=MAX_STEPS),
        "ridge": Option((float,), 0.0, low=0),
        "order": Option(
            (int,), None, low=1, help="default: chosen by a structure scan"
        ),
        "subspace_horizon": Option((int,), None, low=1),
        "structure": Option(
            (str,),
            "state-space",
            ("state-space", "armax", "bj"),
            "state-space, or a polynomial model with a noise model (one output)",
        ),
        "orders": Option(
            (list,),
            None,
            items=int,
            low=0,
            high=MAX_DEPTH,
            help="armax: [na, nb, nc, nk]; bj: [nb, nc, nd, nf, nk]; default: a scan",
        ),
        "feedthrough": Option(
            (bool,), None, help="fit D (y = C x + D u); default: from the data"
        ),
        "offset": Option(
            (bool,), True, help="remove the data's means; the model keeps them"
        ),
        "stabilise": Option(
            (bool,),
            True,
            help="stabilise an unstable start; refit as stable a fit that drifted",
        ),
        "input_delay": Option(
            (str, int, list),
            "auto",
            items=int,
            low=0,
            help="input delay in samples: 'auto' (estimated), one for every input "
            "or a list of one per input; 0: none",
        ),
        # model = "neural": fit_neural's options (docs/nonlinear-models.md).
        "neural_horizon": Option(
            (int,), 64, low=1, high=MAX_STEPS, help="simulated window"
        ),
        "neural_past": Option(
            (int,), 20, low=1, high=MAX_STEPS, help="encoder's past samples"
        ),
        "neural_width": Option(
            (int,), 32, low=1, high=MAX_WIDTH, help="MLP hidden width"
        ),
        "neural_depth": Option((int,), 2, low=2, high=MAX_DEPTH, help="MLP layers"),
        "neural_steps": Option(
            (int,), 20000, low=1, high=MAX_STEPS, help="Adam steps (a maximum)"
        ),
        "neural_lr": Option((float,), 3e-4, low=0, help="Adam's learning rate"),
        "neural_batch_size": Option(
            (int,), 64, low=1, high=MAX_STEPS, help="windows per step"
        ),
    }


def _train_options() -> Schema:
    """The `[controller]`, `[cost]` and `[train]` sections of a controller
    experiment."""
    return {
        "controller": {
            "type": Option((str,), "stacked", ("linear", "mlp", "stacked")),
            "width": Option((int,), 16, low=1, high=MAX_WIDTH),
            "depth": Option((int,), 4, low=0, high=MAX_DEPTH),
            "bound": Option((float,), None, low=0, help="actuator limit"),
            "use_time": Option((bool,), False),
        },
        "cost": {
            "target": Option((list,), None, items=float, help="default: zeros"),
            "Q": Option((float, list), 1.0, items=float, low=0),
            "R": Option((float, list), 0.01, items=float, low=0),
            "Q_final": Option((float, list), None, items=float, low=0),
            "set_point": Option(
                (list,), None, help="model file: output set point(s), output units"
            ),
        },
        "observer": {
            "process_noise": Option(
                (float,), 1.0, low=0, help="LinearSystem file: state noise variance"
            ),
            "measurement_noise": Option(
                (float,), 1.0, low=0, above=True, help="output noise variance"
            ),
        },
        "train": {
            "horizon": Option((int,), 60, low=1, high=MAX_STEPS),
            "initial_states": Option((int,), 64, low=1, high=MAX_STEPS),
            "test_states": Option((int,), 8, low=1, high=MAX_STEPS),
            "spread": Option((float, list), 1.0, items=float, low=0),
            "batch_size": Option((int,), None, low=1, high=MAX_STEPS),
            "steps": Option((int,), 400, low=1, high=MAX_STEPS),
            "optimizer": Option(
                (str,), "adam", ("adam", "lbfgs"), "lbfgs: no lr, no schedule"
            ),
            "lr": Option((float,), 1e-2, low=0),
            "schedule": Option((str,), "cosine", ("constant", "cosine")),
            "clip": Option((float,), None, low=0, help="global gradient-norm clip"),
        },
    }


@checks_own_arguments
def resolve_config(
    config: "str | os.PathLike | Mapping[str, Any]",
    overrides: "Mapping[str, Any] | Sequence[str] | None" = None,
) -> dict:
    """Validate an experiment config and fill in every default.

    **Arguments:**

    - `config`: a TOML file's path, or the parsed TOML as a dict.
    - `overrides`: keys to set before validation: `{"fit.steps": 10}` or
        `["fit.steps=10"]` (values read as TOML).

    **Returns:**

    The resolved config: a dict of the top-level keys and one dict per section,
    every key present (`None` where unset and optional).

    **Raises:**

    `ConfigError` (a `ValueError`) naming the key and what is allowed: a missing or
    unknown `kind`, an unknown section or key, a value of the wrong type or out of
    range, an unknown zoo model or model parameter.

    **Example:**

    ```python
    config = dynsys.resolve_config({"kind": "fit", "fit": {"steps": 50}})
    config["fit"]["loss"], config["data"]["measurement_noise"]  # 'simulation', 0.1
    ```
    """
    if isinstance(config, str | os.PathLike):
        # Its relative paths are read from its folder; those of --set, from here.
        raw = rebase_paths(read_toml(config), pathlib.Path(config).parent)
    elif isinstance(config, Mapping):
        check_depth(dict(config), "config")
        raw = copy.deepcopy(dict(config))
    else:
        raise TypeError(
            "resolve_config(config=...): expected a path or a dict, got "
            f"{type(config)}."
        )
    if overrides:
        raw = apply_overrides(raw, overrides)
    kind = raw.get("kind")
    if kind not in KINDS:
        allowed = ", ".join(repr(k) for k in KINDS)
        got = "nothing" if kind is None else repr(kind)
        raise ConfigError(f"config key 'kind': expected one of {allowed}, got {got}.")
    resolved = resolve(raw, _schema(kind))
    if resolved["name"] is None:
        resolved["name"] = kind
    name = resolved["name"]
    if not name or not all(c.isalnum() or c in "_.-" for c in name) or name[0] == ".":
        raise ConfigError(
            f"config key 'name': expected letters, digits, '_', '-' and '.' (a folder "
            f"name), got {name!r}."
        )
    if len(name) > 150:
        raise ConfigError(
            f"config key 'name': expected at most 150 characters (it names a folder), "
            f"got {len(name)}."
        )
    check_sizes(resolved)
    # A fit of a data file simulates nothing: its zoo model is not built (0.07 s).
    simulated = resolved.get("data", {}).get("file") is None
    simulated = simulated and resolved["system"].get("file") is None
    _check_params(resolved["system"]["model"], resolved["system"]["params"], simulated)
    return resolved


def _check_params(model: str, params: dict, build: bool = True) -> None:
    builder = zoo().ZOO[model]
    allowed = sorted(
        name
        for name, p in inspect.signature(builder).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )
    for name, value in params.items():
        if name not in allowed:
            raise ConfigError(
                f"config key 'system.params': unknown parameter {name!r} of model "
                f"{model!r}; allowed: {', '.join(allowed)}."
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"config key 'system.params.{name}': expected a number, got "
                f"{type(value).__name__} {value!r}."
            )
        if not math.isfinite(value):
            raise ConfigError(
                f"config key 'system.params.{name}': expected a finite number, got "
                f"{value!r}."
            )
    if build:
        _check_model_builds(model, params)


# The largest zoo model a config may build (elements over all its arrays).
_MAX_MODEL_SIZE = 10**8


def _check_model_builds(model: str, params: dict) -> None:
    """Build the zoo model abstractly (no memory for its arrays): a parameter it
    refuses, or arrays too large to allocate, are a ConfigError before anything runs.
    """
    import equinox as eqx
    import jax

    builder = zoo().ZOO[model]
    call = f"{model}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
    try:
        shapes = eqx.filter_eval_shape(lambda: builder(**params))
    except Exception as error:  # the builder's own check, or arithmetic on a bad value
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = reason or type(error).__name__
        if not isinstance(error, ValueError):
            reason = f"{type(error).__name__}: {reason}"
        raise ConfigError(
            f"config key 'system.params': {call} cannot be built: {reason}"
        ) from None
    size = sum(
        math.prod(leaf.shape)
        for leaf in jax.tree.leaves(shapes)
        if isinstance(leaf, jax.ShapeDtypeStruct)
    )
    if size > _MAX_MODEL_SIZE:
        raise ConfigError(
            f"config key 'system.params': {call} would hold {size:,} numbers (at "
            f"most {_MAX_MODEL_SIZE:,}); choose smaller sizes."
        )
