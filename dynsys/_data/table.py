"""From the rows of a table (read from a file or a DataFrame) to the arrays of a
`Dataset`: rows grouped into experiments, the time column checked and turned into
`ts` (or `ts` made from `dt`)."""

import math
from typing import NamedTuple

import numpy as np

from .columns import Plan
from .quoting import quoted


# A time column is accepted when every step is within this fraction of the median step
# (times printed with few digits, logger jitter); the stored times are then the
# uniform grid with the mean step.
UNIFORM_TOLERANCE = 0.01


class Table(NamedTuple):
    """The used cells of a table, one row per sample.

    - `values (rows, k)`: float64, the plan's state, input and output columns in
        that order; input/output cells that are not numbers are NaN and listed in
        `bad`.
    - `lines (rows,)`: where each row is, for errors (`line 7` of a file, `row 5`
        of a DataFrame: see `row_word`).
    - `codes (rows,)`: the experiment of each row, numbered in order of first
        appearance, and `idents`, their identifiers as text; `None`: one experiment.
    - `times (rows,)`: the time column, or `None`.
    - `bad`: `(row, column position, column name, text)` of input/output cells that
        are not numbers; allowed only on the last row of an experiment with states.
    """

    values: np.ndarray
    lines: np.ndarray
    codes: np.ndarray | None
    idents: list[str]
    times: np.ndarray | None
    bad: list[tuple[int, int, str, str]]
    row_word: str = "line"


def not_a_number(prefix: str, where: str, j: int, name: str, text: str) -> ValueError:
    return ValueError(
        f"{prefix}{where}: column {j + 1} ({quoted(name)}): {quoted(text)} is not "
        "a number."
    )


def _groups(table: Table) -> list[tuple[str, np.ndarray]]:
    """`(identifier, row indices)` of each experiment, in order of first appearance."""
    rows = table.values.shape[0]
    if table.codes is None:
        return [("", np.arange(rows))]
    codes = table.codes
    if rows < 2 or bool(np.all(codes[1:] >= codes[:-1])):
        bounds = np.searchsorted(codes, np.arange(len(table.idents) + 1))
        order = np.arange(rows)
    else:
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes))])
    return [
        (ident, order[bounds[g] : bounds[g + 1]])
        for g, ident in enumerate(table.idents)
    ]


def table_parts(prefix: str, plan: Plan, table: Table, dt: float | None) -> dict:
    """The arguments of `Dataset` (`xs`, `us`, `ys` as lists of experiments, `ts`
    and the names) from the rows of `table`.

    `prefix` starts every error (`"load_dataset(path='d.csv'): "`).
    """
    if table.values.shape[0] == 0:
        raise ValueError(f"{prefix}the dataset is empty (no data rows).")
    has_states = bool(plan.roles["states"])
    sizes = [len(plan.roles[argument]) for argument in ("states", "inputs", "outputs")]
    ends = np.cumsum([0, *sizes])
    groups = _groups(table)
    out: dict = {"states": [], "inputs": [], "outputs": []}
    word = table.row_word
    bad_by_group: dict[int, list] = {}
    for cell in table.bad:
        group = 0 if table.codes is None else int(table.codes[cell[0]])
        bad_by_group.setdefault(group, []).append(cell)
    for g, (ident, rows) in enumerate(groups):
        count = len(rows)
        steps = count - has_states
        if steps < 1:
            which = "the experiment" if table.codes is None else f"trajectory {ident!r}"
            raise ValueError(
                f"{prefix}{word} {table.lines[rows[0]]}: {which}"
                f" has {count} row(s); each needs at least {1 + has_states} (one "
                f"{'step: two states' if has_states else 'sample'})."
            )
        # With states, the last row of a trajectory has no input or output: there
        # are T inputs and outputs for T+1 states.
        for row, j, name, text in bad_by_group.get(g, ()):
            if not (has_states and row == rows[-1]):
                raise not_a_number(prefix, f"{word} {table.lines[row]}", j, name, text)
        contiguous = count and rows[-1] - rows[0] == count - 1
        values = (
            table.values[rows[0] : rows[0] + count]
            if contiguous
            else table.values[rows]
        )
        for r, argument in enumerate(("states", "inputs", "outputs")):
            if sizes[r]:
                use = count if argument == "states" else steps
                out[argument].append(values[:use, ends[r] : ends[r + 1]])
    ts = None
    if table.times is not None:
        ts = _file_times(prefix, plan.time, table, groups, dt, plan.time_scale)
    elif dt is not None:
        longest = max(len(rows) for _, rows in groups)
        ts = dt * np.arange(longest, dtype=np.float64)
    return {
        "xs": out["states"] or None,
        "us": out["inputs"] or None,
        "ys": out["outputs"] or None,
        "ts": ts,
        "state_names": plan.names["states"] or None,
        "input_names": plan.names["inputs"] or None,
        "output_names": plan.names["outputs"] or None,
    }


