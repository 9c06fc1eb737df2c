"""ARMAX and Box–Jenkins fits (`fit_armax`, `fit_box_jenkins`) against plain
Python loops of their difference equations.

The coefficients are read through the internal estimators (`armax_polynomials`,
`box_jenkins_polynomials`), which the public functions convert; the conversion is
checked on its own against the loops."""

import numpy as np
import pytest

import dynsys
from dynsys._sysid.armax import Armax, armax_polynomials, armax_state_space
from dynsys._sysid.box_jenkins import (
    box_jenkins_polynomials,
    box_jenkins_state_space,
    BoxJenkins,
)
from dynsys._sysid.polynomial import experiments


# --- plain loops of the difference equations (zero before t = 0) ---------------


def _lag(x, t, k):
    return x[t - k] if t - k >= 0 else 0.0


def _armax_errors_loop(y, u, a, b, c, nk):
    """$e_t = y_t + \\sum a_i y_{t-i} - \\sum_j \\sum_k b_{k j} u_{j, t-nk-k} -
    \\sum c_i e_{t-i}$; `u (T, m)` or `None`."""
    e = np.zeros(len(y))
    for t in range(len(y)):
        value = y[t] + sum(a[i - 1] * _lag(y, t, i) for i in range(1, len(a) + 1))
        if u is not None:
            for k in range(b.shape[0]):
                if t - nk - k >= 0:
                    value -= float(b[k] @ u[t - nk - k])
        value -= sum(c[i - 1] * _lag(e, t, i) for i in range(1, len(c) + 1))
        e[t] = value
    return e


def _rational_loop(num, den, x, delay):
    """$w_t = \\sum_k num_k x_{t-delay-k} - \\sum_i den_i w_{t-i}$ (`den` without
    its leading 1)."""
    w = np.zeros(len(x))
    for t in range(len(x)):
        value = sum(num[k] * _lag(x, t, delay + k) for k in range(len(num)))
        w[t] = value - sum(den[i - 1] * _lag(w, t, i) for i in range(1, len(den) + 1))
    return w


def _bj_errors_loop(y, u, b, f, c, d, nk):
    """$e = (D / C)(y - \\sum_j (B_j / F_j) u_{j, t-nk})$ by loops."""
    v = np.array(y, dtype=float)
    if u is not None:
        for j in range(u.shape[1]):
            v = v - _rational_loop(b[:, j], f[:, j], u[:, j], nk)
    # e_t = v_t + sum d_i v_{t-i} - sum c_i e_{t-i}
    vd = v + np.array(
        [
            sum(d[i - 1] * _lag(v, t, i) for i in range(1, len(d) + 1))
            for t in range(len(v))
        ]
    )
    return _rational_loop(np.ones(1), c, vd, 0)


# --- simulated data -------------------------------------------------------------

T = 2000
SIGMA = 0.1
ARMAX_TRUE = dict(
    a=np.array([-1.5, 0.7]),
    b=np.array([[1.0], [0.5]]),
    c=np.array([-0.3, 0.2]),
    nk=1,
)
BJ_TRUE = dict(
    b=np.array([[1.0], [0.5]]),
    f=np.array([[-1.2], [0.5]]),
    c=np.array([0.4]),
    d=np.array([-0.8]),
    nk=1,
)


def _armax_data(seed=0, level=0.0):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((T, 1))
    e = SIGMA * rng.standard_normal(T)
    a, b, c, nk = (ARMAX_TRUE[k] for k in ("a", "b", "c", "nk"))
    # A y = B u_{t-nk} + C e, solved for y_t
    y = np.zeros(T)
    for t in range(T):
        y[t] = (
            -sum(a[i - 1] * _lag(y, t, i) for i in range(1, 3))
            + sum(b[k, 0] * _lag(u[:, 0], t, nk + k) for k in range(2))
            + e[t]
            + sum(c[i - 1] * _lag(e, t, i) for i in range(1, 3))
        )
    return dynsys.Dataset(us=u[None] + level, ys=y[None, :, None] + level)


