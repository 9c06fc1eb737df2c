"""Experiments: run a validated config into a run folder.

A run folder holds the resolved `config.toml`, `metrics.json`, `history.csv`, the
model file `model.dynsys`, PNG figures and a short `summary.md`; a sweep holds one
such folder per swept value, with a summary figure and table. The kinds of experiment
("fit", "train_controller") live in `_experiment_kinds.py`; this file holds what they
share: the schema, the run folder, sweeps and the entry point `run_experiment`.
"""

import contextvars
import copy
import dataclasses
import hashlib
import inspect
import json
import math
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .config import (
    apply_overrides,
    ConfigError,
    dump_toml,
    expand_sweep,
    Option,
    read_toml,
    resolve,
    Schema,
)
from .interrupt import catch_interrupts, Interrupts
from .run_folder import (
    check_out,
    clean_stale,
    replace_folder,
    reserve_folder,
    staging_folder,
    write_marker,
)


KINDS = ("fit", "train_controller")


def _zoo():
    import dynsys.models as zoo  # lazily: the zoo imports dynsys

    return zoo


def _schema(kind: str) -> Schema:
    """The config schema of an experiment kind (section -> key -> Option)."""
    models = tuple(sorted(_zoo().ZOO))
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
        },
        "system": {
            "model": Option((str,), default_model, models, "a zoo model"),
            "params": Option((dict,), {}, help="the zoo model's parameters"),
            "state_names": Option((list,), None, items=str),
            "input_names": Option((list,), None, items=str),
        },
    }
    if kind == "fit":
        schema["data"] = {
            "file": Option((str,), None, help=".npz/.csv dataset; else simulated"),
            "trajectories": Option((int,), 16, low=1),
            "length": Option((int,), 100, low=1, help="steps per trajectory"),
            "measurement_noise": Option((float,), 0.1, low=0),
            "process_noise": Option((float,), 0.0, low=0),
            "x0_mean": Option((float, list), 0.0, items=float),
            "x0_scale": Option((float,), 1.0, low=0),
            "input_scale": Option((float,), 1.0, low=0),
            "validation": Option((float,), 0.25, low=0, high=0.9),
            "states": Option((list,), None, items=str, help="state columns"),
            "inputs": Option((list,), None, items=str, help="input columns"),
            "outputs": Option((list,), None, items=str, help="output columns"),
            "trajectory_column": Option((str,), "trajectory", help="CSV column"),
            "time_column": Option((str,), "time", help="CSV column"),
            "measured_states": Option(
                (list,), None, items=int, help="simulated outputs: these states"
            ),
        }
        schema["fit"] = {
            "model": Option((str,), "linear", ("linear", "stable")),
            "loss": Option(
                (str,), "simulation", ("simulation", "one_step", "shooting")
            ),
            "horizon": Option((int,), 20, low=1, help="shooting window"),
            "optimizer": Option(
                (str,), "default", ("default", "adam", "lbfgs"), "see fit()"
            ),
            "steps": Option(
                (int,), None, low=1, high=10**8, help="default: the optimiser's"
            ),
            "lr": Option((float,), 3e-3, low=0, help="Adam's learning rate"),
            "batch_size": Option((int,), None, low=1),
            "ridge": Option((float,), 0.0, low=0),
            "order": Option((int,), None, low=1, help="default: from the data"),
            "subspace_horizon": Option((int,), None, low=1),
            "feedthrough": Option((bool,), False, help="fit D (y = C x + D u)"),
        }
    else:
        schema["controller"] = {
            "type": Option((str,), "stacked", ("linear", "mlp", "stacked")),
            "width": Option((int,), 16, low=1),
            "depth": Option((int,), 4, low=0),
            "bound": Option((float,), None, low=0, help="actuator limit"),
            "use_time": Option((bool,), False),
        }
        schema["cost"] = {
            "target": Option((list,), None, items=float, help="default: zeros"),
            "Q": Option((float, list), 1.0, items=float, low=0),
            "R": Option((float, list), 0.01, items=float, low=0),
            "Q_final": Option((float, list), None, items=float, low=0),
        }
        schema["train"] = {
            "horizon": Option((int,), 60, low=1),
            "initial_states": Option((int,), 64, low=1),
            "test_states": Option((int,), 8, low=1),
            "spread": Option((float, list), 1.0, items=float, low=0),
            "batch_size": Option((int,), None, low=1),
            "steps": Option((int,), 400, low=1, high=10**8),
            "lr": Option((float,), 1e-2, low=0),
            "schedule": Option((str,), "cosine", ("constant", "cosine")),
            "clip": Option((float,), None, low=0, help="global gradient-norm clip"),
        }
    return schema


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
        raw = read_toml(config)
    elif isinstance(config, Mapping):
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
    _check_params(resolved["system"]["model"], resolved["system"]["params"])
    return resolved


