"""Text tables: comma-separated `.csv` and whitespace-separated `.dat`/`.txt` files.

The header and the built-in streaming reader (the fallback when no fast reader is
installed, and the one whose errors every reader gives), and the `.csv` writer.
"""

import array
import contextlib
import csv
import io
import math
import pathlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .._atomic_write import write_atomic
from .columns import Plan
from .files import file_error
from .quoting import quoted, quoted_list
from .table import not_a_number, Table


TEXT_SUFFIXES = (".csv", ".dat", ".txt")

# The header (line 1, or the first row when quoted names hold line breaks) may take at
# most this many characters: a longer one is refused before it is split into names.
MAX_HEADER_CHARS = 2**20


class Header(NamedTuple):
    """The column names and how the file is written: `delimiter` (`","`, or `None`
    for runs of spaces and tabs), and whether line 1 is a header (`False` when it
    holds only numbers: the columns are then named `"1"`, `"2"`, ...)."""

    names: list[str]
    delimiter: str | None
    has_header: bool


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _HeaderTooLong(Exception):
    pass


def _bounded_lines(file, limit: int) -> Iterator[str]:
    """The lines of `file`, raising `_HeaderTooLong` past `limit` characters in all
    (nothing longer is ever read)."""
    used = 0
    while line := file.readline(limit - used + 1):
        used += len(line)
        if used > limit:
            raise _HeaderTooLong
        yield line


def _header_too_long(path: pathlib.Path) -> ValueError:
    return file_error(
        path,
        f"line 1 (the header) is longer than {MAX_HEADER_CHARS} characters; refused "
        "(a damaged file, or not a table of a few columns per line).",
    )