def _bj_data(seed=1):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((T, 1))
    e = SIGMA * rng.standard_normal(T)
    b, f, c, d, nk = (BJ_TRUE[k] for k in ("b", "f", "c", "d", "nk"))
    plant = _rational_loop(b[:, 0], f[:, 0], u[:, 0], nk)
    noise = _rational_loop(np.ones(1), d, e + c[0] * np.r_[0.0, e[:-1]], 0)
    return dynsys.Dataset(us=u[None], ys=(plant + noise)[None, :, None])


def _signals(data):
    return np.asarray(data.ys)[0, :, 0], np.asarray(data.us)[0]


def _check_minimum(errors, theta_hat, theta_true):
    """The loss `sum errors(theta)**2` at the estimate is not above that at the
    truth, its gradient (central differences) is ~0 relative to the truth's, and
    the estimate is within 4.5 standard deviations of the truth, the covariance
    $\\hat\\sigma^2 (J^\\top J)^{-1}$ from the differences' Jacobian."""
    r = errors(theta_hat)
    r_true = errors(theta_true)
    assert r @ r <= r_true @ r_true
    h = 1e-6
    J = np.stack(
        [
            (errors(theta_hat + h * unit) - errors(theta_hat - h * unit)) / (2 * h)
            for unit in np.eye(theta_hat.size)
        ],
        axis=1,
    )
    J_true = np.stack(
        [
            (errors(theta_true + h * unit) - errors(theta_true - h * unit)) / (2 * h)
            for unit in np.eye(theta_hat.size)
        ],
        axis=1,
    )
    gradient, gradient_true = 2 * J.T @ r, 2 * J_true.T @ r_true
    assert np.linalg.norm(gradient) < 1e-4 * np.linalg.norm(gradient_true)
    std = np.sqrt(np.diag((r @ r / r.size) * np.linalg.inv(J.T @ J)))
    assert np.all(np.abs(theta_hat - theta_true) < 4.5 * std), (
        theta_hat,
        theta_true,
        std,
    )
    assert np.all(std < 0.05)  # the data determine the coefficients well


def test_armax_recovers_the_coefficients_and_minimises_the_errors():
    data = _armax_data()
    y, u = _signals(data)
    fitted = armax_polynomials(experiments("t", data, False), 2, 2, 2, 1)
    assert fitted.converged

    def errors(theta):
        return _armax_errors_loop(y, u, theta[:2], theta[2:4, None], theta[4:], 1)

    true = ARMAX_TRUE
    theta_true = np.concatenate([true["a"], true["b"][:, 0], true["c"]])
    theta_hat = np.concatenate([fitted.a, fitted.b[:, 0], fitted.c])
    _check_minimum(errors, theta_hat, theta_true)
    r = errors(theta_hat)
    assert fitted.variance == pytest.approx(r @ r / r.size, rel=1e-9)
    assert fitted.variance == pytest.approx(SIGMA**2, rel=0.1)


def test_box_jenkins_recovers_the_coefficients_and_minimises_the_errors():
    data = _bj_data()
    y, u = _signals(data)
    fitted = box_jenkins_polynomials(experiments("t", data, False), 2, 1, 1, 2, 1)
    assert fitted.converged

    def errors(theta):
        b, f = theta[:2, None], theta[2:4, None]
        return _bj_errors_loop(y, u, b, f, theta[4:5], theta[5:6], 1)

    true = BJ_TRUE
    theta_true = np.concatenate(
        [true["b"][:, 0], true["f"][:, 0], true["c"], true["d"]]
    )
    theta_hat = np.concatenate([fitted.b[:, 0], fitted.f[:, 0], fitted.c, fitted.d])
    _check_minimum(errors, theta_hat, theta_true)