def in_seconds(values, scale: float):
    """Times in a column's unit as seconds, `scale` seconds per unit; a unit below
    a second divides by its whole number per second (2000 ms -> exactly 2.0 s)."""
    return values * scale if scale >= 1 else values / round(1 / scale)


def _file_times(prefix, column, table: Table, groups, dt, scale) -> np.ndarray:
    """The times of the longest experiment (every other must follow them), checked
    to increase uniformly, in seconds (`scale` seconds per unit of the column);
    errors quote them in the column's unit."""
    word = table.row_word
    longest, rows = max(groups, key=lambda group: len(group[1]))
    reference = table.times[rows]
    for ident, others in groups if len(groups) > 1 else ():
        ts = table.times[others]
        head = reference[: len(ts)]
        close = np.isclose(ts, head, rtol=1e-9, atol=1e-12)
        if not close.all():
            k = int(np.argmax(~close))
            raise ValueError(
                f"{prefix}{word} {table.lines[others[k]]}: trajectory {ident!r} has "
                f"time {ts[k]} where trajectory {longest!r} has {head[k]}; all must "
                "share their times (a shorter trajectory's are the first of the "
                "longest's)."
            )
    if len(reference) < 2:
        return in_seconds(reference, scale)
    steps = np.diff(reference)
    if not np.all(steps > 0):
        k = int(np.argmax(~(steps > 0)))
        raise ValueError(
            f"{prefix}{word} {table.lines[rows[k + 1]]}: the time column {column!r} "
            f"goes from {reference[k]:g} to {reference[k + 1]:g}; times must "
            f"increase (pass time=False if {column!r} is not a time)."
        )
    mean = (reference[-1] - reference[0]) / (len(reference) - 1)
    deviation = float(np.abs(steps - mean).max())
    if deviation > UNIFORM_TOLERANCE * mean:
        median = float(np.median(steps))
        off = np.abs(steps - median) > UNIFORM_TOLERANCE * median
        k = int(np.argmax(off if off.any() else np.abs(steps - mean)))
        raise ValueError(
            f"{prefix}{word} {table.lines[rows[k + 1]]}: the time column {column!r} "
            f"is not uniform: it steps by {steps[k]:g} from {reference[k]:g} to "
            f"{reference[k + 1]:g} where the usual step is {median:g}; resample the "
            "data to a uniform sample time, or pass time=False and dt=..."
        )
    step = float(in_seconds(mean, scale))
    if dt is not None and not math.isclose(dt, step, rel_tol=1e-6):
        in_unit = "" if scale == 1 else f" s ({mean:g} in the column's unit)"
        raise ValueError(
            f"{prefix}dt={dt:g} disagrees with the time column {column!r}, whose step "
            f"is {step:g}{in_unit}; leave out dt, or pass time=False to ignore the "
            "column."
        )
    rounding = 4 * np.finfo(np.float64).eps * max(abs(reference[0]), abs(reference[-1]))
    if deviation <= 1e-9 * mean + rounding:
        return in_seconds(reference, scale)
    return in_seconds(reference[0] + mean * np.arange(len(reference)), scale)
