"""Programs compiled ahead on another thread (`kept_programs.compiling_ahead`,
`_experiments/fit/ahead.py`): the repeated program is compiled and held, not run,
and the later call runs it without compiling; other programs run as usual; the
thread's compilation is counted apart from the stages."""

import math
import threading

import jax
import jax.numpy as jnp
import pytest

from dynsys._compile import kept_programs as _kept_programs, program_key as _program_key
from dynsys._experiments.runtime import compile_clock

from ..compile_count import compiled_programs


_ROOT = __name__.split(".")[0]

pytestmark = pytest.mark.usefixtures("no_persistent_cache")


def _cumulative(x):
    return jnp.cumsum(x * 3.0 + 1.0)


def _sorted(x):
    return jnp.sort(x)[::-1]


@pytest.fixture
def kept(tmp_path, monkeypatch):
    folder = tmp_path / "programs"
    monkeypatch.setattr(_kept_programs, "_folder", lambda: folder)
    monkeypatch.setattr(
        _program_key, "_NAMED_ROOTS", _program_key._NAMED_ROOTS | {_ROOT}
    )
    return folder


def _computation(repeated, other, x):
    """What a fit does: a program that runs (`other`), then the repeated one."""
    return repeated(other(x))


def test_the_repeated_program_is_compiled_ahead_and_then_runs_without_compiling(
    kept,
):
    repeated = _kept_programs.KeptProgram(_cumulative, {}, repeated=True)
    other = _kept_programs.KeptProgram(_sorted, {})
    x = jnp.arange(5.0)
    with compiled_programs() as ahead, _kept_programs.compiling_ahead():
        with pytest.raises(_kept_programs.CompiledAhead):
            _computation(repeated, other, x)
    assert sum(ahead.values()) >= 2, ahead  # both compiled: `other` ran
    assert len(list(kept.glob("*.program"))) == 2  # and both kept
    with compiled_programs() as later:
        result = _computation(repeated, other, x)
    assert sum(later.values()) == 0, later
    assert jnp.array_equal(result, _cumulative(_sorted(x)))


def test_a_program_kept_by_an_earlier_run_is_loaded_ahead(kept):
    x = jnp.arange(4.0)
    _kept_programs.KeptProgram(_cumulative, {}, repeated=True)(x)  # an earlier run
    repeated = _kept_programs.KeptProgram(_cumulative, {}, repeated=True)
    with compiled_programs() as ahead, _kept_programs.compiling_ahead():
        with pytest.raises(_kept_programs.CompiledAhead):
            repeated(x)
    assert sum(ahead.values()) == 0, ahead
    with compiled_programs() as later:
        result = repeated(x)
    assert sum(later.values()) == 0, later
    assert jnp.array_equal(result, _cumulative(x))


def test_without_a_folder_nothing_is_compiled_ahead(monkeypatch):
    monkeypatch.setattr(_kept_programs, "_folder", lambda: None)
    repeated = _kept_programs.KeptProgram(_cumulative, {}, repeated=True)
    x = jnp.arange(3.0)
    with compiled_programs() as ahead, _kept_programs.compiling_ahead():
        with pytest.raises(_kept_programs.CompiledAhead):
            repeated(x)
    assert sum(ahead.values()) == 0, ahead
    assert jnp.array_equal(repeated(x), _cumulative(x))


def test_jaxs_cache_setting_is_restored_when_two_threads_compile_at_once():
    name = "jax_persistent_cache_min_compile_time_secs"
    before = getattr(jax.config, name)
    inside = threading.Event()
    leave = threading.Event()

    def hold():
        with _kept_programs._outside_jax_cache():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(10)
    with _kept_programs._outside_jax_cache():  # entered second, left first
        assert math.isinf(getattr(jax.config, name))
    assert math.isinf(getattr(jax.config, name))  # the thread still compiles
    leave.set()
    thread.join(10)
    assert getattr(jax.config, name) == before


def test_the_ahead_threads_compilation_is_counted_apart_from_the_stages():
    clock = compile_clock.StageClock()

    def compile_one(size):
        shape = jax.ShapeDtypeStruct((size,), jnp.float32)
        jax.jit(lambda v: jnp.cumsum(v) * 5.0).lower(shape).compile()

    def ahead():
        with compile_clock.stage("refit"):  # nothing on the ahead thread
            compile_one(13)

    with clock.running():
        with compile_clock.stage("scan"):
            thread = threading.Thread(target=ahead, name=compile_clock.AHEAD_THREAD)
            thread.start()
            thread.join(60)
        with compile_clock.stage("refit"):
            compile_one(17)
    stages, ahead = clock.as_dict(), clock.ahead_as_dict()
    assert ahead["programs_compiled"] == 1 and ahead["traces"] == 1, ahead
    assert stages["scan"]["programs_compiled"] == 0, stages
    assert stages["refit"]["programs_compiled"] == 1, stages
    assert "seconds" not in ahead
    assert set(ahead) == set(stages["refit"]) - {"seconds"}


