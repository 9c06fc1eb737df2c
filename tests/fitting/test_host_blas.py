"""One OpenBLAS thread for the host linear algebra of the entry points
(`dynsys/_fitting/host_blas.py`): set inside, the user's count restored after,
threads entering together never restoring one another's 1."""

import threading

import numpy as np
import pytest

import dynsys
from dynsys._fitting.host_blas import (
    _controls,
    _loaded_openblas,
    on_one_blas_thread,
    one_blas_thread,
)
from dynsys._sysid import input_matrices


@pytest.fixture
def controls():
    """The loaded OpenBLAS's `(get, set)` pairs, each set to 3 threads for the
    test (so that "restored" differs from "one", whatever the environment set)
    and set back after it."""
    found = [c for c in map(_controls, _loaded_openblas()) if c is not None]
    if not found:
        pytest.skip("NumPy's BLAS here is not an OpenBLAS with a thread control")
    before = [get() for get, _ in found]
    for _, set_ in found:
        set_(3)
    yield found
    for (_, set_), count in zip(found, before):
        set_(count)


def _counts(controls):
    return [get() for get, _ in controls]


def test_one_blas_thread_sets_and_restores_the_count(controls):
    assert _counts(controls) == [3] * len(controls)
    inner_left = threading.Event()

    def inner():  # enters inside the outer block and leaves before it
        with one_blas_thread():
            assert _counts(controls) == [1] * len(controls)
        inner_left.set()

    with one_blas_thread():
        assert _counts(controls) == [1] * len(controls)
        worker = threading.Thread(target=inner)
        worker.start()
        worker.join()
        assert inner_left.is_set()
        assert _counts(controls) == [1] * len(controls)
    assert _counts(controls) == [3] * len(controls)


def test_a_decorated_function_runs_on_one_thread_and_keeps_its_name(controls):
    @on_one_blas_thread
    def counts_inside(x, *, scale=1):
        """Doc."""
        return _counts(controls), x * scale

    seen, value = counts_inside(2, scale=3)
    assert seen == [1] * len(controls) and value == 6
    assert counts_inside.__name__ == "counts_inside"
    assert counts_inside.__doc__ == "Doc."
    assert _counts(controls) == [3] * len(controls)
    with pytest.raises(ZeroDivisionError):  # restored when it raises, too
        on_one_blas_thread(lambda: 1 / 0)()
    assert _counts(controls) == [3] * len(controls)


def test_the_subspace_start_solves_its_least_squares_on_one_thread(
    controls, monkeypatch
):
    """`fit_subspace`'s input matrices (the solve that took 0.5-0.8 s instead of
    25 ms on a loaded machine) run with one thread, and the count is back after."""
    seen = []
    solve = input_matrices._projected_least_squares

    def recording(*args):
        seen.append(_counts(controls))
        return solve(*args)

    monkeypatch.setattr(input_matrices, "_projected_least_squares", recording)
    rng = np.random.default_rng(0)
    u = rng.standard_normal((1, 200, 1))
    y = np.zeros((1, 200, 1))
    for t in range(1, 200):
        y[0, t] = 0.8 * y[0, t - 1] + u[0, t - 1]
    dynsys.fit_subspace(dynsys.Dataset(us=u, ys=y), 1)
    assert seen and all(c == [1] * len(controls) for c in seen)
    assert _counts(controls) == [3] * len(controls)
