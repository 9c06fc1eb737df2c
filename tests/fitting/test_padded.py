"""Fits padded to one size (`dynsys/_fitting/padded.py`, `fit_padded.py`): the same
steps as the unpadded fit, and one compiled program for every structure."""

import warnings
from types import SimpleNamespace

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import dynsys
from dynsys._experiments.fit.order import refined_size
from dynsys._fitting import levenberg_marquardt
from dynsys._fitting.fit_padded import fit_padded
from dynsys._fitting.gauge import masked_step_basis, step_basis
from dynsys._fitting.padded import (
    LOWER_ORDER_PADDING_LIMIT,
    pad,
    PADDED_JACOBIAN_LIMIT,
    padded_size,
    unpad,
    worth_padding,
)

from ..compile_count import compiled_programs


jax.config.update("jax_enable_x64", True)


def _record(seed=0, states=4, samples=500):
    """A random stable SISO system's response to white noise, 5 % output noise;
    estimation (first 400 samples) and held-out data."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(states, states))
    a *= 0.9 / np.max(np.abs(np.linalg.eigvals(a)))
    true = dynsys.LinearSystem(
        a, rng.normal(size=(states, 1)), rng.normal(size=(1, states))
    )
    u = rng.normal(size=(samples, 1))
    y = np.array(
        dynsys.simulate(true, np.zeros((1, states)), samples, inputs=u[None]).ys[0]
    )
    y += 0.05 * y.std() * rng.normal(size=y.shape)
    cut = 400
    return (
        dynsys.Dataset(us=u[None, :cut], ys=y[None, :cut]),
        dynsys.Dataset(us=u[None, cut:], ys=y[None, cut:]),
    )


def _fit(fitter, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fitter(*args, progress=False, num_steps=30, **kwargs)


def _markov(model, count=12):
    """`D, C B, C K B, ...`: the input–output behaviour, free of the state basis."""
    terms = [np.zeros((1, 1)) if model.D is None else np.asarray(model.D)]
    power = np.asarray(model.B)
    for _ in range(count):
        terms.append(np.asarray(model.C) @ power)
        power = np.asarray(model.K) @ power
    return np.concatenate(terms)


def test_pad_and_unpad_are_inverse_and_the_mask_frees_the_block():
    model = dynsys.LinearSystem(
        jnp.array([[0.5, 0.1], [0.0, 0.3]]),
        jnp.array([[1.0], [2.0]]),
        jnp.array([[1.0, -1.0]]),
        offset=jnp.array([0.2, -0.1]),
    )
    padded, mask = pad(model, 4, feedthrough=True)
    assert padded.K.shape == (4, 4) and padded.D.shape == (1, 1)
    np.testing.assert_array_equal(padded.K[2:], 0.0)
    np.testing.assert_array_equal(mask.K, np.kron([[1, 0], [0, 0]], np.ones((2, 2))))
    np.testing.assert_array_equal(mask.D, 0.0)  # no D in the model: frozen at 0
    np.testing.assert_array_equal(mask.offset, [1, 1, 0, 0])
    back = unpad(padded, 2, feedthrough=False)
    assert back.D is None
    for name in ("K", "B", "C", "offset"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
    with pytest.raises(ValueError, match="feedthrough"):
        pad(dynsys.LinearSystem(model.K, model.B, model.C, jnp.ones((1, 1))), 3, False)
    assert padded_size([(2, False), (5, False), (3, True)]) == (5, True)


@pytest.mark.usefixtures("no_persistent_cache")  # a program read back is not counted
def test_pad_unpad_and_the_free_mask_compile_nothing():
    rng = np.random.default_rng(7)
    model = dynsys.LinearSystem(  # shapes no other test pads
        jnp.asarray(0.3 * rng.normal(size=(3, 3))),
        jnp.asarray(rng.normal(size=(3, 2))),
        jnp.asarray(rng.normal(size=(2, 3))),
        jnp.asarray(rng.normal(size=(2, 2))),
    )
    data = SimpleNamespace(ys=np.zeros((1, 50, 2)))
    with compiled_programs(fresh=True) as compiled:
        padded, mask = pad(model, 6, feedthrough=True)
        back = unpad(padded, 3, feedthrough=True)
        worth_padding(model, 6, True, data)
    assert sum(compiled.values()) == 0, compiled
    for name in ("K", "B", "C", "D"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
        assert getattr(padded, name).dtype == getattr(model, name).dtype
    assert np.sum(mask.K) == 9 and np.sum(mask.D) == 4


def test_the_masked_basis_spans_the_unpadded_step_directions():
    rng = np.random.default_rng(1)
    model = dynsys.LinearSystem(
        0.3 * rng.normal(size=(2, 2)),
        rng.normal(size=(2, 1)),
        rng.normal(size=(1, 2)),
        offset=rng.normal(size=2),
    )
    padded, mask = pad(model, 4, feedthrough=True)
    params = ravel_pytree((padded, None))[0]
    free = ravel_pytree((mask, None))[0]
    basis = masked_step_basis(*eqx.partition((padded, None), eqx.is_array), free)
    # The unpadded gauge-free directions, mapped into the padded coordinates (pad
    # is linear in the matrices).
    flat, unravel = ravel_pytree((model, None))
    reference = step_basis(*eqx.partition((model, None), eqx.is_array))
    embed = np.stack(
        [
            ravel_pytree((pad(unravel(e)[0], 4, True)[0], None))[0]
            for e in np.eye(flat.size)
        ],
        axis=1,
    )
    expected = embed @ reference
    # Same width as the padded model's own (unmasked) gauge-free basis.
    assert basis.shape == (params.size, params.size - 16)
    used = np.linalg.norm(basis, axis=0) > 0.5
    assert used.sum() == reference.shape[1]  # 11 parameters less 4 gauge: 7
    kept = np.asarray(basis)[:, used]
    np.testing.assert_allclose(kept.T @ kept, np.eye(used.sum()), atol=1e-12)
    np.testing.assert_array_equal(np.asarray(basis)[np.asarray(free) == 0], 0.0)
    # The same subspace: equal orthogonal projectors.
    np.testing.assert_allclose(kept @ kept.T, expected @ expected.T, atol=1e-12)


@pytest.mark.parametrize(("order", "feedthrough"), [(2, False), (3, True)])
def test_a_padded_fit_takes_the_unpadded_fit_s_steps(order, feedthrough):
    data, val = _record()
    start = dynsys.fit_subspace(data, order, feedthrough=feedthrough)
    plain = _fit(dynsys.fit, start, data, val_data=val)
    padded = _fit(fit_padded, start, data, 5, True, val_data=val)
    np.testing.assert_allclose(padded.losses, plain.losses, rtol=1e-10)
    assert padded.best_step == plain.best_step
    assert (padded.model.D is None) == (not feedthrough)
    assert padded.model.K.shape == (order, order)
    np.testing.assert_allclose(_markov(padded.model), _markov(plain.model), atol=1e-9)
    assert padded.x0s.shape == plain.x0s.shape
    np.testing.assert_allclose(
        padded.metrics["validation"]["fit_percent"],
        plain.metrics["validation"]["fit_percent"],
        rtol=1e-9,
    )
    # The covariance is the unpadded model's, not the padded one's.
    np.testing.assert_allclose(
        padded.covariance.matrix, plain.covariance.matrix, rtol=1e-6, atol=1e-14
    )


@pytest.mark.usefixtures("no_persistent_cache")  # a program read back is not traced
def test_fits_padded_to_one_size_trace_their_step_once(monkeypatch):
    traces = []
    original = levenberg_marquardt.LevenbergMarquardt.step

    def counted(self, *args):
        traces.append(1)
        return original(self, *args)

    monkeypatch.setattr(levenberg_marquardt.LevenbergMarquardt, "step", counted)
    data, val = _record(seed=2)
    structures = [(1, False), (2, True)]
    starts = [dynsys.fit_subspace(data, n, feedthrough=d) for n, d in structures]
    _fit(fit_padded, starts[0], data, 3, True, val_data=val)
    first = len(traces)
    assert first > 0
    _fit(fit_padded, starts[1], data, 3, True, val_data=val)
    assert len(traces) == first  # another structure, the same program
    _fit(dynsys.fit, starts[1], data, val_data=val)
    assert len(traces) > first  # unpadded, each structure traces its own


def test_padding_is_used_only_where_the_padded_jacobian_is_small():
    model = dynsys.LinearSystem(
        0.5 * jnp.eye(2), jnp.ones((2, 3)), jnp.ones((3, 2)), offset=jnp.zeros(2)
    )

    def data(samples):
        return dynsys.Dataset(
            us=jnp.zeros((1, samples, 3)), ys=jnp.zeros((1, samples, 3))
        )

    # Padded to order 7 with D: 49 + 21 + 21 + 9 + 7 = 107 parameters, less 49
    # change-of-basis directions: 58 Jacobian columns of 3 residuals per sample.
    samples = PADDED_JACOBIAN_LIMIT // (3 * 58)
    assert worth_padding(model, 7, True, data(samples))
    assert not worth_padding(model, 7, True, data(samples + 1))


def test_the_final_fit_shares_the_scan_s_size_only_where_it_pays():
    def scan(*structures):
        rows = [
            SimpleNamespace(order=n, feedthrough=d, refined=r) for n, d, r in structures
        ]
        return SimpleNamespace(candidates=rows), 1.0

    def model(order):
        return dynsys.LinearSystem(
            0.5 * jnp.eye(order), jnp.ones((order, 1)), jnp.ones((1, order))
        )

    def data(samples):
        return dynsys.Dataset(
            us=jnp.zeros((1, samples, 1)), ys=jnp.zeros((1, samples, 1))
        )

    scanned = scan((2, False, True), (4, True, True), (3, False, False))
    # Padded to order 4 with D: 16 + 4 + 4 + 1 = 25 parameters, 9 directions.
    assert refined_size(scanned, model(4), data(100)) == (4, True)
    assert refined_size(scanned, model(2), data(100)) == (4, True)
    assert refined_size(None, model(2), data(100)) is None
    assert refined_size(scan((2, False, False)), model(2), data(100)) is None
    assert refined_size(scanned, model(5), data(100)) is None  # larger than the size
    # A lower order than the padded one: the smaller limit applies.
    lower = LOWER_ORDER_PADDING_LIMIT // 9
    assert refined_size(scanned, model(2), data(lower)) == (4, True)
    assert refined_size(scanned, model(2), data(lower + 1)) is None
    assert refined_size(scanned, model(4), data(lower + 1)) == (4, True)
    same = PADDED_JACOBIAN_LIMIT // 9
    assert refined_size(scanned, model(4), data(same + 1)) is None