@pytest.fixture
def spare_core(monkeypatch):
    from dynsys._sysid import refine_ahead

    monkeypatch.setattr(refine_ahead, "_cores", lambda: 2)
    return refine_ahead


def test_later_candidates_are_compiled_ahead_and_then_run_without_compiling(
    kept, spare_core
):
    # `CandidatesAhead` (the structure scan's unpadded candidates): a thread sets
    # up candidates 1 and 2, each compiling its own repeated program (another
    # shape each) and running the other program; candidate 0 is not its business.
    repeated = _kept_programs.KeptProgram(_cumulative, {}, repeated=True)
    other = _kept_programs.KeptProgram(_sorted, {})
    inputs = {i: jnp.arange(float(3 + i)) for i in range(3)}
    with compiled_programs() as counted:
        ahead = spare_core.CandidatesAhead(
            lambda i: _computation(repeated, other, inputs[i]), [1, 2]
        )
        ahead.wait(0)  # at once: not one of the thread's
        ahead.wait(2)
        ahead.join()
    # Two shapes, each a repeated and another program, compiled on the thread.
    assert sum(counted.values()) == 4, counted
    with compiled_programs() as later:
        results = [_computation(repeated, other, inputs[i]) for i in (1, 2)]
    assert sum(later.values()) == 0, later
    for i, result in zip((1, 2), results):
        assert jnp.array_equal(result, _cumulative(_sorted(inputs[i])))


def test_the_candidates_thread_stops_after_the_one_it_is_setting_up(kept, spare_core):
    started, release, calls = threading.Event(), threading.Event(), []

    def set_up(i):
        calls.append(i)
        started.set()
        release.wait(10)

    ahead = spare_core.CandidatesAhead(set_up, [1, 2, 3])
    assert started.wait(10)
    stopper = threading.Thread(target=ahead.join)
    stopper.start()  # `join` stops the thread; it waits for the current set-up
    release.set()
    stopper.join(10)
    assert calls == [1]
    ahead.wait(3)  # set, though never set up: a candidate compiles on its own


def test_no_thread_without_a_folder_or_a_spare_core(monkeypatch, spare_core):
    monkeypatch.setattr(_kept_programs, "_folder", lambda: None)
    calls = []
    spare_core.CandidatesAhead(calls.append, [1, 2]).join()
    assert calls == []


def test_a_scan_with_candidates_compiled_ahead_chooses_as_one_without(
    kept, spare_core, monkeypatch
):
    # The scan's refined candidates unpadded (`worth_padding` false): the second
    # and third are compiled on the thread; rows, models and the choice are those
    # of the scan without it, to the last digit.
    import dynsys
    from dynsys._fitting import padded

    monkeypatch.setattr(padded, "worth_padding", lambda *args, **kwargs: False)
    K = jnp.array([[0.8, 0.2, 0.0], [-0.2, 0.8, 0.1], [0.0, 0.0, 0.5]])
    model = dynsys.LinearSystem(K, B=jnp.ones((3, 1)), C=jnp.array([[1.0, 0.0, 1.0]]))
    us = jax.random.normal(jax.random.key(0), (1, 260, 1))
    ys = dynsys.rollout(model, jnp.zeros((1, 3)), 260, inputs=us).ys
    ys = ys + 0.02 * jax.random.normal(jax.random.key(1), ys.shape)
    data = dynsys.Dataset(ys=ys[:, :180], us=us[:, :180])
    val = dynsys.Dataset(ys=ys[:, 180:], us=us[:, 180:])
    options = dict(method="fit", val_data=val, refine=3, fit_options={"num_steps": 5})

    clock = compile_clock.StageClock()
    with clock.running():
        with_thread = dynsys.select_order(data, range(1, 5), **options)
    assert clock.ahead_as_dict()["programs_compiled"] >= 2
    monkeypatch.setattr(spare_core, "_cores", lambda: 1)
    without = dynsys.select_order(data, range(1, 5), **options)

    def scores(selection):  # the table without the candidates' times
        rows = selection.table()
        return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]

    assert scores(with_thread) == scores(without)
    assert any(row["refined"] for row in scores(without))
    assert (with_thread.order, with_thread.feedthrough) == (
        without.order,
        without.feedthrough,
    )
    assert jnp.array_equal(with_thread.model.K, without.model.K)
