"""A fit continued from a shorter one (`fit(resume=...)`, `_fitting/continuation.py`)
against one fit of the longer length, run afresh: the same steps, histories and
model, to the last digit; and the `fit` experiment continuing its structure
scan's refinement with the metrics of a run that does not."""

import json

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys
from dynsys._fitting import continuation, train
from dynsys._fitting.solvers import LossFunction, OptaxSolver

from ..sysid.test_order import _data, _modal_system


def _record(seed=0, num_steps=240):
    rng = np.random.default_rng(seed)
    system = dynsys.LinearSystem(
        K=np.array([[0.95, 0.2, 0.0], [-0.2, 0.95, 0.0], [0.0, 0.0, 0.6]]),
        B=rng.standard_normal((3, 1)),
        C=rng.standard_normal((2, 3)),
    )
    us = rng.standard_normal((1, num_steps, 1))
    ys = np.asarray(dynsys.rollout(system, np.zeros((1, 3)), num_steps, inputs=us).ys)
    ys = ys + 0.05 * rng.standard_normal(ys.shape)
    return dynsys.Dataset(us=us, ys=ys).split_time(1 / 3, min_samples=4)


@pytest.fixture(scope="module")
def problem():
    train_data, val = _record()
    start = dynsys.fit_subspace(train_data, 2)  # too small: LM keeps improving
    return start, train_data, val


def _same_fit(a, b):
    np.testing.assert_array_equal(a.losses, b.losses)
    assert a.val_losses == b.val_losses
    assert (a.best_step, a.steps_run, a.stop_reason, a.converged) == (
        b.best_step,
        b.steps_run,
        b.stop_reason,
        b.converged,
    )
    for name in ("K", "B", "C"):
        np.testing.assert_array_equal(getattr(a.model, name), getattr(b.model, name))
    assert a.metrics == b.metrics


def test_a_continued_fit_is_one_fit_of_the_longer_length(problem, monkeypatch):
    start, train_data, val = problem
    short = dynsys.fit(start, train_data, val_data=val, num_steps=10, progress=False)
    assert short.steps_run == 10 and not short.converged
    first_steps = []
    dispatch = train._dispatch

    def counted(loop, k, num_steps):
        first_steps.append(k)
        return dispatch(loop, k, num_steps)

    monkeypatch.setattr(train, "_dispatch", counted)
    continued = dynsys.fit(
        start, train_data, val_data=val, num_steps=60, progress=False, resume=short
    )
    assert first_steps[0] == 10  # the first 10 steps were not run again
    monkeypatch.setattr(train, "_dispatch", dispatch)
    fresh = dynsys.fit(start, train_data, val_data=val, num_steps=60, progress=False)
    assert fresh.steps_run > 10
    _same_fit(continued, fresh)
    # The shorter result is left as it was: steps 0-9 evaluated in the chunk, the
    # model after the last step (10) on the host.
    assert short.steps_run == 10 and [s for s, _ in short.val_losses] == list(range(11))


def test_resume_of_another_problem_is_refused(problem):
    start, train_data, val = problem
    short = dynsys.fit(start, train_data, val_data=val, num_steps=10, progress=False)
    other = dynsys.fit_subspace(train_data, 3)
    with pytest.raises(ValueError, match=r"^fit\(resume=...\): the earlier run was"):
        dynsys.fit(other, train_data, val_data=val, num_steps=20, resume=short)
    with pytest.raises(ValueError, match=r"^fit\(resume=...\): the earlier run was"):
        dynsys.fit(start, train_data, num_steps=20, resume=short)  # no val_data
    with pytest.raises(ValueError, match=r"took 10 steps, more than 5"):
        dynsys.fit(start, train_data, val_data=val, num_steps=5, resume=short)
    with pytest.raises(ValueError, match=r"^fit\(resume=...\): expected the FitResult"):
        dynsys.fit(start, train_data, num_steps=20, resume=short.train_result)
    stopped = dynsys.fit(
        start,
        train_data,
        val_data=val,
        num_steps=10,
        progress=False,
        callback=lambda step, model, loss: None,
    )
    assert stopped.train_result.continuation is None
    with pytest.raises(continuation.NotResumable, match="got FitResult without one"):
        dynsys.fit(start, train_data, val_data=val, num_steps=20, resume=stopped)


def _distance(p):
    return ((p - np.array([1.0, -2.0, 0.5])) ** 2).sum() ** 0.5


def _optimise(num_steps, resume=None):
    return train.optimise(
        LossFunction(_distance, False),
        OptaxSolver(optax.sgd(0.01), "sgd"),
        np.zeros(3, np.float32),
        data=None,
        num_steps=num_steps,
        progress=False,
        chunk=4,
        resume=resume,
    )


def test_only_a_run_ended_at_a_chunk_boundary_is_continued():
    """Without evaluations the chunks set when the flat-loss test runs: a run cut
    inside a chunk would continue on another pattern, so it has no continuation."""
    assert _optimise(6).continuation is None
    short = _optimise(8)
    continued, fresh = _optimise(20, short.continuation), _optimise(20)
    np.testing.assert_array_equal(continued.losses, fresh.losses)
    np.testing.assert_array_equal(continued.model, fresh.model)
    assert (continued.best_step, continued.best_loss) == (
        fresh.best_step,
        fresh.best_loss,
    )


def test_same_compares_structure_and_values():
    a = {"x": np.arange(3.0), "s": "a"}
    assert continuation.same(a, {"x": np.arange(3.0), "s": "a"})
    assert not continuation.same(a, {"x": np.arange(3.0) + 1e-12, "s": "a"})
    assert not continuation.same(a, {"x": np.arange(3.0, dtype=np.float32), "s": "a"})
    assert not continuation.same(a, {"x": np.arange(3.0), "s": "b"})
    assert not continuation.same(a, {"x": np.arange(3.0)})


def test_arrays_this_process_cannot_read_whole_are_not_compared(monkeypatch):
    """A global array of a run of several processes is never read on the host: it
    is the same only as itself."""
    x = jnp.arange(3.0)
    monkeypatch.setattr(continuation, "_addressable", lambda array: False)
    assert continuation.same({"x": x}, {"x": x})
    assert not continuation.same({"x": x}, {"x": jnp.arange(3.0)})


@pytest.mark.slow
def test_the_fit_experiment_continues_its_scan(tmp_path, monkeypatch):
    """`dynsys fit` with the structure left to the scan continues the chosen
    start's refinement (its 30 steps, or fewer where it converged) and reports
    the metrics of a run that fits afresh."""
    from dynsys import cli

    system = _modal_system([(0.35, 0.015), (1.2, 0.025), (0.7, 0.4)])
    record = _data(system, 600, 1)  # the scan chooses a refined order 6
    data = dynsys.Dataset(
        us=record.us, ys=record.ys, input_names=["u"], output_names=["y1", "y2"]
    )
    path = tmp_path / "record.csv"
    data.save(path)
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y1,y2", "--no-progress"]

    def metrics(out):
        assert cli.main([*argv, "--out", str(tmp_path / out)]) == 0
        return json.loads((tmp_path / out / "metrics.json").read_text())

    continued = metrics("continued")
    monkeypatch.setattr(train, "same", lambda a, b: False)  # never resumed
    fresh = metrics("fresh")
    assert 0 < continued["steps_continued"] <= 30
    assert fresh["steps_continued"] == 0
    for key in ("K", "B", "C", "D", "fit_percent", "steps_run", "best_step"):
        assert continued[key] == fresh[key], key
    assert continued["fit_metrics"] == fresh["fit_metrics"]
