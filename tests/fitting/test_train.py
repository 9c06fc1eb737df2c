"""The generic training loop `dynsys.train`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys
from dynsys._fitting.batches import _batch_indices


def test_converges_to_closed_form_minimum():
    target = jnp.array([3.0, -1.0])
    result = dynsys.train(
        lambda m: jnp.sum((m - target) ** 2),
        jnp.zeros(2),
        solver=optax.adam(0.1),
        num_steps=300,
        progress=False,
    )
    np.testing.assert_allclose(result.model, target, atol=1e-3)
    assert result.steps_run == 300 and result.stop_reason is None
    assert result.losses.shape == (300,)
    # losses[k] is the loss of the model before update k.
    np.testing.assert_allclose(result.losses[0], 10.0)


def test_matches_hand_written_sgd_loop():
    """Plain SGD through `train` equals the update rule written out in NumPy."""
    lr, steps = 0.1, 20
    result = dynsys.train(
        lambda m: jnp.sum(m**2) + jnp.sum(m),
        jnp.array([1.0, 2.0]),
        solver=optax.sgd(lr),
        num_steps=steps,
        progress=False,
    )
    m = np.array([1.0, 2.0])
    expected = []
    for _ in range(steps):
        expected.append(np.sum(m**2) + np.sum(m))
        m = m - lr * (2 * m + 1)
    np.testing.assert_allclose(result.losses, expected, rtol=1e-12)
    np.testing.assert_allclose(result.final_model, m, rtol=1e-12)


def test_no_retracing_over_minibatched_run():
    traces = {"count": 0}
    data = {"x": jnp.linspace(0.0, 1.0, 20), "y": 3.0 * jnp.linspace(0.0, 1.0, 20)}

    def loss_fn(model, batch):
        traces["count"] += 1  # Python side effect: runs once per trace
        return jnp.mean((model["a"] * batch["x"] + model["b"] - batch["y"]) ** 2)

    # A weakly typed scalar leaf would retrace once if the loop let its type change.
    model = {"a": jnp.asarray(0.0), "b": jnp.asarray(0.5)}
    assert model["a"].weak_type
    result = dynsys.train(
        loss_fn,
        model,
        data=data,
        batch_size=4,
        num_steps=40,
        eval_every=5,
        key=jax.random.key(1),
        progress=False,
    )
    assert result.steps_run == 40
    # One trace for the jitted step, one for the full-data evaluation, whatever
    # the number of steps.
    assert traces["count"] == 2
    # The full-data loss chose the best model (steps 0, 5, ..., 35, then 40).
    assert [s for s, _ in result.full_losses] == list(range(0, 40, 5)) + [40]


def test_no_retracing_without_data():
    @eqx.debug.assert_max_traces(max_traces=1)
    def loss_fn(model):
        return jnp.sum((model - 2.0) ** 2)

    dynsys.train(loss_fn, jnp.asarray(0.0), num_steps=25, progress=False)


def test_nan_guard_stops_at_known_step_and_returns_best():
    # SGD with learning rate 1 on loss = m moves m to -k at step k exactly; the loss
    # becomes NaN once m < -4.5, i.e. at step 5.
    def loss_fn(m):
        return m + jnp.where(m < -4.5, jnp.nan, 0.0)

    with pytest.warns(UserWarning, match="non-finite loss at step 5"):
        result = dynsys.train(
            loss_fn,
            jnp.array(0.0),
            solver=optax.sgd(1.0),
            num_steps=50,
            progress=False,
        )
    assert result.steps_run == 6
    np.testing.assert_array_equal(result.losses[:5], [0.0, -1.0, -2.0, -3.0, -4.0])
    assert np.isnan(result.losses[5])
    assert result.best_step == 4 and result.best_loss == -4.0
    assert float(result.model) == -4.0
    assert float(result.final_model) == -5.0  # not updated by the NaN step
    assert "step 5" in result.stop_reason


def test_nan_guard_on_gradient():
    # loss = -m is finite everywhere, but 0 * sqrt(|m - 3|) has a NaN gradient
    # (0 * inf) at m = 3, reached at step 3 by SGD with rate 1.
    def loss_fn(m):
        return -m + 0.0 * jnp.sqrt(jnp.abs(m - 3.0))

    with pytest.warns(UserWarning, match="non-finite gradient at step 3"):
        result = dynsys.train(
            loss_fn,
            jnp.array(0.0),
            solver=optax.sgd(1.0),
            num_steps=10,
            progress=False,
        )
    assert result.steps_run == 4
    # The model at step 3 has a finite loss: it is the best one, and it is kept.
    assert result.best_step == 3 and float(result.model) == 3.0
    assert float(result.final_model) == 3.0


def test_nan_at_first_step_returns_initial_model():
    with pytest.warns(UserWarning, match="non-finite loss at step 0"):
        result = dynsys.train(
            lambda m: jnp.sum(m) * jnp.nan, jnp.ones(2), num_steps=5, progress=False
        )
    assert result.best_step == 0 and result.steps_run == 1
    np.testing.assert_array_equal(result.model, jnp.ones(2))


def test_minibatches_reproducible_and_as_documented():
    n, batch_size, steps, lr = 10, 3, 12, 0.05
    data = jnp.arange(n, dtype=float)

    def run(key):
        return dynsys.train(
            lambda m, batch: jnp.mean((m - batch) ** 2),
            jnp.array(0.0),
            data=data,
            batch_size=batch_size,
            solver=optax.sgd(lr),
            num_steps=steps,
            key=key,
            progress=False,
        )

    a, b, c = run(jax.random.key(7)), run(jax.random.key(7)), run(jax.random.key(8))
    np.testing.assert_array_equal(a.losses, b.losses)
    assert not np.array_equal(a.losses, c.losses)

    # Independent replay: the batches are those of _batch_indices, which are shuffled
    # epochs (3 batches of 3 per epoch, the 10th sample dropped each epoch).
    indices = _batch_indices(jax.random.key(7), n, batch_size, steps)
    assert indices.shape == (steps, batch_size)
    for epoch in range(steps // 3):
        seen = indices[3 * epoch : 3 * epoch + 3].ravel()
        assert len(set(seen.tolist())) == 9
    m, expected = 0.0, []
    for idx in indices:
        batch = np.arange(n, dtype=float)[idx]
        expected.append(np.mean((m - batch) ** 2))
        m = m - lr * np.mean(2 * (m - batch))
    np.testing.assert_allclose(a.losses, expected, rtol=1e-12)


def test_filter_spec_freezes_and_only_inexact_arrays_train():
    model = {"a": jnp.array([1.0, 1.0]), "b": jnp.array([1.0]), "n": jnp.array([2])}

    def loss_fn(m):
        return jnp.sum((m["a"] - 3.0) ** 2) + jnp.sum((m["b"] + 1.0) ** 2) + m["n"][0]

    spec = {"a": True, "b": False, "n": True}  # "n" is an integer array: never trains
    result = dynsys.train(
        loss_fn,
        model,
        filter_spec=spec,
        solver=optax.adam(0.1),
        num_steps=200,
        progress=False,
    )
    np.testing.assert_allclose(result.model["a"], [3.0, 3.0], atol=1e-3)
    np.testing.assert_array_equal(result.model["b"], [1.0])
    np.testing.assert_array_equal(result.model["n"], [2])


def test_progress_false_prints_nothing_and_true_shows_a_bar(capfd):
    dynsys.train(lambda m: jnp.sum(m**2), jnp.ones(2), num_steps=5, progress=False)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    dynsys.train(lambda m: jnp.sum(m**2), jnp.ones(2), num_steps=5, progress=True)
    out, err = capfd.readouterr()
    assert "train" in out + err and "5/5" in out + err


def test_callback_stops_training():
    seen = []

    def callback(step, model, loss):
        seen.append((step, float(model), loss))
        return step == 4

    result = dynsys.train(
        lambda m: (m - 1.0) ** 2,
        jnp.array(0.0),
        solver=optax.sgd(0.25),
        num_steps=100,
        callback=callback,
        progress=False,
    )
    assert result.steps_run == 5
    assert [s for s, _, _ in seen] == [0, 1, 2, 3, 4]
    # The callback sees the model after the update and the loss before it.
    assert seen[0][1] == 0.5 and seen[0][2] == 1.0
    assert "callback" in result.stop_reason


def test_val_fn_chooses_the_best_model():
    # Training pulls m from 0 to 3 (m_k = 3 - 3 * 0.8**k under SGD with rate 0.1);
    # validation prefers m = 1, so the best model is the evaluated m_k nearest 1.
    result = dynsys.train(
        lambda m: (m - 3.0) ** 2,
        jnp.array(0.0),
        solver=optax.sgd(0.1),
        num_steps=20,
        val_fn=lambda m: (m - 1.0) ** 2,
        eval_every=1,
        progress=False,
    )
    ms = 3.0 - 3.0 * 0.8 ** np.arange(21)
    expected = (ms - 1.0) ** 2
    steps, values = zip(*result.val_losses)
    assert list(steps) == list(range(21))
    np.testing.assert_allclose(values, expected, rtol=1e-10)
    best = int(np.argmin(expected))
    assert result.best_step == best == 2
    np.testing.assert_allclose(result.model, ms[best], rtol=1e-12)
    np.testing.assert_allclose(result.best_loss, expected[best], rtol=1e-10)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_steps=0), "num_steps must be a positive integer"),
        (dict(num_steps=2.0), "num_steps must be a positive integer"),
        (dict(num_steps=5, eval_every=0), "eval_every must be a positive integer"),
        (dict(num_steps=5, batch_size=2), "batch_size=2 was given without data"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dynsys.train(lambda m: jnp.sum(m**2), jnp.ones(2), progress=False, **kwargs)


@pytest.mark.parametrize(
    "data, batch_size, match",
    [
        ({"a": jnp.ones(4), "b": jnp.ones(5)}, None, "share its leading"),
        ({"a": jnp.ones(())}, None, "share its leading"),
        (jnp.ones((0, 2)), None, "data is empty"),
        ({"a": None}, None, "data has no arrays"),
        (jnp.ones((4, 2)), 5, r"batch_size must be an integer in \[1, 4\]"),
        (jnp.ones((4, 2)), True, r"batch_size must be an integer in \[1, 4\]"),
    ],
)
def test_data_errors(data, batch_size, match):
    with pytest.raises(ValueError, match=match):
        dynsys.train(
            lambda m, batch: jnp.sum(m**2),
            jnp.ones(2),
            data=data,
            batch_size=batch_size,
            num_steps=2,
            progress=False,
        )


def test_nothing_to_train_errors():
    with pytest.raises(ValueError, match="no trainable inexact arrays"):
        dynsys.train(lambda m: 0.0, jnp.array([1, 2]), num_steps=2, progress=False)
    with pytest.raises(ValueError, match="no trainable inexact arrays"):
        dynsys.train(
            lambda m: jnp.sum(m**2),
            jnp.ones(2),
            filter_spec=False,
            num_steps=2,
            progress=False,
        )


def _train_towards_one(rate, num_steps, **options):
    """SGD with `rate` on (m - 1)^2 from m = 0."""
    return dynsys.train(
        lambda m: (m - 1.0) ** 2,
        jnp.array(0.0),
        solver=optax.sgd(rate),
        num_steps=num_steps,
        progress=False,
        **options,
    )


def test_keyboard_interrupt_keeps_the_best_model():
    # SGD with rate 0.25 on (m - 1)^2 halves the distance to 1 each step; Ctrl-C
    # (here raised by the callback after step 3) ends training with the best model.
    def callback(step, model, loss):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.warns(UserWarning, match="interrupted at step 4"):
        result = _train_towards_one(0.25, 100, callback=callback)
    assert result.steps_run == 4 and "interrupted" in result.stop_reason
    np.testing.assert_allclose(result.losses, [1.0, 0.25, 0.0625, 0.015625])
    assert result.best_step == 3
    np.testing.assert_allclose(result.model, 1.0 - 0.5**3)


def test_a_signal_while_a_chunk_is_recorded_keeps_a_best_step_that_was_recorded(
    monkeypatch,
):
    """A SIGINT that arrives while the loop records a chunk's results leaves them
    consistent: the best model is one of the recorded steps (the running best once
    came from a chunk whose losses were not recorded, and the run that kept it could
    not write its folder). SGD with rate 0.01 on (m - 1)^2 shrinks the distance to
    1 by 0.98 each step, so the model at step k is 1 - 0.98^k."""
    import os
    import signal

    from dynsys._fitting import train as train_module

    real_record, counts = train_module._record, []

    def record(outputs, count, first_step, held_out):
        counts.append(count)
        if len(counts) == 2:  # the second chunk: the signal comes while it is recorded
            os.kill(os.getpid(), signal.SIGINT)
        return real_record(outputs, count, first_step, held_out)

    monkeypatch.setattr(train_module, "_record", record)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.warns(UserWarning, match="interrupted at step"):
            result = _train_towards_one(0.01, 1_000_000)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(counts) == 2 and "interrupted" in result.stop_reason
    assert result.steps_run in (counts[0], counts[0] + counts[1])
    assert result.best_step == result.steps_run - 1
    steps = np.arange(result.steps_run)
    np.testing.assert_allclose(result.losses, 0.98 ** (2 * steps), rtol=1e-4)
    np.testing.assert_allclose(result.model, 1.0 - 0.98**result.best_step, rtol=1e-4)


def test_a_signal_whose_exception_was_lost_still_stops_training():
    """Inside a run's signal handling (`catch_interrupts`), a SIGTERM whose
    `KeyboardInterrupt` is swallowed before training starts (as a callback from
    compiled code may drop it) still stops a training of a million steps after
    its first chunk, with the best model kept; the pending flag is then clear."""
    import os
    import signal
    import time

    from dynsys import _interrupt_flag
    from dynsys._experiments.runtime.interrupt import catch_interrupts

    with catch_interrupts() as interrupts:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler runs here and raises
        except KeyboardInterrupt:
            pass  # lost, as by a caller that reports and drops it
        assert interrupts.name == "SIGTERM" and _interrupt_flag.pending()
        with pytest.warns(UserWarning, match="interrupted at step"):
            result = _train_towards_one(0.01, 1_000_000)
        assert not _interrupt_flag.pending()
    assert "interrupted" in result.stop_reason
    assert 0 < result.steps_run < 1_000_000
    assert result.best_step == result.steps_run - 1
    np.testing.assert_allclose(result.model, 1.0 - 0.98**result.best_step, rtol=1e-4)


def _plateau_loss(m):
    """Decreasing until every entry of `m` is at most 1, then exactly 1."""
    return 1.0 + jnp.sum(jnp.maximum(m - 1.0, 0.0) ** 2)


def _adam_losses_by_hand(m, num_steps, learning_rate):
    """The losses of a plain optax loop (no dynsys): the reference."""
    optimizer = optax.adam(learning_rate)
    state = optimizer.init(m)
    losses = []
    for _ in range(num_steps):
        loss, grad = jax.value_and_grad(_plateau_loss)(m)
        losses.append(float(loss))
        updates, state = optimizer.update(grad, state, m)
        m = optax.apply_updates(m, updates)
    return np.asarray(losses)


def test_a_flat_loss_stops_the_loop_and_says_so():
    from dynsys._fitting.flat_loss import flat_resolution

    start, flat_steps, chunk = jnp.array([3.0, 2.0]), 10, 32
    reference = _adam_losses_by_hand(start, 200, 0.1)
    first_flat = int(np.argmax(reference == 1.0))
    assert first_flat > 0 and np.all(reference[first_flat:] == 1.0)
    result = dynsys.train(
        _plateau_loss,
        start,
        solver=optax.adam(0.1),
        num_steps=500,
        progress=False,
        flat_steps=flat_steps,
    )
    # Checked after each dispatch (32 steps for a loss without data): it stops in
    # the first dispatch that ends `flat_steps` steps after the plateau began.
    assert first_flat + flat_steps + 1 <= result.steps_run
    assert result.steps_run <= first_flat + flat_steps + chunk
    resolution = flat_resolution(jnp.float64)
    assert result.stop_reason == (
        f"loss flat for {flat_steps} steps (relative change at most "
        f"{resolution:.1g} per step); kept the best model"
    )
    np.testing.assert_allclose(result.losses, reference[: result.steps_run], rtol=1e-12)
    assert result.best_loss == 1.0 and result.best_step == first_flat


def test_a_loss_still_falling_is_not_flat():
    result = dynsys.train(
        lambda m: jnp.sum(m**2),
        jnp.ones(2),
        solver=optax.sgd(1e-3),
        num_steps=100,
        progress=False,
        flat_steps=5,
    )
    assert result.steps_run == 100 and result.stop_reason is None


def test_flat_steps_at_end_against_a_plain_count():
    from dynsys._fitting.flat_loss import flat_steps_at_end

    losses = [5.0, 4.0, 3.0, 3.0, 3.0 * (1 + 1e-13), 3.0, 3.0 * (1 - 1e-16)]
    resolution = 1e-12
    plain = 0
    for k in range(len(losses) - 1, 0, -1):
        if abs(losses[k] - losses[k - 1]) > resolution * abs(losses[k - 1]):
            break
        plain += 1
    assert plain == 4
    assert flat_steps_at_end(losses, resolution, most=10) == plain
    assert flat_steps_at_end(losses, resolution, most=2) == 2
    assert flat_steps_at_end([1.0, float("nan")], resolution, most=5) == 0


@pytest.mark.parametrize("flat_steps", [0, -3, 2.5, True])
def test_flat_steps_errors(flat_steps):
    with pytest.raises(ValueError, match=r"train\(flat_steps=...\): flat_steps must"):
        dynsys.train(
            lambda m: jnp.sum(m**2), jnp.ones(2), num_steps=5, flat_steps=flat_steps
        )


def test_the_bar_says_compiling_before_it_counts_steps(capfd):
    dynsys.train(lambda m: jnp.sum(m**2), jnp.ones(2), num_steps=40, progress=True)
    _, err = capfd.readouterr()
    assert "train: compiling…" in err
    counted = err.index("40/40")
    assert err.index("train: compiling…") < counted
    # Steps are counted (with a rate) only once the first chunk has come back.
    assert "/40" not in err[: err.index("train: compiling…")]


def test_a_fit_bar_labels_its_cap(capfd):
    true = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    data = dynsys.simulate(true, jnp.ones((3, 2)), 15)
    result = dynsys.fit(dynsys.LinearSystem(K=0.5 * jnp.eye(2)), data, progress=True)
    _, err = capfd.readouterr()
    assert result.converged and result.steps_run < 200
    assert "fit: compiling…" in err
    assert f"fit: {result.steps_run} steps (cap 200)" in err
    assert "/200" not in err
