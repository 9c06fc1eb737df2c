"""The outputs from closed-form initial states (`closed_form`): its own
float64 derivative against differentiation through the free response and
`solve_x0`, central finite differences and reverse mode."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import dynsys
from dynsys._fitting import initial_states
from dynsys._fitting.initial_states import (
    closed_form,
    FreeRun,
    KalmanPredictor,
    solve_x0,
)


def _simulate(model, x0, num_steps, inputs):
    return dynsys.rollout(model, x0, num_steps, inputs=inputs).ys


def _through_the_free_response(model, ys, us, mask, weights):
    """The same outputs, differentiated by JAX through `G` and `solve_x0`."""
    n, (N, T) = model.state_size, ys.shape[:2]
    eye = jnp.eye(n)
    C = eye if model.C is None else model.C
    G = jnp.transpose(
        _simulate(dynsys.LinearSystem(model.K, C=C), eye, T, None), (1, 2, 0)
    )
    forced = _simulate(model, jnp.zeros((N, n)), T, us)
    x0 = solve_x0(G, ys - forced, mask, weights)
    return forced + jnp.einsum("tpn,in->itp", G, x0), x0


def _problem(inputs: bool, feedthrough: bool, levels: bool, seed=0):
    """A 3-state, 2-output model (1 or no input) and 3 experiments of 25 steps,
    the second padded after 17 steps (zeros there, as the loss passes them)."""
    rng = np.random.default_rng(seed)
    n, p, m, N, T = 3, 2, 1, 3, 25
    K = rng.normal(size=(n, n))
    K = 0.9 * K / np.max(np.abs(np.linalg.eigvals(K)))
    B = rng.normal(size=(n, m)) if inputs else None
    D = 0.3 * rng.normal(size=(p, m)) if inputs and feedthrough else None
    model = dynsys.LinearSystem(
        K,
        B,
        rng.normal(size=(p, n)),
        D,
        input_level=np.array([0.4]) if inputs and levels else None,
        output_level=np.array([1.0, -2.0]) if levels else None,
    )
    mask = jnp.asarray(np.arange(T)[None, :] < np.array([T, 17, T])[:, None])
    ys = jnp.where(mask[..., None], jnp.asarray(rng.normal(size=(N, T, p))), 0.0)
    us = jnp.asarray(rng.normal(size=(N, T, m))) if inputs else None
    if us is not None:
        us = jnp.where(mask[..., None], us, 0.0)
    return model, ys, us, mask, jnp.array([0.7, 2.5])


CASES = [(True, True, False), (True, False, True), (False, False, False)]


@pytest.fixture(params=["powers", "recursion"])
def adjoint_derivative(request, monkeypatch):
    """The adjoint recursion's derivative from the powers of `K` (the default
    here), or from the recursion run again (longer records: no powers kept)."""
    if request.param == "recursion":
        monkeypatch.setattr(initial_states, "POWERS_LIMIT", 0)
    return request.param


def _flat(model):
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)
    return flat, lambda point: eqx.combine(unravel(point), static)


@pytest.mark.parametrize("inputs, feedthrough, levels", CASES)
def test_the_derivative_equals_the_one_through_the_free_response(
    inputs, feedthrough, levels, adjoint_derivative
):
    model, ys, us, mask, weights = _problem(inputs, feedthrough, levels)
    flat, rebuild = _flat(model)

    def structured(point):
        return closed_form(FreeRun(_simulate), rebuild(point), ys, us, mask, weights)

    def plain(point):
        return _through_the_free_response(rebuild(point), ys, us, mask, weights)

    got, expected = jax.jacfwd(structured)(flat), jax.jacfwd(plain)(flat)
    for a, b in zip(structured(flat), plain(flat)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(got, expected):
        assert a.shape == b.shape and np.max(np.abs(b)) > 0.1
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.max(np.abs(b)))
    # The data of the padded steps move no initial state.
    x0_of_data = jax.jacfwd(
        lambda data: closed_form(FreeRun(_simulate), model, data, us, mask, weights)[1]
    )(ys)
    np.testing.assert_array_equal(x0_of_data[:, :, 1, 17:], 0.0)
    assert np.max(np.abs(x0_of_data[:, :, 1, :17])) > 0.01


@pytest.mark.parametrize("inputs, feedthrough, levels", CASES[:2])
def test_the_derivative_against_central_differences_and_reverse_mode(
    inputs, feedthrough, levels, adjoint_derivative
):
    model, ys, us, mask, weights = _problem(inputs, feedthrough, levels, seed=3)
    flat, rebuild = _flat(model)

    def loss(point, w=weights, data=ys):
        predicted, x0 = closed_form(
            FreeRun(_simulate), rebuild(point), data, us, mask, w
        )
        return jnp.sum(jnp.sin(predicted)) + jnp.sum(x0**2)

    forward = jax.jacfwd(loss)(flat)
    reverse = jax.grad(loss)(flat)
    h = 1e-6
    central = np.array(
        [(loss(flat + h * e) - loss(flat - h * e)) / (2 * h) for e in np.eye(flat.size)]
    )
    np.testing.assert_allclose(forward, central, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(reverse, forward, rtol=1e-11, atol=1e-11)
    # Along the weights and the data too (the fit never moves them).
    for argnum, value in ((1, weights), (2, ys)):
        along = jax.jacfwd(loss, argnums=argnum)(flat, weights, ys)
        step = h * np.asarray(np.random.default_rng(1).normal(size=value.shape))
        step = step * (mask[..., None] if argnum == 2 else 1.0)
        args_up = [flat, weights, ys]
        args_down = [flat, weights, ys]
        args_up[argnum], args_down[argnum] = value + step, value - step
        difference = (loss(*args_up) - loss(*args_down)) / 2
        np.testing.assert_allclose(np.sum(along * step), difference, rtol=1e-6)


@pytest.mark.parametrize("horizon", [1, 3])
def test_the_kalman_predictors_derivative_equals_the_one_through_its_response(
    horizon,
):
    """`closed_form` of a `KalmanPredictor` (the prediction-error loss's predictions) against
    JAX's derivative through `prediction_free_response`, the predictions from
    zero and `solve_x0`, along the model, the data and the weights."""
    from dynsys._systems.innovation import (
        kalman_predictions,
        prediction_free_response,
    )

    system, ys, us, mask, weights = _problem(True, True, True, seed=7)
    # A gain that moves the predictor's poles but keeps them inside 0.95.
    gain = 0.1 * np.random.default_rng(12).normal(size=(3, 2))
    radius = np.abs(np.linalg.eigvals(system.K - gain @ system.C)).max()
    assert radius < 0.95
    model = dynsys.InnovationSystem(
        system.K,
        system.B,
        system.C,
        system.D,
        kalman_gain=jnp.asarray(gain),
        input_level=system.input_level,
        output_level=system.output_level,
    )
    flat, rebuild = _flat(model)

    def structured(point, data, w):
        return closed_form(KalmanPredictor(horizon), rebuild(point), data, us, mask, w)

    def plain(point, data, w):
        m = rebuild(point)
        G = prediction_free_response(m, data.shape[1], horizon)
        rest = jnp.zeros((data.shape[0], m.state_size))
        forced = kalman_predictions(m, rest, data, us, horizon)
        x0 = solve_x0(G, data - forced, mask, w)
        return forced + jnp.einsum("tpn,in->itp", G, x0), x0

    for a, b in zip(structured(flat, ys, weights), plain(flat, ys, weights)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for argnums in (0, 1, 2):
        got = jax.jacfwd(structured, argnums=argnums)(flat, ys, weights)
        expected = jax.jacfwd(plain, argnums=argnums)(flat, ys, weights)
        for a, b in zip(got, expected):
            assert np.max(np.abs(b)) > 1e-3
            scale = np.max(np.abs(b))
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * scale)
    reverse = jax.grad(lambda p: jnp.sum(jnp.sin(structured(p, ys, weights)[0])))
    forward = jax.jacfwd(lambda p: jnp.sum(jnp.sin(structured(p, ys, weights)[0])))
    np.testing.assert_allclose(reverse(flat), forward(flat), rtol=1e-10, atol=1e-10)


def test_the_adjoint_sums_derivative_in_every_argument_equals_a_plain_loops(
    adjoint_derivative,
):
    """`sum_t (C K^t)^T v_t` along `K`, `C` and `v` together, against a Python loop
    over the steps differentiated by JAX."""
    rng = np.random.default_rng(5)
    n, p, N, T = 3, 2, 2, 9
    K = jnp.asarray(0.5 * rng.normal(size=(n, n)))
    C = jnp.asarray(rng.normal(size=(p, n)))
    v = jnp.asarray(rng.normal(size=(N, T, p)))

    def loop(K, C, v):
        total, power = jnp.zeros((N, n)), jnp.eye(n)
        for t in range(T):
            total = total + v[:, t] @ C @ power
            power = power @ K
        return total

    def adjoint(K, C, v):
        return initial_states._adjoint_sum(dynsys.LinearSystem(K, C=C), v)

    directions = [jnp.asarray(rng.normal(size=a.shape)) for a in (K, C, v)]
    got = jax.jvp(adjoint, (K, C, v), tuple(directions))
    expected = jax.jvp(loop, (K, C, v), tuple(directions))
    for a, b in zip(got, expected):
        assert np.max(np.abs(b)) > 0.1
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_float32_solves_with_the_qr_factors():
    """In float32 the values are `solve_x0`'s QR solves (to round-off), and the derivative, solved
    with the same factors, agrees with float64's and with JAX's derivative through
    the free response and the QR solves."""
    model, ys, us, mask, weights = _problem(True, True, False)
    flat, rebuild = _flat(model)
    single = [jnp.asarray(a, jnp.float32) for a in (flat, ys, us, weights)]

    def structured(point, ys, us, weights):
        return closed_form(FreeRun(_simulate), rebuild(point), ys, us, mask, weights)

    def plain(point, ys, us, weights):
        return _through_the_free_response(rebuild(point), ys, us, mask, weights)

    reference = jax.jacfwd(structured)(flat, ys, us, weights)
    for value, expected in zip(structured(*single), plain(*single)):
        assert value.dtype == jnp.float32
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)
    for got, through in zip(
        jax.jacfwd(structured)(*single), jax.jacfwd(plain)(*single)
    ):
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(
            got, through, rtol=2e-3, atol=2e-4 * np.max(np.abs(through))
        )
    for got, expected in zip(jax.jacfwd(structured)(*single), reference):
        np.testing.assert_allclose(
            got, expected, rtol=2e-3, atol=2e-4 * np.max(np.abs(expected))
        )


@pytest.mark.filterwarnings("ignore:fit. the model is unstable or marginal")
@pytest.mark.parametrize(
    "adjoint, optimizers",
    [(dynsys.LinearAdjoint(), ("adam",)), (dynsys.Checkpointed(), ("adam", None))],
)
def test_fits_with_other_adjoints_take_the_same_steps(adjoint, optimizers):
    """The derivative differentiates the rollout in forward mode inside its rule;
    a fit on output data with another adjoint (reverse mode through the rule with
    an optax optimiser; forward mode with Levenberg–Marquardt, which `fit` uses
    with `Checkpointed` and not with `LinearAdjoint`) takes the default adjoint's
    steps."""
    import optax

    model, ys, us, mask, _ = _problem(True, True, False, seed=5)
    data = dynsys.Dataset(us=us[:, :17], ys=ys[:, :17])
    for name in optimizers:
        optimizer = optax.adam(1e-3) if name == "adam" else None
        results = [
            dynsys.fit(
                model, data, solver=optimizer, adjoint=a, num_steps=5, progress=False
            )
            for a in (adjoint, None)
        ]
        assert results[0].optimizer == results[1].optimizer
        np.testing.assert_allclose(results[0].losses, results[1].losses, rtol=1e-9)
        assert results[1].losses[-1] < results[1].losses[0]
