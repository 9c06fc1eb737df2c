"""Input delays: `estimate_delay` against simulated plants with known dead times
(and none), `with_input_delay` against a plain numpy loop of the delayed plant,
`delay_inputs` against index arithmetic."""

import numpy as np
import pytest

import dynsys
from dynsys._sysid.delay import f_survival, incomplete_beta


def _delayed_plant(rng, delays, T=400, noise=0.05, feedthrough=False):
    """Data of a stable MIMO first-order plant per output, `x_{t+1} = a x_t + B
    u_{t-d}` (each input j delayed by `delays[j]`), `y_t = x_t (+ D u_{t-d}) +
    noise`, from zero initial conditions; returns the data and (K, B, C, D)."""
    m = len(delays)
    p = 2 if m > 1 else 1
    K = np.diag([0.8, 0.6][:p])
    B = np.array([[0.5, -0.3], [0.2, 0.7]])[:p, :m]
    C = np.eye(p)
    D = np.array([[0.4, 0.0], [0.1, -0.3]])[:p, :m] if feedthrough else None
    us = rng.standard_normal((T, m))
    ys = np.zeros((T, p))
    x = np.zeros(p)
    for t in range(T):
        ud = np.array([us[t - d, j] if t >= d else 0.0 for j, d in enumerate(delays)])
        ys[t] = C @ x + (0.0 if D is None else D @ ud) + noise * rng.standard_normal(p)
        x = K @ x + B @ ud
    return dynsys.Dataset(us=us, ys=ys), (K, B, C, D)


@pytest.mark.parametrize("seed", [0, 1])
def test_estimate_delay_recovers_a_known_dead_time(seed):
    rng = np.random.default_rng(seed)
    data, _ = _delayed_plant(rng, (3,))
    assert dynsys.estimate_delay(data, max_delay=8) == (3,)


def test_estimate_delay_per_input_of_a_mimo_plant():
    rng = np.random.default_rng(2)
    data, _ = _delayed_plant(rng, (0, 4))
    assert dynsys.estimate_delay(data, max_delay=6) == (0, 4)


@pytest.mark.parametrize("feedthrough", [False, True])
def test_estimate_delay_invents_none(feedthrough):
    # Plants without dead time, with and without feedthrough, several noise draws;
    # and a second-order plant without feedthrough (response from lag 1).
    for seed in range(4):
        rng = np.random.default_rng(10 + seed)
        data, _ = _delayed_plant(rng, (0,), noise=0.2, feedthrough=feedthrough)
        assert dynsys.estimate_delay(data, max_delay=10) == (0,)
    K = np.array([[1.5, -0.7], [1.0, 0.0]])
    model = dynsys.LinearSystem(K, np.array([[1.0], [0.0]]), np.array([[0.5, 0.3]]))
    rng = np.random.default_rng(20)
    us = rng.standard_normal((300, 1))
    ys = np.asarray(dynsys.rollout(model, np.zeros(2), 300, inputs=us).ys)
    ys = ys + 0.1 * rng.standard_normal(ys.shape)
    assert dynsys.estimate_delay(dynsys.Dataset(us=us, ys=ys)) == (0,)


def _numpy_free_run(K, B, C, D, delays, us, u_bar, y_bar):
    """The delayed plant by a plain loop, from zero state and zero past inputs
    (in deviations): `x_{t+1} = K x_t + B v_t`, `y_t = C x_t + D v_t + y_bar`, with
    `v_{j,t} = u_{j,t-d_j} - u_bar_j` (0 before the record)."""
    T, m = us.shape
    x = np.zeros(K.shape[0])
    ys = []
    for t in range(T):
        v = np.array(
            [us[t - d, j] - u_bar[j] if t >= d else 0.0 for j, d in enumerate(delays)]
        )
        ys.append(C @ x + D @ v + y_bar)
        x = K @ x + B @ v
    return np.array(ys)


def test_with_input_delay_free_run_equals_the_delayed_plant_loop():
    rng = np.random.default_rng(3)
    K = np.array([[0.7, 0.2], [-0.1, 0.5]])
    B = rng.standard_normal((2, 3))
    C = rng.standard_normal((2, 2))
    D = rng.standard_normal((2, 3))
    u_bar, y_bar = np.array([0.5, -1.0, 2.0]), np.array([3.0, -4.0])
    model = dynsys.LinearSystem(K, B, C, D, input_level=u_bar, output_level=y_bar)
    delays = (2, 0, 3)
    delayed = dynsys.with_input_delay(model, delays)
    assert delayed.K.shape == (2 + 5, 2 + 5)
    T = 20
    us = rng.standard_normal((T, 3)) + u_bar
    # The register starts with the past inputs at their level (deviation 0).
    x0 = np.zeros(7)
    got = np.asarray(dynsys.rollout(delayed, x0, T, inputs=us).ys)
    want = _numpy_free_run(K, B, C, D, delays, us, u_bar, y_bar)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    assert dynsys.with_input_delay(model, 0) is model


def test_delay_inputs_shifts_each_input_and_drops_the_first_steps():
    us = np.arange(20.0).reshape(10, 2)
    ys = 100 + np.arange(10.0)[:, None]
    data = dynsys.Dataset(us=us, ys=ys, ts=0.5 * np.arange(10))
    shifted = dynsys.delay_inputs(data, (3, 1))
    assert shifted.lengths == (7,)
    np.testing.assert_array_equal(shifted.ys[0, :, 0], ys[3:, 0])
    np.testing.assert_array_equal(shifted.us[0, :, 0], us[0:7, 0])  # t - 3
    np.testing.assert_array_equal(shifted.us[0, :, 1], us[2:9, 1])  # t - 1
    assert shifted.dt == 0.5


