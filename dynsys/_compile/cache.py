"""JAX's persistent compilation cache for dynsys: compile a program once, across runs.

`use_compile_cache` turns it on (public as `dynsys.use_compile_cache`). The `dynsys`
command and `run_experiment` call it; a plain library call (`fit`, `train`,
`rollout`, ...) never does, and never changes a JAX setting. Where it lives, first
match wins:

1. the folder given to `use_compile_cache`, or `"off"` (`run_experiment` gives
    its config's `compile_cache` key);
2. the `DYNSYS_CACHE_DIR` environment variable (a folder; empty or `off`: no cache);
3. a cache folder the user gave JAX themselves (`jax_compilation_cache_dir`), used
    as it is, with JAX's own thresholds;
4. `$XDG_CACHE_HOME/dynsys/jax` (default `~/.cache/dynsys/jax`).

A folder dynsys chooses gets every compiled program (no minimum compile time or
size), so that a second run of the same shapes compiles nothing. Everything dynsys
keeps there lives in two subfolders of its own, as `entry_file`s (a header and a
SHA-256 digest checked before anything is deserialised): JAX's entries in `jax/`
(`jax_entries`, which stands in for JAX's own file cache) and dynsys's kept programs
in `programs/` (`kept_programs`: a second run does not even trace them). Nothing
else in the folder is read, written or removed. The folder is refused (the cache
turned off, one line) when another user owns it or group or others may write it:
whoever can write it can make this process run code of theirs. Its two subfolders
are kept under 2 GiB by `prune_folder`, on every run and whenever this process's
writes take them over. The cache never makes a run fail: a folder that cannot be
written, or a disk with almost no space left, turns it off with one line; an entry
that is damaged, foreign or not a regular file is compiled again and written over
(one line per process); entries of another JAX version never match (the version
is part of the key). The processes of a `jax.distributed` run on CPU keep no
programs (`_several_cpu_processes`; said in their `CacheStatus`).
"""

import contextlib
import dataclasses
import os
import pathlib
import shutil
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator

from .. import _config
from . import entry_file


ENVIRONMENT_VARIABLE = _config.CACHE_DIR
# Below this much free space the cache is not used: its entries would fail to write.
_MIN_FREE_BYTES = 64 * 2**20
# The most dynsys's subfolders of a cache folder may hold (`prune_folder`).
_MAX_BYTES = 2 * 2**30
# Where `kept_programs` keeps its compiled programs in a folder dynsys chose.
KEPT_SUBFOLDER = "programs"
KEPT_SUFFIX = ".program"
NEXT_SUFFIX = ".next"  # `read_ahead`'s list beside a kept program
# Where `jax_entries` keeps JAX's compiled programs in a folder dynsys chose.
JAX_SUBFOLDER = "jax"
JAX_SUFFIX = ".entry"
# Each subfolder of dynsys's, and the names of its entries.
_OURS = {KEPT_SUBFOLDER: (KEPT_SUFFIX, NEXT_SUFFIX), JAX_SUBFOLDER: (JAX_SUFFIX,)}


@dataclasses.dataclass(frozen=True)
class CacheStatus:
    """Where compiled programs are kept, or why they are not.

    **Fields:**

    - `folder`: the cache folder, `None` when there is no cache.
    - `source`: what chose it: `"config"`, `"DYNSYS_CACHE_DIR"`, `"jax"` (the
        user's own `jax_compilation_cache_dir`) or `"default"`.
    - `reason`: why there is no cache (`None` when there is one).
    - `not_kept`: how many compiled programs of this process could not be written
        to the folder, and why (`None` when every one was).
    """

    folder: str | None
    source: str
    reason: str | None = None
    not_kept: str | None = None

    def as_dict(self) -> dict:
        """For `metrics.json["compile_cache"]` (`not_kept` only when there is one)."""
        record = dataclasses.asdict(self)
        if self.not_kept is None:
            del record["not_kept"]
        return record

    def describe(self) -> str:
        """One line for a summary: the folder, or why there is none."""
        if self.folder is not None:
            kept = f"compiled programs are kept in {self.folder} ({self.source})"
            return kept if self.not_kept is None else f"{kept}, except {self.not_kept}"
        return f"compiled programs are not kept: {self.reason}"


