"""The dataset file formats: `.npz` (read with bounded memory) and long `.csv`.

Readers return plain arrays and names; `load_dataset` builds the `Dataset`.
"""

import array
import csv
import io
import math
import os
import pathlib
import re
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Sequence

import numpy as np


# An .npz member may expand to at most this many times the file's size, or this many
# bytes, whichever is larger (zero padding of ragged data compresses ~100x).
_MAX_EXPANSION = 200
_MIN_ALLOWANCE = 256 * 2**20

NPZ_ARRAYS = ("xs", "us", "ys", "ts", "lengths")
NPZ_NAMES = ("state_names", "input_names", "output_names")


def file_error(path, message: str) -> ValueError:
    return ValueError(f"load_dataset(path={str(path)!r}): {message}")


def check_regular_file(path: pathlib.Path) -> int:
    """The size of `path`, after checking it is an existing regular file (no
    directory, FIFO or device: those are refused before anything is opened)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(
            f"load_dataset(path=...): no such file {str(path)!r}."
        ) from None
    except OSError as error:
        raise file_error(path, f"cannot read it ({error.strerror}).") from None
    if stat.S_ISDIR(info.st_mode):
        raise file_error(path, "is a directory, not a data file.")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or special file"
        raise file_error(path, f"is {kind}, not a regular data file.")
    return info.st_size


def write_atomic(path: pathlib.Path, content: bytes) -> None:
    """Write `content` to a temporary file next to `path`, then rename it over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        # mkstemp creates the file 0600; give it the usual umask-based mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        with os.fdopen(handle, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# ----------------------------------------------------------------------------- npz


def write_npz(path: pathlib.Path, data) -> None:
    """`xs`, `us`, `ys` padded, `ts`, `lengths (N,)` and the names, uncompressed."""
    arrays = {"lengths": np.asarray(data.lengths, dtype=np.int64)}
    for key, names_key in (
        ("xs", "state_names"),
        ("us", "input_names"),
        ("ys", "output_names"),
    ):
        value = getattr(data, key)
        if value is not None:
            arrays[key] = np.asarray(value)
            arrays[names_key] = np.asarray(getattr(data, names_key), dtype=str)
    if data.ts is not None:
        arrays["ts"] = np.asarray(data.ts)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(path, buffer.getvalue())


# What a damaged archive raises while it is read (wrapped into one-line ValueErrors).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    EOFError,
    OSError,
    NotImplementedError,  # an unknown compression method
    RuntimeError,  # an encrypted member
)


def _npy_header(path, member, key: str):
    """`(shape, fortran_order, dtype)` from the start of a `.npy` member."""
    try:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(member)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(member)
    except ValueError as error:
        raise file_error(
            path, f"array {key!r} is not a .npy array ({error})."
        ) from None
    raise file_error(path, f"array {key!r}: unsupported .npy version {version}.")