def test_fit_behind_the_estimated_delay_validates_as_the_true_model():
    rng = np.random.default_rng(4)
    train, (K, B, C, _) = _delayed_plant(rng, (3,), T=300)
    test, _ = _delayed_plant(rng, (3,), T=200)
    delays = dynsys.estimate_delay(train)
    assert delays == (3,)
    model = dynsys.with_input_delay(
        dynsys.fit_subspace(dynsys.delay_inputs(train, delays), order=1), delays
    )
    true = dynsys.with_input_delay(dynsys.LinearSystem(K, B, C), (3,))
    fit = float(dynsys.compare(model, test).fit_percent[0])
    fit_true = float(dynsys.compare(true, test).fit_percent[0])
    assert fit > fit_true - 1.0
    plain = dynsys.fit_subspace(train, order=1)
    assert float(dynsys.compare(plain, test).fit_percent[0]) < fit - 20


def test_delay_errors():
    rng = np.random.default_rng(5)
    data, (K, B, C, _) = _delayed_plant(rng, (1,), T=60)
    model = dynsys.LinearSystem(K, B, C)
    call = r"with_input_delay\(delays=...\): "
    with pytest.raises(ValueError, match=call + "expected one"):
        dynsys.with_input_delay(model, (1, 2))
    with pytest.raises(ValueError, match=call + "must be >= 0"):
        dynsys.with_input_delay(model, (-1,))
    with pytest.raises(TypeError, match=r"with_input_delay\(model=...\): expected a"):
        dynsys.with_input_delay(object(), (1,))
    with pytest.raises(ValueError, match=r"no inputs to delay"):
        dynsys.with_input_delay(dynsys.LinearSystem(K), (1,))
    with pytest.raises(ValueError, match=r"estimate_delay\(significance=...\)"):
        dynsys.estimate_delay(data, significance=1.5)
    with pytest.raises(ValueError, match=r"estimate_delay\(data=...\): the data \("):
        dynsys.estimate_delay(data, max_delay=40)
    with pytest.raises(ValueError, match=r"estimate_delay\(data=...\): the data has"):
        dynsys.estimate_delay(dynsys.Dataset(ys=np.zeros((50, 1))))
    with pytest.raises(ValueError, match=r"delay_inputs\(delays=...\): every"):
        dynsys.delay_inputs(data, (60,))


def test_the_delayed_model_survives_save_load_and_python_control(tmp_path):
    control = pytest.importorskip("control")
    K, B, C, D = np.array([[0.6]]), np.array([[1.0, 0.5]]), np.array([[2.0]]), None
    delayed = dynsys.with_input_delay(dynsys.LinearSystem(K, B, C, D, dt=0.5), (2, 1))
    path = tmp_path / "delayed.dynsys"
    dynsys.save(path, delayed)
    back = dynsys.load(path)
    np.testing.assert_array_equal(np.asarray(back.K), np.asarray(delayed.K))
    np.testing.assert_array_equal(np.asarray(back.B), np.asarray(delayed.B))
    # python-control's impulse response: input j first reaches y at lag d_j + 1,
    # then C K^(t - d_j - 1) B_j (the closed form of the delayed first-order plant).
    sys = dynsys.to_control(back)
    T = 8
    for j, d in enumerate((2, 1)):
        u = np.zeros((2, T))
        u[j, 0] = 1.0
        y = control.forced_response(sys, T=0.5 * np.arange(T), U=u).outputs
        want = [0.0 if t <= d else 2.0 * 0.6 ** (t - d - 1) * B[0, j] for t in range(T)]
        np.testing.assert_allclose(np.ravel(y), want, atol=1e-12)


@pytest.mark.parametrize("dofs", [(1, 10), (3, 500), (7, 2000), (12, 40)])
def test_the_f_tests_survival_function_equals_scipys(dofs):
    import scipy.stats

    F = np.array([0.0, 1e-3, 0.1, 1.0, 2.5, 10.0, 50.0])
    np.testing.assert_allclose(
        f_survival(F, *dofs), scipy.stats.f.sf(F, *dofs), rtol=1e-10, atol=1e-300
    )


@pytest.mark.parametrize("a", [0.5, 2.5, 40.0, 1000.0])
@pytest.mark.parametrize("b", [0.5, 3.5, 300.0])
def test_the_incomplete_beta_function_equals_scipys(a, b):
    import scipy.special

    for x in [1e-9, 0.01, 0.3, 0.5, 0.9, 0.999, 0.0, 1.0]:
        want = scipy.special.betainc(a, b, x)
        np.testing.assert_allclose(incomplete_beta(a, b, x), want, rtol=1e-10)


def test_a_command_imports_neither_scipy_stats_nor_scipy_signal():
    """Each costs a `dynsys fit` about a second of start-up (`scipy.special` 0.05-0.2
    s); the delay test and the polynomial filters do without them until asked."""
    import subprocess
    import sys

    code = (
        "import sys, dynsys._experiments.run, dynsys._sysid.delay, "
        "dynsys._sysid.polynomial; "
        "print(sorted(m for m in ('scipy.stats', 'scipy.signal', 'scipy.special') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
