"""How many programs XLA compiles for one `fit` (issue 20, "compile less"), counted
by JAX's own compilation events, never by time: the default Levenberg–Marquardt fit
with validation data compiles one optimiser chunk and one prediction program (for
the training and the validation data alike: no separate validation-loss or
initial-state programs, no swarm of one-operation programs), and a second fit of the same shapes compiles nothing."""

import collections

import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..compile_count import compiled_programs


# These tests count or time compilations: a program read back from the test run's
# shared compilation cache would not be counted.
pytestmark = pytest.mark.usefixtures("no_persistent_cache")


def _records(num_steps):
    """Output data of a lightly damped 3-state system, 1 input, 2 outputs, and a
    start from subspace identification (shapes no other test uses)."""
    rng = np.random.default_rng(3)
    true = dynsys.LinearSystem(
        K=jnp.array([[0.9, 0.3, 0.0], [-0.3, 0.9, 0.1], [0.0, 0.0, 0.5]]),
        B=jnp.array([[1.0], [0.0], [0.5]]),
        C=jnp.array([[1.0, 0.0, 0.0], [0.0, 0.5, 1.0]]),
    )
    us = rng.normal(size=(1, num_steps, 1))
    traj = dynsys.rollout(true, jnp.zeros((1, 3)), num_steps, inputs=jnp.asarray(us))
    ys = np.asarray(traj.ys) + 0.01 * rng.normal(size=(1, num_steps, 2))
    data = dynsys.Dataset(ys=ys, us=us)
    return data.split_time(1 / 3, min_samples=4)


def _big(counter: collections.Counter) -> collections.Counter:
    """The programs of fit's own compiled functions (not JAX's one-operation ones)."""
    names = ("run_chunk", "_predictions", "evaluate", "_initial_states")
    return collections.Counter(
        {k: v for k, v in counter.items() if any(n in k for n in names)}
    )


def test_one_fit_compiles_one_chunk_and_one_prediction_program():
    train, val = _records(157)
    start = dynsys.fit_subspace(train, 3)
    with compiled_programs() as first:
        result = dynsys.fit(start, train, val_data=val, num_steps=4, progress=False)
    assert result.val_losses  # the validation loss was evaluated during the fit
    # The chunk once (it also gives the validation loss of every step); one
    # prediction program for the training and the (padded) validation data.
    assert _big(first) == {"jit(run_chunk)": 1, "jit(_predictions)": 1}, first
    # The rest are a few small set-up programs (data to the device, weights).
    assert sum(first.values()) <= 12, first
    with compiled_programs() as second:
        again = dynsys.fit(start, train, val_data=val, num_steps=4, progress=False)
    assert sum(second.values()) == 0, second
    np.testing.assert_array_equal(again.losses, result.losses)


def test_validation_metrics_equal_the_validation_loss_of_the_same_model():
    """The validation loss recorded during the fit and the validation metrics come
    from one program: at the best step they are the same number; and that number
    is the output-error loss computed independently (closed-form x0 by numpy)."""
    train, val = _records(157)
    start = dynsys.fit_subspace(train, 3)
    result = dynsys.fit(start, train, val_data=val, num_steps=4, progress=False)
    model = result.model
    ys, us = np.asarray(val.ys[0]), np.asarray(val.us[0])
    T, p = ys.shape
    K, B, C = (np.asarray(a) for a in (model.K, model.B, model.C))
    u_level, y_level = np.asarray(model.input_level), np.asarray(model.output_level)
    free = np.zeros((T, p, K.shape[0]))
    forced = np.zeros((T, p))
    power, x = np.eye(K.shape[0]), np.zeros(K.shape[0])
    for t in range(T):  # y_t = C x_t + level, x_{t+1} = K x_t + B (u_t - level)
        free[t], forced[t] = C @ power, C @ x + y_level
        power, x = K @ power, K @ x + B @ (us[t] - u_level)
    weights = 1 / ys.var(axis=0)
    rows = (free * np.sqrt(weights)[None, :, None]).reshape(T * p, -1)
    target = ((ys - forced) * np.sqrt(weights)[None]).reshape(-1)
    x0 = np.linalg.lstsq(rows, target, rcond=None)[0]
    loss = np.sum((rows @ x0 - target) ** 2) / (T * p)
    np.testing.assert_allclose(result.metrics["validation"]["loss"], loss, rtol=1e-8)


def test_a_record_of_another_length_in_the_same_bucket_compiles_no_fit_program():
    """Records are padded (masked) to `padded_length`: a second file of another
    length in the same bucket (100 and 105 training samples, both padded to 112)
    reuses the fit's programs."""
    from dynsys._fitting.length_buckets import padded_length

    train, val = _records(157)
    other_train, other_val = _records(150)
    assert other_train.num_steps != train.num_steps
    assert padded_length(other_train.num_steps) == padded_length(train.num_steps)
    start = dynsys.fit_subspace(train, 3)
    dynsys.fit(start, train, val_data=val, num_steps=4, progress=False)
    other_start = dynsys.fit_subspace(other_train, 3)
    with compiled_programs() as second:
        dynsys.fit(other_start, other_train, val_data=other_val, num_steps=4,
                   progress=False)  # fmt: skip
    assert _big(second) == {}, second


def test_the_padding_changes_no_value(monkeypatch):
    """The same fit without the padding (each record at its own length) gives the
    same losses and model, to the float32 rounding of a sum in another order."""
    import dynsys._fitting.fit as fit_module

    train, val = _records(130)  # 87 training samples, padded to 96
    start = dynsys.fit_subspace(train, 3)
    padded = dynsys.fit(start, train, val_data=val, num_steps=5, progress=False)
    monkeypatch.setattr(fit_module, "shared_length", lambda steps, signature: steps)
    plain = dynsys.fit(start, train, val_data=val, num_steps=5, progress=False)
    np.testing.assert_allclose(padded.losses, plain.losses, rtol=1e-4)
    np.testing.assert_allclose(padded.val_losses, plain.val_losses, rtol=1e-4)
    np.testing.assert_allclose(
        np.asarray(padded.model.K), np.asarray(plain.model.K), rtol=1e-3, atol=1e-5
    )