def _innovation_loop(K, B, C, D, L, u, e):
    """$x_{t+1} = K x_t + B u_t + L e_t$, $y_t = C x_t + D u_t + e_t$ from 0."""
    x = np.zeros(K.shape[0])
    ys = []
    for t in range(len(e)):
        y = C @ x + e[t] + (D @ u[t] if D is not None else 0.0)
        ys.append(float(y[0]))
        x = K @ x + B @ u[t] + L[:, 0] * e[t]
    return np.array(ys)


@pytest.mark.parametrize("nk", [0, 1, 3])
def test_armax_state_space_is_the_difference_equation(nk):
    rng = np.random.default_rng(nk)
    model = Armax(
        a=np.array([-0.9, 0.3]),
        b=rng.standard_normal((3, 2)),
        c=np.array([0.5, -0.2, 0.1, 0.05]),
        nk=nk,
        variance=1.0,
        steps=0,
        converged=True,
    )
    K, B, C, D, L = armax_state_space(model)
    assert K.shape == (max(2, nk + 2, 4),) * 2
    u, e = rng.standard_normal((60, 2)), rng.standard_normal(60)
    y = _innovation_loop(K, B, C, D, L, u, e)
    # the ARMAX equation's error, fed the state-space output, is the noise
    np.testing.assert_allclose(
        _armax_errors_loop(y, u, model.a, model.b, model.c, nk), e, atol=1e-10
    )


@pytest.mark.parametrize("nk, nb, nf", [(0, 2, 3), (2, 2, 3), (0, 1, 0)])
def test_box_jenkins_state_space_is_the_difference_equation(nk, nb, nf):
    """Two inputs with their own F; the last case is a static plant (no state in
    the plant's blocks)."""
    rng = np.random.default_rng(10 + nk + nf)
    f = np.array([[-0.5, 0.3], [0.2, -0.1], [0.1, 0.0]])[:nf]
    model = BoxJenkins(
        b=rng.standard_normal((nb, 2)),
        f=f,
        c=np.array([0.4, 0.1]),
        d=np.array([-0.7]),
        nk=nk,
        variance=1.0,
        steps=0,
        converged=True,
    )
    K, B, C, D, L = box_jenkins_state_space(model)
    assert K.shape[0] == 2 * max(nf, nk + nb - 1) + 2
    u, e = rng.standard_normal((60, 2)), rng.standard_normal(60)
    y = _innovation_loop(K, B, C, D, L, u, e)
    errors = _bj_errors_loop(y, u, model.b, model.f, model.c, model.d, nk)
    np.testing.assert_allclose(errors, e, atol=1e-10)


def _deviations(data):
    y, u = _signals(data)
    return y - y.mean(), u - u.mean(axis=0)


def test_fit_armax_predict_and_compare_are_the_polynomials():
    """With offset (data far from zero): `predict` from a zero predictor state is
    the polynomials' one-step prediction, and the free run of `compare` is the
    plain simulation of B / A, both on the mean-removed data plus the level."""
    data = _armax_data(seed=3, level=5.0)
    model = dynsys.fit_armax(data, na=2, nb=2, nc=2, nk=1)
    fitted = armax_polynomials(experiments("t", data, True), 2, 2, 2, 1)
    assert isinstance(model, dynsys.InnovationSystem)
    y, u = _signals(data)
    y_dev, u_dev = _deviations(data)
    assert float(model.output_level[0]) == pytest.approx(y.mean())
    assert float(model.input_level[0]) == pytest.approx(u.mean())
    x0 = np.zeros((1, model.state_size))
    predicted = np.asarray(dynsys.predict(model, data, x0=x0))[0, :, 0]
    errors = _armax_errors_loop(y_dev, u_dev, fitted.a, fitted.b, fitted.c, 1)
    np.testing.assert_allclose(y - predicted, errors, atol=1e-9)
    free = np.asarray(dynsys.compare(model, data, x0=x0).predicted)[0, :, 0]
    simulated = _rational_loop(fitted.b[:, 0], fitted.a, u_dev[:, 0], 1)
    np.testing.assert_allclose(free, simulated + y.mean(), atol=1e-9)
    np.testing.assert_allclose(fitted.a, ARMAX_TRUE["a"], atol=0.05)


