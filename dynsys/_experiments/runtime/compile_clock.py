"""How much of each stage of a run went to JAX compilation (`metrics.json["timing"]`).

JAX reports its compilation work through `jax.monitoring`: the seconds spent tracing
a function to a jaxpr, lowering the jaxpr to an MLIR module, and compiling the module
for the backend (or reading it from the persistent compilation cache), and one event
per persistent-cache hit. One listener, registered once per process, adds them up;
a `StageClock` reads those totals at every change of stage and charges the
difference, and the wall time, to the stage that was running.

Stages are exclusive: a stage opened inside another (the structure scan inside the
subspace start) pauses the outer one, so the stages' seconds add up to the run's
time spent inside the clock, never more. The runner marks its stages with
`stage("fit")` and so on; outside a running clock `stage` does nothing.

Work done on the thread that compiles programs ahead (`AHEAD_THREAD`,
`_experiments/fit/ahead.py`) overlaps the stages: it is added up apart
(`StageClock.ahead_as_dict`), and `stage` does nothing on that thread.
"""

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator

from ..._compile import kept_programs
from ..._compile.kept_programs import LOAD_EVENT


# The jax.monitoring events (jax/_src/dispatch.py, jax/_src/compiler.py).
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_BACKEND_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


@dataclasses.dataclass
class CompileWork:
    """JAX's compilation work, summed over some span of time.

    **Fields:**

    - `tracing_seconds`, `lowering_seconds`, `backend_seconds`: the time spent
        tracing Python functions to jaxprs, lowering them to MLIR, and compiling
        (or loading from the persistent cache) the backend programs.
    - `traces`: the functions traced (top-level `jit` traces).
    - `programs`: the backend programs asked for (each compiled, or loaded).
    - `cache_hits`: those of them that came from the persistent compilation cache.
    - `loading_seconds`, `programs_loaded`: the time spent reading dynsys's kept
        programs (`_compile/kept_programs.py`), which need no tracing, lowering or backend
        compilation, and how many were read.
    """

    tracing_seconds: float = 0.0
    lowering_seconds: float = 0.0
    backend_seconds: float = 0.0
    traces: int = 0
    programs: int = 0
    cache_hits: int = 0
    loading_seconds: float = 0.0
    programs_loaded: int = 0

    def __sub__(self, other: "CompileWork") -> "CompileWork":
        return CompileWork(
            *(
                getattr(self, f.name) - getattr(other, f.name)
                for f in dataclasses.fields(self)
            )
        )

    def __add__(self, other: "CompileWork") -> "CompileWork":
        return CompileWork(
            *(
                getattr(self, f.name) + getattr(other, f.name)
                for f in dataclasses.fields(self)
            )
        )

    @property
    def compile_seconds(self) -> float:
        """Tracing, lowering, backend compilation and loading kept programs."""
        return (
            self.tracing_seconds
            + self.lowering_seconds
            + self.backend_seconds
            + self.loading_seconds
        )


# The name of the thread that compiles programs ahead of the stage that runs them.
AHEAD_THREAD = kept_programs.AHEAD_THREAD
# The process's totals since the listener was registered, on the ahead thread and
# on every other; JAX may compile on any thread, hence the lock.
_totals = CompileWork()
_ahead_totals = CompileWork()
_lock = threading.Lock()
_listening = False


def _on_ahead_thread() -> bool:
    return threading.current_thread().name == AHEAD_THREAD


def _on_duration(event: str, seconds: float, **_) -> None:
    with _lock:
        totals = _ahead_totals if _on_ahead_thread() else _totals
        if event == _TRACE_EVENT:
            totals.tracing_seconds += seconds
            totals.traces += 1
        elif event == _LOWER_EVENT:
            totals.lowering_seconds += seconds
        elif event == _BACKEND_EVENT:
            totals.backend_seconds += seconds
            totals.programs += 1
        elif event == LOAD_EVENT:  # dynsys's own: a kept program read
            totals.loading_seconds += seconds
            totals.programs_loaded += 1