def _read_member(path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int):
    """One `.npy` member, its declared and header sizes checked before any data is
    read or allocated."""
    key = info.filename[: -len(".npy")]
    if info.file_size > limit:
        raise file_error(
            path,
            f"array {key!r} declares {info.file_size} bytes uncompressed, more than "
            f"the {limit} allowed for this file; refused (a damaged or hostile file).",
        )
    with archive.open(info) as member:
        shape, fortran, dtype = _npy_header(path, member, key)
        if dtype.hasobject:
            raise file_error(
                path, f"array {key!r} holds Python objects; only numbers and text load."
            )
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > min(limit, info.file_size):
            raise file_error(
                path,
                f"array {key!r} claims shape {shape} ({nbytes} bytes) but the file "
                f"holds at most {min(limit, info.file_size)} bytes for it; refused.",
            )
        buffer = bytearray(nbytes)
        view, filled = memoryview(buffer), 0
        while filled < nbytes:
            count = member.readinto(view[filled:])
            if not count:
                raise file_error(path, f"array {key!r} is truncated.")
            filled += count
    array = np.frombuffer(buffer, dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C")


def read_npz(path: pathlib.Path, size: int) -> dict[str, np.ndarray]:
    """The arrays dynsys uses (`NPZ_ARRAYS`, `NPZ_NAMES`); other members are never
    decompressed."""
    limit = max(_MAX_EXPANSION * size, _MIN_ALLOWANCE)
    try:
        with zipfile.ZipFile(path) as archive:
            members = {
                info.filename[: -len(".npy")]: info
                for info in archive.infolist()
                if info.filename.endswith(".npy")
            }
            arrays = {
                key: _read_member(path, archive, members[key], limit)
                for key in (*NPZ_ARRAYS, *NPZ_NAMES)
                if key in members
            }
            found = sorted(members)
    except _ZIP_ERRORS as error:
        raise file_error(path, f"not a readable .npz file ({error}).") from None
    arrays["_found"] = np.asarray(found, dtype=str)
    return arrays


# ----------------------------------------------------------------------------- csv


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


def _default_role(name: str, prefix: str) -> bool:
    """`x`, `x0`, `x_pos`, `x1_dot` are states; `xnote` or `user_id` are not."""
    return re.fullmatch(rf"{prefix}(?:[0-9_].*)?", name) is not None


def csv_roles(
    path, header: list[str], given: dict[str, Sequence[str] | None], special: dict
) -> dict[str, list[str]]:
    """The columns of each role: `given` names (checked), else the default prefix."""
    found = f"columns found: {header}"
    for argument, column in special.items():
        if column is not None and column not in header:
            separator = next((c for c in ";\t|" if any(c in h for h in header)), None)
            hint = (
                f" (the file seems to separate columns with {separator!r}; dynsys "
                "reads comma-separated values)"
                if separator and len(header) == 1
                else ""
            )
            raise file_error(
                path,
                f"line 1: the header must have a {column!r} column ({argument}="
                f"{column!r}); {found}{hint}.",
            )
    reserved = {c for c in special.values() if c is not None}
    claimed: dict[str, str] = {}
    for argument, names in given.items():
        if names is None:
            continue
        if isinstance(names, str):
            raise ValueError(
                f"load_dataset({argument}=...): expected a list of column names, got "
                f"the string {names!r}."
            )
        for name in names:
            if name not in header:
                raise ValueError(
                    f"load_dataset({argument}=...): no column {name!r} in "
                    f"{str(path)!r}; {found}."
                )
            if name in reserved:
                raise ValueError(
                    f"load_dataset({argument}=...): {name!r} is the trajectory or "
                    f"time column; {found}."
                )
            if name in claimed:
                where = (
                    "twice" if claimed[name] == argument else f"also in {claimed[name]}"
                )
                raise ValueError(
                    f"load_dataset({argument}=...): column {name!r} is named {where}; "
                    "each column has one role."
                )
            claimed[name] = argument
    prefixes = {"states": "x", "inputs": "u", "outputs": "y"}
    roles = {}
    for argument, names in given.items():
        if names is not None:
            roles[argument] = list(names)
        else:
            roles[argument] = [
                c
                for c in header
                if c not in reserved
                and c not in claimed
                and _default_role(c, prefixes[argument])
            ]
    if not roles["states"] and not roles["outputs"]:
        raise file_error(
            path,
            "line 1: no state or output columns: name them x0, x1, ... / y0, y1, ... "
            f"or pass states=[...] / outputs=[...]; {found}.",
        )
    return roles


class _Rows:
    """The rows of one trajectory, parsed as they stream in: line numbers, times and
    the values of the used columns (states, then inputs and outputs), flat."""

    def __init__(self):
        self.lines = array.array("q")
        self.times = array.array("d")
        self.values = array.array("d")
        # Input/output cells that are not numbers: (row, line, column, text). They
        # are errors unless on the last row of a trajectory with states.
        self.bad: list[tuple[int, int, int, str]] = []


def read_csv(
    path: pathlib.Path,
    *,
    states=None,
    inputs=None,
    outputs=None,
    trajectory: str | None = "trajectory",
    time: str | None = "time",
) -> dict:
    """Per-trajectory arrays for each role, the shared times and the names. The
    file is streamed: memory holds 8 bytes per used cell, not the text."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            first = next(reader, None)
            if first is None:
                raise file_error(path, "the file is empty.")
            header = _csv_header(path, first)
            roles = csv_roles(
                path,
                header,
                {"states": states, "inputs": inputs, "outputs": outputs},
                {"trajectory": trajectory, "time": time},
            )
            groups = _csv_rows(path, reader, header, roles, trajectory, time)
    except UnicodeDecodeError as error:
        raise file_error(
            path,
            f"not UTF-8 text (byte {error.object[error.start]:#x} at offset "
            f"{error.start}); save the file as UTF-8 CSV.",
        ) from None
    except csv.Error as error:
        raise file_error(path, f"not a readable CSV file ({error}).") from None
    if not groups:
        raise file_error(path, "the dataset is empty (no data rows).")
    return _csv_arrays(path, header, roles, groups, time is not None)


def _csv_header(path, first: list[str]) -> list[str]:
    header = [name.strip() for name in first]
    seen: dict[str, int] = {}
    for j, name in enumerate(header):
        if name in seen:
            raise file_error(
                path,
                f"line 1: column {name!r} appears twice in the header (columns "
                f"{seen[name] + 1} and {j + 1}); rename one. Columns found: {header}.",
            )
        seen[name] = j
    return header


def _csv_rows(path, reader, header, roles, trajectory, time) -> dict[str, _Rows]:
    """Group the rows by trajectory, parsing the used cells as they come."""
    column = {name: j for j, name in enumerate(header)}
    state_cols = [column[name] for name in roles["states"]]
    other_cols = [column[name] for name in (*roles["inputs"], *roles["outputs"])]
    time_col = None if time is None else column[time]
    ident_col = None if trajectory is None else column[trajectory]
    width = len(header)

    def number(line: int, row: list[str], j: int) -> float:
        text = row[j].strip()
        try:
            return float(text)
        except ValueError:
            raise _not_a_number(path, line, header, j, text) from None

    groups: dict[str, _Rows] = {}
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != width:
            raise file_error(
                path,
                f"line {line}: expected {width} cells (as in the header), got "
                f"{len(row)}.",
            )
        ident = "" if ident_col is None else row[ident_col].strip()
        rows = groups.get(ident)
        if rows is None:
            rows = groups[ident] = _Rows()
        k = len(rows.lines)
        rows.lines.append(line)
        if time_col is not None:
            rows.times.append(number(line, row, time_col))
        for j in state_cols:
            rows.values.append(number(line, row, j))
        for j in other_cols:
            text = row[j].strip()
            try:
                rows.values.append(float(text))
            except ValueError:
                rows.values.append(math.nan)
                rows.bad.append((k, line, j, text))
    return groups


def _not_a_number(path, line: int, header, j: int, text: str) -> ValueError:
    return file_error(
        path, f"line {line}: column {j + 1} ({header[j]!r}): {text!r} is not a number."
    )


def _csv_arrays(path, header, roles, groups: dict[str, _Rows], timed: bool) -> dict:
    has_states = bool(roles["states"])
    sizes = [len(roles[argument]) for argument in ("states", "inputs", "outputs")]
    ends = np.cumsum([0, *sizes])
    out: dict = {"states": [], "inputs": [], "outputs": []}
    for ident, rows in groups.items():
        count = len(rows.lines)
        steps = count - has_states
        if steps < 1:
            raise file_error(
                path,
                f"line {rows.lines[0]}: trajectory {ident!r} has {count} row(s); "
                f"each needs at least {1 + has_states} (one "
                f"{'step: two states' if has_states else 'sample'}).",
            )
        # With states, the last row of a trajectory has no input or output: there
        # are T inputs and outputs for T+1 states.
        for k, line, j, text in rows.bad:
            if k < steps:
                raise _not_a_number(path, line, header, j, text)
        values = np.frombuffer(rows.values, dtype=np.float64).reshape(count, ends[-1])
        for r, argument in enumerate(("states", "inputs", "outputs")):
            if sizes[r]:
                use = count if argument == "states" else steps
                out[argument].append(values[:use, ends[r] : ends[r + 1]])
    ts = _shared_times(path, groups) if timed else None
    return {
        "xs": out["states"] or None,
        "us": out["inputs"] or None,
        "ys": out["outputs"] or None,
        "ts": ts,
        "state_names": roles["states"] or None,
        "input_names": roles["inputs"] or None,
        "output_names": roles["outputs"] or None,
    }


def _shared_times(path, groups: dict[str, _Rows]) -> np.ndarray:
    """The times of the longest trajectory; every other must follow them."""
    longest = max(groups, key=lambda ident: len(groups[ident].lines))
    reference = np.frombuffer(groups[longest].times, dtype=np.float64)
    for ident, rows in groups.items():
        ts = np.frombuffer(rows.times, dtype=np.float64)
        head = reference[: len(ts)]
        close = np.isclose(ts, head, rtol=1e-9, atol=1e-12)
        if not close.all():
            k = int(np.argmax(~close))
            raise file_error(
                path,
                f"line {rows.lines[k]}: trajectory {ident!r} has time {ts[k]} "
                f"where trajectory {longest!r} has {head[k]}; all must share their "
                "times (a shorter trajectory's are the first of the longest's).",
            )
    return reference.copy()
