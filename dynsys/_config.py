"""Experiment configs: TOML files validated against a schema, with one-key sweeps."""

import copy
import dataclasses
import pathlib
import tomllib
from typing import Any


class ConfigError(ValueError):
    """An invalid experiment config; the message names the key and what is allowed."""


@dataclasses.dataclass(frozen=True)
class Option:
    """One config key: its type(s), default and (optionally) the allowed values."""

    types: tuple[type, ...]
    default: Any
    choices: tuple[Any, ...] | None = None
    help: str = ""

    def check(self, key: str, value: Any) -> Any:
        if (
            float in self.types
            and isinstance(value, int)
            and not isinstance(value, bool)
        ):
            value = float(value)
        if value is None and self.default is None:
            return None
        if isinstance(value, bool) and bool not in self.types:
            raise ConfigError(self._type_message(key, value))
        if not isinstance(value, self.types):
            raise ConfigError(self._type_message(key, value))
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise ConfigError(
                f"config key '{key}': expected one of {allowed}, got {value!r}."
            )
        return value

    def _type_message(self, key: str, value: Any) -> str:
        names = " or ".join(t.__name__ for t in self.types)
        return (
            f"config key '{key}': expected {names}, got {type(value).__name__} "
            f"{value!r}."
        )


Schema = dict[str, dict[str, Option]]
"""Section name -> key -> Option. The section "" holds top-level keys."""


def _check_section(schema: Schema, section: str, given: dict, prefix: str) -> dict:
    options = schema[section]
    unknown = sorted(set(given) - set(options))
    if unknown:
        allowed = ", ".join(sorted(options))
        where = f"[{section}]" if section else "the top level"
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}'; allowed keys in {where}: "
            f"{allowed}."
        )
    resolved = {}
    for key, option in options.items():
        value = given.get(key, option.default)
        resolved[key] = option.check(prefix + key, value) if key in given else value
    return resolved


def resolve(raw: dict, schema: Schema) -> dict:
    """Validate `raw` against `schema` and fill in defaults.

    **Raises:**

    `ConfigError` naming the first unknown key, the key of a wrong type or value, and
    what is allowed.
    """
    sections = {s for s in schema if s}
    top_level = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in raw.items() if isinstance(v, dict)}
    unknown = sorted(set(tables) - sections - {"sweep"})
    if unknown:
        raise ConfigError(
            f"unknown config section '[{unknown[0]}]'; allowed sections: "
            f"{', '.join(sorted(sections | {'sweep'}))}."
        )
    resolved = _check_section(schema, "", top_level, "")
    for section in sorted(sections):
        resolved[section] = _check_section(
            schema, section, tables.get(section, {}), f"{section}."
        )
    if "sweep" in tables:
        resolved["sweep"] = _check_sweep(tables["sweep"], schema)
    return resolved


def _check_sweep(sweep: dict, schema: Schema) -> dict:
    allowed = {"key", "values"}
    unknown = sorted(set(sweep) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown config key 'sweep.{unknown[0]}'; allowed keys in [sweep]: key, "
            "values."
        )
    key, values = sweep.get("key"), sweep.get("values")
    if not isinstance(key, str) or "." not in key:
        raise ConfigError(
            f"config key 'sweep.key': expected 'section.key' (e.g. "
            f"'data.measurement_noise'), got {key!r}."
        )
    section, name = key.split(".", 1)
    if section not in schema or name not in schema[section] or not section:
        raise ConfigError(f"config key 'sweep.key': {key!r} is not a config key.")
    if not isinstance(values, list) or not values:
        raise ConfigError(
            f"config key 'sweep.values': expected a non-empty list, got {values!r}."
        )
    option = schema[section][name]
    checked = [option.check(key, value) for value in values]
    return {"key": key, "values": checked}


def load_config(path: str | pathlib.Path, schema: Schema) -> dict:
    """Read a TOML experiment config and `resolve` it.

    **Raises:**

    `ConfigError` for a missing file, invalid TOML, or an invalid key or value.
    """
    path = pathlib.Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist.") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"config file {str(path)!r} is not valid TOML: {error}"
        ) from None
    return resolve(raw, schema)


def expand_sweep(config: dict) -> list[tuple[str, dict]]:
    """The runs of a config: `[("", config)]`, or one `(label, config)` per value."""
    if "sweep" not in config:
        return [("", config)]
    section, name = config["sweep"]["key"].split(".", 1)
    runs = []
    for value in config["sweep"]["values"]:
        single = copy.deepcopy(config)
        del single["sweep"]
        single[section][name] = value
        runs.append((f"{name}={value}", single))
    return runs


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to TOML")


def dump_toml(config: dict) -> str:
    """Write a resolved config (scalars, lists, one level of tables) as TOML.

    Keys whose value is `None` are left out (TOML has no null).
    """
    lines = [
        f"{k} = {_toml_value(v)}"
        for k, v in config.items()
        if not isinstance(v, dict) and v is not None
    ]
    for section, table in config.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"]
            lines += [
                f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None
            ]
    return "\n".join(lines) + "\n"
