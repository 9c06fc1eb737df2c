"""Experiment configs: TOML files validated against a schema, with one-key sweeps."""

import copy
import dataclasses
import math
import pathlib
import tomllib
from typing import Any


class ConfigError(ValueError):
    """An invalid experiment config; the message names the key and what is allowed.

    Raised by `dynsys.resolve_config` and `dynsys.run_experiment` before anything
    runs (or, for values that must fit the model, such as the length of
    `cost.target`, before any training). A `ValueError`.

    **Example:**

    ```python
    try:
        dynsys.resolve_config({"kind": "fit", "fit": {"loss": "l1"}})
    except dynsys.ConfigError as error:
        print(error)  # config key 'fit.loss': expected one of 'simulation', ...
    ```
    """


@dataclasses.dataclass(frozen=True)
class Option:
    """One config key: its type(s), default, and what values are allowed.

    `choices` lists the allowed values; `low`/`high` bound numbers (inclusive;
    `above`: `low` excluded); `items` is the type of a list's elements (ints are
    accepted as floats).
    """

    types: tuple[type, ...]
    default: Any
    choices: tuple[Any, ...] | None = None
    help: str = ""
    low: float | None = None
    high: float | None = None
    items: type | None = None
    above: bool = False

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
        if isinstance(value, list) and self.items is not None:
            value = [self._check_item(key, k, item) for k, item in enumerate(value)]
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._check_range(key, value)
        return value

    def _check_item(self, key: str, k: int, item: Any) -> Any:
        assert self.items is not None
        if self.items is float and isinstance(item, int) and not isinstance(item, bool):
            item = float(item)
        if isinstance(item, bool) or not isinstance(item, self.items):
            raise ConfigError(
                f"config key '{key}': expected a list of {self.items.__name__}, but "
                f"item {k} is {type(item).__name__} {item!r}."
            )
        if isinstance(item, int | float):
            self._check_range(f"{key}[{k}]", item)
        return item

    def _check_range(self, key: str, value: float) -> None:
        below = self.low is not None and (
            value <= self.low if self.above else value < self.low
        )
        if (
            not math.isfinite(value)
            or below
            or (self.high is not None and value > self.high)
        ):
            if self.low is not None and self.high is not None:
                opening = "(" if self.above else "["
                wanted = f"a finite value in {opening}{self.low:g}, {self.high:g}]"
            elif self.low is not None:
                wanted = f"a finite value {'>' if self.above else '>='} {self.low:g}"
            elif self.high is not None:
                wanted = f"a finite value <= {self.high:g}"
            else:
                wanted = "a finite value"
            raise ConfigError(f"config key '{key}': expected {wanted}, got {value!r}.")

    def _type_message(self, key: str, value: Any) -> str:
        names = " or ".join(
            "table" if t is dict else t.__name__ if t is not list else "list"
            for t in self.types
        )
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
    for name in sorted(sections & set(raw)):
        if not isinstance(raw[name], dict):
            raise ConfigError(
                f"config key '{name}': expected a table [{name}], got "
                f"{type(raw[name]).__name__} {raw[name]!r}."
            )
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
    allowed = {"key", "values", "seeds"}
    unknown = sorted(set(sweep) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown config key 'sweep.{unknown[0]}'; allowed keys in [sweep]: key, "
            "seeds, values."
        )
    key, values = sweep.get("key"), sweep.get("values")
    if not isinstance(key, str) or "." not in key:
        raise ConfigError(
            f"config key 'sweep.key': expected 'section.key' (e.g. "
            f"'data.measurement_noise'), got {key!r}."
        )
    section, name = key.split(".", 1)
    if section not in schema or name not in schema[section] or not section:
        allowed = ", ".join(
            f"{sec}.{k}" for sec in sorted(schema) if sec for k in schema[sec]
        )
        raise ConfigError(
            f"config key 'sweep.key': {key!r} is not a config key; allowed: {allowed}."
        )
    if not isinstance(values, list) or not values:
        raise ConfigError(
            f"config key 'sweep.values': expected a non-empty list, got {values!r}."
        )
    option = schema[section][name]
    checked = [option.check(key, value) for value in values]
    resolved = {"key": key, "values": checked}
    if "seeds" in sweep:
        seeds = sweep["seeds"]
        seed_option = schema[""]["seed"]
        if (
            not isinstance(seeds, list)
            or not seeds
            or len(set(map(str, seeds))) < len(seeds)
        ):
            raise ConfigError(
                "config key 'sweep.seeds': expected a non-empty list of distinct "
                f"seeds, got {seeds!r}."
            )
        resolved["seeds"] = [seed_option.check("sweep.seeds", s) for s in seeds]
    return resolved


