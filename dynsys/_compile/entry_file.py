"""The file of one cache entry: what dynsys writes for every compiled program it
keeps (its own kept programs, JAX's entries, `read_ahead`'s lists) and the only way
it reads one back.

A file is `_MAGIC`, then the SHA-256 digest of the entry's name and content, then
the content:

    b"dynsys-cache-entry 1\\n" + sha256(name + b"\\0" + content) + content

`read` hands the content over only when the file is a regular file (not a link, a
FIFO or a device: opened with `O_NOFOLLOW | O_NONBLOCK`, checked with `fstat`, so
it never blocks), at most `MAX_BYTES` long, and its digest matches: a bit flipped
anywhere, a file cut short, or an entry filed under another name is refused before
anything is deserialised. The digest guards against damage, not against someone who
can write the folder (they could write a matching digest): `cache` refuses a folder
that another user owns or that group or others may write.

`is_ours` tells dynsys's files from others' by their first bytes: pruning removes
nothing else.
"""

import hashlib
import os
import pathlib
import stat

from .._atomic_write import write_atomic


_MAGIC = b"dynsys-cache-entry 1\n"
_DIGEST_BYTES = 32
# The longest entry read back (a fit's largest kept program is under 1 MiB).
MAX_BYTES = 256 * 2**20


class Refused(Exception):
    """An entry that exists but is not handed over; the message says why."""


def _digest(name: str, content: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\0" + content).digest()


def write(path: pathlib.Path, name: str, content: bytes) -> int:
    """Write `content` as the entry `name` at `path`, whole or not at all.

    **Returns:** the bytes written. **Raises:** `OSError`.
    """
    data = _MAGIC + _digest(name, content) + content
    write_atomic(path, data)
    return len(data)


def read(path: pathlib.Path, name: str, max_bytes: int = MAX_BYTES) -> bytes | None:
    """The content of the entry `name` at `path`; `None` when there is no file.

    **Raises:** `Refused` when the file is not a regular file, is longer than
    `max_bytes`, or is not an entry of dynsys's filed under `name` (damaged, cut
    short, foreign).
    """
    data = _read_regular(path, max_bytes + len(_MAGIC) + _DIGEST_BYTES)
    if data is None:
        return None
    head = len(_MAGIC) + _DIGEST_BYTES
    if not data.startswith(_MAGIC) or len(data) < head:
        raise Refused(f"{path} is not an entry of dynsys's")
    content = data[head:]
    if data[len(_MAGIC) : head] != _digest(name, content):
        raise Refused(f"{path} is damaged (its SHA-256 digest does not match)")
    return content


def _read_regular(
    path: pathlib.Path, max_bytes: int, head_only: bool = False
) -> bytes | None:
    """The bytes of the regular file `path` (at most `max_bytes`; only its first
    `len(_MAGIC)` with `head_only`), without following a link or waiting on a FIFO;
    `None` when there is no file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        handle = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: a symbolic link
        raise Refused(f"{path} cannot be opened as a regular file ({error.strerror})")
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path} is not a regular file")
        if info.st_size > max_bytes:
            raise Refused(f"{path} holds {info.st_size} bytes (at most {max_bytes})")
        size = min(info.st_size, len(_MAGIC)) if head_only else info.st_size
        chunks, left = [], size + 1  # one more: a file that grew is seen
        while left > 0 and (chunk := os.read(handle, min(left, 2**24))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as error:
        raise Refused(f"{path} cannot be read ({error.strerror})")
    finally:
        os.close(handle)
    data = b"".join(chunks)
    if head_only:
        return data[:size]
    if len(data) != size:
        raise Refused(f"{path} changed while it was read")
    return data


def is_ours(path: pathlib.Path) -> bool:
    """Whether `path` is a regular file that starts as dynsys's entries do."""
    try:
        data = _read_regular(path, 2**62, head_only=True)
    except Refused:
        return False
    return data is not None and data.startswith(_MAGIC)
