"""Compile time per stage (`metrics.json["timing"]["stages"]`): the stage clock counts
JAX's own compilation events, stage by stage, and a second identical run in one
process compiles nothing in its fit stage."""

import json
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._experiments.runtime.compile_clock import stage, StageClock


# These tests count or time compilations: a program read back from the test run's
# shared compilation cache would not be counted.
pytestmark = pytest.mark.usefixtures("no_persistent_cache")


def _fresh_function():
    """A jitted function no other test has compiled (its own cache)."""

    @jax.jit
    def f(x):
        return jnp.sin(x) @ x

    return f


def test_each_stage_counts_the_programs_compiled_in_it():
    f = _fresh_function()
    clock = StageClock()
    with clock.running():
        with stage("first"):
            f(np.ones((3, 3))).block_until_ready()
        compiled_first = f._cache_size()
        with stage("again"):  # same shapes: served from jit's own cache
            f(np.ones((3, 3))).block_until_ready()
        with stage("new shape"):
            f(np.ones((4, 4))).block_until_ready()
    stages = clock.as_dict()
    # jit's own cache holds one program per shape: the reference count.
    assert compiled_first == 1 and f._cache_size() == 2
    assert stages["first"]["programs_compiled"] == 1
    assert stages["first"]["traces"] == 1
    assert stages["first"]["compile_seconds"] > 0
    assert stages["again"]["programs_compiled"] == 0
    assert stages["again"]["traces"] == 0
    assert stages["again"]["compile_seconds"] == 0.0  # no event at all
    assert stages["new shape"]["programs_compiled"] == 1
    for entry in stages.values():
        parts = ("tracing_seconds", "lowering_seconds", "backend_compile_seconds")
        assert entry["compile_seconds"] == pytest.approx(sum(entry[p] for p in parts))
        assert entry["cache_hits"] == 0  # the tests run without the persistent cache


def test_stages_are_exclusive_and_add_up_to_no_more_than_the_total():
    f = _fresh_function()
    clock = StageClock()
    with clock.running():
        with stage("outer"):
            time.sleep(0.05)
            with stage("inner"):
                f(np.ones((2, 2))).block_until_ready()
                time.sleep(0.05)
            time.sleep(0.05)
        with stage("outer"):  # a second visit adds to the first
            time.sleep(0.05)
    stages = clock.as_dict()
    total = clock.seconds()
    assert list(stages) == ["other", "outer", "inner"]
    assert stages["inner"]["programs_compiled"] == 1
    assert stages["outer"]["programs_compiled"] == 0  # the inner stage took it
    assert stages["outer"]["seconds"] >= 0.15
    assert stages["inner"]["seconds"] >= 0.05
    assert sum(entry["seconds"] for entry in stages.values()) <= total


def test_stage_outside_a_running_clock_only_runs_its_body():
    x = jnp.arange(4.0).reshape(2, 2)
    with stage("nowhere"):
        value = _fresh_function()(x)
    np.testing.assert_allclose(value, np.sin(np.asarray(x)) @ np.asarray(x))
    assert "nowhere" not in StageClock().as_dict()


def test_a_failing_stage_is_charged_and_left():
    clock = StageClock()
    with clock.running():
        with pytest.raises(ValueError, match="inside"), stage("failing"):
            raise ValueError("inside")
        with stage("after"):
            pass
    assert list(clock.as_dict()) == ["other", "failing", "after"]


# The states path of `fit` (least squares, then the free-run fit): small and quick.
_FIT = {
    "kind": "fit",
    "name": "clock",
    "seed": 5,
    "data": {"trajectories": 3, "length": 12},
    "fit": {"steps": 4, "lr": 1e-2},
}


def test_a_second_identical_run_compiles_nothing_in_its_fit_stage(tmp_path):
    eqx.clear_caches()  # whatever ran before in this process compiled nothing here
    jax.clear_caches()
    runs = [
        dynsys.run_experiment(_FIT, out_root=tmp_path, progress=False, echo=None).path
        for _ in range(2)
    ]
    first, second = (
        json.loads((path / "metrics.json").read_text())["timing"] for path in runs
    )
    assert first["stages"]["fit"]["programs_compiled"] > 0
    assert first["stages"]["fit"]["traces"] > 0
    assert second["stages"]["fit"]["programs_compiled"] == 0
    assert second["stages"]["fit"]["traces"] == 0
    assert second["stages"]["fit"]["compile_seconds"] == 0.0
    for timing in (first, second):
        assert {"data", "fit", "figures", "writing"} <= set(timing["stages"])
        seconds = sum(entry["seconds"] for entry in timing["stages"].values())
        assert seconds <= timing["total_seconds"]
        assert timing["fit_seconds"] >= timing["stages"]["fit"]["seconds"]
    summary = (runs[0] / "summary.md").read_text()
    line = next(line for line in summary.splitlines() if line.startswith("Time: "))
    assert "fit " in line and "(compiling " in line
