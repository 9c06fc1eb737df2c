"""The noise model of a subspace estimate: state estimates from the data windows,
the innovation covariance and Kalman gain (Riccati equation), and `B`, `D` that stay
well conditioned when the estimated `K` is unstable or marginal."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jaxtyping import Array

from .._compile.jit import device_array, kept_jit
from .convolution import recursion_states
from .input_matrices import input_matrices
from .signals import in_shared_length, Signals


class NoiseModel(NamedTuple):
    """`(B, D, c)` (as `input_matrices`), the Kalman gain `L (n, p)` and the
    innovation covariance `(p, p)`."""

    B: Array | None
    D: Array | None
    c: Array | None
    kalman_gain: Array
    innovation_covariance: Array


def _hankel(signal: Array, start: int, s: int, count: int) -> Array:
    index = start + np.arange(count)[:, None] + np.arange(s)[None, :]
    return signal[index].reshape(count, -1)


def _window_rows(y, u, horizon: int, constant: bool):
    """`(regressors, future outputs)` of an experiment's windows: `[U_f, 1, U_p,
    Y_p]` and `Y_f`, one row per window."""
    count = y.shape[0] - 2 * horizon + 1
    blocks = []
    if u is not None:
        blocks.append(_hankel(u, horizon, horizon, count))
    if constant:
        blocks.append(jnp.ones((count, 1), y.dtype))
    past = [] if u is None else [_hankel(u, 0, horizon, count)]
    past.append(_hankel(y, 0, horizon, count))
    return jnp.concatenate(blocks + past, axis=1), _hankel(y, horizon, horizon, count)


@kept_jit
def _past_projection(
    ys: Array, us: Array | None, lengths: Array, horizon: int, constant: bool
) -> tuple[Array, Array]:
    """The part of every window's future outputs that its past explains, `(N, W,
    s p)`, and whether the window lies inside the experiment, `(N, W)`: the future
    outputs regressed on the future inputs, a constant and the past inputs and
    outputs (least squares over all windows), then the past's share kept (N4SID's
    oblique projection). It does not depend on the order: one program per horizon.
    """
    count = ys.shape[1] - 2 * horizon + 1
    valid = jnp.arange(count)[None, :] < (lengths[:, None] - 2 * horizon + 1)

    def rows(y, u):
        return _window_rows(y, u, horizon, constant)

    if us is None:
        regressors, future = jax.vmap(lambda y: rows(y, None))(ys)
    else:
        regressors, future = jax.vmap(rows)(ys, us)
    weight = valid[..., None].astype(ys.dtype)
    X = (regressors * weight).reshape(-1, regressors.shape[-1])
    Y = (future * weight).reshape(-1, future.shape[-1])
    theta = jnp.linalg.lstsq(X, Y)[0]  # (regressors, s p)
    m = 0 if us is None else us.shape[-1]
    first_past = horizon * m + int(constant)
    return regressors[..., first_past:] @ theta[first_past:], valid


def past_projection(
    s: Signals, horizon: int, constant: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`_past_projection` of the prepared signals `s`, in NumPy (float64): `(N, W,
    s p)` and `(N, W)`. It depends on the data and the horizon only, so an order
    scan computes it once for all its orders (`SubspaceBasis.past`)."""
    padded = in_shared_length(s, "past_projection")  # (its windows past the end:
    past, valid = _past_projection(  # masked, and cut off here)
        padded.ys, padded.us, device_array(s.lengths), horizon, constant
    )
    count = s.ys.shape[1] - 2 * horizon + 1
    return np.asarray(past, np.float64)[:, :count], np.asarray(valid)[:, :count]


def window_states(
    past: np.ndarray, valid: np.ndarray, gamma
) -> tuple[np.ndarray, np.ndarray]:
    """The state $\\hat x_{j+s}$ of every window `j` of every experiment, `(N, W,
    n)`, and whether the window lies inside the experiment, `(N, W)`, in NumPy,
    from the windows' `past_projection`.

    The part of the future outputs the past explains is $\\Gamma \\hat x$, so
    $\\hat x = \\Gamma^{+}\\,\\Theta_{\\mathrm{past}} z_{\\mathrm{past}}$, in the
    state basis of the observability matrix `gamma (s p, n)`."""
    gamma = np.asarray(gamma, np.float64)
    return past @ np.linalg.pinv(gamma).T, valid


def _state_regression(
    K, C, xs, valid, s: Signals, horizon: int, feedthrough: bool, constant: bool
):
    """`(B, D, c)` from the state estimates: least squares of
    $[\\hat x_{t+1} - K \\hat x_t;\\ y_t - C \\hat x_t]$ on $u_t$ (and the
    constant): no powers of `K`, so well conditioned whatever its spectral radius.
    """
    dtype = jnp.asarray(K).dtype
    K, C = np.asarray(K, np.float64), np.asarray(C, np.float64)
    W = xs.shape[1]
    t = horizon + np.arange(W - 1)
    pair = valid[:, :-1] & valid[:, 1:]
    with np.errstate(over="ignore", invalid="ignore"):  # diverged estimates: inf
        state_lhs = xs[:, 1:] - xs[:, :-1] @ K.T  # (N, W-1, n)
        output_lhs = np.asarray(s.ys, np.float64)[:, t] - xs[:, :-1] @ C.T
    columns = []
    if s.us is not None:
        columns.append(np.asarray(s.us, np.float64)[:, t])
    columns.append(np.ones(pair.shape + (1,)))
    regressors = np.concatenate(columns, axis=-1)[pair]
    state_fit = np.linalg.lstsq(regressors, state_lhs[pair], rcond=None)[0]
    output_fit = np.linalg.lstsq(regressors, output_lhs[pair], rcond=None)[0]
    B = D = c = None
    if s.us is not None:
        m = s.us.shape[-1]
        B = jnp.asarray(state_fit[:m].T, dtype)
        if feedthrough:
            D = jnp.asarray(output_fit[:m].T, dtype)
    if constant:
        c = jnp.asarray(output_fit[-1], dtype)
    return B, D, c


def _residuals(K, B, C, D, c, xs, valid, s: Signals, horizon: int):
    """The state and output residuals `(w (k, n), v (k, p))` of the state
    estimates' consecutive pairs."""
    K, B, C, D = (
        None if a is None else np.asarray(a, np.float64) for a in (K, B, C, D)
    )
    W = xs.shape[1]
    t = horizon + np.arange(W - 1)
    pair = valid[:, :-1] & valid[:, 1:]
    with np.errstate(over="ignore", invalid="ignore"):  # diverged estimates: inf
        w = xs[:, 1:] - xs[:, :-1] @ K.T
        v = np.asarray(s.ys, np.float64)[:, t] - xs[:, :-1] @ C.T
        if s.us is not None and B is not None:
            u = np.asarray(s.us, np.float64)[:, t]
            w = w - u @ B.T
            if D is not None:
                v = v - u @ D.T
        if c is not None:
            v = v - np.asarray(c, np.float64)[None, None]
    return w[pair], v[pair]


def kalman_gain_from_residuals(K, C, w, v) -> tuple[np.ndarray, np.ndarray]:
    """The steady-state Kalman gain and innovation covariance of $x_{t+1} = K x_t +
    w_t$, $y_t = C x_t + v_t$ with the sample covariances $Q, S, R$ of the residuals
    `w (k, n)`, `v (k, p)`: from the filter's Riccati equation
    $P = K P K^\\top + Q - (K P C^\\top + S)(C P C^\\top + R)^{-1}(\\dots)^\\top$,
    $L = (K P C^\\top + S)(C P C^\\top + R)^{-1}$, $\\Sigma_e = C P C^\\top + R$.
    Falls back to $L = S R^{-1}$, $\\Sigma_e = R$ ($P = 0$: the state estimates
    taken as exact) when the equation has no stabilising solution."""
    K, C = np.asarray(K, np.float64), np.asarray(C, np.float64)
    w, v = np.asarray(w, np.float64), np.asarray(v, np.float64)
    k = max(w.shape[0], 1)
    with np.errstate(over="ignore", invalid="ignore"):  # diverged residuals: inf
        Q, S, R = w.T @ w / k, w.T @ v / k, v.T @ v / k
    Q, R = (Q + Q.T) / 2, (R + R.T) / 2
    R = R + 1e-12 * max(np.trace(R), 1e-300) * np.eye(R.shape[0])
    try:
        P = scipy.linalg.solve_discrete_are(K.T, C.T, Q, R, s=S)
        gain_num, innovation = K @ P @ C.T + S, C @ P @ C.T + R
        L = np.linalg.solve(innovation.T, gain_num.T).T
        if not (np.all(np.isfinite(L)) and _radius(K - L @ C) < 1.0):
            raise ValueError("no stabilising solution")
    except (ValueError, np.linalg.LinAlgError):
        L, innovation = np.linalg.solve(R.T, S.T).T, R
    return L, (innovation + innovation.T) / 2


_MARGINAL = 0.999  # spectral radius from which K counts as marginal


def _radius(A) -> float:
    return float(np.max(np.abs(np.linalg.eigvals(np.asarray(A, np.float64)))))


def _filtered_outputs(A, L, C, ys) -> np.ndarray:
    """`(N, T, p)`: $C \\hat x_t$ of the predictor $\\hat x_{t+1} = A \\hat x_t
    + L y_t$ from $\\hat x_0 = 0$."""
    with np.errstate(over="ignore", invalid="ignore"):  # an unstable A: inf, scored
        return recursion_states(A, ys @ L.T) @ C.T


def _predictor_inputs(K, C, L, c, s: Signals, feedthrough: bool):
    """`(B, D)` through the predictor: with $\\bar K = K - L C$ (stable),
    $y_t - \\sum_{j<t} C \\bar K^{t-1-j} L (y_j - c) - c = C \\bar K^t x_0 +
    \\sum_{j<t} C \\bar K^{t-1-j} (B - L D) u_j + D u_t + e_t$ is linear in
    $B - L D$, $D$ and $x_0$: least squares as `input_matrices`, whose regressors
    now decay (powers of $\\bar K$) instead of growing."""
    dtype = jnp.asarray(K).dtype
    K, C, L = (np.asarray(a, np.float64) for a in (K, C, L))
    ys = np.asarray(s.ys, np.float64)
    if c is not None:
        ys = ys - np.asarray(c, np.float64)[None, None]
    A = K - L @ C
    filtered = _filtered_outputs(A, L, C, ys)
    B_bar, D, _ = input_matrices(A, C, ys - filtered, s.us, s.mask, feedthrough, False)
    B = np.asarray(B_bar) if D is None else np.asarray(B_bar) + L @ np.asarray(D)
    return jax.device_put(np.asarray(B, dtype)), D  # device_put: nothing compiled


def noise_model(
    K,
    C,
    B,
    D,
    c,
    gamma,
    s: Signals,
    horizon: int,
    feedthrough: bool,
    constant: bool,
    past: tuple[np.ndarray, np.ndarray],
) -> NoiseModel:
    """The noise model of the subspace estimate `K`, `C`, `B`, `D`, `c`: state
    estimates from the windows (`window_states`), then the Kalman gain and
    innovation covariance from their residuals (`kalman_gain_from_residuals`), and
    the constant output term `c` as their mean. When `K` is unstable or marginal
    (spectral radius at least 0.999) or `B`, `D` are not finite, `B`, `D`, `c` are
    re-estimated from the states and then through the stable predictor
    (`_predictor_inputs`). `past`: the windows' `past_projection` for these
    signals and horizon (an order scan computes it once for all its orders)."""
    xs, valid = window_states(*past, gamma)
    finite = all(
        a is None or bool(np.all(np.isfinite(np.asarray(a)))) for a in (B, D, c)
    )
    unstable = not _radius(K) < _MARGINAL or not finite
    if unstable:
        B, D, c = _state_regression(K, C, xs, valid, s, horizon, feedthrough, constant)
    w, v = _residuals(K, B, C, D, None, xs, valid, s, horizon)
    if constant:
        # the constant output term that goes with the state estimates (the joint
        # least squares with x0 trades it against a marginal state direction)
        c = jnp.asarray(v.mean(axis=0), K.dtype)
        v = v - v.mean(axis=0)
    L, innovation = kalman_gain_from_residuals(K, C, w, v)
    L = jnp.asarray(L, K.dtype)
    if unstable and s.us is not None:
        B, D = _predictor_inputs(K, C, L, c, s, feedthrough)
    return NoiseModel(B, D, c, L, jnp.asarray(innovation, K.dtype))