@contextlib.contextmanager
def text_rows(path: pathlib.Path, delimiter: str | None, *, limit=None) -> Iterator:
    """The rows of the file as lists of cells; text problems as one-line errors.
    With `limit`, reading stops (refused) past that many characters."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            lines = file if limit is None else _bounded_lines(file, limit)
            if delimiter is None:
                yield (line.split() for line in lines)
            else:
                yield csv.reader(lines, delimiter=delimiter)
    except _HeaderTooLong:
        raise _header_too_long(path) from None
    except UnicodeDecodeError as error:
        raise file_error(
            path,
            f"not UTF-8 text (byte {error.object[error.start]:#x} at offset "
            f"{error.start}); save the file as UTF-8 text.",
        ) from None
    except csv.Error as error:
        raise file_error(path, f"not a readable CSV file ({error}).") from None


def read_header(path: pathlib.Path) -> Header:
    """Line 1 of the file: the column names, trailing unnamed empty columns dropped
    (published files often end every line with a comma)."""
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as file:
        first_line = file.readline(MAX_HEADER_CHARS + 1)
    if len(first_line) > MAX_HEADER_CHARS:
        raise _header_too_long(path)
    delimiter = "," if path.suffix.lower() == ".csv" or "," in first_line else None
    with text_rows(path, delimiter, limit=MAX_HEADER_CHARS) as rows:
        first = next(rows, None)
    if first is None:
        raise file_error(path, "the file is empty.")
    names = [name.strip() for name in first]
    while len(names) > 1 and names[-1] == "":
        names.pop()
    if names and all(_is_number(name) for name in names):
        return Header([str(j + 1) for j in range(len(names))], delimiter, False)
    seen: dict[str, int] = {}
    for j, name in enumerate(names):
        if name in seen:
            raise file_error(
                path,
                f"line 1: column {quoted(name)} appears twice in the header "
                f"(columns {seen[name] + 1} and {j + 1}); rename one. Columns found: "
                f"{quoted_list(names)}.",
            )
        seen[name] = j
    return Header(names, delimiter, True)


class _Columns:
    """The positions of the used columns in a row."""

    def __init__(self, header: Header, plan: Plan):
        position = {name: j for j, name in enumerate(header.names)}
        self.states = [position[name] for name in plan.roles["states"]]
        self.others = [
            position[name] for name in (*plan.roles["inputs"], *plan.roles["outputs"])
        ]
        self.time = None if plan.time is None else position[plan.time]
        self.ident = None if plan.trajectory is None else position[plan.trajectory]
        self.used = [
            j
            for j in (self.ident, self.time, *self.states, *self.others)
            if j is not None
        ]


def read_text(path: pathlib.Path, header: Header, plan: Plan) -> Table:
    """The built-in reader: streams the file, keeping 8 bytes per used cell."""
    names = header.names
    columns = _Columns(header, plan)
    width = len(names)
    lines, times = array.array("q"), array.array("d")
    values, codes = array.array("d"), array.array("q")
    idents: dict[str, int] = {}
    bad: list[tuple[int, int, str, str]] = []

    def number(line: int, row: list[str], j: int) -> float:
        text = row[j].strip()
        try:
            return float(text)
        except ValueError:
            raise not_a_number(
                f"load_dataset(path={str(path)!r}): ", f"line {line}", j, names[j], text
            ) from None

    with text_rows(path, header.delimiter) as rows:
        if header.has_header:
            next(rows)
        for line, row in enumerate(rows, start=1 + header.has_header):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < width or any(cell.strip() for cell in row[width:]):
                raise file_error(
                    path,
                    f"line {line}: expected {width} cells (as in the header), got "
                    f"{len(row)}.",
                )
            if columns.ident is not None:
                ident = row[columns.ident].strip()
                codes.append(idents.setdefault(ident, len(idents)))
            lines.append(line)
            if columns.time is not None:
                times.append(number(line, row, columns.time))
            for j in columns.states:
                values.append(number(line, row, j))
            for j in columns.others:
                text = row[j].strip()
                try:
                    values.append(float(text))
                except ValueError:
                    values.append(math.nan)
                    bad.append((len(lines) - 1, j, names[j], text))
    count = len(lines)
    return Table(
        values=np.frombuffer(values, dtype=np.float64).reshape(count, -1)
        if count
        else np.zeros((0, len(columns.states) + len(columns.others))),
        lines=np.frombuffer(lines, dtype=np.int64),
        codes=None if columns.ident is None else np.frombuffer(codes, dtype=np.int64),
        idents=list(idents) if columns.ident is not None else [""],
        times=None if columns.time is None else np.frombuffer(times, dtype=np.float64),
        bad=bad,
    )


def write_csv(path: pathlib.Path, data) -> None:
    """The long format of `load_dataset`: one row per sample, trajectory by
    trajectory; with states, a trajectory's last row has empty input and output
    cells."""
    for name in (*data.state_names, *data.input_names, *data.output_names):
        if name[:1] in ("=", "+", "-", "@", "\t", "\r"):
            raise ValueError(
                f"Dataset.save(path=...): the column name {name!r} starts with "
                f"{name[:1]!r}, which spreadsheets run as a formula; rename it or "
                "save as .npz."
            )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["trajectory", "time", *data.state_names, *data.input_names, *data.output_names]
    )
    xs, us, ys = (
        None if a is None else np.asarray(a, dtype=np.float64)
        for a in (data.xs, data.us, data.ys)
    )
    extra = 0 if xs is None else 1
    ts = np.asarray(data.ts) if data.ts is not None else None
    for i, T_i in enumerate(data.lengths):
        for t in range(T_i + extra):
            time = repr(ts[t].item()) if ts is not None else str(t)
            row = [str(i), time]
            if xs is not None:
                row += [repr(v) for v in xs[i, t].tolist()]
            for channels in (us, ys):
                if channels is None:
                    continue
                if t < T_i:
                    row += [repr(v) for v in channels[i, t].tolist()]
                else:  # no input or output after the last state
                    row += [""] * channels.shape[2]
            writer.writerow(row)
    write_atomic(path, out.getvalue().encode())