def _check_params(model: str, params: dict) -> None:
    builder = _zoo().ZOO[model]
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
    _check_model_builds(model, params)


# The largest zoo model a config may build (elements over all its arrays).
_MAX_MODEL_SIZE = 10**8


def _check_model_builds(model: str, params: dict) -> None:
    """Build the zoo model abstractly (no memory for its arrays): a parameter it
    refuses, or arrays too large to allocate, are a ConfigError before anything runs.
    """
    import equinox as eqx
    import jax

    builder = _zoo().ZOO[model]
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


@dataclasses.dataclass(frozen=True)
class ExperimentResult:
    """What `run_experiment` returns.

    **Fields:**

    - `path`: the run folder.
    - `config`: the resolved config (as written to `config.toml`).
    - `metrics`: the contents of `metrics.json`.
    - `figures`: the PNG files written, in the order they were made.
    - `runs`: for a sweep, one `ExperimentResult` per swept value; else empty.
    """

    path: pathlib.Path
    config: dict
    metrics: dict
    figures: tuple[pathlib.Path, ...]
    runs: tuple["ExperimentResult", ...] = ()

    def copy_figures(
        self, folder: "str | os.PathLike", prefix: str | None = None
    ) -> list[pathlib.Path]:
        """Copy the figures to `folder` as `<prefix>_<name>.png` (default prefix:
        the config's `name`), each written atomically; returns the new paths."""
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        prefix = self.config["name"] if prefix is None else prefix
        written = []
        for figure in self.figures:
            target = folder / f"{prefix}_{figure.name}"
            temporary = target.with_name(f".{target.name}.partial-{os.getpid()}")
            shutil.copyfile(figure, temporary)
            os.replace(temporary, target)
            written.append(target)
        return written


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


_reserve_folder = reserve_folder  # the name tests and older code use


def _folder_label(label: str, taken: set[str]) -> str:
    """A sweep sub-run's folder name: `key=value`, made safe and unique."""
    safe = "".join(c if c.isalnum() or c in "_.=+-" else "_" for c in label)
    safe = safe[:100]
    candidate, k = safe, 2
    while candidate in taken:
        candidate, k = f"{safe}-{k}", k + 1
    taken.add(candidate)
    return candidate


def _markdown_number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "n/a"
    return str(value)


def _strict(value, path: str, notes: dict[str, str]):
    """`value` with every non-finite float replaced by `None` (noted in `notes`)."""
    if isinstance(value, float) and not math.isfinite(value):
        notes[path] = repr(value)
        return None
    if isinstance(value, dict):
        return {
            k: _strict(v, f"{path}.{k}" if path else str(k), notes)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_strict(v, f"{path}[{k}]", notes) for k, v in enumerate(value)]
    return value


def strict_json(value) -> str:
    """`value` as strict JSON (no NaN/Infinity): a non-finite number becomes `null`,
    and the top level gains `"non_finite": {"path": "inf", ...}` saying which."""
    notes: dict[str, str] = {}
    value = _strict(value, "", notes)
    if notes and isinstance(value, dict):
        value["non_finite"] = notes
    return json.dumps(value, indent=2, allow_nan=False) + "\n"


