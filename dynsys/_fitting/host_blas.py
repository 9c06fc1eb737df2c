"""One OpenBLAS thread for NumPy's linear algebra on small host problems
(`one_blas_thread`, and `on_one_blas_thread` for the entry points).

NumPy's OpenBLAS splits a matrix product or an SVD of a few hundred rows over all
its threads, and each call waits for the slowest. Beside XLA's own thread pool,
or on a shared machine, a thread that is not scheduled stalls the call: the SVD
of the 534 x 66 residual Jacobian of a `dynsys fit` run took 0.01-0.9 s after
JAX had started (2 ms on one thread). The covariance and the bands
(`covariance.py`, `linear_sensitivity.py`) do their arithmetic inside
`one_blas_thread`, which sets the count back on leaving: a library leaves its
user's process as it found it.

The same stall multiplies across a whole identification: on a 2-core machine with
other work running, `dynsys fit glass_furnace.csv` spent 56-85 s in its subspace
stage with OpenBLAS's default threads and 7-8 s on one (each least-squares solve of
a few thousand rows by 54 columns took 0.5-0.8 s instead of 25 ms). The entry
points that do host linear algebra (the command, `identify`, `fit_subspace`,
`select_order`, `compare`, ...) therefore run inside it (`on_one_blas_thread`).
"""

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar


_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


# The names OpenBLAS builds export its thread count under.
_SYMBOLS = (
    ("openblas_get_num_threads", "openblas_set_num_threads"),
    ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
)


def _loaded_openblas() -> tuple[str, ...]:
    """The paths of the OpenBLAS libraries loaded in this process (from
    `/proc/self/maps`; none where there is no such file)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return ()
    return tuple(sorted(p for p in paths if os.path.isabs(p)))


@functools.cache
def _controls(path: str) -> tuple | None:
    """`(get, set)` of the thread count of the library at `path`, or `None`."""
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return None
    for get, set_ in _SYMBOLS:
        if hasattr(library, get) and hasattr(library, set_):
            getter, setter = getattr(library, get), getattr(library, set_)
            getter.restype = ctypes.c_int
            setter.argtypes = [ctypes.c_int]
            return getter, setter
    return None


# Threads inside `one_blas_thread` and the counts to restore when the last leaves.
_lock = threading.Lock()
_inside = 0
_restore: list = []


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Inside, each loaded OpenBLAS runs on one thread; the counts it had are
    restored when the last thread inside leaves (so that threads entering
    together never restore one another's 1). Nothing changes where none is
    loaded or NumPy's BLAS is another."""
    global _inside
    with _lock:
        if _inside == 0:
            controls = [c for c in map(_controls, _loaded_openblas()) if c]
            _restore[:] = [(set_, get()) for get, set_ in controls]
            for set_, _ in _restore:
                set_(1)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                for set_, count in _restore:
                    set_(count)
                _restore.clear()


def on_one_blas_thread(
    function: Callable[_Params, _Result],
) -> Callable[_Params, _Result]:
    """`function`, run inside `one_blas_thread` (for an entry point whose host
    linear algebra is many small problems)."""

    @functools.wraps(function)
    def on_one_thread(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        with one_blas_thread():
            return function(*args, **kwargs)

    return on_one_thread
