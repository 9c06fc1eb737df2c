"""The fast text reader: pandas' C parser, when pandas is installed.

It reads only the used columns. Whatever it cannot vouch for (a cell that is not a
number, a blank cell where a number belongs, a row of the wrong width, a quoted
line break) it leaves to the built-in reader by returning `None`, so both readers
accept the same files and give the same errors.
"""

import importlib.util
import pathlib
import warnings

import numpy as np

from .columns import Plan
from .table import Table
from .text_files import Header, text_rows


def pandas_available() -> bool:
    return importlib.util.find_spec("pandas") is not None


def read_fast(path: pathlib.Path, header: Header, plan: Plan) -> Table | None:
    """The table read by pandas, or `None` (no pandas, or a file to leave to the
    built-in reader)."""
    if not pandas_available():
        return None
    import pandas as pd

    values_cols = [*plan.roles["states"], *plan.roles["inputs"], *plan.roles["outputs"]]
    used = [c for c in (plan.trajectory, plan.time, *values_cols) if c is not None]
    position = {name: j for j, name in enumerate(header.names)}
    wanted = {position[name] for name in used}
    width = len(header.names)
    try:
        with warnings.catch_warnings():
            # Rows wider than the header: leave them to the built-in reader.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                path,
                sep="," if header.delimiter == "," else r"\s+",
                header=None,
                skiprows=1 if header.has_header else 0,
                # The used columns, and any beyond the header (must be blank).
                usecols=sorted(
                    wanted | set(range(width, _first_row_width(path, header)))
                ),
                dtype={position[plan.trajectory]: str} if plan.trajectory else None,
                keep_default_na=False,
                na_values=[""],
                skip_blank_lines=False,
                index_col=False,
                engine="c",
            )
    except (ValueError, pd.errors.ParserError, pd.errors.ParserWarning, OSError):
        return None
    return _table(frame, header, plan, position, values_cols)


def _first_row_width(path: pathlib.Path, header: Header) -> int:
    """The number of cells on the first data line (0 when there is none)."""
    with text_rows(path, header.delimiter) as rows:
        if header.has_header:
            next(rows, None)
        return len(next(rows, []))


def _table(frame, header: Header, plan: Plan, position, values_cols) -> Table | None:
    import pandas as pd

    first_line = 1 + header.has_header
    lines = np.arange(first_line, first_line + len(frame), dtype=np.int64)
    width = len(header.names)
    extra = [j for j in frame.columns if j >= width]
    if extra and not frame[extra].isna().all(axis=None):
        return None  # cells beyond the header: the built-in reader names the line
    special = [position[c] for c in (plan.trajectory, plan.time) if c is not None]
    for j in [*special, *(position[c] for c in values_cols)]:
        if frame[j].isna().any() and j not in _io_positions(plan, position):
            return None  # a blank line or cell: the built-in reader decides
        if j != position.get(plan.trajectory) and frame[j].dtype.kind not in "fiu":
            return None  # text in a number column: the built-in reader names it
    codes, idents = None, [""]
    if plan.trajectory is not None:
        column = frame[position[plan.trajectory]].str.strip()
        codes, uniques = pd.factorize(column, sort=False)
        codes, idents = codes.astype(np.int64), [str(u) for u in uniques]
    values = frame[[position[c] for c in values_cols]].to_numpy(dtype=np.float64)
    blank = np.isnan(values)
    if blank.any():
        # Only a state file's last row of each experiment may lack its input and
        # output; anything else is for the built-in reader.
        allowed = np.zeros(len(frame), dtype=bool)
        if plan.roles["states"]:
            allowed[_last_rows(codes, len(frame))] = True
        if blank[~allowed].any():
            return None
    times = None
    if plan.time is not None:
        times = frame[position[plan.time]].to_numpy(dtype=np.float64)
    return Table(values, lines, codes, idents, times, bad=[])


def _io_positions(plan: Plan, position) -> set[int]:
    return {position[c] for c in (*plan.roles["inputs"], *plan.roles["outputs"])}


def _last_rows(codes, rows: int) -> np.ndarray:
    """The last row of each experiment."""
    if codes is None:
        return np.asarray([rows - 1])
    _, first_from_end = np.unique(codes[::-1], return_index=True)
    return rows - 1 - first_from_end
