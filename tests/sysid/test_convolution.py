"""The FFT sums of a linear model's response (`_sysid/convolution.py`) against a
plain Python loop, and the NumPy free run and input regressors built on them
against the step-by-step recursion they replace (and scipy's `dlsim`)."""

import numpy as np
import pytest
import scipy.signal

import dynsys
from dynsys._sysid import convolution
from dynsys._sysid.free_run import free_run
from dynsys._sysid.input_matrices import _input_regressors
from dynsys._sysid.signals import signals


def _stable(rng, n, radius=0.95):
    K = rng.standard_normal((n, n))
    return K * radius / np.max(np.abs(np.linalg.eigvals(K)))


def test_delayed_sums_match_a_plain_loop():
    rng = np.random.default_rng(0)
    T, N, p, m, a = 37, 2, 3, 2, 4
    kernel = rng.standard_normal((T, p, m))
    rows = rng.standard_normal((T, a))
    us = rng.standard_normal((N, T, m))
    response = np.zeros((N, T, p))
    regressors = np.zeros((N, T, a, m))
    for i in range(N):
        for t in range(T):
            for j in range(t):
                response[i, t] += kernel[t - 1 - j] @ us[i, j]
                regressors[i, t] += np.outer(rows[t - 1 - j], us[i, j])
    np.testing.assert_allclose(
        convolution.delayed_response(kernel, us), response, rtol=0, atol=1e-12
    )
    np.testing.assert_allclose(
        convolution.delayed_regressors(rows, us), regressors, rtol=0, atol=1e-12
    )
    one = convolution.delayed_response(kernel[:1], us[:, :1])  # T = 1: nothing
    np.testing.assert_array_equal(one, np.zeros((N, 1, p)))


