"""Which column of a table plays which role: states, inputs, outputs, the trajectory
identifier, the time, and the units written into the names.

Shared by every tabular source (`.csv`/`.dat`/`.txt` files, `.mat` variables,
pandas DataFrames), so they pick columns and fail the same way.
"""

import re
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from .quoting import quoted, quoted_list

# The units a time column may be written in (any case), and their length in seconds.
# A unit below one second is stored as the divisor that gives seconds, so that times
# written in whole milliseconds become exact seconds (2000 ms -> 2.0 s).
_SECONDS_PER_UNIT = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("ms", "msec", "millisecond", "milliseconds"), 1e-3),
    **dict.fromkeys(("us", "µs", "μs", "usec", "microsecond", "microseconds"), 1e-6),
    **dict.fromkeys(("ns", "nsec", "nanosecond", "nanoseconds"), 1e-9),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
}
_UNITS_UNDERSTOOD = "s, ms, us (µs), ns, min and h"
_UNIT_WORDS = "|".join(sorted(_SECONDS_PER_UNIT, key=len, reverse=True))

# Time columns recognised without `time=`: `t`, `time`, `times`, `timestamp`, with an
# optional unit suffix (`t_s`, `time_ms`, `Time (s)`, `t [min]`), any case. A name
# like `k`, `n`, `sample` or `index` is a sample index, never a time.
_TIME_NAME = re.compile(
    rf"(?:t|time|times|timestamp)(?:[ _-]?(?:{_UNIT_WORDS}))?", re.IGNORECASE
)
# The unit suffix of a time column's name: after a recognised time name (`time_ms`,
# `tmin`), or after a separator in a name given as `time=` (`clock_ms`).
_TIME_SUFFIX = re.compile(
    rf"(?:^(?:t|time|times|timestamp)[ _-]?|[ _-])({_UNIT_WORDS})$", re.IGNORECASE
)
_UNIT = re.compile(r"[\(\[]([^()\[\]]*)[\)\]]\s*$")
_PREFIX = {"states": "x", "inputs": "u", "outputs": "y"}
ROLES = ("states", "inputs", "outputs")


def unit_of(name: str) -> str | None:
    """The unit at the end of a column name, `"temp (°C)"` -> `"°C"` (also
    `"temp [°C]"`); `None` without one (`"temp_C"` has none)."""
    match = _UNIT.search(name)
    return match.group(1).strip() if match else None


def _bare(name: str) -> str:
    return _UNIT.sub("", name).strip()


def is_time_name(name: str) -> bool:
    """Whether a column name is recognised as a time column without `time=`."""
    return _TIME_NAME.fullmatch(_bare(name)) is not None


def time_unit_scale(call: str, column: str) -> float:
    """Seconds per unit of the time column `column`, from the unit written at the end
    of its name: in parentheses or brackets (`t [min]`, `Time (s)`) or as a suffix
    (`time_ms`, `t_us`, `time_h`; `clock_ms` for a column given as `time=`); `1.0`
    (seconds) without one. A unit in parentheses or brackets that is not a time unit
    (`t [days]`, `t (°C)`) is refused, as are two units that disagree."""
    bracket = unit_of(column)
    match = _TIME_SUFFIX.search(_bare(column))
    units = [unit for unit in (bracket, match and match.group(1)) if unit]
    scales = {_SECONDS_PER_UNIT.get(unit.lower()) for unit in units}
    if bracket is not None and bracket.lower() not in _SECONDS_PER_UNIT:
        raise ValueError(
            f"{call}(time=...): the time column {quoted(column)} is in "
            f"{quoted(bracket)}, not a unit of time dynsys converts; it understands "
            f"{_UNITS_UNDERSTOOD} (as in 'time_ms', 't [min]'): convert the column, "
            "or pass time=False if it is not a time."
        )
    if len(scales) > 1:
        raise ValueError(
            f"{call}(time=...): the name of the time column {quoted(column)} gives "
            f"two units, {units[1]!r} and {units[0]!r}; rename it with one."
        )
    return scales.pop() if scales else 1.0


def _default_role(name: str, prefix: str) -> bool:
    """`x`, `x0`, `x_pos`, `x1_dot` are states; `xnote` or `user_id` are not."""
    return re.fullmatch(rf"{prefix}(?:[0-9_].*)?", name) is not None


class Plan(NamedTuple):
    """The columns of each role (as in the table), the trajectory and time columns
    (or `None`), the names the `Dataset` gets (units added), and the seconds per unit
    of the time column (`1000 ms` -> `1.0 s`: `time_scale` `1e-3`)."""

    roles: dict[str, list[str]]
    trajectory: str | None
    time: str | None
    names: dict[str, list[str]]
    time_scale: float = 1.0


def _special(call, where, header, argument, given, default_names, found, hint):
    """The trajectory or time column: `given` (checked), `False` for none, or the one
    column recognised by name."""
    if given is False:
        return None
    if given is not None:
        if not isinstance(given, str):
            raise ValueError(
                f"{call}({argument}=...): expected a column name, None or False, "
                f"got {given!r}."
            )
        if given not in header:
            raise ValueError(
                f"{call}({argument}={quoted(given)}): {where} has no "
                f"{quoted(given)} column; {found}{hint}."
            )
        return given
    candidates = [name for name in header if default_names(name)]
    if len(candidates) > 1:
        raise ValueError(
            f"{call}({argument}=...): {where} has several columns that could be the "
            f"{argument} ({quoted_list(candidates)}); pass {argument}='...' to choose "
            f"one, or {argument}=False for none."
        )
    return candidates[0] if candidates else None


