"""Neural state-space models (`NeuralStateSpace`, `StateEncoder`, `fit_neural`):
equal to the linear part before training, truncated-simulation windows and
gradients, sharded windows, and a nonlinear system identified better than by the
best linear model."""

import json
import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import dynsys
from dynsys._fitting.windows import (
    free_run_windows,
    truncated_simulation_loss,
    windows,
)

from ..helpers import randomised


def _linear(key, n=3, m=2, p=2):
    k1, k2, k3 = jax.random.split(key, 3)
    K = 0.5 * jax.random.orthogonal(k1, n)
    return dynsys.LinearSystem(
        K, jax.random.normal(k2, (n, m)), jax.random.normal(k3, (p, n)),
        input_level=jnp.full((m,), 0.5), output_level=jnp.full((p,), -1.0),
    )  # fmt: skip


def _small_model(getkey, width=5):
    linear = _linear(getkey())
    model = dynsys.NeuralStateSpace(
        linear, width_size=width, depth=2, state_scale=jnp.array([1.0, 2.0, 0.5]),
        input_scale=jnp.array([1.0, 3.0]), output_scale=jnp.array([2.0, 1.0]),
        key=getkey(),
    )  # fmt: skip
    return linear, model


def test_untrained_model_equals_its_linear_part(getkey):
    linear, model = _small_model(getkey)
    x0 = jax.random.normal(getkey(), (4, 3))
    us = jax.random.normal(getkey(), (4, 30, 2))
    reference = dynsys.rollout(linear, x0, 30, inputs=us)
    neural = dynsys.rollout(model, x0, 30, inputs=us)
    np.testing.assert_allclose(neural.xs, reference.xs, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(neural.ys, reference.ys, rtol=1e-14, atol=1e-14)
    # Once the corrections are not zero the model is not linear any more.
    changed = dynsys.rollout(randomised(model, getkey()), x0, 30, inputs=us)
    assert np.max(np.abs(changed.ys - reference.ys)) > 1e-2


def test_corrections_are_scaled_by_the_stored_normalisation(getkey):
    linear, model = _small_model(getkey)
    model = randomised(model, getkey())
    x, u = jnp.array([0.3, -1.0, 2.0]), jnp.array([0.5, -2.0])
    z = jnp.concatenate([(x - model.state_mean) / model.state_scale,
                         (u - model.input_mean) / model.input_scale])  # fmt: skip

    def mlp(net, z):  # a plain loop over the layers: tanh hidden, affine last
        h = jnp.zeros(0)
        for k, layer in enumerate(net.layers):
            h = layer.weight @ h + layer.context_weight @ z + layer.bias
            h = jnp.tanh(h) if k < len(net.layers) - 1 else h
        return h

    expected_x = model.base.step(0, x, u) + model.state_scale * mlp(model.state_net, z)
    expected_y = model.base.output(0, x, u) + model.output_scale * mlp(
        model.output_net, z
    )
    np.testing.assert_allclose(model.step(0, x, u), expected_x, rtol=1e-13)
    np.testing.assert_allclose(model.output(0, x, u), expected_y, rtol=1e-13)


def test_windows_equal_plain_slices(getkey):
    ys = jax.random.normal(getkey(), (2, 12, 1))
    us = jax.random.normal(getkey(), (2, 12, 2))
    batch = windows(ys, us, (12, 9), past=3, horizon=4, stride=2)
    expected = [(i, s) for i, length in enumerate((12, 9))
                for s in range(3, length - 4 + 1, 2)]  # fmt: skip
    assert batch["ys"].shape == (len(expected), 4, 1)
    for w, (i, s) in enumerate(expected):
        np.testing.assert_array_equal(batch["past_ys"][w], ys[i, s - 3 : s])
        np.testing.assert_array_equal(batch["past_us"][w], us[i, s - 3 : s])
        np.testing.assert_array_equal(batch["ys"][w], ys[i, s : s + 4])
        np.testing.assert_array_equal(batch["us"][w], us[i, s : s + 4])


def _window_batch(getkey, model, W=6, past=4, horizon=5):
    us = jax.random.normal(getkey(), (2, 30, 2))
    ys = dynsys.rollout(model, jnp.zeros((2, 3)), 30, inputs=us).ys
    ys = ys + 0.1 * jax.random.normal(getkey(), ys.shape)
    batch = windows(ys, us, (30, 30), past=past, horizon=horizon, stride=7)
    return {k: v[:W] for k, v in batch.items()}


def _encoder(getkey, batch, n=3):
    states = jax.random.normal(getkey(), (batch["ys"].shape[0], n))
    encoder = dynsys.StateEncoder.from_states(
        batch["past_us"], batch["past_ys"], states, width_size=4, key=getkey()
    )
    return randomised(encoder, getkey(), scale=0.1)


def test_truncated_simulation_loss_equals_a_plain_loop(getkey):
    _, model = _small_model(getkey)
    model = randomised(model, getkey())
    batch = _window_batch(getkey, model)
    encoder = _encoder(getkey, batch)
    scale = jnp.array([2.0, 0.5])
    total, count = 0.0, 0
    # One step at a time (each compiled once: the module is an argument).
    step = eqx.filter_jit(lambda m, t, x, u: m.step(t, x, u))
    output = eqx.filter_jit(lambda m, t, x, u: m.output(t, x, u))
    encode_one = eqx.filter_jit(lambda e, pu, py: e(pu, py))
    for w in range(batch["ys"].shape[0]):
        x = encode_one(encoder, batch["past_us"][w], batch["past_ys"][w])
        for t in range(batch["ys"].shape[1]):
            u = batch["us"][w, t]
            error = (output(model, t, x, u) - batch["ys"][w, t]) / scale
            total, count = total + float(jnp.sum(error**2)), count + 2
            x = step(model, t, x, u)
    loss = truncated_simulation_loss((model, encoder), batch, scale)
    np.testing.assert_allclose(loss, total / count, rtol=1e-12)


def test_truncated_simulation_gradient_equals_finite_differences(getkey):
    _, model = _small_model(getkey, width=3)
    model = randomised(model, getkey())
    batch = _window_batch(getkey, model, W=3, past=3, horizon=4)
    encoder = _encoder(getkey, batch)
    scale = jnp.array([1.0, 2.0])
    params = (model, encoder)
    flat, unravel = ravel_pytree(params)
    # The stored normalisation is not trained (its gradient is stopped): the
    # finite differences move every other array.
    fixed = ravel_pytree(
        eqx.tree_at(
            lambda p: (
                p[0].state_mean,
                p[0].state_scale,
                p[0].input_mean,
                p[0].input_scale,
                p[0].output_scale,
                p[1].feature_mean,
                p[1].feature_scale,
                p[1].state_scale,
            ),
            jax.tree.map(jnp.zeros_like, params),
            replace_fn=jnp.ones_like,
        )  # fmt: skip
    )[0]

    @jax.jit
    def loss(vector):
        return truncated_simulation_loss(unravel(vector), batch, scale)

    gradient = jax.jit(jax.grad(loss))(flat)
    for _ in range(3):
        direction = jnp.where(fixed > 0, 0.0, jax.random.normal(getkey(), flat.shape))
        h = 1e-6
        numeric = (loss(flat + h * direction) - loss(flat - h * direction)) / (2 * h)
        np.testing.assert_allclose(gradient @ direction, numeric, rtol=1e-6, atol=1e-9)


def test_encoder_recovers_linear_states_from_the_past(getkey):
    """The encoder's least-squares part is exact for a noise-free linear system
    (observable in `past = n` samples): the state is affine in the past samples."""
    linear = _linear(getkey())
    us = jax.random.normal(getkey(), (1, 200, 2))
    x0 = jax.random.normal(getkey(), (1, 3))
    traj = dynsys.rollout(linear, x0, 200, inputs=us)
    batch = windows(traj.ys, us, (200,), past=4, horizon=1)
    states = traj.xs[0, 4:200]
    encoder = dynsys.StateEncoder.from_states(
        batch["past_us"], batch["past_ys"], states, ridge=0.0, key=getkey()
    )
    predicted = jax.vmap(encoder)(batch["past_us"], batch["past_ys"])
    np.testing.assert_allclose(predicted, states, rtol=1e-7, atol=1e-7)


def duffing(num_samples, seed):
    """A Duffing oscillator $\\ddot y + 0.1 \\dot y + y + y^3 = u$ (RK4, input held
    over each 0.3 s sample), low-pass noise input, small output noise."""
    rng = np.random.default_rng(seed)
    u = np.convolve(rng.standard_normal(num_samples + 8), np.ones(8) / 8, "same")
    u = 1.5 * u[:num_samples]

    def field(s, f):
        return np.array([s[1], f - 0.1 * s[1] - s[0] - s[0] ** 3])

    state, y, h = np.zeros(2), np.empty(num_samples), 0.075
    for t in range(num_samples):
        y[t] = state[0]
        for _ in range(4):
            k1 = field(state, u[t])
            k2 = field(state + h / 2 * k1, u[t])
            k3 = field(state + h / 2 * k2, u[t])
            k4 = field(state + h * k3, u[t])
            state = state + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    y = y + 0.005 * rng.standard_normal(num_samples)
    return dynsys.Dataset(us=u[None, :, None], ys=y[None, :, None])


def _fit_percent(measured, predicted):
    measured, predicted = np.asarray(measured), np.asarray(predicted)
    spread = np.linalg.norm(measured - measured.mean(axis=(0, 1)), axis=(0, 1))
    return float(np.mean(100 * (1 - np.linalg.norm(measured - predicted,
                                                   axis=(0, 1)) / spread)))  # fmt: skip


MARGIN = 20.0  # fit % points by which the neural model beats the linear one


@pytest.mark.slow
def test_neural_model_beats_the_best_linear_model_on_a_duffing_oscillator():
    estimation, validation = duffing(1200, 1), duffing(600, 2)
    result = dynsys.fit_neural(
        estimation, validation, order=2, horizon=32, past=10, width_size=16,
        learning_rate=3e-3, num_steps=400, eval_every=40,
        key=jax.random.key(0),
    )  # fmt: skip
    past = result.past
    # The best linear model: the output-error fit of order 2 that fit_neural starts
    # from, or a subspace model of order 2 to 6, each with its initial state
    # estimated from all of the record (scored on the same samples).
    linear_fits = []
    for model in [result.linear] + [
        dynsys.fit_subspace(estimation, order) for order in (2, 4, 6)
    ]:
        c = dynsys.compare(model, validation)
        linear_fits.append(_fit_percent(c.measured[:, past:], c.predicted[:, past:]))
    neural = result.compare(validation)
    neural_fit = _fit_percent(neural.measured, neural.predicted)
    assert neural_fit > max(linear_fits) + MARGIN, (neural_fit, linear_fits)
    assert result.best_step > 0


def test_fit_neural_stops_at_a_non_finite_loss_with_the_best_model():
    estimation = duffing(300, 3)
    with pytest.warns(UserWarning, match=r"fit_neural: non-finite .*best model"):
        result = dynsys.fit_neural(
            estimation, base=dynsys.fit_subspace(estimation, 2), horizon=16, past=6,
            width_size=4,
            solver=optax.scale(jnp.nan), num_steps=20,
            eval_every=5,
        )  # fmt: skip
    assert result.steps_run < 20
    assert result.stop_reason.startswith("non-finite")
    # The best model is the untrained one: equal to the linear model.
    us = estimation.us
    x0 = jnp.zeros((1, 2))
    np.testing.assert_allclose(
        dynsys.rollout(result.model, x0, 50, inputs=us[:, :50]).ys,
        dynsys.rollout(result.linear, x0, 50, inputs=us[:, :50]).ys,
        rtol=1e-12, atol=1e-12,
    )  # fmt: skip


def test_patience_counts_validation_evaluations_in_one_run_of_adam():
    """Training stops `patience` evaluations after the best one (not after whole
    rounds), and is one run of Adam: its losses are those of `dynsys.train` with
    the same windows, minibatches and solver state kept from the first step.
    Validated on another plant (the output sign flipped), the run soon stops
    improving and stops."""
    jax.config.update("jax_enable_x64", True)
    estimation = duffing(300, 3)
    flipped = dynsys.Dataset(us=estimation.us, ys=-estimation.ys)
    base = dynsys.fit_subspace(estimation, 2)
    kwargs = dict(base=base, horizon=16, past=6, width_size=4, num_steps=700,
                  eval_every=5, batch_size=8, learning_rate=1e-2, refine_linear=False,
                  key=jax.random.key(0))
    stopped = dynsys.fit_neural(estimation, flipped, patience=3, **kwargs)
    # The last evaluation 3 evaluations after the best; the steps of its dispatch
    # (at most eval_every) ran before the stop.
    last = stopped.val_losses[-1][0]
    assert last == stopped.best_step + 15 and last < stopped.steps_run <= last + 5
    assert stopped.stop_reason == "no validation gain for 3 evaluations (15 steps)"
    # Validated on its own plant, with no early stop (patience past the budget):
    # the steps of one Adam run, past the former 500-step rounds that restarted it.
    result = dynsys.fit_neural(estimation, patience=1000, **kwargs)
    assert result.steps_run == 700 and result.stop_reason is None
    from dynsys._sysid import neural

    s, v = neural.check_arguments(estimation, None, 6, 16)
    setup = neural._setup(neural._well_scaled(base, s), s, v, 6, 16, 1, 4, 2,
                          kwargs["key"], None)  # fmt: skip
    reference = dynsys.train(
        setup.loss, setup.params, data=setup.windows, solver=optax.adam(1e-2),
        num_steps=700, batch_size=8, key=jax.random.fold_in(kwargs["key"], 1),
        progress=False,
    )  # fmt: skip
    np.testing.assert_allclose(result.losses, reference.losses, rtol=1e-9)


def test_restarts_return_the_restart_best_on_validation():
    """`restarts=3`: three trainings from the keys of `restart_keys`, each equal
    to a single run (`restarts=1`) from its key; the one returned has the lowest
    best validation loss."""
    jax.config.update("jax_enable_x64", True)
    estimation, validation = duffing(200, 3), duffing(120, 5)
    kwargs = dict(base=dynsys.fit_subspace(estimation, 2), horizon=12, past=6,
                  width_size=4, num_steps=30, eval_every=10, batch_size=8,
                  learning_rate=1e-2, refine_linear=False)  # fmt: skip
    key = jax.random.key(3)
    result = dynsys.fit_neural(estimation, validation, restarts=3, key=key, **kwargs)
    from dynsys._sysid.neural import restart_keys

    keys = restart_keys(key, 3)
    assert len({str(jax.random.key_data(k)) for k in keys}) == 3
    singles = [dynsys.fit_neural(estimation, validation, key=k, **kwargs)
               for k in keys]  # fmt: skip
    bests = [min(v for _, v in run.val_losses) for run in singles]
    np.testing.assert_allclose(result.restart_losses, bests, rtol=1e-12)
    assert result.restart == int(np.argmin(bests))
    chosen = singles[result.restart]
    assert result.best_step == chosen.best_step
    np.testing.assert_allclose(result.losses, chosen.losses, rtol=1e-12)
    assert singles[0].restart_losses == [bests[0]] and singles[0].restart == 0


def _realisation(model, T):
    """`model` in the coordinates `x = T z` (the same input-output map)."""
    T_inv = jnp.linalg.inv(T)
    return eqx.tree_at(
        lambda m: (m.K, m.B, m.C), model, (T_inv @ model.K @ T, T_inv @ model.B,
                                           model.C @ T),
    )  # fmt: skip


def test_a_badly_scaled_linear_start_trains_as_a_well_scaled_one():
    """A realisation whose output is a near-cancellation of large states (as the
    cascaded tanks' order-7 output-error fit): each Adam step of about the
    learning rate per parameter blew the free run up (window loss 0.014 -> 170 on
    the tanks). fit_neural(balance=True) trains the base in balanced coordinates,
    so the same plant in two realisations trains alike."""
    jax.config.update("jax_enable_x64", True)
    estimation, validation = duffing(300, 3), duffing(200, 5)
    good = dynsys.fit_subspace(estimation, 2)
    bad = _realisation(good, jnp.array([[300.0, -299.0], [1.0, 0.0]]))
    kwargs = dict(horizon=16, past=6, width_size=4, num_steps=40,
                  eval_every=10, refine_linear=False, balance=True,
                  key=jax.random.key(0))
    runs = [dynsys.fit_neural(estimation, validation, base=b, **kwargs)
            for b in (good, bad)]  # fmt: skip
    start = runs[0].losses[0]
    np.testing.assert_allclose(runs[1].losses[0], start, rtol=1e-9)
    for run in runs:
        assert np.all(np.isfinite(run.losses)) and run.losses.max() < 2 * start


def test_the_balanced_start_has_equal_diagonal_gramians():
    """The base fit_neural trains: the same zero-state response, and controllability
    and observability Gramians equal and diagonal (SciPy's Lyapunov solver)."""
    import scipy.linalg

    from dynsys._sysid.neural import _well_scaled
    from dynsys._sysid.signals import signals

    jax.config.update("jax_enable_x64", True)
    data = duffing(200, 6)
    model = _realisation(
        dynsys.fit_subspace(data, 2), jnp.array([[300.0, -299.0], [1.0, 0.0]])
    )
    scaled = _well_scaled(model, signals(data, "test"))
    K, B, C = (np.asarray(a) for a in (scaled.K, scaled.B, scaled.C))
    Wc = scipy.linalg.solve_discrete_lyapunov(K, B @ B.T)
    Wo = scipy.linalg.solve_discrete_lyapunov(K.T, C.T @ C)
    # (the transformation undoes a condition number of about 1e5: 1e-4 relative)
    np.testing.assert_allclose(Wc, Wo, rtol=1e-4, atol=1e-4 * np.abs(Wc).max())
    np.testing.assert_allclose(Wc, np.diag(np.diag(Wc)), atol=1e-4 * np.abs(Wc).max())
    x0 = jnp.zeros((1, 2))
    np.testing.assert_allclose(
        dynsys.rollout(scaled, x0, 100, inputs=data.us[:, :100]).ys,
        dynsys.rollout(model, x0, 100, inputs=data.us[:, :100]).ys, rtol=1e-7,
        atol=1e-12,
    )  # fmt: skip


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("learning_rate", 0.0, "fit_neural(learning_rate=...): expected a finite "
         "number > 0, got 0.0."),
        ("learning_rate", float("nan"), "fit_neural(learning_rate=...): expected"),
        ("width_size", 0, "fit_neural(width_size=...): expected an int >= 1, got 0."),
        ("depth", 1, "fit_neural(depth=...): expected an int >= 2, got 1."),
        ("num_steps", 2.5, "fit_neural(num_steps=...): expected an int >= 1"),
        ("patience", 0, "fit_neural(patience=...): expected an int >= 1, got 0."),
        ("restarts", 0, "fit_neural(restarts=...): expected an int >= 1, got 0."),
        ("batch_size", True, "fit_neural(batch_size=...): expected an int >= 1"),
    ],
)  # fmt: skip
def test_options_out_of_range_are_refused_before_the_linear_fit(
    option, value, message, monkeypatch
):
    """A learning rate of 0 trained nothing for 10,000 steps; a depth of 1 failed
    deep inside the MLP. Now one line, before any fit."""
    import dynsys._sysid.neural as neural

    def no_fit(*args, **kwargs):
        raise AssertionError("the linear fit ran")

    monkeypatch.setattr(neural, "_linear_start", no_fit)
    with pytest.raises(ValueError) as raised:
        dynsys.fit_neural(duffing(60, 4), horizon=8, past=4, **{option: value})
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_start_whose_free_run_overflows_is_refused_before_training():
    """An unstable start over the horizon: the loss was inf/nan at step 0 and the
    run ended with a warning and an untrained model; now one line, no training."""
    jax.config.update("jax_enable_x64", True)
    data = duffing(120, 4)
    base = dynsys.LinearSystem(
        jnp.array([[1e4]]), jnp.array([[1.0]]), jnp.array([[1.0]])
    )
    with pytest.raises(ValueError) as raised:
        dynsys.fit_neural(data, base=base, horizon=64, past=4, num_steps=5)
    message = str(raised.value)
    assert message.startswith("fit_neural(horizon=...): the start model's loss over "
                              "the training windows of 64 steps is ")  # fmt: skip
    assert "\n" not in message