def test_fit_box_jenkins_predict_and_compare_are_the_polynomials():
    data = _bj_data(seed=4)
    model = dynsys.fit_box_jenkins(data, nb=2, nc=1, nd=1, nf=2, nk=1)
    fitted = box_jenkins_polynomials(experiments("t", data, True), 2, 1, 1, 2, 1)
    y, _ = _signals(data)
    y_dev, u_dev = _deviations(data)
    x0 = np.zeros((1, model.state_size))
    predicted = np.asarray(dynsys.predict(model, data, x0=x0))[0, :, 0]
    errors = _bj_errors_loop(y_dev, u_dev, fitted.b, fitted.f, fitted.c, fitted.d, 1)
    np.testing.assert_allclose(y - predicted, errors, atol=1e-9)
    free = np.asarray(dynsys.compare(model, data, x0=x0).predicted)[0, :, 0]
    simulated = _rational_loop(fitted.b[:, 0], fitted.f[:, 0], u_dev[:, 0], 1)
    np.testing.assert_allclose(free, simulated + y.mean(), atol=1e-9)


def test_box_jenkins_two_inputs_and_several_experiments():
    """Two inputs with their own denominators, no delay (a feedthrough), three
    experiments of different lengths: the one-step predictions of `predict` are
    the polynomials' on each experiment, and the plant is found."""
    rng = np.random.default_rng(5)
    b = np.array([[1.0, -0.5], [0.3, 0.2]])
    f = np.array([[-0.7, -0.3]])
    lengths = (700, 500, 600)
    us, ys = [], []
    for length in lengths:
        u = rng.standard_normal((length, 2))
        e = SIGMA * rng.standard_normal(length)
        y = _rational_loop(b[:, 0], f[:, 0], u[:, 0], 0)
        y = y + _rational_loop(b[:, 1], f[:, 1], u[:, 1], 0)
        y = y + _rational_loop(np.array([1.0, 0.4]), np.array([-0.8]), e, 0)
        us.append(u)
        ys.append(y[:, None])
    data = dynsys.Dataset(us=us, ys=ys)
    model = dynsys.fit_box_jenkins(data, nb=2, nc=1, nd=1, nf=1, nk=0, offset=False)
    fitted = box_jenkins_polynomials(experiments("t", data, False), 2, 1, 1, 1, 0)
    np.testing.assert_allclose(fitted.b, b, atol=0.05)
    np.testing.assert_allclose(fitted.f, f, atol=0.05)
    assert model.D is not None and model.state_size == 2 * 1 + 1
    x0 = np.zeros((3, model.state_size))
    predicted = np.asarray(dynsys.predict(model, data, x0=x0))
    for i, length in enumerate(lengths):
        u, y = us[i], ys[i][:, 0]
        errors = _bj_errors_loop(y, u, fitted.b, fitted.f, fitted.c, fitted.d, 0)
        np.testing.assert_allclose(y - predicted[i, :length, 0], errors, atol=1e-9)


def test_armax_model_works_with_the_rest_of_dynsys(tmp_path):
    """save / load round trip, residual analysis (white innovations), and an ARMA
    model on data without inputs."""
    data = _armax_data(seed=6)
    model = dynsys.fit_armax(data, 2, 2, 2)
    dynsys.save(tmp_path / "armax.dynsys", model)
    loaded = dynsys.load(tmp_path / "armax.dynsys")
    assert isinstance(loaded, dynsys.InnovationSystem)
    np.testing.assert_array_equal(np.asarray(loaded.kalman_gain), model.kalman_gain)
    residuals = dynsys.residual_analysis(model, data, horizon=1, max_lag=10)
    assert np.all(np.abs(np.asarray(residuals.autocorrelation)[1:]) < residuals.bound)
    arma = dynsys.fit_armax(dynsys.Dataset(ys=data.ys), na=2, nb=0, nc=2)
    assert arma.B is None and arma.state_size == 2