@pytest.mark.parametrize("T", [1, 2, 3, 37, 256, 1000])
@pytest.mark.parametrize("radius", [0.9, 1.02])
def test_powers_match_a_plain_loop(T, radius):
    """`powers` doubles (the rows so far times a power of K); the rows are those
    of the product taken one step at a time, decaying or growing."""
    rng = np.random.default_rng(7)
    n, p = 4, 3
    K, C = _stable(rng, n, radius), rng.standard_normal((p, n))
    expected, row = [], C
    for _ in range(T):
        expected.append(row)
        row = row @ K
    rows = convolution.powers(K, C, T)
    assert rows.shape == (T, p, n)
    scale = np.max(np.abs(expected), axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(rows / scale, np.asarray(expected) / scale, atol=1e-12)


@pytest.mark.parametrize("T", [1, 2, 17, 534])
@pytest.mark.parametrize("radius", [0.9, 1.0, 1.03])
def test_the_recursion_in_blocks_equals_a_plain_loop(T, radius):
    """Each step to round-off of its own size (what the FFT sums cannot give a
    growing model), decaying, marginal or growing."""
    rng = np.random.default_rng(8)
    A, forcing = _stable(rng, 4, radius), rng.standard_normal((2, T, 4))
    expected, x = [], np.zeros((2, 4))
    for t in range(T):
        expected.append(x)
        x = x @ A.T + forcing[:, t]
    expected = np.stack(expected, axis=1)
    states = convolution.recursion_states(A, forcing)
    scale = np.maximum(np.max(np.abs(expected), axis=-1, keepdims=True), 1e-300)
    np.testing.assert_allclose(states / scale, expected / scale, atol=1e-12)


def test_the_recursion_in_blocks_overflows_as_the_loop_does():
    A = np.diag([1e3, 0.5])  # past float64 within 103 steps
    forcing = np.ones((1, 400, 2))
    with np.errstate(all="ignore"):
        states = convolution.recursion_states(A, forcing)
        plain = convolution._plain_recursion(A, forcing)
    np.testing.assert_array_equal(states, plain)  # inf and nan where the loop has
    assert np.all(np.isfinite(states[0, :100])) and not np.isfinite(states[0, -1, 0])


def test_smooth_lengths_are_the_next_products_of_2_3_and_5():
    def smooth(m):
        for prime in (2, 3, 5):
            while m % prime == 0:
                m //= prime
        return m == 1

    for n in list(range(1, 300)) + [4199, 8399, 12287, 40001]:
        expected = next(m for m in range(max(n, 2), 4 * n + 4) if smooth(m))
        assert convolution.smooth_length(n) == expected, n


def test_decays_by_the_spectral_radius():
    assert convolution.decays(np.diag([0.5, -0.99]))
    assert not convolution.decays(np.diag([0.5, 0.9995]))  # marginal: recursion
    assert not convolution.decays(np.diag([1.2, 0.1]))
    assert not convolution.decays(np.array([[np.nan]]))
    assert convolution.decays(np.zeros((0, 0)))


def _model_and_signals(rng, n=5, p=2, m=2, T=300, N=2, radius=0.95):
    model = dynsys.LinearSystem(
        K=_stable(rng, n, radius),
        B=rng.standard_normal((n, m)),
        C=rng.standard_normal((p, n)),
        D=rng.standard_normal((p, m)),
        offset=rng.standard_normal(n),
        output_level=rng.standard_normal(p),
    )
    data = dynsys.Dataset(
        ys=rng.standard_normal((N, T, p)).astype(np.float32),
        us=rng.standard_normal((N, T, m)).astype(np.float32),
    )
    return model, signals(data, "test")


def test_free_run_by_sums_matches_the_recursion(monkeypatch):
    model, s = _model_and_signals(np.random.default_rng(1))
    by_sums = free_run(model, s)
    monkeypatch.setattr(convolution, "DECAYING_RADIUS", 0.0)  # every model: loop
    step_by_step = free_run(model, s)
    scale = np.max(np.abs(step_by_step))
    np.testing.assert_allclose(by_sums, step_by_step, rtol=0, atol=1e-12 * scale)


def test_free_run_from_zero_state_matches_dlsim():
    """With no output to explain (zero outputs, an input that starts at zero) the
    least-squares initial state is zero: the free run is scipy's simulation."""
    rng = np.random.default_rng(2)
    n, p, m, T = 4, 1, 1, 200
    K, B, C = _stable(rng, n), rng.standard_normal((n, m)), rng.standard_normal((p, n))
    D = rng.standard_normal((p, m))
    us = rng.standard_normal((T, m))
    _, expected, _ = scipy.signal.dlsim((K, B, C, D, 1.0), us)
    data = dynsys.Dataset(ys=expected[None], us=us[None])
    predicted = free_run(dynsys.LinearSystem(K, B, C, D), signals(data, "test"))
    np.testing.assert_allclose(predicted[0], expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("feedthrough", [False, True])
def test_input_regressors_by_sums_match_the_recursion(monkeypatch, feedthrough):
    rng = np.random.default_rng(3)
    n, p, m, T, N = 4, 3, 2, 120, 2
    K, C = _stable(rng, n), rng.standard_normal((p, n))
    rows = convolution.powers(K, C, T)
    us = rng.standard_normal((N, T, m))
    by_sums = _input_regressors(K, rows, us, feedthrough)
    monkeypatch.setattr(convolution, "DECAYING_RADIUS", 0.0)
    step_by_step = _input_regressors(K, rows, us, feedthrough)
    assert by_sums.shape == (N, T, p, n * m + feedthrough * p * m)
    np.testing.assert_allclose(by_sums, step_by_step, rtol=0, atol=1e-12)


def test_a_growing_model_keeps_the_recursion():
    """An unstable model's free run is the recursion's to the last digit (FFT sums
    would lose its early steps' digits to the late steps' size)."""
    rng = np.random.default_rng(4)
    model, s = _model_and_signals(rng, n=3, p=1, m=1, T=400, N=1, radius=1.05)
    K = np.asarray(model.K, np.float64)
    assert not convolution.decays(K)
    predicted = free_run(model, s)
    x, forced = np.zeros(3), []
    a = np.asarray(model.offset, np.float64)
    B, C = np.asarray(model.B, np.float64), np.asarray(model.C, np.float64)
    D, c = np.asarray(model.D, np.float64), np.asarray(model.output_level, np.float64)
    us = np.asarray(s.us, np.float64)[0]
    for t in range(400):
        forced.append(C @ x + D @ us[t] + c)
        x = K @ x + B @ us[t] + a
    # The initial state's part is the same least squares in both: compare the
    # forced response at the early steps, where the sums would differ.
    rows = convolution.powers(K, C, 400)
    x0 = np.linalg.lstsq(
        rows.reshape(400, 3), (np.asarray(s.ys, np.float64)[0] - forced).ravel()
    )[0]
    expected = np.asarray(forced) + rows @ x0
    np.testing.assert_allclose(predicted[0][:50], expected[:50], rtol=1e-9)
