"""The initial states of a linear model's experiments in closed form: the
least-squares `x0` of each experiment given the free and forced responses
(`solve_x0`), and the outputs predicted from it (`closed_form`), whose
derivative along every parameter direction is formed from single-trajectory
derivatives instead of the whole free response's."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, ArrayLike, Bool, Float

from .._systems.innovation import kalman_predictions, prediction_free_response
from .._systems.system import LinearSystem


def solve_x0(
    G: Float[ArrayLike, "T p n"],
    b: Float[ArrayLike, "N T p"],
    valid: Bool[ArrayLike, "N T"],
    weights: Float[ArrayLike, " p"],
) -> Float[Array, "N n"]:
    """For each experiment `i`,
    $\\arg\\min_{x_0} \\sum_{t\\ \\mathrm{valid}} \\sum_c w_c (G_t x_0 - b_{i,t})_c^2$;
    differentiable in forward and reverse mode.

    In float64 by the normal equations (an `n x n` Cholesky factorisation per
    experiment and one step of iterative refinement), with a hand-written derivative
    (`_normal_equations_x0`); in float32, whose precision the normal equations would
    square away, by a QR solve per experiment. A ridge at round-off level keeps a
    rank-deficient problem (a window shorter than the state, an unobservable
    direction, a fully padded window) finite without changing a well-posed one:
    $\\epsilon \\lVert A_i \\rVert_F^2$ added to $A_i^\\top A_i$ (with $A_i$ the
    weighted valid rows of $G$), $(\\epsilon \\lVert A_i \\rVert_F)^2$ in the QR
    solve, whose own accuracy needs less."""
    if G.dtype == jnp.float64:
        return _normal_equations_x0(G, b, valid.astype(G.dtype), weights)
    return jax.vmap(_qr_x0, in_axes=(None, 0, 0, None))(G, b, valid, weights)


def _qr_x0(G, b, valid, weights):
    """One experiment's $x_0$ by a QR solve (`G (T, p, n)`, `b (T, p)`)."""
    return _qr_parts(G, b, valid, weights)[-1]


def _qr_parts(G, b, valid, weights):
    """One experiment's QR solve: the orthonormal columns `Q (T p, n)` of its
    weighted valid rows (the ridge's rows left out), the triangle `R (n, n)` of
    them and the ridge, and $x_0$."""
    T, p, n = G.shape
    root = jnp.sqrt(weights)
    A = jnp.where(valid[:, None, None], G * root[None, :, None], 0.0).reshape(T * p, n)
    rhs = jnp.where(valid[:, None], b * root[None, :], 0.0).reshape(T * p)
    scale = jnp.sum(A**2)
    eps = jnp.finfo(A.dtype).eps
    ridge = jnp.sqrt(eps**2 * scale + jnp.where(scale > 0, 0.0, 1.0))
    A = jnp.concatenate([A, ridge * jnp.eye(n, dtype=A.dtype)])
    Q, R = jnp.linalg.qr(A)
    x = jax.scipy.linalg.solve_triangular(R, Q[: T * p].T @ rhs, lower=False)
    return Q[: T * p], R, x


def _normal_equations_parts(G, b, valid, weights):
    """Per experiment: the row weights `W (N, T, p)`, the ridged Gram matrices'
    Cholesky factors, the Gram matrices' traces `(N,)`, the ridges `(N,)` and the
    refined solutions `x (N, n)`."""
    W = valid[:, :, None] * weights[None, None, :]
    gram = jnp.einsum("tpn,itp,tpm->inm", G, W, G)
    scale = jnp.trace(gram, axis1=1, axis2=2)
    eps = jnp.finfo(G.dtype).eps
    ridge = eps * scale + jnp.where(scale > 0, 0.0, 1.0)
    eye = jnp.eye(G.shape[-1], dtype=G.dtype)
    factors = jnp.linalg.cholesky(gram + ridge[:, None, None] * eye[None])  # lower

    def solve(right):  # (N, n)
        return jax.vmap(_cho_solve)(factors, right)

    x = solve(jnp.einsum("tpn,itp->in", G, W * b))
    residual = b - jnp.einsum("tpn,in->itp", G, x)
    x = x + solve(jnp.einsum("tpn,itp->in", G, W * residual) - ridge[:, None] * x)
    return W, factors, scale, ridge, x


def _cho_solve(lower, right):
    return jax.scipy.linalg.cho_solve((lower, True), right)


