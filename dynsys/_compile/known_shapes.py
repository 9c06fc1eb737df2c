"""The padded shapes this machine has compiled a fit's programs for (`known`,
`remember`): record lengths and model sizes, so that a record of another length, or
a scan whose candidates are smaller, can be padded to one of them and run those
programs (`_fitting/length_buckets.py`, `shared_length`; `_fitting/padded.py`,
`shared_size`).

Kept in memory for this process, and in the `shapes` file of the folder where
dynsys keeps its programs (`kept_programs`), one `signature value` pair per line,
so that the next process finds them too. The file is only a hint: a line it cannot
read is skipped, a length whose programs were pruned since is compiled again, and
a file that cannot be read or written is as good as none (nothing is said)."""

import os
import pathlib

from . import cache


FILE_NAME = "shapes"
# Past this many lines the file is not grown (a hint, never a log).
MOST_LINES = 4096
_in_memory: set[tuple[str, int]] = set()


def _path() -> pathlib.Path | None:
    status = cache.current_status()
    if status is None or status.folder is None or status.source == "jax":
        return None  # (a folder the user gave JAX is theirs: no file of ours there)
    return pathlib.Path(status.folder) / cache.KEPT_SUBFOLDER / FILE_NAME


def _read(path: pathlib.Path) -> set[tuple[str, int]]:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            lines = file.read(2**20).splitlines()
    except OSError:
        return set()
    pairs = set()
    for line in lines:
        signature, _, length = line.rpartition(" ")
        if signature and length.isdigit():
            pairs.add((signature, int(length)))
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
    one `write` when several processes append)."""
    _in_memory.add((signature, value))
    path = _path()
    if path is None or " " in signature or "\n" in signature:
        return
    if (signature, value) in (pairs := _read(path)) or len(pairs) >= MOST_LINES:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(descriptor, f"{signature} {value}\n".encode("ascii"))
        finally:
            os.close(descriptor)
    except (OSError, UnicodeEncodeError):
        pass
