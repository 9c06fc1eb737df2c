import numpy as np
import pytest
import scipy.signal

import dynsys


def _arx_data(rng, lengths, p, m, na, nb, nk, noise=0.1, level=0.0):
    """Data of a random stable MIMO ARX system (plus white equation noise), padded
    to the longest experiment; also returns its coefficients."""
    A = 0.3 * rng.standard_normal((na, p, p)) / max(na, 1)
    Bs = rng.standard_normal((nb, p, m))
    T = max(lengths)
    us = rng.standard_normal((len(lengths), T, m))
    ys = np.zeros((len(lengths), T, p))
    for i in range(len(lengths)):
        for t in range(T):
            y = noise * rng.standard_normal(p) + level
            for k in range(1, na + 1):
                if t - k >= 0:
                    y -= A[k - 1] @ ys[i, t - k]
            for j in range(nb):
                if t - nk - j >= 0:
                    y += Bs[j] @ us[i, t - nk - j]
            ys[i, t] = y
    for i, length in enumerate(lengths):
        ys[i, length:] = 0.0
        us[i, length:] = 0.0
    return dynsys.Dataset(us=us, ys=ys, lengths=list(lengths)), A, Bs


def _reference(data, na, nb, nk, offset):
    """The least-squares ARX coefficients, by a plain loop over the steps and
    np.linalg.lstsq: `(A (na, p, p), Bs (nb, p, m))`."""
    ys, us = np.asarray(data.ys), np.asarray(data.us)
    lengths = data.lengths
    if offset:
        valid = np.concatenate([np.arange(ys.shape[1]) < T for T in lengths])
        y_bar = ys.reshape(-1, ys.shape[-1])[valid].mean(axis=0)
        u_bar = us.reshape(-1, us.shape[-1])[valid].mean(axis=0)
        ys, us = ys - y_bar, us - u_bar
    L = max(na, nk + nb - 1)
    rows, targets = [], []
    for i, T in enumerate(lengths):
        for t in range(L, T):
            row = [-ys[i, t - k] for k in range(1, na + 1)]
            row += [us[i, t - nk - j] for j in range(nb)]
            row += [np.ones(1)] if offset else []
            rows.append(np.concatenate(row))
            targets.append(ys[i, t])
    theta = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)[0].T
    p, m = ys.shape[-1], us.shape[-1]
    A = np.stack([theta[:, k * p : (k + 1) * p] for k in range(na)])
    Bs = np.stack([theta[:, na * p + j * m : na * p + (j + 1) * m] for j in range(nb)])
    return A, Bs


def _coefficients(model, p, na, nb, nk):
    """A and B of the ARX model read back from the observer form."""
    K, C = np.asarray(model.K), np.asarray(model.C)
    B = np.asarray(model.B)
    D = np.zeros((p, B.shape[1])) if model.D is None else np.asarray(model.D)
    L = K.shape[0] // p
    A = np.stack([-K[k * p : (k + 1) * p, :p] for k in range(L)])
    B_tilde = np.stack([B[k * p : (k + 1) * p] + A[k] @ D for k in range(L)])
    B_tilde = np.concatenate([D[None], B_tilde])  # B̃_0 = D
    np.testing.assert_array_equal(C, np.eye(p, K.shape[0]))
    return A[:na], B_tilde[nk : nk + nb]


@pytest.mark.parametrize(
    "lengths, p, m, na, nb, nk",
    [
        ((300,), 1, 1, 2, 2, 1),
        ((200, 150, 120), 2, 3, 2, 3, 1),
        ((250, 180), 2, 1, 1, 2, 0),
        ((200,), 1, 2, 3, 1, 2),
    ],
)
@pytest.mark.parametrize("offset", [False, True])
def test_equals_numpy_least_squares(lengths, p, m, na, nb, nk, offset):
    rng = np.random.default_rng(0)
    data, _, _ = _arx_data(rng, lengths, p, m, na, nb, nk, level=1.5)
    model = dynsys.fit_arx(data, na, nb, nk, offset=offset)
    A_ref, B_ref = _reference(data, na, nb, nk, offset)
    L = max(na, nk + nb - 1)
    assert model.K.shape == (p * L, p * L)
    assert (model.D is not None) == (nk == 0)
    A, Bs = _coefficients(model, p, na, nb, nk)
    np.testing.assert_allclose(A, A_ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(Bs, B_ref, rtol=0, atol=1e-10)
    assert (model.output_level is not None) == offset


def test_frequency_response_siso_matches_scipy():
    rng = np.random.default_rng(1)
    na, nb, nk = 3, 2, 2
    data, _, _ = _arx_data(rng, (400,), 1, 1, na, nb, nk)
    model = dynsys.fit_arx(data, na, nb, nk, offset=False)
    A, Bs = _reference(data, na, nb, nk, offset=False)
    a = np.concatenate([[1.0], A[:, 0, 0]])
    b = np.concatenate([np.zeros(nk), Bs[:, 0, 0]])
    w = np.linspace(0.01, np.pi, 40)
    _, expected = scipy.signal.freqz(b, a, worN=w)
    got = np.asarray(dynsys.frequency_response(model, w))[:, 0, 0]
    np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-10)