def test_bad_input_gives_one_line_errors():
    data = duffing(100, 4)
    with pytest.raises(ValueError, match=r"fit_neural\(horizon=...\): past \+ horizon"):
        dynsys.fit_neural(data, horizon=95, past=10)
    short = data.window(0, 8)
    with pytest.raises(ValueError, match=r"fit_neural\(past=...\): the encoder window"):
        dynsys.fit_neural(data, short, horizon=20, past=10)
    with pytest.raises(ValueError, match=r"fit_neural\(solver=...\): expected"):
        dynsys.fit_neural(data, horizon=20, past=10, solver="sgd")
    with pytest.raises(ValueError, match=r"NeuralStateSpace\(state_scale=...\)"):
        dynsys.NeuralStateSpace(
            dynsys.LinearSystem(jnp.eye(2)), state_scale=jnp.ones(3),
            key=jax.random.key(0),
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"free_run_windows\(past=...\)"):
        free_run_windows(data.ys, data.us, (5,), 10)


SHARDED = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import dynsys
    from dynsys._fitting.windows import truncated_simulation_loss, windows

    assert len(jax.devices()) == 4, jax.devices()
    keys = jax.random.split(jax.random.key(0), 6)
    linear = dynsys.LinearSystem(0.4 * jax.random.normal(keys[0], (3, 3)),
                                 jax.random.normal(keys[1], (3, 1)),
                                 jax.random.normal(keys[2], (1, 3)))
    model = dynsys.NeuralStateSpace(linear, width_size=4, key=keys[3])
    model = jax.tree.map(lambda a: a + 0.1 if isinstance(a, jax.Array) else a, model)
    us = jax.random.normal(keys[4], (2, 40, 1))
    ys = jax.random.normal(keys[5], (2, 40, 1))
    batch = windows(ys, us, (40, 40), past=4, horizon=8, stride=2)
    batch = {k: v[:16] for k, v in batch.items()}
    encoder = dynsys.StateEncoder.from_states(
        batch["past_us"], batch["past_ys"], jnp.ones((16, 3)), key=keys[0])
    scale = jnp.array([1.5])
    f = jax.jit(jax.value_and_grad(
        lambda p, b: truncated_simulation_loss(p, b, scale)))
    single, g1 = f((model, encoder), batch)
    sharded = dynsys.shard_batch(batch)
    assert not sharded["ys"].sharding.is_fully_replicated
    many, g2 = f((model, encoder), sharded)
    np.testing.assert_allclose(many, single, rtol=1e-12)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)

    # fit_neural on windows spread over the 4 devices: the same steps as on one.
    u = jax.random.normal(keys[1], (1, 300, 1))
    y = jnp.tanh(dynsys.rollout(linear, jnp.zeros((1, 3)), 300, inputs=u).ys)
    data = dynsys.Dataset(us=u, ys=y)
    base = dynsys.fit_subspace(data, 2)
    kwargs = dict(base=base, horizon=15, past=6, width_size=4, num_steps=20,
                  eval_every=10, batch_size=8, key=keys[2])
    one = dynsys.fit_neural(data, shard=False, **kwargs)
    four = dynsys.fit_neural(data, shard=True, **kwargs)
    np.testing.assert_allclose(four.losses, one.losses, rtol=1e-9)
    np.testing.assert_allclose(four.val_losses, one.val_losses, rtol=1e-9)
    print("NEURAL SHARDING OK")
    """
)


@pytest.mark.slow
def test_sharded_windows_equal_the_unsharded_loss():
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    result = subprocess.run(
        [sys.executable, "-c", SHARDED], capture_output=True, text=True, env=env,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NEURAL SHARDING OK" in result.stdout


REAL = os.path.join(os.path.dirname(__file__), "..", "..", "data", "real")
PH = ["fit", os.path.join(REAL, "ph_neutralisation.csv"), "--inputs"]
PH += ["acid_flow,base_flow", "--outputs", "pH", "--model", "neural", "--no-progress"]
# A fixed linear structure: the structure scan is tested elsewhere (CI time).
PH += ["--order", "3", "--no-feedthrough", "--steps", "20"]


@pytest.mark.slow
def test_cli_fits_linear_then_neural_on_the_ph_record(tmp_path, capsys):
    from dynsys import cli

    out = tmp_path / "run"
    argv = [*PH, "--neural-steps", "20", "--neural-horizon", "16", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "neural fit %" in printed and "free run from sample 20" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    neural = metrics["neural"]
    assert neural["past"] == 20 and neural["steps_run"] <= 20
    assert (out / "neural_comparison.png").exists()
    assert (out / "neural_model.dynsys").exists()
    assert (out / "neural_encoder.dynsys").exists()
    # The linear model's reported score, recomputed with numpy from the saved model
    # the neural stage started from (fitted on the first two thirds; model.dynsys is
    # its refit on the whole record) and the raw last third, from sample 20 on.
    table = np.genfromtxt(os.path.join(REAL, "ph_neutralisation.csv"), delimiter=",",
                          names=True)  # fmt: skip
    u = np.stack([table["acid_flow"], table["base_flow"]], axis=1)
    y = table["pH"][:, None]
    T = len(y)
    k = T - int(np.floor(T / 3 + 0.5))
    model = dynsys.load(out / "neural_linear_model.dynsys")
    assert metrics["selection"]["refit_on_all_estimation_data"]
    refit = dynsys.load(out / "model.dynsys")
    assert not np.allclose(np.asarray(refit.K), np.asarray(model.K))
    validation = dynsys.Dataset(us=u[None, k:], ys=y[None, k:])
    predicted = np.asarray(dynsys.compare(model, validation).predicted[0, 20:])
    measured = y[k + 20 :]
    error = np.linalg.norm(measured - predicted)
    fit = 100 * (1 - error / np.linalg.norm(measured - measured.mean()))
    np.testing.assert_allclose(neural["fit_percent"]["linear"], [fit], rtol=1e-5)
    rms = np.sqrt(np.mean((measured - predicted) ** 2))
    np.testing.assert_allclose(neural["rms"]["linear"], [rms], rtol=1e-5)
    assert np.isfinite(neural["fit_percent"]["neural"][0])
    assert np.isfinite(neural["rms"]["neural"][0])


@pytest.mark.slow
def test_cli_horizon_longer_than_the_records_is_a_one_line_error(tmp_path, capsys):
    from dynsys import cli

    out = tmp_path / "run"
    argv = [*PH, "--neural-horizon", "5000", "--neural-steps", "1", "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    # the command names its flag, not the config key (issue 48 item 10)
    assert "--neural-horizon (5000)" in err and "longer than the longest" in err
    assert not out.exists()  # refused before the linear stage: nothing written


def test_cli_neural_model_needs_output_data(tmp_path, capsys):
    from dynsys import cli

    out = tmp_path / "run"
    argv = ["fit", "--model", "neural", "--trajectories", "4", "--length", "20"]
    assert cli.main([*argv, "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--model: 'neural' needs data with outputs" in err
