"""Output-error fitting: losses on `model.output` with estimated initial states,
per-channel normalisation, ragged experiments, nonlinear models, bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys
from dynsys._fitting.fit import _batch, _initial_states, _objective


def _system(seed=0, n=3, m=1, p=2, feedthrough=True):
    rng = np.random.default_rng(seed)
    K = rng.normal(size=(n, n))
    K = 0.85 * K / np.max(np.abs(np.linalg.eigvals(K)))
    D = 0.3 * rng.normal(size=(p, m)) if feedthrough else None
    return dynsys.LinearSystem(K, rng.normal(size=(n, m)), rng.normal(size=(p, n)), D)


def _data(system, N=3, T=30, noise=0.0, seed=1):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x0s = jax.random.normal(k1, (N, system.state_size))
    us = jax.random.normal(k2, (N, T, system.input_size))
    return dynsys.simulate(
        system, x0s, T, inputs=us, measurement_noise=noise, key=k3
    ), np.asarray(x0s)


def _perturbed(system, scale=0.02, seed=3):
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda a: a + scale * rng.normal(size=a.shape) if eqx.is_array(a) else a,
        system,
    )


@jax.jit
def _reference_loss(model, experiments, weights):
    """The normalised output error written out per experiment, unpadded: for each
    experiment the outputs are $G x_0 + z$, $x_0$ by a weighted `lstsq`, and the
    weighted squared errors are summed over all valid samples."""
    K, B, C, D = model.K, model.B, model.C, model.D
    n, p = K.shape[0], C.shape[0]
    total, count = 0.0, 0
    root = jnp.sqrt(weights)
    for ys, us in experiments:
        T = ys.shape[0]

        def step(carry, u):
            CK, x = carry
            return (CK @ K, K @ x + B @ u), (CK, C @ x + D @ u)

        _, (G, z) = jax.lax.scan(step, (C, jnp.zeros(n)), us)
        A = (G * root[None, :, None]).reshape(T * p, n)
        b = ((ys - z) * root[None, :]).reshape(T * p)
        x0 = jnp.linalg.lstsq(A, b)[0]
        total = total + jnp.sum(((G @ x0 + z - ys) * root[None, :]) ** 2)
        count += T
    return total / (p * count)


def test_loss_and_initial_states_against_a_written_out_reference():
    system = _system()
    data, x0s = _data(system, noise=0.1)
    model = _perturbed(system, 0.1)
    result = dynsys.fit(
        model, data, solver=optax.sgd(0.0), num_steps=1, progress=False
    )
    ys = np.asarray(data.ys)
    weights = 1.0 / ys.reshape(-1, 2).var(axis=0)
    experiments = [(data.ys[i], data.us[i]) for i in range(3)]
    expected = _reference_loss(model, experiments, jnp.asarray(weights))
    assert result.losses[0] == pytest.approx(float(expected), rel=1e-10)
    assert result.metrics["train"]["loss"] == pytest.approx(float(expected), rel=1e-10)
    # On noise-free data the estimated initial states are exact (and equal to
    # estimate_x0's).
    clean, _ = _data(system)
    objective = _objective("simulation", clean, system, False, None, None)
    batch = _batch(clean, jnp.float64)
    estimated = _initial_states(objective, system, batch)
    np.testing.assert_allclose(estimated, x0s, atol=1e-9)
    np.testing.assert_allclose(estimated, dynsys.estimate_x0(system, clean), atol=1e-9)
    loss = eqx.filter_jit(lambda o, m, b: o.loss((m, None), b))
    assert loss(objective, system, batch) < 1e-20


def test_channel_normalisation_makes_units_irrelevant():
    """Measuring channel 0 in other units (x 1000), with C and D scaled alike, gives
    the same loss."""
    system = _system()
    data, _ = _data(system, noise=0.1)
    model = _perturbed(system, 0.1)
    scale = jnp.array([1000.0, 1.0])
    scaled = dynsys.Dataset(ys=data.ys * scale[None, None], us=data.us)
    scaled_model = dynsys.LinearSystem(
        model.K, model.B, model.C * scale[:, None], model.D * scale[:, None]
    )
    a = dynsys.fit(model, data, solver=optax.sgd(0.0), num_steps=1, progress=False)
    b = dynsys.fit(
        scaled_model, scaled, solver=optax.sgd(0.0), num_steps=1, progress=False
    )
    assert b.losses[0] == pytest.approx(a.losses[0], rel=1e-10)


def _ragged(data, lengths):
    return dynsys.Dataset(
        ys=[data.ys[i, :T] for i, T in enumerate(lengths)],
        us=[data.us[i, :T] for i, T in enumerate(lengths)],
    )


def test_ragged_loss_gradient_and_fit_equal_the_unpadded_experiments():
    system = _system()
    data, _ = _data(system, N=3, T=30, noise=0.1)
    lengths = (30, 17, 24)
    ragged = _ragged(data, lengths)
    assert ragged.is_ragged and ragged.lengths == lengths
    experiments = [(data.ys[i, :T], data.us[i, :T]) for i, T in enumerate(lengths)]
    valid = np.concatenate([np.asarray(y) for y, _ in experiments])
    weights = jnp.asarray(1.0 / valid.var(axis=0))
    model = _perturbed(system, 0.1)

    def reference(model):
        return _reference_loss(model, experiments, weights)

    objective = _objective("simulation", ragged, model, False, None, None)
    batch = _batch(ragged, jnp.float64)

    @jax.jit
    def masked(model, batch=batch):
        return objective.loss((model, None), batch)

    np.testing.assert_allclose(masked(model), reference(model), rtol=1e-12)
    g_masked = jax.jit(jax.grad(masked))(model)
    g_reference = jax.jit(jax.grad(reference))(model)
    for a, b in zip(jax.tree.leaves(g_masked), jax.tree.leaves(g_reference)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    # Garbage (NaN) in the padding never reaches the loss or the gradient.
    poisoned = dict(batch)
    pad = ~np.asarray(batch["mask"])
    poisoned["ys"] = jnp.where(pad[..., None], jnp.nan, batch["ys"])
    poisoned["us"] = jnp.where(pad[..., None], jnp.nan, batch["us"])
    g_poisoned = jax.jit(jax.grad(masked))(model, poisoned)
    for a, b in zip(jax.tree.leaves(g_poisoned), jax.tree.leaves(g_masked)):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    # The fit itself: the same optimiser on the written-out loss through train.
    sgd = optax.sgd(0.05)
    fitted = dynsys.fit(model, ragged, solver=sgd, num_steps=6, progress=False)
    trained = dynsys.train(reference, model, solver=sgd, num_steps=6, progress=False)
    np.testing.assert_allclose(fitted.losses, trained.losses, rtol=1e-8)
    for a, b in zip(jax.tree.leaves(fitted.model), jax.tree.leaves(trained.model)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def _markov(system, k=8):
    s = system.to_linear() if hasattr(system, "to_linear") else system
    K, B, C = (np.asarray(a) for a in (s.K, s.B, s.C))
    return np.stack([C @ np.linalg.matrix_power(K, j) @ B for j in range(k)])


@pytest.mark.parametrize(
    "loss",
    [dynsys.Simulation(), dynsys.MultipleShooting(10)],
    ids=["simulation", "shooting"],
)
def test_noise_free_output_error_recovers_the_system(loss):
    """C and D train like K and B: from a perturbed start the default optimiser
    reaches the Markov parameters C K^j B and D of the truth (the state basis is not
    identifiable, these are)."""
    system = _system(feedthrough=True)
    data, x0s = _data(system, N=3, T=40)
    result = dynsys.fit(_perturbed(system), data, loss=loss, progress=False)
    assert result.converged and result.stop_reason is None
    np.testing.assert_allclose(_markov(result.model), _markov(system), atol=1e-7)
    np.testing.assert_allclose(result.model.D, system.D, atol=1e-7)
    assert result.metrics["train"]["fit_percent"] > 99.999
    assert "one_step_nrmse" not in result.metrics["train"]
    if loss == dynsys.Simulation():
        np.testing.assert_allclose(
            _markov(result.model, 1)[0] @ np.zeros(1), 0.0
        )  # shape sanity
        assert result.x0s.shape == (3, 3)
    else:
        assert result.x0s.shape == (3, 4, 3)


class _Tanh(dynsys.AbstractSystem):
    """x_{t+1} = a x_t + b tanh(x_t) + c u_t (2 states, diagonal), y = x_0 + x_1."""

    a: jax.Array
    b: jax.Array
    c: jax.Array
    state_size: int = eqx.field(static=True, default=2)
    input_size: int = eqx.field(static=True, default=1)

    def step(self, t, x, u):
        return self.a * x + self.b * jnp.tanh(x) + self.c * u[0]

    def output(self, t, x, u):
        return jnp.stack([x[0] + x[1], x[0] - 0.5 * x[1]])

    @property
    def output_size(self):
        return 2


def test_nonlinear_output_error_trains_the_initial_states():
    true = _Tanh(jnp.array([0.5, 0.7]), jnp.array([0.3, -0.2]), jnp.array([0.4, 0.8]))
    x0s = jnp.array([[1.0, -0.5], [0.3, 0.9]])
    us = jax.random.normal(jax.random.key(0), (2, 25, 1))
    data = dynsys.simulate(true, x0s, 25, inputs=us)
    assert data.ys is not None
    start = _Tanh(
        jnp.array([0.45, 0.75]), jnp.array([0.25, -0.15]), jnp.array([0.45, 0.75])
    )
    result = dynsys.fit(start, data, progress=False)
    assert result.optimizer.startswith("Levenberg") and result.converged
    for name in ("a", "b", "c"):
        np.testing.assert_allclose(
            getattr(result.model, name), getattr(true, name), atol=1e-6
        )
    np.testing.assert_allclose(result.x0s, x0s, atol=1e-6)


def test_output_data_bad_input():
    system = _system()
    data, _ = _data(system)
    with pytest.raises(
        ValueError, match=r"fit\(loss=OneStep\(\)\): the data have outputs"
    ):
        dynsys.fit(system, data, loss=dynsys.OneStep(), progress=False)
    with pytest.raises(
        ValueError,
        match=r"fit\(data=...\): the data have p = 2 output channels but the model has output_size = 1",
    ):
        dynsys.fit(
            dynsys.LinearSystem(system.K, system.B, system.C[:1], system.D[:1]),
            data,
            progress=False,
        )
    with pytest.raises(
        ValueError,
        match=r"MultipleShooting\(horizon=1\)\): each window's initial state is estimated from its horizon \* p = 2 output samples, fewer than the n = 3 states; use a horizon >= 2",
    ):
        dynsys.fit(system, data, loss=dynsys.MultipleShooting(1), progress=False)
    states_only = dynsys.Dataset(xs=data.xs, us=data.us)
    with pytest.raises(
        ValueError,
        match=r"fit\(val_data=...\): the training data have outputs but the validation data have states only",
    ):
        dynsys.fit(system, data, val_data=states_only, progress=False)
    tanh = _Tanh(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))
    tanh_data = dynsys.simulate(tanh, jnp.zeros((2, 2)), 5, inputs=jnp.ones((2, 5, 1)))
    with pytest.raises(
        ValueError, match=r"estimated in closed form for linear models only, got _Tanh"
    ):
        dynsys.fit(tanh, tanh_data, val_data=tanh_data, progress=False)


@pytest.mark.parametrize("dtype, rtol", [(jnp.float64, 1e-10), (jnp.float32, 2e-4)])
def test_closed_form_x0_equals_weighted_least_squares(dtype, rtol):
    """The loss's x0 solve (normal equations with a hand-written derivative in
    float64, QR in float32) against numpy's least squares on each experiment's
    valid, weighted rows; its derivatives (G, b and the weights) against finite
    differences; a fully padded experiment gives a finite zero."""
    from jax.test_util import check_grads

    from dynsys._fitting.initial_states import solve_x0

    keys = jax.random.split(jax.random.key(4), 3)
    G = jax.random.normal(keys[0], (30, 2, 4), dtype)
    b = jax.random.normal(keys[1], (3, 30, 2), dtype)
    weights = jnp.array([0.5, 3.0], dtype)
    lengths = [23, 30, 0]
    valid = jnp.arange(30)[None, :] < jnp.array(lengths)[:, None]
    got = solve_x0(G, b, valid, weights)
    assert got.shape == (3, 4)
    root = np.sqrt(np.asarray(weights, np.float64))
    for i, length in enumerate(lengths[:2]):
        A = (np.asarray(G, np.float64)[:length] * root[None, :, None]).reshape(-1, 4)
        rhs = (np.asarray(b, np.float64)[i, :length] * root[None, :]).reshape(-1)
        expected = np.linalg.lstsq(A, rhs, rcond=None)[0]
        np.testing.assert_allclose(got[i], expected, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(got[2], np.zeros(4))  # fully padded
    if dtype == jnp.float64:
        check_grads(
            lambda G, b, w: solve_x0(G, b, valid[:2], w),
            (G, b[:2], weights),
            order=1,
            modes=["fwd", "rev"],
        )
