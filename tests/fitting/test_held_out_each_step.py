"""The held-out loss of every Levenberg–Marquardt step, evaluated inside the chunk
(`chunk.HeldOutEachStep`): its values against the host's evaluation of each step's
model, and its stop against the rule applied in plain Python to a run that does
not stop."""

import pathlib

import numpy as np
import pytest

import dynsys
from dynsys._fitting import fit as fit_module
from dynsys._fitting.flat_loss import HELD_OUT_RESOLUTION, HELD_OUT_STEPS


HEATING = pathlib.Path(__file__).parents[2] / "data" / "real" / "heating.csv"


@pytest.fixture(scope="module")
def heating():
    """heating.csv as received: estimation on the first two thirds, the last third
    held out, the estimation data's levels removed from both."""
    data = dynsys.load_dataset(HEATING, inputs=["drive_V"], outputs=["temp_C"])
    train, val = data.split_time(1 / 3)
    levels_u = np.mean(np.asarray(train.us), axis=(0, 1))
    levels_y = np.mean(np.asarray(train.ys), axis=(0, 1))

    def centred(d):
        us, ys = np.asarray(d.us) - levels_u, np.asarray(d.ys) - levels_y
        return dynsys.Dataset(us=us, ys=ys)

    train, val = centred(train), centred(val)
    return dynsys.fit_subspace(train, 7, feedthrough=True), train, val


def _on_the_host(monkeypatch):
    """`fit` with its held-out loss evaluated on the host after every step (the
    `_predictions` program of the final metrics) and no patience."""
    optimise = fit_module.optimise

    def host(*args, **kwargs):
        kwargs.update(evaluate_each_step=False, eval_every=1, patience=None)
        if kwargs["evaluator"] is not None and hasattr(kwargs["evaluator"], "batch"):
            objective, batch = kwargs["evaluator"].objective, kwargs["evaluator"].batch
            kwargs["evaluator"] = fit_module._ValidationLoss(objective, batch)
        return optimise(*args, **kwargs)

    monkeypatch.setattr(fit_module, "optimise", host)


def test_each_steps_held_out_loss_is_the_hosts_evaluation_of_its_model(
    heating, monkeypatch
):
    start, train, val = heating
    in_chunk = dynsys.fit(start, train, val_data=val, num_steps=15, progress=False)
    _on_the_host(monkeypatch)
    host = dynsys.fit(start, train, val_data=val, num_steps=15, progress=False)
    # Steps 0-14 in the chunk, the model after the last step (15) on the host.
    assert [s for s, _ in in_chunk.val_losses] == list(range(16))
    assert [s for s, _ in host.val_losses] == list(range(16))
    host_values = [v for _, v in host.val_losses]
    np.testing.assert_allclose(
        [v for _, v in in_chunk.val_losses], host_values, rtol=1e-9
    )
    np.testing.assert_allclose(in_chunk.losses, host.losses, rtol=1e-9)
    best = int(np.argmin(host_values))
    assert in_chunk.best_step == best
    np.testing.assert_allclose(in_chunk.model.K, host.model.K, rtol=1e-7)


def _stop_of_the_rule(values, patience, resolution):
    """`(stop step, best step)`: the first step `k` at which the held-out loss has
    not fallen below `(1 - resolution)` times its last such fall's value for
    `patience` steps, and the step of the lowest value up to `k`."""
    reference, reference_step = np.inf, -1
    for k, value in enumerate(values):
        if value < reference * (1 - resolution):
            reference, reference_step = value, k
        if reference_step >= 0 and k - reference_step >= patience:
            return k, int(np.argmin(values[: k + 1]))
    return None, int(np.argmin(values))


def test_the_run_stops_where_the_rule_says_on_a_run_that_does_not_stop(
    heating, monkeypatch
):
    """On heating at order 7 with `D` the held-out loss falls for about 18 steps,
    then rises while the training loss goes on falling: the run stops 20 steps
    after the held-out loss last fell by 0.1 %, with the model of its lowest value
    (the rule applied to the held-out losses of a 120-step run that does not
    stop)."""
    start, train, val = heating
    stopped = dynsys.fit(start, train, val_data=val, num_steps=120, progress=False)
    _on_the_host(monkeypatch)
    full = dynsys.fit(start, train, val_data=val, num_steps=120, progress=False)
    values = np.array([v for s, v in full.val_losses if s < full.steps_run])
    stop, best = _stop_of_the_rule(values, HELD_OUT_STEPS, HELD_OUT_RESOLUTION)
    assert stop is not None and stop < 100, (stop, best)
    assert stopped.steps_run == stop + 1
    assert stopped.best_step == best
    assert stopped.stop_reason.startswith(
        f"held-out loss not improved by more than 0.1% for {HELD_OUT_STEPS} steps "
        f"(best at step {best})"
    )
    np.testing.assert_allclose(stopped.losses, full.losses[: stop + 1], rtol=1e-9)