def test_to_control_gives_the_transfer_function_b_over_a():
    """`to_control` of a fitted ARMAX model: its frequency response is that of
    B(z) / A(z) of the fitted polynomials, evaluated directly."""
    control = pytest.importorskip("control")
    data = _armax_data(seed=8)
    model = dynsys.fit_armax(data, 2, 2, 2, offset=False)
    fitted = armax_polynomials(experiments("t", data, False), 2, 2, 2, 1)
    system = dynsys.to_control(model)
    z = np.exp(1j * np.array([0.1, 0.7, 2.0]))
    numerator = sum(fitted.b[k, 0] * z ** -(1 + k) for k in range(2))
    denominator = 1 + sum(fitted.a[i - 1] * z**-i for i in range(1, 3))
    response = np.array([complex(system(zi)) for zi in z])
    np.testing.assert_allclose(response, numerator / denominator, rtol=1e-9)
    assert control.isdtime(system)


def _short():
    return dynsys.Dataset(us=np.ones((1, 6, 1)), ys=np.arange(6.0)[None, :, None])


@pytest.mark.parametrize(
    "call, kwargs, match",
    [
        (
            dynsys.fit_armax,
            dict(na=-1, nb=1, nc=1),
            r"fit_armax\(na=\.\.\.\): must be >= 0, got -1",
        ),
        (
            dynsys.fit_armax,
            dict(na=1, nb=1, nc=1, nk=-2),
            r"fit_armax\(nk=\.\.\.\): must be >= 0, got -2",
        ),
        (
            dynsys.fit_armax,
            dict(na=0, nb=1, nc=0, nk=0),
            r"fit_armax\(na=\.\.\., nb=\.\.\., nc=\.\.\.\): the model needs a state",
        ),
        (
            dynsys.fit_box_jenkins,
            dict(nb=1, nc=-1, nd=1, nf=1),
            r"fit_box_jenkins\(nc=\.\.\.\): must be >= 0, got -1",
        ),
        (
            dynsys.fit_box_jenkins,
            dict(nb=1, nc=1, nd=1, nf=1, nk=-1),
            r"fit_box_jenkins\(nk=\.\.\.\): must be >= 0",
        ),
        (
            dynsys.fit_box_jenkins,
            dict(nb=0, nc=1, nd=1, nf=2),
            r"fit_box_jenkins\(nf=\.\.\.\): without B",
        ),
    ],
)
def test_bad_orders_are_one_line_errors(call, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        call(_armax_data(seed=7), **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "call, orders",
    [(dynsys.fit_armax, (2, 2, 2)), (dynsys.fit_box_jenkins, (2, 1, 1, 2))],
)
def test_bad_data_are_one_line_errors(call, orders):
    name = call.__name__
    two_outputs = dynsys.Dataset(us=np.zeros((1, 50, 1)), ys=np.zeros((1, 50, 2)))
    with pytest.raises(
        ValueError,
        match=rf"{name}\(data=\.\.\.\): .* 2 output channels, expected 1 output",
    ) as info:
        call(two_outputs, *orders)
    assert "\n" not in str(info.value)
    with pytest.raises(
        ValueError,
        match=rf"{name}\(data=\.\.\.\): too short for the model: 6 samples give 4 equations",
    ) as info:
        call(_short(), *orders)
    assert "\n" not in str(info.value)
    no_inputs = dynsys.Dataset(ys=np.zeros((1, 50, 1)))
    with pytest.raises(
        ValueError, match=rf"{name}\(nb=\.\.\.\): the data has no inputs"
    ):
        call(no_inputs, *orders)
    with pytest.raises(TypeError, match=rf"{name}\(nk=\.\.\.\): expected an integer"):
        call(_short(), *orders, nk=1.0)


def _armax_loop_data(a, b, c, nk, T, seed, feedback=0.0):
    """A y = B u_{t-nk} + C e by a loop (one input, `SIGMA` noise), the input white
    noise `r` plus, with `feedback`, the output feedback `-feedback y_{t-1}`."""
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(T)
    e = SIGMA * rng.standard_normal(T)
    y, u = np.zeros(T), np.zeros(T)
    for t in range(T):
        u[t] = r[t] - feedback * _lag(y, t, 1)
        y[t] = (
            -sum(a[i - 1] * _lag(y, t, i) for i in range(1, len(a) + 1))
            + sum(b[k] * _lag(u, t, nk + k) for k in range(len(b)))
            + e[t]
            + sum(c[i - 1] * _lag(e, t, i) for i in range(1, len(c) + 1))
        )
    return dynsys.Dataset(us=u[None, :, None], ys=y[None, :, None])


@pytest.mark.parametrize(
    "kind, feedback",
    [("integrating plant (A has a root at 1)", 0.0), ("output feedback", 0.2)],
)
def test_armax_on_an_integrating_plant_and_under_feedback(kind, feedback):
    """An integrating plant (the output drifts; only C needs to be stable) and
    data taken under output feedback (the input correlates with past noise; the
    closed loop is stable): the coefficients are found to the noise's accuracy and
    the one-step errors have the noise's size."""
    if feedback:
        a, b, c = np.array([-1.2, 0.5]), np.array([1.0, 0.4]), np.array([0.6])
    else:
        a, b, c = np.array([-1.5, 0.5]), np.array([0.5, 0.2]), np.array([0.3])
    data = _armax_loop_data(a, b, c, nk=1, T=T, seed=11, feedback=feedback)
    fitted = armax_polynomials(experiments("t", data, False), 2, 2, 1, 1)
    assert fitted.converged, kind
    np.testing.assert_allclose(fitted.a, a, atol=0.03)
    np.testing.assert_allclose(fitted.b[:, 0], b, atol=0.03)
    np.testing.assert_allclose(fitted.c, c, atol=0.06)
    model = dynsys.fit_armax(data, 2, 2, 1, offset=False)
    x0 = np.zeros((1, model.state_size))
    y = np.asarray(data.ys)[0, :, 0]
    errors = y - np.asarray(dynsys.predict(model, data, x0=x0))[0, :, 0]
    assert np.std(errors) == pytest.approx(SIGMA, rel=0.1)


def _heating():
    import pathlib

    path = pathlib.Path(dynsys.__file__).parents[1] / "data" / "real" / "heating.csv"
    data = dynsys.load_dataset(path, inputs=["drive_V"], outputs=["temp_C"])
    return data.split_time(1 / 3)


def test_real_heating_record():
    """The heating record as received (levels far from zero, 2 s samples): the
    ARMAX model's one-step errors on the estimation data are no larger than those
    of the least-squares ARX model of the same orders (ARX is ARMAX with C = 1, so
    the minimiser can only do better; both evaluated by the loop on the same
    mean-removed data), and the Box–Jenkins model, whose plant does not have to
    explain the noise, simulates the held-out third better than ARX (79.7 % against
    52.3 % fit)."""
    estimation, validation = _heating()
    y, u = _signals(estimation)
    y_dev, u_dev = y - y.mean(), u - u.mean(axis=0)
    armax = dynsys.fit_armax(estimation, na=2, nb=2, nc=1, nk=1)
    assert armax.dt == 2.0
    x0 = np.zeros((1, armax.state_size))
    armax_errors = y - np.asarray(dynsys.predict(armax, estimation, x0=x0))[0, :, 0]
    deviations = dynsys.Dataset(us=u_dev[None], ys=y_dev[None, :, None])
    arx = dynsys.fit_arx(deviations, na=2, nb=2, nk=1, offset=False)
    K, B = np.asarray(arx.K), np.asarray(arx.B)
    a_arx, b_arx = -K[:, 0], B[:, :1]  # observer form, nk = 1: B holds b
    arx_errors = _armax_errors_loop(y_dev, u_dev, a_arx, b_arx, np.zeros(0), 1)
    assert armax_errors @ armax_errors <= arx_errors @ arx_errors
    bj = dynsys.fit_box_jenkins(estimation, nb=2, nc=1, nd=1, nf=2, nk=1)
    arx_raw = dynsys.fit_arx(estimation, na=2, nb=2, nk=1)
    bj_fit = float(dynsys.compare(bj, validation).fit_percent[0])
    arx_fit = float(dynsys.compare(arx_raw, validation).fit_percent[0])
    assert bj_fit > arx_fit + 10, (bj_fit, arx_fit)


@pytest.mark.parametrize(
    "structure", ["armax nc=0 (ARX)", "box-jenkins nf=nc=nd=0 (FIR)"]
)
def test_without_noise_dynamics_the_fit_is_linear_least_squares(structure):
    """With C = D = 1 (and F = 1) the prediction errors are linear in the
    coefficients: the minimiser is the closed-form least squares over every step
    from zero initial conditions, two inputs, two experiments."""
    rng = np.random.default_rng(12)
    lengths = (300, 200)
    us = [rng.standard_normal((T_i, 2)) for T_i in lengths]
    ys = [rng.standard_normal((T_i, 1)) for T_i in lengths]
    data = dynsys.Dataset(us=us, ys=ys)
    na = 2 if structure.startswith("armax") else 0
    rows, targets = [], []
    for u, y in zip(us, ys):
        y = y[:, 0]
        for t in range(len(y)):
            row = [-_lag(y, t, i) for i in range(1, na + 1)]
            row += [_lag(u[:, j], t, 2 + k) for k in range(3) for j in range(2)]
            rows.append(row)
            targets.append(y[t])
    theta = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)[0]
    prepared = experiments("t", data, False)
    if na:
        fitted = armax_polynomials(prepared, na, 3, 0, 2)
        np.testing.assert_allclose(fitted.a, theta[:na], atol=1e-9)
    else:
        fitted = box_jenkins_polynomials(prepared, 3, 0, 0, 0, 2)
    np.testing.assert_allclose(fitted.b.ravel(), theta[na:], atol=1e-9)


