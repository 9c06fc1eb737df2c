"""`B`, `D` and a constant output term of a linear model with known `K`, `C`, by
least squares over every step of every experiment, each experiment's initial state
estimated jointly (projected out in closed form)."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .initial_state import observability_rows


def _input_regressors(
    K: Array, C: Array, us: Array, feedthrough: bool
) -> Float[Array, "N T p q"]:
    """`Phi[i, t]` with $y_t = C K^t x_0 + \\Phi_t\\,[\\mathrm{vec}\\,B;
    \\mathrm{vec}\\,D]$ (row-major vec): the response to unit entries of `B`, `D`."""
    N, T, m = us.shape
    n = K.shape[0]
    eye_n = jnp.eye(n, dtype=K.dtype)

    def body(W, u):  # W (N, n, n*m): d x_t / d vec(B)
        phi = jnp.einsum("pi,nij->npj", C, W)
        W_next = jnp.einsum("ij,njk->nik", K, W) + jax.vmap(
            lambda v: jnp.kron(eye_n, v[None, :])
        )(u)
        return W_next, phi

    W0 = jnp.zeros((N, n, n * m), K.dtype)
    _, phi = jax.lax.scan(body, W0, jnp.swapaxes(us, 0, 1))
    phi = jnp.swapaxes(phi, 0, 1)  # (N, T, p, n m)
    if feedthrough:
        p = C.shape[0]
        eye_p = jnp.eye(p, dtype=K.dtype)
        direct = jax.vmap(jax.vmap(lambda v: jnp.kron(eye_p, v[None, :])))(us)
        phi = jnp.concatenate([phi, direct], axis=-1)
    return phi


def input_matrices(
    K: Float[Array, "n n"],
    C: Float[Array, "p n"],
    ys: Float[Array, "N T p"],
    us: Float[Array, "N T m"] | None,
    mask: Bool[Array, "N T"],
    feedthrough: bool,
    constant: bool,
) -> tuple[Array | None, Array | None, Array | None]:
    """`(B, D, c)` of $y_t = C K^t x_0 + \\sum_{j<t} C K^{t-1-j} B u_j + D u_t + c$
    by least squares on all experiments, each experiment's $x_0$ projected out (so
    it is estimated jointly, in closed form). `B` is `None` without inputs, `D`
    unless `feedthrough`, `c (p,)` unless `constant`.

    The regressors of $x_0$ grow like $K^t$ when $K$ is unstable, and then swamp
    the others: stabilise `K` first (`stabilised_start`)."""
    N, T, p = ys.shape
    n = K.shape[0]
    weight = mask.astype(ys.dtype)
    columns = []
    if us is not None:
        phi = _input_regressors(K, C, us * weight[..., None], feedthrough)
        columns.append(phi)
    if constant:
        columns.append(jnp.broadcast_to(jnp.eye(p, dtype=ys.dtype), (N, T, p, p)))
    if not columns:
        return None, None, None
    phi = jnp.concatenate(columns, axis=-1)
    phi = (phi * weight[..., None, None]).reshape(N, T * p, -1)
    y = (ys * weight[..., None]).reshape(N, T * p)
    obs = observability_rows(K, C, T)[None] * weight[:, :, None, None]
    obs = obs.reshape(N, T * p, n)
    obs_pinv = jnp.linalg.pinv(obs)
    phi = phi - obs @ (obs_pinv @ phi)
    y = y - jnp.einsum("nij,nj->ni", obs, jnp.einsum("nij,nj->ni", obs_pinv, y))
    theta = jnp.linalg.lstsq(phi.reshape(N * T * p, -1), y.reshape(-1))[0]
    B = D = c = None
    if us is not None:
        m = us.shape[-1]
        B = theta[: n * m].reshape(n, m)
        if feedthrough:
            D = theta[n * m : n * m + p * m].reshape(p, m)
    if constant:
        c = theta[-p:]
    return B, D, c