@jax.custom_jvp
def _normal_equations_x0(G, b, valid, weights):
    """`solve_x0` in float64 (`valid` as 0/1 floats)."""
    return _normal_equations_parts(G, b, valid, weights)[-1]


@_normal_equations_x0.defjvp
def _normal_equations_x0_jvp(primals, tangents):
    # With M_i = sum_t G_t^T W_it G_t + rho_i I, differentiating M_i x_i =
    # sum_t G_t^T W_it b_it gives M_i dx_i = sum_t dG_t^T W_it r_it +
    # G_t^T W_it (db_it - dG_t x_i) + G_t^T dW_it r_it - drho_i x_i, with
    # r = b - G x. Each term is one contraction over time and channels, which
    # jacfwd batches over all parameter directions as a matrix product: through
    # the factorisation or a vmapped solve per experiment the Jacobian of the
    # output-error loss took 4-10x as long (small batched LAPACK calls, and
    # per-experiment copies of dG).
    G, b, valid, weights = primals
    dG, db, _, dweights = tangents
    W, factors, scale, ridge, x = _normal_equations_parts(G, b, valid, weights)
    residual = b - jnp.einsum("tpn,in->itp", G, x)
    dW = valid[:, :, None] * dweights[None, None, :]
    right = (
        jnp.einsum("tpn,itp->in", dG, W * residual)
        + jnp.einsum("tpn,itp->in", G, W * (db - jnp.einsum("tpn,in->itp", dG, x)))
        + jnp.einsum("tpn,itp->in", G, dW * residual)
    )
    eps = jnp.finfo(G.dtype).eps
    dscale = 2 * jnp.einsum("tpn,itp,tpn->i", G, W, dG) + jnp.einsum(
        "tpn,itp,tpn->i", G, dW, G
    )
    dridge = jnp.where(scale > 0, eps * dscale, 0.0)
    right = right - dridge[:, None] * x
    eye = jnp.eye(G.shape[-1], dtype=G.dtype)
    inverses = jax.vmap(_cho_solve, in_axes=(0, None))(factors, eye)
    return x, jnp.einsum("inm,im->in", inverses, right)


# simulate(model, x0s (N, n), num_steps, inputs (N, T, m) or None) -> ys (N, T, p)
Simulate = Callable[..., Float[Array, "N T p"]]


def closed_form(
    predictor: "FreeRun | KalmanPredictor",
    model,
    ys: Float[Array, "N T p"],
    us: Float[Array, "N T m"] | None,
    mask: Bool[Array, "N T"],
    weights: Float[Array, " p"],
) -> tuple[Float[Array, "N T p"], Float[Array, "N n"]]:
    """The outputs that `predictor` gives a linear `model` from each experiment's
    least-squares initial state, and those states: `predicted = z + G x0` with `G`
    the predictor's free response (`C K^t` for a `FreeRun`), `z` its response from
    rest and `x0 = solve_x0(G, ys - z, mask, weights)`. `ys` and `us` are zero at
    the padded steps (`mask` False).

    Its derivative is formed without the free response's: along a direction,
    `dz + dG x0` is the derivative of one run from the fixed `x0`, and the term of
    `dx0` with `dG^T` is the derivative of `sum_t G_t^T v_t` (the adjoint
    recursion of a `FreeRun`; a `KalmanPredictor`'s reverse-mode derivative in the
    initial state, differentiated forward), so that each parameter direction
    carries an `(N, n)` state instead of `G`'s `(n, n)` per step (on the glass
    furnace record, 6 outputs and 6 states, a Levenberg–Marquardt step 3x faster;
    docs/benchmarks.md). `dx0` is solved with `solve_x0`'s factors: Cholesky's in
    float64, the QR factors in float32 (whose precision the normal equations would
    square away).
    """
    return _with_structured_derivative(predictor)(model, ys, us, mask, weights)


class FreeRun:
    """The free run of a linear model from `x0`, through `simulate`: `run`, the
    free response `G (T, p, n)` and `adjoint_sum` (`sum_t G_t^T v_t`)."""

    def __init__(self, simulate: Simulate):
        self.simulate = simulate

    def run(self, model, x0, ys, us):
        return self.simulate(model, x0, ys.shape[1], us)

    def free(self, model, num_steps: int):
        eye = jnp.eye(model.state_size, dtype=model.K.dtype)
        C = eye if model.C is None else model.C
        G = self.simulate(LinearSystem(model.K, C=C), eye, num_steps, None)
        return jnp.transpose(G, (1, 2, 0))

    def adjoint_sum(self, model, x0, ys, us, v):
        return _adjoint_sum(model, v)