def test_frequency_response_mimo_matches_polynomials():
    rng = np.random.default_rng(2)
    p, m, na, nb, nk = 2, 2, 2, 2, 0
    data, _, _ = _arx_data(rng, (300, 300), p, m, na, nb, nk)
    model = dynsys.fit_arx(data, na, nb, nk, offset=False)
    A, Bs = _reference(data, na, nb, nk, offset=False)
    w = np.linspace(0.02, 3.0, 25)
    expected = []
    for omega in w:
        z = np.exp(1j * omega)
        A_z = np.eye(p) + sum(A[k] * z ** -(k + 1) for k in range(na))
        B_z = sum(Bs[j] * z ** -(nk + j) for j in range(nb))
        expected.append(np.linalg.solve(A_z, B_z))
    got = np.asarray(dynsys.frequency_response(model, w))
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-8, atol=1e-10)


def test_offset_model_simulates_raw_data():
    """Noise-free ARX data with a constant term (a level far from zero): the model
    with its operating point reproduces the raw outputs."""
    rng = np.random.default_rng(3)
    data, _, _ = _arx_data(rng, (200, 160), 2, 1, 2, 2, 1, noise=0.0, level=40.0)
    model = dynsys.fit_arx(data, 2, 2, 1)
    fit = np.asarray(dynsys.compare(model, data).fit_percent)
    np.testing.assert_allclose(fit, 100.0, atol=1e-5)


def test_real_heating_record():
    """The heating record exactly as received (levels far from zero): the
    coefficients are numpy's least squares, and the model simulates the raw held-out
    temperatures (a wrong operating point would put it ~130 degrees off)."""
    data = dynsys.load_dataset(
        "data/real/heating.csv", inputs=["drive_V"], outputs=["temp_C"], time="t_s"
    )
    train, val = data.split_time(1 / 3)
    model = dynsys.fit_arx(train, 2, 2, 1)
    assert model.state_size == 2 and model.dt == 2.0
    A, Bs = _coefficients(model, 1, 2, 2, 1)
    A_ref, B_ref = _reference(train, 2, 2, 1, offset=True)
    np.testing.assert_allclose(A, A_ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(Bs, B_ref, rtol=0, atol=1e-10)
    assert float(dynsys.compare(model, val).fit_percent[0]) > 20.0


def test_errors():
    rng = np.random.default_rng(4)
    data, _, _ = _arx_data(rng, (20,), 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match=r"fit_arx\(na=...\).*largest na possible is"):
        dynsys.fit_arx(data, 15, 2, 1)
    with pytest.raises(ValueError, match=r"fit_arx\(nb=...\).*largest nb possible is"):
        dynsys.fit_arx(data, 1, 12, 1)
    with pytest.raises(ValueError, match=r"fit_arx\(na=...\): must be >= 0, got -1"):
        dynsys.fit_arx(data, -1, 1, 1)
    with pytest.raises(TypeError, match=r"fit_arx\(nk=...\): expected an integer"):
        dynsys.fit_arx(data, 1, 1, 1.5)
    with pytest.raises(ValueError, match=r"fit_arx\(na=..., nb=...\)"):
        dynsys.fit_arx(data, 0, 1, 0)
    no_inputs = dynsys.Dataset(ys=np.asarray(data.ys))
    with pytest.raises(ValueError, match=r"fit_arx\(nb=...\): the data has no inputs"):
        dynsys.fit_arx(no_inputs, 2, 1, 1)
    assert dynsys.fit_arx(no_inputs, 2, 0, 1).B is None
