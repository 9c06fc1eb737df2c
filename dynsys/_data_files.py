"""The dataset file formats: `.npz` (read with bounded memory) and long `.csv`.

Readers return plain arrays and names; `load_dataset` builds the `Dataset`.
"""

import csv
import io
import math
import os
import pathlib
import re
import stat
import tempfile
import zipfile
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


def _read_member(path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int):
    """One `.npy` member, its header's size checked before any data is read."""
    key = info.filename[: -len(".npy")]
    if info.file_size > limit:
        raise file_error(
            path,
            f"array {key!r} declares {info.file_size} bytes uncompressed, more than "
            f"{limit} allowed for a {archive.fp_size} byte file; refused (a damaged "
            "or hostile file).",
        )
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise file_error(
                path, f"array {key!r}: unsupported .npy version {version}."
            )
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
            archive.fp_size = size  # type: ignore[attr-defined]  (for messages)
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
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as error:
        raise file_error(path, f"not a readable .npz file ({error}).") from None
    except ValueError as error:
        if str(error).startswith("load_dataset("):
            raise
        raise file_error(path, f"not a readable .npz file ({error}).") from None
    arrays["_found"] = np.asarray(found, dtype=str)
    return arrays


# ----------------------------------------------------------------------------- csv


def write_csv(path: pathlib.Path, data) -> None:
    """The long format of `load_dataset`: one row per sample, trajectory by
    trajectory; with states, a trajectory's last row has empty input and output
    cells."""
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
            for array in (us, ys):
                if array is None:
                    continue
                if t < T_i:
                    row += [repr(v) for v in array[i, t].tolist()]
                else:  # no input or output after the last state
                    row += [""] * array.shape[2]
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
            raise file_error(
                path,
                f"line 1: the header must have a {column!r} column ({argument}="
                f"{column!r}); {found}.",
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


def read_csv(
    path: pathlib.Path,
    *,
    states=None,
    inputs=None,
    outputs=None,
    trajectory: str | None = "trajectory",
    time: str | None = "time",
) -> dict:
    """Per-trajectory arrays (lists) for each role, the shared times and names."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            rows = list(csv.reader(file))
    except UnicodeDecodeError as error:
        raise file_error(
            path,
            f"not UTF-8 text (byte {error.object[error.start]:#x} at offset "
            f"{error.start}); save the file as UTF-8 CSV.",
        ) from None
    except csv.Error as error:
        raise file_error(path, f"not a readable CSV file ({error}).") from None
    if not rows:
        raise file_error(path, "the file is empty.")
    header = [name.strip() for name in rows[0]]
    seen: dict[str, int] = {}
    for j, name in enumerate(header):
        if name in seen:
            raise file_error(
                path,
                f"line 1: column {name!r} appears twice in the header (columns "
                f"{seen[name] + 1} and {j + 1}); rename one. Columns found: {header}.",
            )
        seen[name] = j
    roles = csv_roles(
        path,
        header,
        {"states": states, "inputs": inputs, "outputs": outputs},
        {"trajectory": trajectory, "time": time},
    )
    column = {name: j for j, name in enumerate(header)}

    def number(line: int, row: list[str], j: int) -> float:
        text = row[j].strip()
        try:
            return float(text)
        except ValueError:
            raise file_error(
                path,
                f"line {line}: column {j + 1} ({header[j]!r}): {text!r} is not a "
                "number.",
            ) from None

    groups: dict[str, list[tuple[int, list[str]]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise file_error(
                path,
                f"line {line}: expected {len(header)} cells (as in the header), got "
                f"{len(row)}.",
            )
        ident = row[column[trajectory]].strip() if trajectory is not None else ""
        groups.setdefault(ident, []).append((line, row))
    if not groups:
        raise file_error(path, "the dataset is empty (no data rows).")
    has_states = bool(roles["states"])
    out: dict = {"states": [], "inputs": [], "outputs": []}
    times: dict[str, list[float]] = {}
    for ident, lines in groups.items():
        if time is not None:
            times[ident] = [number(line, row, column[time]) for line, row in lines]
        steps = len(lines) - has_states
        if steps < 1:
            raise file_error(
                path,
                f"line {lines[0][0]}: trajectory {ident!r} has {len(lines)} row(s); "
                f"each needs at least {1 + has_states} (one "
                f"{'step: two states' if has_states else 'sample'}).",
            )
        for argument in ("states", "inputs", "outputs"):
            cols = [column[name] for name in roles[argument]]
            if not cols:
                continue
            # With states, the last row of a trajectory has no input or output:
            # there are T inputs and outputs for T+1 states.
            use = lines if argument == "states" else lines[: max(steps, 0)]
            out[argument].append(
                np.array(
                    [[number(line, row, j) for j in cols] for line, row in use],
                    dtype=np.float64,
                ).reshape(len(use), len(cols))
            )
    ts = None
    if time is not None:
        ts = _shared_times(path, groups, times)
    return {
        "xs": out["states"] or None,
        "us": out["inputs"] or None,
        "ys": out["outputs"] or None,
        "ts": ts,
        "state_names": roles["states"] or None,
        "input_names": roles["inputs"] or None,
        "output_names": roles["outputs"] or None,
    }


def _shared_times(path, groups: dict, times: dict[str, list[float]]) -> np.ndarray:
    """The times of the longest trajectory; every other must follow them."""
    longest = max(times, key=lambda ident: len(times[ident]))
    reference = np.asarray(times[longest])
    for ident, ts in times.items():
        ts = np.asarray(ts)
        head = reference[: len(ts)]
        close = np.isclose(ts, head, rtol=1e-9, atol=1e-12)
        if not close.all():
            k = int(np.argmax(~close))
            raise file_error(
                path,
                f"line {groups[ident][k][0]}: trajectory {ident!r} has time {ts[k]} "
                f"where trajectory {longest!r} has {head[k]}; all must share their "
                "times (a shorter trajectory's are the first of the longest's).",
            )
    return reference
