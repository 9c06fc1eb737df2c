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
size), so that a second run of the same shapes compiles nothing; dynsys's own
programs are kept there too, in `programs/` (`kept_programs`: a second run does not
even trace them). The folder is kept under 2 GiB by `prune_folder` (at most once a
day; JAX's own size limit would scan the whole folder on every write). The cache
never makes a run fail: a folder that cannot be written, or a disk with almost no
space left, turns it off with one warning; JAX itself ignores (with a warning) an
entry it cannot read, and entries of another JAX version never match (the version
is part of the key). The processes of a `jax.distributed` run on CPU keep no
programs (`_several_cpu_processes`; said in their `CacheStatus`).
"""

import dataclasses
import os
import pathlib
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator

from .. import _config


ENVIRONMENT_VARIABLE = _config.CACHE_DIR
# Below this much free space the cache is not used: its entries would fail to write.
_MIN_FREE_BYTES = 64 * 2**20
# The most a folder dynsys chose may hold (`prune_folder`), and how often it is checked.
_MAX_BYTES = 2 * 2**30
_PRUNE_EVERY_SECONDS = 24 * 3600
_PRUNED_STAMP = ".dynsys-pruned"
# Where `kept_programs` keeps its compiled programs in a folder dynsys chose.
KEPT_SUBFOLDER = "programs"
KEPT_SUFFIX = ".program"
NEXT_SUFFIX = ".next"  # `read_ahead`'s list beside a kept program


@dataclasses.dataclass(frozen=True)
class CacheStatus:
    """Where compiled programs are kept, or why they are not.

    **Fields:**

    - `folder`: the cache folder, `None` when there is no cache.
    - `source`: what chose it: `"config"`, `"DYNSYS_CACHE_DIR"`, `"jax"` (the
        user's own `jax_compilation_cache_dir`) or `"default"`.
    - `reason`: why there is no cache (`None` when there is one).
    """

    folder: str | None
    source: str
    reason: str | None = None

    def as_dict(self) -> dict:
        """For `metrics.json["compile_cache"]`."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line for a summary: the folder, or why there is none."""
        if self.folder is not None:
            return f"compiled programs are kept in {self.folder} ({self.source})"
        return f"compiled programs are not kept: {self.reason}"


# What dynsys set in this process (`None`: nothing yet), and the warnings given.
_current: CacheStatus | None = None
_said: set[str] = set()


def default_folder() -> pathlib.Path:
    """`$XDG_CACHE_HOME/dynsys/jax`, or `~/.cache/dynsys/jax`."""
    base = _config.read(_config.XDG_CACHE_HOME) or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser() / "dynsys" / "jax"


def current_status() -> CacheStatus | None:
    """What the last `use_compile_cache` set (`None` if it was never called)."""
    return _current


def use_compile_cache(folder: "str | os.PathLike | None" = None) -> CacheStatus:
    """Turn on JAX's persistent compilation cache for this process, in a folder of
    dynsys's, so that a later run of the same shapes compiles nothing.

    A plain library call never changes JAX's settings; call this once, before the
    first fit, in a program of your own that wants the cache (the `dynsys` command
    and `run_experiment` call it). It sets `jax_compilation_cache_dir` to the
    folder, writes every program there (no minimum compile time or size, no JAX
    size limit: the folder is kept under 2 GiB by dynsys, pruned at most once a
    day) and keeps dynsys's own compiled programs in its `programs/` subfolder,
    which a later process loads without tracing them (`docs/performance.md`,
    "Compile once across runs"). These settings affect every later `jax.jit` of the
    process, yours included.

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
    written, or a disk with less than 64 MiB free, gives a status without a folder
    and one warning (once per reason and process); nothing is raised. The processes
    of a `jax.distributed` run on CPU get no cache (said in `reason`).

    **Example:**

    ```python
    status = dynsys.use_compile_cache("~/.cache/my-project/jax")
    status.folder  # the folder, made absolute
    result = dynsys.fit(model, data)  # a second run of this program compiles less
    ```
    """
    global _current
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
    or written, or its disk is (nearly) full."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
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


def _apply(status: CacheStatus) -> None:
    """Set JAX's cache options for `status` (nothing for the user's own folder)."""
    if status.source == "jax":
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir != status.folder:
        jax.config.update("jax_compilation_cache_dir", status.folder)
        compilation_cache.reset_cache()  # the next compilation opens the new folder
    if status.folder is not None:
        # Every program, however quick to compile or small: dynsys's chunks are
        # what a second run should not compile again.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        # No size limit of JAX's: with one (and `filelock` installed) JAX lists and
        # reads every entry's access time on each write, 0.4 s per program in a
        # folder of 7,000 entries. `prune_folder` bounds the folder instead.
        jax.config.update("jax_compilation_cache_max_size", -1)
        prune_folder(pathlib.Path(status.folder))


def prune_folder(
    folder: pathlib.Path,
    max_bytes: int = _MAX_BYTES,
    every_seconds: float = _PRUNE_EVERY_SECONDS,
) -> int:
    """Remove the least recently used compiled programs of a cache folder until
    it holds at most `max_bytes`; at most once per `every_seconds` (a stamp file in
    the folder says when it last ran). Only compiled programs are touched (JAX's
    `*-cache` entries with their `*-atime` companions, and dynsys's kept programs);
    a failure to list or remove one is ignored.

    **Returns:** the number of programs removed.
    """
    stamp = folder / _PRUNED_STAMP
    try:
        if time.time() - stamp.stat().st_mtime < every_seconds:
            return 0
    except OSError:
        pass  # never pruned
    entries, total = [], 0
    try:
        for entry in _entries(folder):
            info = entry.stat()
            used = max(info.st_atime, info.st_mtime)
            entries.append((used, entry.path, info.st_size))
            total += info.st_size
        stamp.touch()
    except OSError:
        return 0
    removed = 0
    for _, path, size in sorted(entries):
        if total <= max_bytes:
            break
        if path.endswith("-cache"):
            companion = path[: -len("-cache")] + "-atime"
        else:  # a kept program's list of the programs that followed it
            companion = path[: -len(KEPT_SUFFIX)] + NEXT_SUFFIX
        for name in (path, companion):
            try:
                os.unlink(name)
            except OSError:
                pass
        total -= size
        removed += 1
    return removed


def _entries(folder: pathlib.Path) -> Iterator[os.DirEntry]:
    """The compiled programs of a cache folder: JAX's (`*-cache`) and dynsys's kept
    ones (`programs/*.program`, `kept_programs`)."""
    for entry in os.scandir(folder):
        if entry.name.endswith("-cache") and entry.is_file():
            yield entry
    kept = folder / KEPT_SUBFOLDER
    if kept.is_dir():
        for entry in os.scandir(kept):
            if entry.name.endswith(KEPT_SUFFIX) and entry.is_file():
                yield entry


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=_first_caller_outside())


def _first_caller_outside() -> int:
    """The `stacklevel`, for a warning of `_say_once`, of the first caller outside
    the dynsys package: the user's call of `use_compile_cache` or of
    `run_experiment`."""
    import sys

    # The package's folder as its modules' code names it (unresolved, like theirs).
    package = os.path.dirname(os.path.dirname(__file__)) + os.sep
    frame, level = sys._getframe(1), 1  # `_say_once`, level 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level
