"""`ExperimentResult`, and what a run folder records: the config as used, strict
JSON metrics, the data file's digest."""

import copy
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import shutil


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
    """The config as written to `config.toml`: only what the run used (its data
    files absolute paths, as `run_experiment` resolved them)."""
    config = copy.deepcopy(config)
    if config["kind"] == "fit":
        data = config["data"]
        unused = _SIMULATED_ONLY if data["file"] is not None else _FILE_ONLY
        for section, keys in unused.items():
            for key in keys:
                config[section].pop(key, None)
        if data.get("validation_file") is not None or (
            data.get("validation_split") is not None
        ):  # these hold out the data; a share of experiments means nothing then
            data.pop("validation", None)
    return config