def read_toml(path: str | pathlib.Path) -> dict:
    """Read a TOML config file (not yet validated).

    **Raises:**

    `ConfigError` for a missing file or invalid TOML.
    """
    path = pathlib.Path(path)
    try:
        if path.exists() and not path.is_file():
            raise ConfigError(f"config file {str(path)!r} is not a regular file.")
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist.") from None
    except (OSError, UnicodeDecodeError) as error:
        why = getattr(error, "strerror", None) or str(error)
        raise ConfigError(
            f"config file {str(path)!r} cannot be read ({why})."
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"config file {str(path)!r} is not valid TOML: {error}"
        ) from None
    except RecursionError:  # tomllib reads nested tables and arrays recursively
        raise ConfigError(_too_deep(f"config file {str(path)!r}")) from None
    check_depth(raw, f"config file {str(path)!r}")
    return raw


# The deepest nesting of tables and lists a config may have. The schema's deepest
# is 3 (`[system] params = { ... }`); the bound keeps every recursive step that
# follows (copying, checking, writing) far from Python's recursion limit.
MAX_NESTING = 32


def _too_deep(what: str) -> str:
    return (
        f"{what} is not valid TOML for a config: tables or arrays nested too deeply "
        f"(at most {MAX_NESTING} levels)."
    )


def check_depth(value: Any, what: str) -> None:
    """Refuse (one line) tables and lists nested deeper than `MAX_NESTING`; walked
    without recursion, so any depth is safe to check."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_NESTING:
                raise ConfigError(_too_deep(what))
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)


def parse_override(text: str) -> tuple[str, Any]:
    """`"fit.steps=10"` -> `("fit.steps", 10)`; the value is read as TOML, else kept
    as a string (`"system.model=pendulum"`)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            f"override {text!r}: expected KEY=VALUE, e.g. 'fit.steps=100'."
        )
    try:
        parsed = tomllib.loads(f"value = {value.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    except RecursionError:
        raise ConfigError(_too_deep(f"override {key!r}")) from None
    check_depth(parsed, f"override {key!r}")
    return key, parsed


def apply_overrides(raw: dict, overrides) -> dict:
    """A copy of the raw config with `overrides` set: a mapping `"section.key"` ->
    value, or a sequence of `"section.key=value"` strings."""
    raw = copy.deepcopy(raw)
    if isinstance(overrides, dict):
        items = list(overrides.items())
        for key, value in items:
            check_depth(value, f"override {key!r}")
    else:
        items = [parse_override(text) for text in overrides]
    for key, value in items:
        section, dot, name = key.partition(".")
        if not dot:
            raw[key] = value
            continue
        table = raw.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(
                f"override {key!r}: config key '{section}' is not a table."
            )
        table[name] = value
    return raw


def expand_sweep(config: dict) -> list[tuple[str, dict]]:
    """The runs of a config: `[("", config)]`, or one `(label, config)` per value
    (per value and seed, value by value, when the sweep lists `seeds`)."""
    if "sweep" not in config:
        return [("", config)]
    section, name = config["sweep"]["key"].split(".", 1)
    seeds = config["sweep"].get("seeds")
    runs = []
    for value in config["sweep"]["values"]:
        for seed in seeds or [config["seed"]]:
            single = copy.deepcopy(config)
            del single["sweep"]
            single[section][name] = value
            single["seed"] = seed
            label = f"{name}={value}" + (f"_seed={seed}" if seeds else "")
            runs.append((label, single))
    return runs


def _toml_key(key: str) -> str:
    if key and all(c.isalnum() or c in "_-" for c in key):
        return key
    return _toml_value(str(key))


_TOML_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _toml_char(c: str) -> str:
    """One character of a TOML basic string: escaped when TOML requires it (the
    quote, the backslash and every control character)."""
    if c in _TOML_ESCAPES:
        return _TOML_ESCAPES[c]
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\u{ord(c):04X}"
    return c


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_toml_char(c) for c in value) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(
            f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()
        )
        return "{" + (f" {items} " if items else "") + "}"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to TOML")


def dump_toml(config: dict) -> str:
    """Write a resolved config (scalars, lists, one level of tables whose values may
    be inline tables) as TOML; `tomllib.loads(dump_toml(c)) == c` up to the `None`s.

    Keys whose value is `None` are left out (TOML has no null).
    """
    lines = [
        f"{_toml_key(k)} = {_toml_value(v)}"
        for k, v in config.items()
        if not isinstance(v, dict) and v is not None
    ]
    for section, table in config.items():
        if isinstance(table, dict):
            lines += ["", f"[{_toml_key(section)}]"]
            lines += [
                f"{_toml_key(k)} = {_toml_value(v)}"
                for k, v in table.items()
                if v is not None
            ]
    return "\n".join(lines) + "\n"
