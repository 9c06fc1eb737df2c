"""Dataset files: what every format shares (checks of the path, atomic writes, errors
naming the file) and the `.npz` format, read with bounded memory.

Readers return plain arrays and names; `load_dataset` builds the `Dataset`.
"""

import io
import math
import os
import pathlib
import stat
import zipfile
import zlib

import numpy as np

from .._atomic_write import write_atomic


# The arrays of an .npz or .mat file may expand, all together, to at most this many
# times the file's size, or this many bytes, whichever is larger (zero padding of
# ragged data compresses ~100x).
_MAX_EXPANSION = 200
_MIN_ALLOWANCE = 256 * 2**20

NPZ_ARRAYS = ("xs", "us", "ys", "ts", "lengths")
NPZ_NAMES = ("state_names", "input_names", "output_names")


def file_error(path, message: str) -> ValueError:
    return ValueError(f"load_dataset(path={str(path)!r}): {message}")


def expansion_limit(size: int) -> int:
    """The bytes the arrays read from a file of `size` bytes may take in all."""
    return max(_MAX_EXPANSION * size, _MIN_ALLOWANCE)


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


# The dtype kinds a data array may have: booleans, integers and floats (never
# dates, time spans, complex numbers, raw bytes or records).
_DATA_KINDS = "biuf"


def _member_size(path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int):
    """`(shape, fortran_order, dtype, nbytes)` of one `.npy` member, from its zip
    entry and `.npy` header alone: nothing of its data is read."""
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
    if key in NPZ_ARRAYS and dtype.kind not in _DATA_KINDS:
        raise file_error(
            path,
            f"array {key!r} has dtype {dtype}; only integer, float or boolean "
            "arrays load (save the values as numbers).",
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > min(limit, info.file_size):
        raise file_error(
            path,
            f"array {key!r} claims shape {shape} ({nbytes} bytes) but the file "
            f"holds at most {min(limit, info.file_size)} bytes for it; refused.",
        )
    return shape, fortran, dtype, nbytes


def _check_total(path, sizes: dict[str, tuple], limit: int) -> None:
    """One budget for all the members read: their sizes from the headers add up to
    at most `limit` bytes."""
    total = sum(size[-1] for size in sizes.values())
    if total > limit:
        largest = max(sizes, key=lambda key: sizes[key][-1])
        raise file_error(
            path,
            f"its arrays {sorted(sizes)} would take {total} bytes in all (largest "
            f"{largest!r}, shape {sizes[largest][0]}), more than the {limit} allowed "
            "for this file; refused (a damaged or hostile file).",
        )


def _read_member(path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, size):
    """One `.npy` member's data, of the `(shape, fortran, dtype, nbytes)` its
    header declared (checked before)."""
    key = info.filename[: -len(".npy")]
    shape, fortran, dtype, nbytes = size
    with archive.open(info) as member:
        _npy_header(path, member, key)
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
    decompressed. Every member's size and dtype is checked from its header first,
    against one budget for all of them, before any data is read."""
    limit = expansion_limit(size)
    try:
        with zipfile.ZipFile(path) as archive:
            members = {
                info.filename[: -len(".npy")]: info
                for info in archive.infolist()
                if info.filename.endswith(".npy")
            }
            wanted = [key for key in (*NPZ_ARRAYS, *NPZ_NAMES) if key in members]
            sizes = {
                key: _member_size(path, archive, members[key], limit) for key in wanted
            }
            _check_total(path, sizes, limit)
            arrays = {
                key: _read_member(path, archive, members[key], sizes[key])
                for key in wanted
            }
            found = sorted(members)
    except _ZIP_ERRORS as error:
        raise file_error(path, f"not a readable .npz file ({error}).") from None
    arrays["_found"] = np.asarray(found, dtype=str)
    return arrays