def _separator_hint(header: list[str]) -> str:
    separator = next((c for c in ";\t|" if any(c in h for h in header)), None)
    if separator and len(header) == 1:
        return (
            f" (the file seems to separate columns with {separator!r}; dynsys reads "
            "comma-separated .csv and whitespace-separated .dat/.txt files)"
        )
    return ""


def _claim(call, where, header, given, reserved, found) -> dict[str, str]:
    """Check the given role columns: present, not special, each in one role."""
    claimed: dict[str, str] = {}
    for argument, names in given.items():
        if names is None:
            continue
        if isinstance(names, str):
            raise ValueError(
                f"{call}({argument}=...): expected a list of column names, got the "
                f"string {names!r}."
            )
        for name in names:
            if name not in header:
                raise ValueError(
                    f"{call}({argument}=...): no column {quoted(name)} in {where}; "
                    f"{found}."
                )
            if name in reserved:
                raise ValueError(
                    f"{call}({argument}=...): {name!r} is the trajectory or time "
                    f"column; {found}."
                )
            if name in claimed:
                again = (
                    "twice" if claimed[name] == argument else f"also in {claimed[name]}"
                )
                raise ValueError(
                    f"{call}({argument}=...): column {name!r} is named {again}; "
                    "each column has one role."
                )
            claimed[name] = argument
    return claimed


def plan_columns(
    call: str,
    where: str,
    header: Sequence[str],
    *,
    states=None,
    inputs=None,
    outputs=None,
    trajectory=None,
    time=None,
    units=None,
    datetime_columns: Collection[str] = (),
) -> Plan:
    """The roles of the columns of `header`.

    `call` names the function in errors (`"load_dataset"`), `where` the source
    (`"'data.csv'"`). `trajectory`/`time`: a column name, `None` to recognise it by
    name (`trajectory`; see `is_time_name`), or `False` for none. A role not given
    takes the columns named like its letter (`x`, `u`, `y`, alone or followed by a
    digit or `_`), unless another role is named by the time column. The time column's
    unit is read from its name (see `time_unit_scale`), except for the columns in
    `datetime_columns`, whose dates count in seconds already.
    """
    header = list(header)
    found = f"columns found: {quoted_list(header)}"
    hint = _separator_hint(header)
    trajectory = _special(
        call, where, header, "trajectory", trajectory,
        lambda name: name == "trajectory", found, hint,
    )  # fmt: skip
    given = {"states": states, "inputs": inputs, "outputs": outputs}
    explicit = {name for names in given.values() if names is not None for name in names}
    time = _special(
        call, where, header, "time", time,
        lambda name: is_time_name(name) and name not in explicit and name != trajectory,
        found, hint,
    )  # fmt: skip
    reserved = {column for column in (trajectory, time) if column is not None}
    claimed = _claim(call, where, header, given, reserved, found)
    roles = {}
    for argument, names in given.items():
        if names is not None:
            roles[argument] = list(names)
        else:
            roles[argument] = [
                name
                for name in header
                if name not in reserved
                and name not in claimed
                and _default_role(name, _PREFIX[argument])
            ]
    if not roles["states"] and not roles["outputs"]:
        raise ValueError(
            f"{call}(outputs=...): {where} has no state or output column: pass "
            "outputs=[...] (and inputs=[...]; --outputs/--inputs on the command "
            f"line) or name the columns y0, y1, ... and u0, u1, ...; {found}{hint}."
        )
    names = with_units(call, roles, units)
    scale = 1.0
    if time is not None and time not in datetime_columns:
        scale = time_unit_scale(call, time)
    return Plan(roles, trajectory, time, names, scale)


def with_units(call: str, roles: dict[str, list[str]], units) -> dict[str, list[str]]:
    """The names with their units: `units` maps a column to its unit, or lists one
    unit (or `None`) per column in the order inputs, outputs, states."""
    names = {argument: list(columns) for argument, columns in roles.items()}
    if units is None:
        return names
    order = [
        (a, j) for a in ("inputs", "outputs", "states") for j in range(len(names[a]))
    ]
    if isinstance(units, Mapping):
        where = {names[a][j]: (a, j) for a, j in order}
        unknown = [column for column in units if column not in where]
        if unknown:
            raise ValueError(
                f"{call}(units=...): no input, output or state column {unknown}; "
                f"columns in use: {list(where)}."
            )
        pairs = [(where[column], unit) for column, unit in units.items()]
    elif isinstance(units, Sequence) and not isinstance(units, str):
        if len(units) != len(order):
            raise ValueError(
                f"{call}(units=...): expected {len(order)} units (one per input, "
                f"output and state column, in that order), got {len(units)}."
            )
        pairs = list(zip(order, units))
    else:
        raise ValueError(
            f"{call}(units=...): expected a mapping column -> unit or a list, got "
            f"{units!r}."
        )
    for (argument, j), unit in pairs:
        if unit is None or unit == "":
            continue
        column = names[argument][j]
        if unit_of(column) is not None:
            raise ValueError(
                f"{call}(units=...): column {column!r} already has the unit "
                f"{unit_of(column)!r} in its name."
            )
        names[argument][j] = f"{column} ({unit})"
    return names
