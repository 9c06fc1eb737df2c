"""The files a config names: a relative path in a config file is read from the
config file's folder (not the current folder), and a resolved config holds absolute
paths, so that the `config.toml` a run writes reruns from anywhere."""

import copy
import pathlib

from .config import ConfigError


# The config keys that name a file or folder: (section, key); "" is the top level.
PATH_KEYS = (
    ("data", "file"),
    ("data", "validation_file"),
    ("", "compile_cache"),
    ("system", "file"),
    ("system", "encoder"),
)

# The data files a fit reads (checked to be regular files before anything runs).
_DATA_FILES = ("file", "validation_file")


def _rebased(value, folder: pathlib.Path, key: str):
    """`value` read from `folder` when it is a relative path (else as it is: an
    absolute or `~` path, a value of the wrong type for the schema to refuse, or
    the compile cache's `"off"`)."""
    if not isinstance(value, str) or not value:
        return value
    if key == "compile_cache" and value == "off":
        return value
    path = pathlib.Path(value)
    if path.is_absolute() or value.startswith("~"):
        return value
    return str(folder / path)


def rebase_paths(raw: dict, folder: pathlib.Path) -> dict:
    """A copy of the raw config of a file in `folder` with its relative paths
    (`PATH_KEYS`, and the values of a sweep over one of them) read from `folder`.
    Overrides set afterwards (`dynsys run --set`) stay relative to the current
    folder."""
    raw = copy.deepcopy(raw)
    folder = pathlib.Path(folder).absolute()
    for section, key in PATH_KEYS:
        table = raw.get(section) if section else raw
        if isinstance(table, dict) and key in table:
            table[key] = _rebased(table[key], folder, key)
    sweep = raw.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("values"), list):
        swept = sweep.get("key")
        for section, key in PATH_KEYS:
            if section and swept == f"{section}.{key}":
                sweep["values"] = [_rebased(v, folder, key) for v in sweep["values"]]
    return raw


def _checked_file(given: str, key: str, what: str = "a .npz or .csv dataset") -> str:
    """The absolute path of the data file `given` at config key `key`, which must
    exist and be a regular file."""
    path = pathlib.Path(given).expanduser()
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as error:
        raise ConfigError(
            f"config key '{key}': cannot resolve {given!r} ({error})."
        ) from None
    if not path.exists():
        raise ConfigError(f"config key '{key}': no such file {given!r}.")
    if not path.is_file():
        raise ConfigError(
            f"config key '{key}': {given!r} is not a regular file (a folder or a "
            f"device); give {what}."
        )
    return str(path)


def resolve_data_file(config: dict) -> dict:
    """Make `data.file` and `data.validation_file` absolute (a run folder reruns
    from anywhere) and check that each is a regular file, before anything runs;
    a sweep over one of them is checked value by value."""
    if config["kind"] != "fit":
        return _resolve_plant_file(config)
    config = copy.deepcopy(config)
    for key in _DATA_FILES:
        if config["data"][key] is not None:
            config["data"][key] = _checked_file(config["data"][key], f"data.{key}")
    sweep = config.get("sweep")
    if sweep is not None and sweep["key"] in (f"data.{k}" for k in _DATA_FILES):
        sweep["values"] = [
            v if v is None else _checked_file(v, sweep["key"])
            for v in sweep["values"]
        ]
    return config


def _resolve_plant_file(config: dict) -> dict:
    """A controller experiment's `system.file` and `system.encoder`, absolute and
    checked to be regular files."""
    config = copy.deepcopy(config)
    for key in ("file", "encoder"):
        if config["system"].get(key) is not None:
            config["system"][key] = _checked_file(
                config["system"][key], f"system.{key}", "a model file (.dynsys)"
            )
    return config