class KalmanPredictor:
    """The `horizon`-step predictions of an `InnovationSystem`'s Kalman predictor
    from `x0` (`kalman_predictions`), as `FreeRun`."""

    def __init__(self, horizon: int):
        self.horizon = horizon

    def run(self, model, x0, ys, us):
        return kalman_predictions(model, x0, ys, us, self.horizon)

    def free(self, model, num_steps: int):
        return prediction_free_response(model, num_steps, self.horizon)

    def adjoint_sum(self, model, x0, ys, us, v):
        # The predictions are affine in x0: their pullback of v is G^T v.
        _, pullback = jax.vjp(lambda x: self.run(model, x, ys, us), x0)
        return pullback(v)[0]


def _adjoint_sum(model, v: Float[Array, "N T p"]) -> Float[Array, "N n"]:
    """`sum_t G_t^T v_t` per experiment (`G_t = C K^t`), by the recursion
    `l <- K^T l + C^T v_t` from the last step back to the first."""
    K = model.K
    C = jnp.eye(K.shape[0], dtype=K.dtype) if model.C is None else model.C
    return _adjoint_recursion(K, C, v)


@jax.custom_jvp
def _adjoint_recursion(K, C, v):
    """`_adjoint_sum` of `K (n, n)`, `C (p, n)` and `v (N, T, p)`: `(N, n)`."""
    return _back_substitute(K, _time_major(v, C))[0]


def _time_major(v: Float[Array, "N T p"], C: Float[Array, "p n"]):
    """The forcing `v_t C` of every step, time first: `(T, N, n)`."""
    return jnp.einsum("ntp,pj->tnj", v, C)


def _back_substitute(K, forcing: Float[Array, "T N n"]):
    """The rows `l_t = l_{t+1} K + forcing_t` from `l_T = 0` back to `l_0`: `(l_0
    (N, n), the l_{t+1} that each step starts from (T, N, n))`."""

    def back(rows, f_t):
        return rows @ K + f_t, rows

    zeros = jnp.zeros(forcing.shape[1:], forcing.dtype)
    return jax.lax.scan(back, zeros, forcing, reverse=True)


# The largest `T n^2` (entries of the powers `K^t`, t < T) whose derivative is
# formed from those powers (`_adjoint_recursion_jvp`): 2^24, 128 MB in float64.
POWERS_LIMIT = 2**24


def _adjoint_recursion_jvp(primals, tangents):
    """The rows satisfy `l_t = l_{t+1} K + v_t C`, so `l_0 = sum_t v_t C K^t` and
    its derivative is `sum_t (l_{t+1} dK + v_t dC + dv_t C) K^t`. Each term is a
    contraction of a direction's `dK`, `dC` or `dv` with an array of the primal
    alone (`S`, `V`, `C K^t` below), formed once for every direction: a direction
    then costs `n^3 + p n^2 + T p n` multiply-adds and no loop (`T p n` only where
    `v` moves: a fit's `v` is fixed, its tangent a symbolic zero). JAX's own
    derivative carried every direction's `dK` and `dC` through the recursion's loop,
    and formed its forcing at each step: along 48 directions of an order-10 model
    over 1,536 steps it took 10.7 ms, this 0.6 ms (docs/benchmarks.md). Where the
    powers would take more than `POWERS_LIMIT` entries, the derivative runs the
    recursion again on its own forcing, formed for every step at once."""
    K, C, v = primals
    dK, dC, dv = tangents
    dK, dC = _instantiated(dK), _instantiated(dC)
    dv = None if isinstance(dv, SymbolicZero) else dv  # its terms left out
    total, starts = _back_substitute(K, _time_major(v, C))
    num_steps, n = v.shape[1], K.shape[0]
    if num_steps * n * n > POWERS_LIMIT:
        forcing = starts @ dK + _time_major(v, dC)
        if dv is not None:
            forcing = forcing + _time_major(dv, C)
        return total, _back_substitute(K, forcing)[0]
    powers = _powers(K, num_steps)  # (T, n, n): K^t
    after_state = jnp.einsum("tna,tbj->nabj", starts, powers)  # S
    after_output = jnp.einsum("ntp,tbj->npbj", v, powers)  # V
    derivative = jnp.einsum("ab,nabj->nj", dK, after_state)
    derivative = derivative + jnp.einsum("pb,npbj->nj", dC, after_output)
    if dv is not None:
        free_response = jnp.einsum("pb,tbj->tpj", C, powers)  # C K^t
        derivative = derivative + jnp.einsum("ntp,tpj->nj", dv, free_response)
    return total, derivative