# What dynsys set in this process (`None`: nothing yet), and the warnings given.
_current: CacheStatus | None = None
_said: set[str] = set()
# Programs this process could not write to the folder: how many, the first reason.
_not_kept: dict = {"count": 0, "why": None}
# `say`'s topic for an entry refused (damaged, foreign, not a regular file): one
# line per process, whichever entry it is.
REFUSED_TOPIC = "an entry refused"
# Whether `say` prints its line (the `dynsys` command) rather than warning.
_prints = {"on": False}
# The bytes in dynsys's subfolders of the folder in use, as last counted plus written.
_tally: dict = {"folder": None, "bytes": 0}


def default_folder() -> pathlib.Path:
    """`$XDG_CACHE_HOME/dynsys/jax`, or `~/.cache/dynsys/jax`."""
    base = _config.read(_config.XDG_CACHE_HOME) or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser() / "dynsys" / "jax"


def current_status() -> CacheStatus | None:
    """What the last `use_compile_cache` set (`None` if it was never called), with
    the programs that could not be written since (`not_kept`)."""
    if _current is None or _current.folder is None or not _not_kept["count"]:
        return _current
    count, why = _not_kept["count"], _not_kept["why"]
    programs = "program" if count == 1 else "programs"
    return dataclasses.replace(
        _current, not_kept=f"{count} {programs} that could not be written ({why})"
    )


def note_not_kept(why: str) -> None:
    """Count a compiled program that could not be written to the folder."""
    _not_kept["count"] += 1
    _not_kept["why"] = _not_kept["why"] or why


def use_compile_cache(folder: "str | os.PathLike | None" = None) -> CacheStatus:
    """Turn on JAX's persistent compilation cache for this process, in a folder of
    dynsys's, so that a later run of the same shapes compiles nothing.

    A plain library call never changes JAX's settings; call this once, before the
    first fit, in a program of your own that wants the cache (the `dynsys` command
    and `run_experiment` call it). It sets `jax_compilation_cache_dir` to the
    folder, writes every program there (no minimum compile time or size, no JAX
    size limit: dynsys's subfolders are kept under 2 GiB, checked on every run) and
    keeps dynsys's own compiled programs in its `programs/` subfolder, which a
    later process loads without tracing them (`docs/performance.md`, "Compile once
    across runs"). Every entry is checked against its SHA-256 digest before it is
    deserialised. These settings affect every later `jax.jit` of the process,
    yours included.

    **Arguments:**

    - `folder`: the cache folder; `"off"` (or `""`) for no cache; `None` to take
        `DYNSYS_CACHE_DIR` (a folder, or empty or `off`), else a folder you gave
        JAX yourself (`jax_compilation_cache_dir`, used as it is, with JAX's own
        thresholds and no kept programs), else `$XDG_CACHE_HOME/dynsys/jax`
        (`~/.cache/dynsys/jax`).

    **Returns:**

    A `CacheStatus`: `folder` (`None` when there is no cache), `source` (what chose
    it: `"config"` for the `folder` argument, `"DYNSYS_CACHE_DIR"`, `"jax"` or
    `"default"`) and `reason` (why there is no cache). A folder that cannot be
    written, that another user owns or that group or others may write, or a disk
    with less than 64 MiB free, gives a status without a folder and one warning
    (once per reason and process); nothing is raised. The processes
    of a `jax.distributed` run on CPU get no cache (said in `reason`).

    **Example:**

    ```python
    status = dynsys.use_compile_cache("~/.cache/my-project/jax")
    status.folder  # the folder, made absolute
    result = dynsys.fit(model, data)  # a second run of this program compiles less
    ```
    """
    global _current
    _not_kept.update(count=0, why=None)  # counted anew for each run
    status = _choose(folder)
    if status.folder is not None and status.source != "jax":
        if _several_cpu_processes():
            # Said in the status (the run's summary and metrics), not as a
            # warning: every process would print it, before any error's one line.
            status = CacheStatus(None, status.source, _SEVERAL_CPU_PROCESSES)
        elif (reason := _unusable(pathlib.Path(status.folder))) is not None:
            status = CacheStatus(None, status.source, reason)
            _say_once(f"dynsys: no compilation cache: {reason}; compiling as usual.")
    _apply(status)
    _current = status
    return status


def _choose(folder) -> CacheStatus:
    """The folder (or none) and what chose it, before checking it."""
    if folder is not None:
        return _from_text(os.fspath(folder), "config")
    if (text := _config.read(ENVIRONMENT_VARIABLE)) is not None:
        return _from_text(text, ENVIRONMENT_VARIABLE)
    import jax

    theirs = jax.config.jax_compilation_cache_dir
    # JAX's folder is the user's unless dynsys set it (a later call of a process
    # whose earlier call chose a folder of dynsys's).
    ours = _current is not None and _current.source != "jax"
    if theirs and not (ours and theirs == _current.folder):
        return CacheStatus(str(theirs), "jax")
    return CacheStatus(str(default_folder()), "default")


