"""The model file's format: a magic line, the length of a JSON header, the header
(with its own checksum) and the leaves; reading and checking a file before anything
is allocated, so an untrusted file fails small and in one line."""

import hashlib
import json
import math
import os
import pathlib
import stat
import struct
from typing import Any

import jax
import numpy as np


MAGIC = b"DYNSYS-MODEL\n"
FORMAT_VERSION = 1


def header_digest(header: dict[str, Any]) -> str:
    """The SHA-256 of every header entry but the digest itself (class, static
    settings such as `dt` or `bound`, shapes, the leaves' checksum), in a canonical
    JSON form that survives the header's own JSON round trip."""
    covered = {key: value for key, value in header.items() if key != "header_sha256"}
    canonical = json.dumps(covered, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# Bounds on what a model file may claim, checked before anything is allocated.
MAX_HEADER_BYTES = 64 << 20
MAX_RANK = 32
NUMERIC_KINDS = "biufc"


def read_model_file(path: pathlib.Path) -> tuple[dict[str, Any], bytes]:
    """Read and check a model file: a regular file only (never a FIFO or device,
    even through a symbolic link), at most as many bytes as its header promises."""

    def fail(why: str) -> ValueError:
        return ValueError(f"load(path={str(path)!r}): {why}")

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise fail("no such file.") from None
    except OSError as error:
        raise fail(f"cannot read it ({error.strerror or error}).") from None
    if not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise fail(f"{what} (a model file is a regular file written by dynsys.save).")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise fail(f"cannot read it ({error.strerror or error}).") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the stat
            raise fail("not a regular file.")
        magic = f.read(len(MAGIC))
        if magic != MAGIC:
            raise fail(
                "not a dynsys model file (it does not start with the dynsys header); "
                "models are written by dynsys.save."
            )
        raw_length = f.read(8)
        start = len(MAGIC) + 8
        if len(raw_length) < 8:
            raise fail("the file is truncated (it ends inside the header).")
        (length,) = struct.unpack("<Q", raw_length)
        if start + length > size:
            raise fail("the file is truncated (it ends inside the header).")
        if length > MAX_HEADER_BYTES:
            raise fail(
                f"the header claims {length} bytes (at most {MAX_HEADER_BYTES})."
            )
        encoded = f.read(length)
        if len(encoded) != length:
            raise fail("the file is truncated (it ends inside the header).")
        header = parse_header(encoded, fail)
        payload_bytes = header["payload_bytes"]
        if payload_bytes != size - start - length:
            raise fail(
                f"the file is truncated or damaged: {size - start - length} bytes of "
                f"leaves, the header says {payload_bytes}."
            )
        check_leaves(header, fail)
        payload = f.read(payload_bytes + 1)
    if len(payload) != payload_bytes:
        raise fail(
            f"the file is truncated or damaged: {len(payload)} bytes of leaves, the "
            f"header says {payload_bytes}."
        )
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise fail("the file is damaged: the checksum of the leaves does not match.")
    return header, payload


def parse_header(encoded: bytes, fail) -> dict[str, Any]:
    try:
        header = json.loads(encoded)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        why = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise fail(f"the header is not valid JSON ({why}).") from None
    if not isinstance(header, dict) or header.get("format") != "dynsys-model":
        raise fail("not a dynsys model file (wrong format in the header).")
    version = header.get("format_version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise fail(f"the header's format_version is {version!r}, not an integer.")
    if version > FORMAT_VERSION:
        raise fail(
            f"the file has format version {version}, newer than this dynsys "
            f"understands ({FORMAT_VERSION}); upgrade dynsys."
        )
    wanted = {
        "class": str,
        "leaves": list,
        "payload_bytes": int,
        "payload_sha256": str,
    }
    for key, kind in wanted.items():
        value = header.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise fail(
                f"the header's {key!r} is {type(value).__name__}, expected "
                f"{kind.__name__} (the file is damaged or not written by dynsys)."
            )
    fields = header.get("fields")
    if fields is not None and not isinstance(fields, dict):
        raise fail("the header's 'fields' is not a table.")
    static = header.get("static")
    if static is not None and not isinstance(static, dict):
        raise fail("the header's 'static' is not a table.")
    channels = header.get("channels")
    if channels is not None and not _channel_table(channels):
        raise fail(
            "the header's 'channels' is not a table of input and output names."
        )
    # Files from before the header had its own checksum load unchecked.
    try:
        digest = header_digest(header) if "header_sha256" in header else None
    except RecursionError:
        raise fail("the header is nested too deeply.") from None
    if digest is not None and header["header_sha256"] != digest:
        raise fail(
            "the file is damaged or was edited: the checksum of the header (class, "
            "static settings such as dt, shapes) does not match."
        )
    return header


def _channel_table(channels) -> bool:
    """Whether `channels` is `{"inputs": [str, ...], "outputs": [str, ...]}`."""
    return (
        isinstance(channels, dict)
        and set(channels) == {"inputs", "outputs"}
        and all(
            isinstance(names, list) and all(isinstance(n, str) for n in names)
            for names in channels.values()
        )
    )


def array_spec(info: Any, where: str, fail) -> jax.ShapeDtypeStruct:
    """The shape and dtype a header entry claims, checked (numeric dtypes only)."""
    if not isinstance(info, dict):
        raise fail(f"{where} is not a table in the header.")
    shape, dtype = info.get("shape"), info.get("dtype")
    if isinstance(shape, list) and len(shape) > MAX_RANK:
        raise fail(f"{where} has rank {len(shape)} in the header (at most {MAX_RANK}).")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_RANK
        or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        )
    ):
        raise fail(f"{where} has shape {shape!r} in the header, not a list of sizes.")
    try:
        np_dtype = np.dtype(dtype) if isinstance(dtype, str) else None
    except TypeError:
        np_dtype = None
    if np_dtype is None or np_dtype.kind not in NUMERIC_KINDS:
        raise fail(f"{where} has dtype {dtype!r} in the header, not a numeric dtype.")
    return jax.ShapeDtypeStruct(tuple(shape), np_dtype)


def check_leaves(header: dict[str, Any], fail) -> None:
    """The arrays the header claims must fit in the payload (checked before any
    allocation: a small file cannot claim gigabytes)."""
    claimed = 0
    for k, info in enumerate(header["leaves"]):
        if isinstance(info, dict) and "shape" in info:
            spec = array_spec(info, f"leaf {k}", fail)
            claimed += math.prod(spec.shape) * spec.dtype.itemsize
    for name, info in (header.get("fields") or {}).items():
        if isinstance(info, dict) and "shape" in info:
            array_spec(info, f"field {name!r}", fail)
    if claimed > header["payload_bytes"]:
        raise fail(
            f"the header claims {claimed} bytes of arrays but the file holds "
            f"{header['payload_bytes']} (the file is damaged or hostile)."
        )