def test_the_jacobians_are_the_derivatives_of_the_errors():
    """The filtered Jacobians that the minimiser steps on equal central
    differences of the errors, at a point away from any minimum (two inputs, two
    experiments, a delay)."""
    from dynsys._sysid.armax import armax_errors
    from dynsys._sysid.box_jenkins import box_jenkins_errors

    rng = np.random.default_rng(13)
    us = [rng.standard_normal((80, 2)), rng.standard_normal((50, 2))]
    ys = [rng.standard_normal((80, 1)), rng.standard_normal((50, 1))]
    data = experiments("t", dynsys.Dataset(us=us, ys=ys), False)

    def armax(theta):
        return armax_errors(data, theta[:2], theta[2:6].reshape(2, 2), theta[6:], 2)

    def box_jenkins(theta):
        b, f = theta[:4].reshape(2, 2), theta[4:6].reshape(1, 2)
        return box_jenkins_errors(data, b, f, theta[6:8], theta[8:], 2)

    for errors, size in ((armax, 8), (box_jenkins, 9)):
        theta = 0.3 * rng.standard_normal(size)
        _, J = errors(theta)
        h = 1e-6
        J_fd = np.stack(
            [
                (errors(theta + h * unit)[0] - errors(theta - h * unit)[0]) / (2 * h)
                for unit in np.eye(size)
            ],
            axis=1,
        )
        np.testing.assert_allclose(J, J_fd, atol=1e-6)
