"""`SweepConfig`: the `[sweep]` table as a typed, frozen config whose fields are the
arguments of the calls a sweep makes: `run_experiment(config, overrides=...)` per
run and `plot.sweep(...)` for its figure (issue 49, item 3)."""

import dataclasses
import inspect
import types

import numpy as np
import pytest

import dynsys
from dynsys._experiments.config import expand_sweep
from dynsys._experiments.sweep import SweepConfig


def _raw(**sweep):
    return {
        "kind": "fit",
        "description": "noise sweep",
        "data": {"trajectories": 2, "length": 10},
        "sweep": {"key": "data.measurement_noise", "values": [0.0, 0.1, 0.2], **sweep},
    }


def test_every_field_is_an_argument_of_the_call_it_feeds():
    sweep = SweepConfig.from_config(dynsys.resolve_config(_raw(seeds=[1, 2])))
    fields = {field.name for field in dataclasses.fields(SweepConfig)}
    plotted = set(inspect.signature(dynsys.plot.sweep).parameters)
    runs = [types.SimpleNamespace(metrics={"summary": {"a": 1.0}})] * 6
    assert set(sweep.figure_arguments(runs)) <= plotted
    # Each field feeds plot.sweep under its own name, or a run's overrides
    # (`seeds`: the config key `seed`, which run_experiment(overrides=) takes).
    assert fields - plotted == {"seeds"}
    assert {"seed", sweep.key} == set(sweep.overrides()[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        sweep.key = "fit.steps"  # type: ignore[misc]


@pytest.mark.parametrize("seeds", [None, [3, 5]])
def test_the_overrides_give_the_runs_of_the_config(seeds):
    raw = _raw() if seeds is None else _raw(seeds=seeds)
    sweep = SweepConfig.from_config(dynsys.resolve_config(raw))
    base = {key: value for key, value in raw.items() if key != "sweep"}
    expected = [single for _, single in expand_sweep(dynsys.resolve_config(raw))]
    got = [dynsys.resolve_config(base, overrides) for overrides in sweep.overrides()]
    assert got == expected
    assert len(got) == 3 * (1 if seeds is None else len(seeds))


def test_the_figure_gets_the_complete_values_and_a_row_per_seed():
    sweep = SweepConfig.from_config(dynsys.resolve_config(_raw(seeds=[1, 2])))
    assert sweep.xlabel.endswith("[data.measurement_noise]")
    assert sweep.title == "noise sweep" and sweep.per_value == 2
    scores = [10.0, 11.0, 20.0, 21.0, 30.0]  # the last value's second seed not run
    runs = [types.SimpleNamespace(metrics={"summary": {"fit": s}}) for s in scores]
    arguments = sweep.figure_arguments(runs)
    assert arguments["values"] == [0.0, 0.1]
    # (seeds, values): seed k of value v is run 2 v + k.
    np.testing.assert_array_equal(arguments["metrics"]["fit"], [[10, 20], [11, 21]])
    plain = SweepConfig.from_config(dynsys.resolve_config(_raw()))
    assert plain.figure_arguments(runs[:2])["metrics"]["fit"] == [10.0, 11.0]
    assert plain.overrides() == [{"data.measurement_noise": v} for v in (0, 0.1, 0.2)]
