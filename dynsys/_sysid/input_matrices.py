"""`B`, `D` and a constant output term of a linear model with known `K`, `C`, by
least squares over every step of every experiment, each experiment's initial state
estimated jointly (projected out in closed form).

Written in NumPy (float64): an order scan calls it for tens of models of different
sizes, and a compiled program per size would cost more than the arithmetic."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .convolution import decays, delayed_regressors, powers, recursion_states


def _numpy(a) -> np.ndarray | None:
    return None if a is None else np.asarray(a, dtype=np.float64)


def _unit_entries(u: np.ndarray, rows: int) -> np.ndarray:
    """`(N, rows, rows * m)`: for each experiment, the matrix $M$ with
    $M\\,\\mathrm{vec}(X) = X u$ for `X (rows, m)` (row-major vec)."""
    N, m = u.shape
    out = np.zeros((N, rows, rows, m))
    index = np.arange(rows)
    out[:, index, index, :] = u[:, None, :]
    return out.reshape(N, rows, rows * m)


def _input_regressors(
    K: np.ndarray, rows: np.ndarray, us: np.ndarray, feedthrough: bool
) -> np.ndarray:
    """`Phi[i, t]` `(N, T, p, q)` with $y_t = C K^t x_0 + \\Phi_t\\,[\\mathrm{vec}\\,B;
    \\mathrm{vec}\\,D]$ (row-major vec): the response to unit entries of `B`, `D`;
    `rows` `(T, p, n)` are $C K^t$. Summed by FFT where `K`'s powers decay
    (`convolution.py`), else step by step."""
    N, T, m = us.shape
    _, p, n = rows.shape
    if decays(K):
        phi = delayed_regressors(rows.reshape(T, p * n), us).reshape(N, T, p, n * m)
    else:
        # d x_t / d B[i, k] follows the recursion forced by u_t[k] e_i, one
        # state per entry of B (`recursion_states`, batched over them).
        forcing = np.zeros((N, n, m, T, n))
        index = np.arange(n)
        forcing[:, index, :, :, index] = np.swapaxes(us, 1, 2)[None]
        states = recursion_states(K, forcing.reshape(N * n * m, T, n))
        phi = np.einsum("pj,nktj->ntpk", rows[0], states.reshape(N, n * m, T, n))
    if feedthrough:
        direct = _unit_entries(us.reshape(N * T, m), p).reshape(N, T, p, p * m)
        phi = np.concatenate([phi, direct], axis=-1)
    return phi


def input_matrices(
    K: Float[ArrayLike, "n n"],
    C: Float[ArrayLike, "p n"],
    ys: Float[ArrayLike, "N T p"],
    us: Float[ArrayLike, "N T m"] | None,
    mask: Bool[ArrayLike, "N T"],
    feedthrough: bool,
    constant: bool,
) -> tuple[Array | None, Array | None, Array | None]:
    """`(B, D, c)` of $y_t = C K^t x_0 + \\sum_{j<t} C K^{t-1-j} B u_j + D u_t + c$
    by least squares on all experiments, each experiment's $x_0$ projected out (so
    it is estimated jointly, in closed form). `B` is `None` without inputs, `D`
    unless `feedthrough`, `c (p,)` unless `constant`; in the dtype of `ys`.

    The regressors of $x_0$ grow like $K^t$ when $K$ is unstable, and then swamp
    the others: stabilise `K` first (`stabilised_start`)."""
    dtype = jnp.result_type(ys)  # JAX's dtype of `ys`, without a program to find it
    K, C, ys, us = _numpy(K), _numpy(C), _numpy(ys), _numpy(us)
    N, T, p = ys.shape
    n = K.shape[0]
    weight = np.asarray(mask, dtype=np.float64)
    columns = []
    with np.errstate(all="ignore"):
        rows = powers(K, C, T)
        if us is not None:
            columns.append(
                _input_regressors(K, rows, us * weight[..., None], feedthrough)
            )
        if constant:
            columns.append(np.broadcast_to(np.eye(p), (N, T, p, p)))
        if not columns:
            return None, None, None
        phi = np.concatenate(columns, axis=-1) * weight[..., None, None]
        phi = phi.reshape(N, T * p, -1)
        y = (ys * weight[..., None]).reshape(N, T * p)
        obs = (rows[None] * weight[:, :, None, None]).reshape(N, T * p, n)
        theta = _projected_least_squares(obs, phi, y)
    B = D = c = None
    if us is not None:
        m = us.shape[-1]
        B = jnp.asarray(theta[: n * m].reshape(n, m), dtype)
        if feedthrough:
            D = jnp.asarray(theta[n * m : n * m + p * m].reshape(p, m), dtype)
    if constant:
        c = jnp.asarray(theta[-p:], dtype)
    return B, D, c


def _projected_least_squares(
    obs: np.ndarray, phi: np.ndarray, y: np.ndarray
) -> np.ndarray:
    """$\\theta$ minimising $\\sum_i \\min_{x_i} \\lVert y_i - O_i x_i - \\Phi_i
    \\theta\\rVert^2$: each experiment's `O_i (T p, n)` projected out of its
    regressors `Phi_i (T p, q)` and outputs `y_i (T p,)` first."""
    N, rows, n = obs.shape
    if not (np.all(np.isfinite(obs)) and np.all(np.isfinite(phi))):
        return np.full(phi.shape[-1], np.nan)
    cutoff = 10 * max(rows, n) * np.finfo(np.float64).eps  # as jnp.linalg.pinv
    obs_pinv = np.linalg.pinv(obs, rcond=cutoff)
    phi = phi - obs @ (obs_pinv @ phi)
    y = y - np.einsum("nij,nj->ni", obs, np.einsum("nij,nj->ni", obs_pinv, y))
    return np.linalg.lstsq(phi.reshape(N * rows, -1), y.reshape(-1), rcond=None)[0]
