import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def _random_system(key, n=6, m=2, p=2, radius=0.9):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    K = jax.random.normal(k1, (n, n))
    K = radius * K / jnp.max(jnp.abs(jnp.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K,
        jax.random.normal(k2, (n, m)),
        jax.random.normal(k3, (p, n)),
        jax.random.normal(k4, (p, m)),
    )


def _data(system, lengths, key, snr_db=None, dt=None):
    """Outputs of `system` from random x0 and white inputs, cut to `lengths`."""
    N, T = len(lengths), max(lengths)
    k1, k2, k3 = jax.random.split(key, 3)
    us = jax.random.normal(k1, (N, T, system.input_size))
    x0s = jax.random.normal(k2, (N, system.state_size))
    ys = dynsys.rollout(system, x0s, T, inputs=us).ys
    if snr_db is not None:
        scale = jnp.std(ys, axis=(0, 1)) * 10 ** (-snr_db / 20)
        ys = ys + scale[None, None] * jax.random.normal(k3, ys.shape)
    ts = None if dt is None else dt * jnp.arange(T)
    return dynsys.Dataset(us=us, ys=ys, ts=ts, lengths=lengths)


def _markov(system, count=11):
    K, B, C = (np.asarray(a) for a in (system.K, system.B, system.C))
    return np.stack([C @ np.linalg.matrix_power(K, k) @ B for k in range(count)])


def _matched_eigenvalues(K1, K2):
    e1 = list(np.linalg.eigvals(np.asarray(K1)))
    e2 = list(np.linalg.eigvals(np.asarray(K2)))
    assert len(e1) == len(e2)
    pairs = []
    for value in e1:  # nearest unmatched
        j = int(np.argmin([abs(value - w) for w in e2]))
        pairs.append((value, e2.pop(j)))
    return np.array(pairs)


@pytest.mark.parametrize("lengths", [(200,) * 4, (200, 150, 120, 90)])
def test_exact_on_noise_free_data(getkey, lengths):
    true = _random_system(getkey())
    true = dynsys.LinearSystem(true.K, true.B, true.C)  # no feedthrough
    data = _data(true, lengths, getkey(), dt=0.5)
    model = dynsys.fit_subspace(data)  # order chosen: 6
    assert model.K.shape == (6, 6) and model.D is None and model.dt == 0.5
    pairs = _matched_eigenvalues(true.K, model.K)
    np.testing.assert_allclose(pairs[:, 1], pairs[:, 0], atol=1e-6)
    np.testing.assert_allclose(_markov(model), _markov(true), atol=1e-6)


def test_feedthrough_recovers_D(getkey):
    true = _random_system(getkey(), n=4, m=2, p=3)
    data = _data(true, (120, 100, 80), getkey())
    model = dynsys.fit_subspace(data, order=4, feedthrough=True)
    np.testing.assert_allclose(model.D, true.D, atol=1e-6)
    np.testing.assert_allclose(_markov(model), _markov(true), atol=1e-6)


def test_output_only_data(getkey):
    # Free responses from several initial states: no inputs, B is None.
    true = dynsys.LinearSystem(
        jnp.array([[0.95, 0.3, 0.0], [-0.3, 0.95, 0.0], [0.0, 0.0, 0.5]]),
        C=jnp.array([[1.0, 0.0, 1.0]]),
    )
    x0s = jax.random.normal(getkey(), (5, 3))
    ys = dynsys.rollout(true, x0s, 60).ys
    data = dynsys.Dataset(ys=ys)
    model = dynsys.fit_subspace(data, order=3)
    assert model.B is None
    pairs = _matched_eigenvalues(true.K, model.K)
    np.testing.assert_allclose(pairs[:, 1], pairs[:, 0], atol=1e-8)


def test_order_selection_at_40_db(getkey):
    true = _random_system(getkey())
    true = dynsys.LinearSystem(true.K, true.B, true.C)
    data = _data(true, (200,) * 4, getkey(), snr_db=40.0)
    values = dynsys.subspace_singular_values(data)
    assert values.shape == (20,)
    model = dynsys.fit_subspace(data)
    assert model.state_size == 6
    assert np.all(np.abs(np.linalg.eigvals(np.asarray(model.K))) < 1.0)


@pytest.mark.parametrize("offset", [False, True])
def test_singular_values_against_dense_numpy_reference(getkey, offset):
    """The per-experiment QR (ragged lengths) equals one dense LQ of the stacked
    block Hankel matrix built by a plain loop (with `offset`: of the data less
    their means, with a row of ones after the future inputs)."""
    true = _random_system(getkey(), n=3, m=1, p=2)
    lengths = (60, 45, 30)
    data = _data(true, lengths, getkey(), snr_db=20.0)
    ys = [np.asarray(data.ys[i, :T]) for i, T in enumerate(lengths)]
    us = [np.asarray(data.us[i, :T]) for i, T in enumerate(lengths)]
    if offset:
        y_bar, u_bar = np.concatenate(ys).mean(0), np.concatenate(us).mean(0)
        ys, us = [y - y_bar for y in ys], [u - u_bar for u in us]
    s = 5
    columns = []
    for y, u in zip(ys, us):
        for j in range(len(y) - 2 * s + 1):
            columns.append(
                np.concatenate(
                    [
                        u[j + s : j + 2 * s].ravel(),
                        [1.0] * offset,
                        u[j : j + s].ravel(),
                        y[j : j + s].ravel(),
                        y[j + s : j + 2 * s].ravel(),
                    ]
                )
            )
    H = np.array(columns).T
    L = np.linalg.qr(H.T, mode="r").T / np.sqrt(H.shape[1])
    a, b = s * 1 + offset, s * 3
    expected = np.linalg.svd(L[a + b :, a : a + b], compute_uv=False)
    values = dynsys.subspace_singular_values(data, horizon=s, offset=offset)
    np.testing.assert_allclose(values, expected, rtol=1e-9, atol=1e-12)


def test_bad_input(getkey):
    true = _random_system(getkey(), n=2, m=1, p=1)
    data = _data(true, (50, 30, 16), getkey())
    with pytest.raises(ValueError, match=r"largest order possible is .* = 7, got 9"):
        dynsys.fit_subspace(data, order=9, horizon=8)
    with pytest.raises(
        ValueError, match="experiment 2 has 16; the largest horizon possible is 8"
    ):
        dynsys.fit_subspace(data, horizon=9)
    with pytest.raises(ValueError, match="order must be a positive integer"):
        dynsys.fit_subspace(data, order=0)
    with pytest.raises(ValueError, match="horizon must be an integer >= 2"):
        dynsys.subspace_singular_values(data, horizon=1)
    tiny = _data(true, (3, 3), getkey())
    with pytest.raises(ValueError, match="too little data"):
        dynsys.fit_subspace(tiny)
    no_inputs = dynsys.Dataset(ys=data.ys, lengths=data.lengths)
    with pytest.raises(ValueError, match="no inputs, so there is no D"):
        dynsys.fit_subspace(no_inputs, feedthrough=True)


def test_orders_share_the_past_projection_and_realise_as_alone(getkey, monkeypatch):
    """The windows' past projection (the noise model's state estimates) depends on
    the data and the horizon only: an order scan computes it once, and each order's
    innovation model equals the one realised from a basis of its own."""
    from dynsys._sysid import subspace

    data = _data(_random_system(getkey()), [300, 250], getkey(), snr_db=30)
    computed = []
    original = subspace.past_projection

    def counted(*args):
        computed.append(args[1])
        return original(*args)

    monkeypatch.setattr(subspace, "past_projection", counted)
    bases = subspace.subspace_bases("test", data, horizon=10, offset=False)
    shared = [subspace.realise("test", bases(n), n, True, True) for n in (2, 4, 6)]
    assert computed == [10]
    for n, model in zip((2, 4, 6), shared):
        alone = subspace.subspace_bases("test", data, horizon=10, offset=False)(n)
        reference = subspace.realise("test", alone, n, True, True)
        for name in ("K", "B", "C", "D", "kalman_gain"):
            np.testing.assert_array_equal(
                getattr(model, name), getattr(reference, name), err_msg=name
            )
    assert len(computed) == 4


@pytest.mark.usefixtures("no_persistent_cache")  # a program read back is not counted
def test_the_operating_point_is_the_mean_of_the_valid_steps_and_compiles_nothing():
    from dynsys._sysid.operating_point import data_levels, deviations
    from dynsys._sysid.signals import signals

    from ..compile_count import compiled_programs

    rng = np.random.default_rng(3)
    lengths = [37, 23]  # ragged: the padding must not count
    us = [rng.normal(size=(T, 2)) + 4.0 for T in lengths]
    ys = [rng.normal(size=(T, 3)) - 1.5 for T in lengths]
    data = dynsys.Dataset(us=us, ys=ys)
    s = signals(data, "test")
    with compiled_programs(fresh=True) as compiled:
        u_bar, y_bar = data_levels(s)
        centred = deviations(s, u_bar, y_bar)
    assert sum(compiled.values()) == 0, compiled
    # A plain loop over the experiments' valid steps.
    u_ref = sum(u.sum(axis=0) for u in us) / sum(lengths)
    y_ref = sum(y.sum(axis=0) for y in ys) / sum(lengths)
    np.testing.assert_allclose(u_bar, u_ref, rtol=1e-12)
    np.testing.assert_allclose(y_bar, y_ref, rtol=1e-12)
    for i, T in enumerate(lengths):
        np.testing.assert_allclose(centred.ys[i, :T], ys[i] - y_ref, atol=1e-12)
        np.testing.assert_allclose(centred.us[i, :T], us[i] - u_ref, atol=1e-12)
        np.testing.assert_array_equal(centred.ys[i, T:], 0.0)
    assert isinstance(centred.ys, jax.Array) and centred.ys.dtype == s.ys.dtype