def _file_digest(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Keys that only a simulated-data fit uses (left out of a data-file run's config.toml).
_SIMULATED_ONLY = {
    "data": (
        "trajectories",
        "length",
        "measurement_noise",
        "process_noise",
        "x0_mean",
        "x0_scale",
        "input_scale",
        "measured_states",
    ),
    "system": ("model", "params"),
}
_FILE_ONLY = {
    "data": ("states", "inputs", "outputs", "trajectory_column", "time_column"),
}


def _recorded(config: dict) -> dict:
    """The config as written to `config.toml`: only what the run used."""
    config = copy.deepcopy(config)
    if config["kind"] == "fit":
        unused = _SIMULATED_ONLY if config["data"]["file"] is not None else _FILE_ONLY
        for section, keys in unused.items():
            for key in keys:
                config[section].pop(key, None)
    return config


def _resolve_data_file(config: dict) -> dict:
    """Make `data.file` absolute (a run folder reruns from anywhere) and check that
    it is a readable regular file, before anything runs."""
    if config["kind"] != "fit" or config["data"]["file"] is None:
        return config
    given = config["data"]["file"]
    path = pathlib.Path(given).expanduser()
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as error:
        raise ConfigError(
            f"config key 'data.file': cannot resolve {given!r} ({error})."
        ) from None
    if not path.exists():
        raise ConfigError(f"config key 'data.file': no such file {given!r}.")
    if not path.is_file():
        raise ConfigError(
            f"config key 'data.file': {given!r} is not a regular file (a folder or a "
            "device); give a .npz or .csv dataset."
        )
    config = copy.deepcopy(config)
    config["data"]["file"] = str(path)
    return config


def _status_line(config: dict, metrics: dict) -> str:
    if metrics["status"] == "complete":
        return (
            f"A `{config['kind']}` experiment, seed {config['seed']}, precision "
            f"{config['precision']}. Rerun it with `dynsys run config.toml` (same "
            "config and seed, same metrics)."
        )
    reason = metrics.get("stop_reason") or "stopped early"
    return (
        f"**Interrupted** ({metrics['signal']}): {reason}. This `{config['kind']}` "
        f"experiment (seed {config['seed']}, precision {config['precision']}) is "
        "incomplete: its metrics are those of the model kept when it stopped; "
        "`dynsys run config.toml` runs it in full."
    )


def _write_single(
    config: dict,
    folder: pathlib.Path,
    outcome: Outcome,
    seconds: float,
    interrupts: Interrupts,
) -> ExperimentResult:
    from .._io import save

    recorded = _recorded(config)
    metrics = dict(outcome.metrics)
    metrics["status"] = "interrupted" if interrupts.interrupted else "complete"
    metrics["signal"] = interrupts.name
    metrics["precision"] = config["precision"]
    if config["kind"] == "fit" and config["data"]["file"] is not None:
        path = pathlib.Path(config["data"]["file"])
        metrics["data_file"] = {"path": str(path), "sha256": _file_digest(path)}
    metrics["summary"] = outcome.summary
    metrics["timing"] = {**metrics.get("timing", {}), "total_seconds": seconds}
    (folder / "config.toml").write_text(dump_toml(recorded), encoding="utf-8")
    (folder / "metrics.json").write_text(strict_json(metrics))
    (folder / "history.csv").write_text("\n".join(outcome.history) + "\n")
    save(folder / "model.dynsys", outcome.model)
    for name, writer in outcome.files.items():
        writer(folder / name)
    figures = []
    for name, figure in outcome.figures.items():
        figure.savefig(folder / name, dpi=100)
        figures.append(folder / name)
    lines = [f"# {config['name']}", ""]
    if config["description"]:
        lines += [config["description"], ""]
    lines += [_status_line(config, metrics), "", *outcome.notes]
    if "data_file" in metrics:
        lines += [
            "",
            f"Data file: `{metrics['data_file']['path']}` (SHA-256 "
            f"`{metrics['data_file']['sha256']}`).",
        ]
    lines += [
        "",
        f"Headline ({outcome.summary_label}):",
        "",
        "| metric | value |",
        "| --- | --- |",
        *(f"| {k} | {_markdown_number(v)} |" for k, v in outcome.summary.items()),
        "",
        "Files: `config.toml` (the resolved config), `metrics.json`, `history.csv` "
        "(loss per step), `model.dynsys` (`dynsys.load`), and the figures:",
        "",
        *(f"![{p.stem}]({p.name})" for p in figures),
        "",
    ]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    (folder / "summary.md").write_text(text, encoding="utf-8")
    return ExperimentResult(folder, recorded, metrics, tuple(figures))


def _run_single(
    config: dict,
    folder: pathlib.Path,
    progress: bool,
    echo,
    interrupts: Interrupts | None = None,
) -> ExperimentResult:
    from .kinds import RUNNERS

    interrupts = Interrupts() if interrupts is None else interrupts
    start = time.perf_counter()
    outcome = RUNNERS[config["kind"]](config, progress=progress, echo=echo)
    return _write_single(
        config, folder, outcome, time.perf_counter() - start, interrupts
    )


def _run_sweep(
    config: dict,
    folder: pathlib.Path,
    progress: bool,
    echo,
    interrupts: Interrupts | None = None,
) -> ExperimentResult:
    """One run per value; a signal stops the sweep after the sub-run it hit (which is
    kept, marked interrupted, when it got as far as writing its folder)."""
    interrupts = Interrupts() if interrupts is None else interrupts
    key = config["sweep"]["key"]
    section, name = key.split(".", 1)
    runs: list[ExperimentResult] = []
    taken: set[str] = set()
    for label, single in expand_sweep(config):
        label = _folder_label(label, taken)
        value = single[section][name]
        seed = f" (seed {single['seed']})" if "seeds" in config["sweep"] else ""
        echo(f"sweep {key} = {value!r}{seed} -> {label}/")
        sub = folder / label
        sub.mkdir()
        write_marker(sub, "a sweep's sub-run")
        try:
            runs.append(_run_single(single, sub, progress, echo, interrupts))
        except KeyboardInterrupt:
            shutil.rmtree(sub, ignore_errors=True)
            if not runs or not interrupts.interrupted:
                raise
        if interrupts.interrupted:
            echo(f"sweep {key}: interrupted ({interrupts.name}); stopping the sweep")
            break
    return _write_sweep(config, folder, runs, interrupts)


def _write_sweep(
    config: dict, folder: pathlib.Path, runs: list, interrupts: Interrupts
) -> ExperimentResult:
    from .. import plot

    key, values = config["sweep"]["key"], config["sweep"]["values"]
    seeds = config["sweep"].get("seeds")
    per_value = len(seeds) if seeds else 1
    complete = len(runs) // per_value  # values whose every seed has run
    done = values[:complete]
    runs_by_value = [(values[k // per_value], r) for k, r in enumerate(runs)]
    labels = list(runs[0].metrics["summary"])
    table = {}
    for label in labels:
        column = [r.metrics["summary"][label] for r in runs[: complete * per_value]]
        # (seeds, values) when several seeds are run: plot.sweep draws error bars.
        table[label] = (
            np.asarray(column).reshape(complete, per_value).T if seeds else column
        )
    from .kinds import ROLES, sweep_label

    figure = plot.sweep(
        key,
        done,
        table,
        xlabel=sweep_label(config, key),
        ylabel=_summary_label(config),
        roles=ROLES,
        title=config["description"] or None,
    )
    figure.savefig(folder / "sweep.png", dpi=100)
    status = "interrupted" if interrupts.interrupted else "complete"
    metrics = {
        "status": status,
        "signal": interrupts.name,
        "precision": config["precision"],
        "sweep": {"key": key, "values": values} | ({"seeds": seeds} if seeds else {}),
        "runs": [
            {
                "value": v,
                "seed": r.config["seed"],
                "folder": r.path.name,
                "status": r.metrics["status"],
                "summary": r.metrics["summary"],
            }
            for v, r in runs_by_value
        ],
        "not_run": values[-(-len(runs) // per_value) :],
    }
    recorded = _recorded(config)
    (folder / "config.toml").write_text(dump_toml(recorded), encoding="utf-8")
    (folder / "metrics.json").write_text(strict_json(metrics))
    lines = [f"# {config['name']}: sweep of `{key}`", ""]
    if config["description"]:
        lines += [config["description"], ""]
    if interrupts.interrupted:
        lines += [
            f"**Interrupted** ({interrupts.name}): the sweep stopped after "
            f"{len(runs)} of {len(values) * per_value} runs; the last run below is "
            "marked.",
            "",
        ]
    each = (
        f"seeds {', '.join(map(str, seeds))}; the figure shows their mean and ±1 "
        "standard deviation"
        if seeds
        else f"seed {config['seed']}"
    )
    lines += [
        f"One `{config['kind']}` run per value of `{key}` ({each}, precision "
        f"{config['precision']}); each sub-folder is a run folder.",
        "",
        f"| {key} | seed | " + " | ".join(labels) + " | status | run |",
        "|" + " --- |" * (len(labels) + 4),
    ]
    for value, run in runs_by_value:
        cells = " | ".join(_markdown_number(run.metrics["summary"][k]) for k in labels)
        lines.append(
            f"| {value} | {run.config['seed']} | {cells} | {run.metrics['status']} | "
            f"[{run.path.name}]({run.path.name}/) |"
        )
    for value in values[-(-len(runs) // per_value) :]:
        blanks = " | ".join("" for _ in labels)
        lines.append(f"| {value} | | {blanks} | not run | |")
    lines += ["", "![sweep](sweep.png)", ""]
    (folder / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return ExperimentResult(
        folder, recorded, metrics, (folder / "sweep.png",), tuple(runs)
    )


def _summary_label(config: dict) -> str:
    from .kinds import SUMMARY_LABELS

    return SUMMARY_LABELS[config["kind"]]


def _rebase(result: ExperimentResult, old: pathlib.Path, new: pathlib.Path):
    def move(path: pathlib.Path) -> pathlib.Path:
        return new / path.relative_to(old)

    return dataclasses.replace(
        result,
        path=move(result.path),
        figures=tuple(move(p) for p in result.figures),
        runs=tuple(_rebase(r, old, new) for r in result.runs),
    )


def _out_root(out_root: "str | os.PathLike") -> pathlib.Path:
    root = pathlib.Path(out_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        why = error.strerror.lower() if error.strerror else str(error)
        raise ValueError(
            f"run_experiment(out_root=...): cannot create {str(root)!r} ({why})."
        ) from None
    if not os.access(root, os.W_OK):
        raise ValueError(
            f"run_experiment(out_root=...): {str(root)!r} is not writable."
        )
    return root


def run_experiment(
    config: "str | os.PathLike | Mapping[str, Any]",
    *,
    out_root: "str | os.PathLike" = "runs",
    out: "str | os.PathLike | None" = None,
    overrides: "Mapping[str, Any] | Sequence[str] | None" = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = print,
) -> ExperimentResult:
    """Run an experiment from a config and write its run folder.

    The kinds:

    - `kind = "fit"`: data simulated from a zoo model (`[system]`, `[data]`: noise,
        trajectories, length) or read from `data.file`; a linear (or stable linear)
        model fitted by least squares and then gradient descent (`[fit]`: loss,
        horizon, steps, lr, batch size).
    - `kind = "train_controller"`: a controller (`[controller]`: linear, mlp or
        stacked, width, depth, bound) trained to drive a zoo system (`[system]`) to
        `cost.target` through batched closed-loop rollouts (`[cost]`, `[train]`).

    The folder (`out`, or `out_root/<name>-<timestamp>/`) holds `config.toml` (the
    resolved config), `metrics.json`, `history.csv`, `model.dynsys`, PNG figures and
    `summary.md`. It is built aside (a hidden `.<folder>.partial-<pid>`) and moved
    into place whole; a failed run leaves nothing behind, and what a killed process
    left is removed by the next run in the same place. A `[sweep]` table (`key =
    "section.key"`, `values = [...]`) runs once per value into sub-folders and adds
    `sweep.png` and a summary table. Same config and seed, same metrics (except
    `metrics["timing"]`), whichever way it is started: the run uses the config's
    `precision` (float64 by default) and records it.

    SIGTERM is handled like SIGINT (Ctrl-C): training stops and keeps its best
    model, the folder is written and marked interrupted (`metrics["status"]`,
    `summary.md`), and a sweep stops after that run.

    In a run of several processes (`jax.distributed`, `dynsys run --distributed`),
    every process computes, and only process 0 prints and writes the run folder;
    on the other processes the returned result's paths do not exist.

    **Arguments:**

    - `config`: a TOML file's path or the parsed TOML as a dict (see
        `resolve_config` and the experiments guide for every key).
    - `out_root`: where the timestamped run folder is made.
    - `out`: an exact folder to write instead. An earlier run folder there is
        replaced; anything else (a folder dynsys did not write, a file, `.`, `..`)
        is refused before anything runs.
    - `overrides`: config keys to set first, `{"fit.steps": 10}` or
        `["fit.steps=10"]` (as `dynsys run --set`).
    - `progress`: show progress bars.
    - `echo`: where progress lines and tables go (`None`: nowhere).

    **Returns:**

    An `ExperimentResult` (the folder, resolved config, metrics, figures, sub-runs).

    **Raises:**

    `ConfigError` (a `ValueError`) naming the key and what is allowed, for an
    invalid config, an unreadable `data.file`, or values that do not fit the model
    (e.g. a `cost.target` of the wrong length); `ValueError` for an `out` or
    `out_root` that cannot or may not be written; `KeyboardInterrupt` for a signal
    that came before there was anything to keep (nothing is written then).

    **Example:**

    ```python
    result = dynsys.run_experiment(
        {"kind": "fit", "data": {"trajectories": 4, "length": 20},
         "fit": {"steps": 10}},
        out_root="runs", progress=False, echo=None)
    sorted(p.name for p in result.figures)  # eigenvalues, loss, trajectories
    ```
    """
    if _elsewhere():  # several processes: only process 0 writes
        return _run_without_writing(config, overrides)
    import jax

    resolved = _resolve_data_file(resolve_config(config, overrides))
    echo = echo if echo is not None else (lambda line: None)
    if out is None:
        root = _out_root(out_root)
    else:
        out = check_out(out, "run_experiment(out=...)")
        root = out.absolute().parent
    clean_stale(root)
    folder = staging = None
    with (
        catch_interrupts() as interrupts,
        jax.enable_x64(resolved["precision"] == "float64"),
    ):
        try:
            folder = out if out is not None else reserve_folder(root, resolved["name"])
            staging = staging_folder(folder)
            if "sweep" in resolved:
                result = _run_sweep(resolved, staging, progress, echo, interrupts)
            else:
                result = _run_single(resolved, staging, progress, echo, interrupts)
            if out is None:  # an empty folder of ours: renaming onto it is atomic
                os.replace(staging, folder)
            else:
                replace_folder(staging, folder, "run_experiment(out=...)")
        except BaseException:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            if out is None and folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            raise
    return _rebase(result, staging, folder)


# Several processes (`dynsys run --distributed`): every process runs the experiment
# (the collectives need all of them); process 0 alone prints and writes.
_WITHOUT_WRITING = contextvars.ContextVar("dynsys_without_writing", default=False)


def _elsewhere() -> bool:
    """True in a process other than 0, unless already running without writing."""
    import jax

    return jax.process_index() != 0 and not _WITHOUT_WRITING.get()


def _run_without_writing(config, overrides) -> ExperimentResult:
    """`run_experiment` into a temporary folder that is removed, printing nothing
    (no progress, no warnings)."""
    import tempfile
    import warnings

    token = _WITHOUT_WRITING.set(True)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="dynsys-process-") as scratch,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            return run_experiment(
                config,
                out=pathlib.Path(scratch) / "run",
                overrides=overrides,
                progress=False,
                echo=None,
            )
    finally:
        _WITHOUT_WRITING.reset(token)