def _from_text(text: str, source: str) -> CacheStatus:
    if text.strip().lower() in ("", "off"):
        what = "config key 'compile_cache'" if source == "config" else source
        return CacheStatus(None, source, f"turned off ({what} = {text!r})")
    return CacheStatus(str(pathlib.Path(text).expanduser().absolute()), source)


_SEVERAL_CPU_PROCESSES = (
    "this is one of several processes of a jax.distributed run on CPU, where a "
    "program that one process compiled and another reads back breaks their "
    "collectives"
)


def _several_cpu_processes() -> bool:
    """Whether this is one of several processes of a `jax.distributed` run on CPU.
    There every process reads the programs that process 0 wrote to the cache, and
    on the second run of the same shapes their collectives no longer match (Gloo:
    "Received data size doesn't match expected size"; `tests/distributed/test_distributed.py`).
    Asked without starting JAX's backends where `jax.distributed` is not
    initialised (which must come first)."""
    import jax

    initialised = getattr(jax.distributed, "is_initialized", None)
    if initialised is None or not initialised():
        return False
    return jax.process_count() > 1 and jax.default_backend() == "cpu"


def _unusable(folder: pathlib.Path) -> str | None:
    """Why `folder` cannot hold the cache (`None` if it can): it cannot be created
    or written, another user owns it or group or others may write it (it or one of
    dynsys's subfolders), or its disk is (nearly) full."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (reason := _not_private(folder)) is not None:
            return reason
        for name in _OURS:
            (folder / name).mkdir(mode=0o700, exist_ok=True)
            if (reason := _not_private(folder / name)) is not None:
                return reason
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".dynsys-probe-")
        os.close(handle)
        os.unlink(probe)
        free = shutil.disk_usage(folder).free
    except OSError as error:
        why = error.strerror or type(error).__name__
        return f"cannot write to {folder} ({why})"
    if free < _MIN_FREE_BYTES:
        return f"{folder} has {free / 2**20:.0f} MiB free (at least 64 MiB needed)"
    return None


def _not_private(folder: pathlib.Path) -> str | None:
    """Why `folder` may hold programs planted by someone else (`None`: only this
    user can write it). Whoever can write the cache can make this process run code
    of theirs (a kept program is unpickled, an executable is run)."""
    info = os.stat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a folder"
    uid = _user_id()
    if uid is not None and info.st_uid != uid:
        return (
            f"{folder} belongs to another user (uid {info.st_uid}, not {uid}), "
            "who could plant programs in it"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = oct(stat.S_IMODE(info.st_mode))
        return (
            f"{folder} can be written by group or others (mode {mode}); "
            f"'chmod go-w {folder}' to use it"
        )
    return None


def _user_id() -> int | None:
    """This process's user id (`None` where the system has none: Windows)."""
    return os.getuid() if hasattr(os, "getuid") else None


def _apply(status: CacheStatus) -> None:
    """Set JAX's cache options for `status` (nothing for the user's own folder)."""
    if status.source == "jax":
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    from . import jax_entries

    jax_entries.uninstall()
    if jax.config.jax_compilation_cache_dir != status.folder:
        jax.config.update("jax_compilation_cache_dir", status.folder)
        compilation_cache.reset_cache()  # the next compilation opens the new folder
    if status.folder is not None:
        folder = pathlib.Path(status.folder)
        # JAX's entries go through dynsys's checked files (`jax_entries`); where
        # this JAX has no place for them, JAX's cache stays off: it would read its
        # entries unchecked.
        if not _install_checked_entries(folder / JAX_SUBFOLDER):
            jax.config.update("jax_compilation_cache_dir", None)
            compilation_cache.reset_cache()
        # Every program, however quick to compile or small: dynsys's chunks are
        # what a second run should not compile again.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        # No size limit of JAX's (its file cache is not used): `prune_folder`
        # bounds dynsys's subfolders instead.
        jax.config.update("jax_compilation_cache_max_size", -1)
        _tally["folder"] = folder
        _tally["bytes"] = 0
        prune_folder(folder)