def _instantiated(tangent):
    """A tangent as an array (zeros for a symbolic zero)."""
    if isinstance(tangent, SymbolicZero):
        return jnp.zeros(tangent.shape, tangent.dtype)
    return tangent


_adjoint_recursion.defjvp(_adjoint_recursion_jvp, symbolic_zeros=True)


def _powers(K: Float[Array, "n n"], count: int) -> Float[Array, "count n n"]:
    """`K^t` for `t = 0 ... count - 1`, by doubling: `log2(count)` batched
    products instead of `count` sequential ones."""
    powers = jnp.eye(K.shape[0], dtype=K.dtype)[None]
    while powers.shape[0] < count:
        step = powers[-1] @ K  # K^m for the m powers so far
        powers = jnp.concatenate([powers, powers @ step])
    return powers[:count]


def _with_structured_derivative(predictor: "FreeRun | KalmanPredictor"):
    """`closed_form` of `predictor` as a function of `(model, ys, us,
    mask, weights)` with its own forward-mode derivative."""

    def parts(model, ys, us, mask, weights):
        """`G`, the row weights `W (N, T, p)`, `x0`, the predicted outputs and
        `solve(v, g)`: the `dx0` with `M dx0 = G^T W v + g` (`v (N, T, p)`, `g (N,
        n)`, `M = G^T W G` plus the ridge)."""
        G = predictor.free(model, ys.shape[1])
        rest = jnp.zeros((ys.shape[0], model.state_size), G.dtype)
        forced = predictor.run(model, rest, ys, us)
        valid, b = mask.astype(G.dtype), ys - forced
        if G.dtype == jnp.float64:
            W, factors, _, _, x0 = _normal_equations_parts(G, b, valid, weights)

            def solve(v, g):
                right = jnp.einsum("tpn,itp->in", G, W * v) + g
                return jax.vmap(_cho_solve)(factors, right)

        else:
            W = valid[:, :, None] * weights[None, None, :]
            qr = jax.vmap(_qr_parts, in_axes=(None, 0, 0, None))
            Q, R, x0 = qr(G, b, valid, weights)

            def solve(v, g):  # R^-1 (Q^T sqrt(W) v + R^-T g), M = R^T R
                rows = (jnp.sqrt(W) * v).reshape(v.shape[0], -1)
                projected = jnp.einsum("irn,ir->in", Q, rows)
                lower = jax.vmap(lambda r, b: _triangular(r, b, True))(R, g)
                return jax.vmap(_triangular)(R, projected + lower)

        return G, W, x0, forced + jnp.einsum("tpn,in->itp", G, x0), solve

    @jax.custom_jvp
    def outputs(model, ys, us, mask, weights):
        _, _, x0, predicted, _ = parts(model, ys, us, mask, weights)
        return predicted, x0

    @outputs.defjvp
    def outputs_jvp(primals, tangents):
        model, ys, us, mask, weights = primals
        dmodel, dys, dus, _, dweights = tangents
        G, W, x0, predicted, solve = parts(model, ys, us, mask, weights)
        residual = ys - predicted
        # dz + dG x0: the derivative of the run from the (fixed) estimated states.
        _, along = jax.jvp(
            lambda m, y, u: predictor.run(m, x0, y, u),
            (model, ys, us),
            (dmodel, dys, dus),
        )
        # M dx0 = dG^T W r + G^T W (dys - dz - dG x0) + G^T dW r (r the residual);
        # the ridge's own derivative, eps times the trace of dM, is below the
        # round-off of the other terms and is left out.
        _, transposed = jax.jvp(
            lambda m: predictor.adjoint_sum(m, x0, ys, us, W * residual),
            (model,),
            (dmodel,),
        )
        dW = mask.astype(G.dtype)[:, :, None] * dweights[None, None, :]
        g = transposed + jnp.einsum("tpn,itp->in", G, dW * residual)
        dx0 = solve(dys - along, g)
        dpredicted = along + jnp.einsum("tpn,in->itp", G, dx0)
        return (predicted, x0), (dpredicted, dx0)

    return outputs


def _triangular(R, right, transposed=False):
    """`R^-1 right`, or `R^-T right` with `transposed` (`R` upper triangular)."""
    return jax.scipy.linalg.solve_triangular(R, right, trans=1 if transposed else 0)