def _on_event(event: str, **_) -> None:
    if event == _CACHE_HIT_EVENT:
        with _lock:
            (_ahead_totals if _on_ahead_thread() else _totals).cache_hits += 1


def compile_work_so_far(ahead: bool = False) -> CompileWork:
    """JAX's compilation work in this process since the first call (which
    registers the listener, once, and imports JAX); `ahead`: on the ahead thread
    only, else on every other."""
    global _listening
    with _lock:
        if not _listening:
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(_on_duration)
            monitoring.register_event_listener(_on_event)
            _listening = True
        return dataclasses.replace(_ahead_totals if ahead else _totals)


@dataclasses.dataclass
class _Stage:
    seconds: float = 0.0
    work: CompileWork = dataclasses.field(default_factory=CompileWork)


class StageClock:
    """Wall time and compilation work per stage of a run.

    Time not inside any named stage goes to `base` (data loading, checks, printing).
    Use `with clock.running():` around the run and `stage(name)` inside it.
    """

    def __init__(self, base: str = "other"):
        self._stack = [base]
        self._stages: dict[str, _Stage] = {}
        self._started = self._mark_time = time.perf_counter()
        self._mark_work = compile_work_so_far()
        self._ahead_at_start = compile_work_so_far(ahead=True)

    def seconds(self) -> float:
        """Wall time since the clock was made."""
        return time.perf_counter() - self._started

    def _charge(self) -> None:
        """Charge what happened since the last mark to the running stage."""
        now, work = time.perf_counter(), compile_work_so_far()
        entry = self._stages.setdefault(self._stack[-1], _Stage())
        entry.seconds += now - self._mark_time
        entry.work = entry.work + (work - self._mark_work)
        self._mark_time, self._mark_work = now, work

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the time inside to stage `name` (added up over several visits)."""
        self._charge()
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    @contextlib.contextmanager
    def running(self) -> Iterator["StageClock"]:
        """Make this the clock `stage(...)` charges, for the run inside."""
        global _current
        previous, _current = _current, self
        try:
            yield self
        finally:
            self._charge()
            _current = previous

    def ahead_as_dict(self) -> dict[str, float | int]:
        """`metrics.json["timing"]["compiled_ahead"]`: the work of the thread that
        compiled programs ahead since the clock was made, with the keys of a
        stage's entry (`as_dict`) but `seconds` (it overlapped the stages)."""
        work = compile_work_so_far(ahead=True) - self._ahead_at_start
        return {k: v for k, v in _entry(0.0, work).items() if k != "seconds"}

    def as_dict(self) -> dict[str, dict[str, float | int]]:
        """`metrics.json["timing"]["stages"]`: per stage, in the order first seen,
        `seconds` (wall), `compile_seconds` (tracing + lowering + backend +
        loading kept programs) and its four parts, `traces`, `programs_compiled`
        (backend programs compiled, not loaded), `cache_hits` (loaded from JAX's
        persistent cache) and `programs_loaded` (dynsys's kept programs read, with
        no tracing); up to now."""
        self._charge()
        return {
            name: _entry(entry.seconds, entry.work)
            for name, entry in self._stages.items()
        }


def _entry(seconds: float, work: CompileWork) -> dict[str, float | int]:
    return {
        "seconds": seconds,
        "compile_seconds": work.compile_seconds,
        "tracing_seconds": work.tracing_seconds,
        "lowering_seconds": work.lowering_seconds,
        "backend_compile_seconds": work.backend_seconds,
        "traces": work.traces,
        "programs_compiled": work.programs - work.cache_hits,
        "cache_hits": work.cache_hits,
        "loading_seconds": work.loading_seconds,
        "programs_loaded": work.programs_loaded,
    }


_current: StageClock | None = None


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Charge the time inside to stage `name` of the running clock (if any; not on
    the ahead thread, whose work overlaps the stages)."""
    if _current is None or _on_ahead_thread():
        yield
        return
    with _current.stage(name):
        yield