def _install_checked_entries(folder: pathlib.Path) -> bool:
    """`jax_entries.install` in `folder`, saying and counting as the kept programs
    do."""
    from . import jax_entries

    def not_written(why: str) -> None:
        note_not_kept(why)
        say(
            f"dynsys: compiled programs are not kept in {folder} ({why}); "
            "compiling as usual."
        )

    return jax_entries.install(
        folder,
        JAX_SUFFIX,
        refused=say_refused,
        not_written=not_written,
        written=lambda size: note_written(folder, size),
    )


def say_refused(why: str) -> None:
    """Say (once per process) that an entry was refused and is compiled again."""
    say(
        f"dynsys: a compile-cache entry was ignored ({why}); it is compiled again "
        "and written over.",
        topic=REFUSED_TOPIC,
    )


def note_written(folder: pathlib.Path, size: int) -> None:
    """Count `size` bytes written to `folder` (a subfolder of the cache folder in
    use), and prune it when this takes it over the size limit."""
    if _tally["folder"] is None or folder.parent != _tally["folder"]:
        return
    _tally["bytes"] += size
    if _tally["bytes"] > _MAX_BYTES:
        prune_folder(_tally["folder"])


def prune_folder(folder: pathlib.Path, max_bytes: int | None = None) -> int:
    """Remove the least recently used entries of dynsys's subfolders of a cache
    folder (`programs/`, `jax/`) until they hold at most `max_bytes` (default:
    2 GiB). Only files
    that dynsys wrote are removed (named as its entries, regular files, starting
    with an entry's header: `entry_file.is_ours`); nothing else in the folder is
    touched. A time in the future counts as now. A failure to list or remove one
    is ignored.

    **Returns:** the number of entries removed.
    """
    max_bytes = _MAX_BYTES if max_bytes is None else max_bytes
    now = time.time()
    entries, total = [], 0
    for entry in _entries(folder):
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        used = min(max(info.st_atime, info.st_mtime), now)
        entries.append((used, entry.path, info.st_size))
        total += info.st_size
    removed = 0
    for _, path, size in sorted(entries):
        if total <= max_bytes:
            break
        if not entry_file.is_ours(pathlib.Path(path)):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        removed += 1
    if _tally["folder"] == folder:
        _tally["bytes"] = total
    return removed


def _entries(folder: pathlib.Path) -> Iterator[os.DirEntry]:
    """The files named as dynsys's entries in its subfolders of a cache folder (a
    subfolder that is a link is not followed)."""
    for name, suffixes in _OURS.items():
        try:
            if not stat.S_ISDIR(os.lstat(folder / name).st_mode):
                continue
            listed = list(os.scandir(folder / name))
        except OSError:
            continue
        for entry in listed:
            if entry.name.endswith(suffixes) and entry.is_file(follow_symlinks=False):
                yield entry


@contextlib.contextmanager
def lines_printed():
    """Inside, the cache's lines (`say`) are printed on stderr, one line each,
    instead of given as Python warnings (two lines, with a source line): for the
    `dynsys` command, whose output they are."""
    before = _prints["on"]
    _prints["on"] = True
    try:
        yield
    finally:
        _prints["on"] = before


def say(message: str, said: set[str] | None = None, topic: str | None = None) -> None:
    """Tell the user `message` (one line, starting `dynsys: `) once per `topic`
    (default: the message) and process: printed on stderr in the `dynsys` command
    (`lines_printed`), else a `RuntimeWarning` at the user's call."""
    said = _said if said is None else said
    topic = message if topic is None else topic
    if topic in said:
        return
    said.add(topic)
    if _prints["on"]:
        print(message, file=sys.stderr, flush=True)
    else:
        level = _first_caller_outside(sys._getframe())
        warnings.warn(message, RuntimeWarning, stacklevel=level)


def _say_once(message: str) -> None:
    say(message)


def _first_caller_outside(frame) -> int:
    """The `stacklevel`, for a warning of `say` (whose frame is `frame`), of the
    first caller outside the dynsys package: the user's call of
    `use_compile_cache` or of `run_experiment`."""
    # The package's folder as its modules' code names it (unresolved, like theirs).
    package = os.path.dirname(os.path.dirname(__file__)) + os.sep
    checker = os.path.join("jaxtyping", "_decorator.py")

    def ours(code) -> bool:
        # The package's code, or the run-time type checks that the test suite wraps
        # around each of its functions (jaxtyping's wrapper and beartype's).
        name = code.co_filename
        return name.startswith((package, "<@beartype(")) or name.endswith(checker)

    level = 1  # `say`, level 1
    while frame is not None and ours(frame.f_code):
        frame, level = frame.f_back, level + 1
    return level
