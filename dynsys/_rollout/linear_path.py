"""The linear path of a rollout: a `LinearSystem` with open-loop inputs and/or
`LinearFeedback` is one affine recurrence $x_{t+1} = M x_t + b_t$ for the whole batch,
with $M = K - BG$ and $b_t = B w_t + \\mathrm{offset}$, solved by one of the affine
solvers; `LinearAdjoint` solves its adjoint recurrence with the same solver."""

import functools

import jax
import jax.numpy as jnp

from .adjoint import (
    LinearAdjoint,
)
from .affine import _batch_input_axis, _reverse_solve, Factored
from .step import closed_loop_input


def _closed_loop_matrix(K, B, G):
    return K if G is None else K - B @ G


def _states(solve, num_steps, K, B, offset, G, x0, w):
    dtype = x0.dtype
    M = _closed_loop_matrix(K, B, G).astype(dtype)
    b_seq = None if w is None else Factored(w.astype(dtype), B.astype(dtype))
    b_const = None if offset is None else offset.astype(dtype)
    return solve(M, x0, b_seq, b_const, num_steps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _states_linear_adjoint(solve, num_steps, K, B, offset, G, x0, w):
    return _states(solve, num_steps, K, B, offset, G, x0, w)


def _states_fwd(solve, num_steps, K, B, offset, G, x0, w):
    xs = _states(solve, num_steps, K, B, offset, G, x0, w)
    return xs, (K, B, offset, G, xs, w)


def _states_bwd(solve, num_steps, residuals, g):
    K, B, offset, G, xs, w = residuals
    dtype = xs.dtype
    Mt = _closed_loop_matrix(K, B, G).astype(dtype).T
    lambdas = _reverse_solve(solve, Mt, g[:, -1], g[:, :-1])  # lambda_0 … lambda_T
    later = lambdas[:, 1:]  # lambda_{t+1}, t = 0 … T-1
    # One matrix product over all trajectories and steps: sum_t lambda_{t+1} x_t^T
    # (batch and time folded into one axis: XLA's CPU backend contracts one axis
    # several times faster than two).
    n = xs.shape[-1]
    flat_later = later.reshape(-1, n)
    dM = flat_later.T @ xs[:, :-1].reshape(-1, n)
    dK = dM.astype(K.dtype)
    dB = dG = doffset = dw = None
    if G is not None:
        dG = -(B.T.astype(dtype) @ dM).astype(G.dtype)
    if B is not None:
        # u_t = w_t - G x_t, so sum_t lambda_{t+1} u_t^T = Lambda^T W - dM G^T.
        dB = jnp.zeros(B.shape, dtype)
        if w is not None:
            if w.shape[0] == later.shape[0]:
                dB = flat_later.T @ w.reshape(-1, w.shape[-1]).astype(dtype)
            else:
                dB = jnp.einsum("ta,tm->am", later.sum(0), w[0].astype(dtype))
        if G is not None:
            dB = dB - dM @ G.T.astype(dtype)
        dB = dB.astype(B.dtype)
    if offset is not None:
        doffset = later.sum((0, 1)).astype(offset.dtype)
    if w is not None:
        dw = jnp.einsum("nta,am->ntm", later, B.astype(dtype))
        if w.shape[0] != dw.shape[0]:
            dw = dw.sum(0, keepdims=True)
        dw = dw.astype(w.dtype)
    dx0 = lambdas[:, 0]
    return dK, dB, doffset, dG, dx0, dw


_states_linear_adjoint.defvjp(_states_fwd, _states_bwd)


def _linear_rollout_batch(solve, system, controller, x0, ts, inputs, adjoint):
    num_steps = ts.shape[0] - 1
    G = None if controller is None else controller.gain
    # Levels (an operating point) enter as constant terms: x_{t+1} = K x_t + B u_t + a,
    # y_t = C x_t + D u_t + c.
    state_constant, output_constant = system.constant_terms()
    args = (system.K, system.B, state_constant, G, x0, inputs)
    if isinstance(adjoint, LinearAdjoint):
        xs = _states_linear_adjoint(solve, num_steps, *args)
    else:
        xs = _states(solve, num_steps, *args)
    # Inputs and outputs of every step at once: vmapped, they are matrix products.
    before = xs[:, :-1]
    inputs_b, axis = _batch_input_axis(inputs, x0.shape[0])
    over_time = jax.vmap(closed_loop_input, in_axes=(None, 0, 0, 0))
    over_batch = jax.vmap(over_time, in_axes=(None, None, 0, axis))
    if controller is None and inputs is None:
        us = None
    elif controller is None:
        us = jnp.broadcast_to(inputs, (x0.shape[0],) + inputs.shape[1:])
    else:
        us = over_batch(controller, ts[:-1], before, inputs_b)
    ys = _outputs(system.C, system.D, before, us)
    if output_constant is not None:
        ys = ys + output_constant[None, None]
    return xs, us, ys


def _outputs(C, D, xs, us):
    """$y_t = C x_t + D u_t$ for `xs (N, T, n)` and `us (N, T, m)` or `None`; shape
    `(N, T, p)`. Each term is one product with batch and time folded into one
    axis: vmapped over both, the reverse pass (`dC`, `dD`) contracts two axes,
    which XLA's CPU backend runs several times slower."""

    def fold(a, matrix):
        flat = a.reshape(-1, a.shape[-1]) @ matrix.T
        return flat.reshape(a.shape[:-1] + (matrix.shape[0],))

    ys = xs if C is None else fold(xs, C)
    if D is not None and us is not None:
        ys = ys + fold(us, D)
    return ys
