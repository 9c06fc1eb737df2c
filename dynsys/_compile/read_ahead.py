"""Kept programs read ahead: the programs an earlier run of the `dynsys` command
used are loaded on a background thread while this run computes.

Loading the kept programs (`kept_programs`) is 0.3-0.45 s of a warm `dynsys fit`
on an 800-sample record, each one read when it is first called. Their keys are
known only from a call's arguments, but the first program a run calls names the run
well (its key holds the code, the data's shapes and the settings): the keys that
followed it last time are listed in `<first key>.next` beside the programs. When a
process of the command calls that first program again, a thread loads the listed
programs in the order they were used, and `take` hands each over when it is called
(waiting for one in flight, or leaving one not yet started to the caller). jaxlib
releases Python's GIL while it deserialises, so the run's own work goes on.

A list that no longer fits (other options, new code) only costs the thread's work:
a program is used only under its own key. A list is an `entry_file` too: one that
is damaged or not a regular file is not read. At the end of the process the list is
written again when this run's keys differ. Only processes that ask for it
(`enable_for_process`, the `dynsys` command) read or write lists.
"""

import atexit
import pathlib
import threading
from collections.abc import Callable

from . import entry_file
from .cache import NEXT_SUFFIX


_MOST = 64  # keys listed at most
_PENDING, _CLAIMED, _LOADING, _DONE = "pending", "claimed", "loading", "done"
_state: dict = {"enabled": False, "run": None}


def enable_for_process() -> None:
    """Read programs ahead in this process (the `dynsys` command, which owns its
    process, calls it before its run)."""
    _state["enabled"] = True


class _Run:
    """This process's keys in the order first used, and the programs being read
    ahead for them."""

    def __init__(self, folder: pathlib.Path, first: str, suffix: str):
        self.folder = folder
        self.suffix = suffix  # a program file's
        self.keys = [first]
        self.listed = _listed(folder / (first + NEXT_SUFFIX))
        self._lock = threading.Lock()
        self._status = {key: _PENDING for key in self.listed}
        self._loaded: dict[str, object] = {}
        self._ready = {key: threading.Event() for key in self.listed}
        self.thread: threading.Thread | None = None

    def start(self, loader: Callable) -> None:
        """Load the listed programs on a thread (`self.thread`), in their order."""
        if self.listed:
            self.thread = threading.Thread(
                target=self._load_all, args=(loader,), daemon=True, name="read-ahead"
            )
            self.thread.start()

    def _load_all(self, loader: Callable) -> None:
        for key in self.listed:
            with self._lock:
                if self._status[key] != _PENDING:
                    continue
                self._status[key] = _LOADING
            try:
                program = loader(self.folder / (key + self.suffix), key)
            except Exception:  # the caller loads it again and says what is wrong
                program = None
            with self._lock:
                self._loaded[key] = program
                self._status[key] = _DONE
            self._ready[key].set()

    def take(self, key: str):
        """The program read ahead for `key` (after waiting for it if in flight), or
        `None`: not listed, not started yet (left to the caller), or unreadable."""
        with self._lock:
            status = self._status.get(key)
            if status == _PENDING:
                self._status[key] = _CLAIMED
            if status in (None, _PENDING, _CLAIMED):
                return None
        self._ready[key].wait()
        with self._lock:
            return self._loaded.pop(key, None)

    def note(self, key: str) -> None:
        if key not in self.keys and len(self.keys) <= _MOST:
            self.keys.append(key)

    def write(self) -> None:
        """List this run's keys after its first, where they differ from the list
        read (a folder that cannot be written: nothing is read ahead next time)."""
        if self.keys[1:] != self.listed:
            try:
                content = "".join(key + "\n" for key in self.keys[1:]).encode()
                name = self.keys[0] + NEXT_SUFFIX
                entry_file.write(self.folder / name, name, content)
            except OSError:
                pass


def _listed(path: pathlib.Path) -> list[str]:
    """The keys listed in `path` (an `entry_file`); none where it is missing,
    damaged or not a regular file (each program read ahead is checked anyway)."""
    try:
        content = entry_file.read(path, path.name, max_bytes=_MOST * 256)
        lines = [] if content is None else content.decode().split()
    except (entry_file.Refused, UnicodeDecodeError):
        return []
    return [line for line in dict.fromkeys(lines) if line.isalnum()][:_MOST]


def taken(folder: pathlib.Path, key: str, suffix: str, loader: Callable):
    """Note that this process calls the kept program `key` of `folder`, and return
    it when it was read ahead (else `None`). The first call of the process starts
    reading ahead the programs that followed `key` last time; `loader(path, key)`
    reads one (`kept_programs.load`, without its clock event)."""
    if not _state["enabled"]:
        return None
    run = _state["run"]
    if run is None:
        run = _state["run"] = _Run(folder, key, suffix)
        run.start(loader)
        atexit.register(run.write)
        return None
    if run.folder != folder:
        return None
    run.note(key)
    return run.take(key)
