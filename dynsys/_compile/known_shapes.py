"""The padded shapes this machine has compiled a fit's programs for (`known`,
`remember`): record lengths and model sizes, so that a record of another length, or
a scan whose candidates are smaller, can be padded to one of them and run those
programs (`_fitting/length_buckets.py`, `shared_length`; `_fitting/padded.py`,
`shared_size`).

Kept in memory for this process, and in the `shapes` file of the folder where
dynsys keeps its programs (`kept_programs`), one `signature value` pair per line,
so that the next process finds them too. The file is only a hint: a line it cannot
read is skipped, a length whose programs were pruned since is compiled again, and
a file that cannot be read or written, or is not a regular file (a link, a pipe),
is as good as none (nothing is said)."""

import os
import pathlib
import stat

from . import cache, kept_programs


FILE_NAME = "shapes"
# Past this many lines the file is not grown (a hint, never a log).
MOST_LINES = 4096
_in_memory: set[tuple[str, int]] = set()


def _path() -> pathlib.Path | None:
    status = cache.current_status()
    if status is None or status.folder is None or status.source == "jax":
        return None  # (a folder the user gave JAX is theirs: no file of ours there)
    return pathlib.Path(status.folder) / cache.KEPT_SUBFOLDER / FILE_NAME


def _open_regular(path: pathlib.Path, flags: int) -> int | None:
    """A descriptor of `path` opened with `flags`, if it is a regular file (not a
    link, a pipe or a folder); else `None`."""
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(descriptor).st_mode):
            return descriptor
    except OSError:
        pass
    os.close(descriptor)
    return None


def _read(path: pathlib.Path) -> set[tuple[str, int]]:
    descriptor = _open_regular(path, os.O_RDONLY)
    if descriptor is None:
        return set()
    try:
        text = os.read(descriptor, 2**20).decode("ascii", errors="replace")
    except OSError:
        return set()
    finally:
        os.close(descriptor)
    pairs = set()
    for line in text.splitlines():
        signature, _, value = line.rpartition(" ")
        if signature and value.isdigit():
            pairs.add((signature, int(value)))
    return pairs


def known(signature: str) -> set[int]:
    """The values remembered for programs of `signature` (e.g. the shapes of a
    fit's arrays but their length, and which shape the value is)."""
    path = _path()
    pairs = _in_memory | (_read(path) if path is not None else set())
    return {value for name, value in pairs if name == signature}


def remember(signature: str, value: int) -> None:
    """Remember that a fit of `signature` runs at `value`: in memory, and as one
    appended line of the `shapes` file (a line short enough to be written whole by
    one `write` when several processes append). Not within
    `kept_programs.compiling_ahead`: what the run pads to must not depend on when
    a thread compiling ahead of it got there (it only looks shapes up)."""
    if kept_programs.is_compiling_ahead():
        return
    _in_memory.add((signature, value))
    path = _path()
    if path is None or " " in signature or "\n" in signature:
        return
    if (signature, value) in (pairs := _read(path)) or len(pairs) >= MOST_LINES:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    descriptor = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    if descriptor is None:
        return
    try:
        os.write(descriptor, f"{signature} {value}\n".encode("ascii"))
    except (OSError, UnicodeEncodeError):
        pass
    finally:
        os.close(descriptor)
