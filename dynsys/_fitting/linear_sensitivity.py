"""The derivatives of a `LinearSystem`'s free run with respect to its trained
parameters, on the host in NumPy (float64): what the covariance of a fit and the
free-run band need, without compiling a program.

For $x_{t+1} = K x_t + B u_t + a$, $y_t = C x_t + D u_t + c$ (the levels folded
into $a$ and $c$, `constant_terms`), the derivative along a parameter follows a
recursion of the same form, $dx_{t+1} = K\\,dx_t + dK\\,x_t + dB\\,u_t + da$,
$dy_t = C\\,dx_t + dC\\,x_t + dD\\,u_t + dc$. Each trained parameter of a
`LinearSystem` is one entry of one of its arrays, so every derivative of a matrix
is a selection (`linear_parameters`) and the forcing terms are gathered, not
multiplied (other linear models take their derivatives from one small kept
program). With the initial state estimated by least squares for each model
(`closed_form_run`), its derivative comes from the normal equations, as
`_fitting/initial_states.py` forms it in JAX.

A JAX program (`jax.jacfwd` of the rollout) computes the same; tracing and
compiling it took 0.3-1 s per run of `dynsys fit`, the arithmetic here a few
milliseconds for a model of order 7 on 800 samples.
"""

import dataclasses
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._compile.jit import kept_jit
from .._systems.system import LinearSystem


# Entries (N x T x states x parameter columns) of one block of the forward
# derivatives: past this the columns go in blocks.
BLOCK_ENTRIES = 2**22


class Linear(NamedTuple):
    """`K (n, n)`, `B (n, m)`, `C (p, n)`, `D (p, m)`, the constant terms `a (n,)`
    and `c (p,)` (`constant_terms`), float64; with derivatives, each with a last
    axis of the `P` trained parameters."""

    K: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    a: np.ndarray
    c: np.ndarray


# `LinearSystem`'s arrays, in the order `jax.tree.leaves` flattens them.
_FIELDS = ("K", "B", "C", "D", "offset", "input_level", "output_level")


def linear_parameters(model, trained) -> tuple[Linear, Linear] | None:
    """`(values, derivatives)` of a linear `model` with respect to its trained
    arrays (`trained`: the bool pytree of `ParameterCovariance.trained`), ravelled
    in `ParameterCovariance.split`'s order; `None` for a model that is not linear.

    For a `LinearSystem` every derivative is a selection, built on the host. For
    other linear models (a `StableLinearSystem`, whose `K` is a function of its
    parameters; a `Discretized` ODE) they come from one small kept program, the
    derivatives of `to_linear()`'s arrays (`_to_linear_derivatives`)."""
    if type(model) is not LinearSystem:
        return _through_to_linear(model, trained)
    arrays = {name: getattr(model, name) for name in _FIELDS}
    marks = {name: getattr(trained, name, None) for name in _FIELDS}
    selected = [
        name
        for name in _FIELDS
        if arrays[name] is not None and marks[name] is not None and bool(marks[name])
    ]
    leaves = jax.tree.leaves(eqx.partition(model, trained)[0])
    params = [arrays[name] for name in selected]
    if len(leaves) != len(params) or any(a is not b for a, b in zip(leaves, params)):
        return _through_to_linear(model, trained)  # not the plain layout
    host = {
        name: None if x is None else np.asarray(x, np.float64)
        for name, x in arrays.items()
    }
    n = host["K"].shape[0]
    B = np.zeros((n, 0)) if host["B"] is None else host["B"]
    C = np.eye(n) if host["C"] is None else host["C"]
    D = np.zeros((C.shape[0], B.shape[1])) if host["D"] is None else host["D"]
    shapes = {
        "K": (n, n),
        "B": B.shape,
        "C": C.shape,
        "D": D.shape,
        "offset": (n,),
        "input_level": (B.shape[1],),
        "output_level": (C.shape[0],),
    }
    count = sum(int(np.prod(shapes[name])) for name in selected)
    derivative = {name: np.zeros((*shapes[name], count)) for name in _FIELDS}
    start = 0
    for name in selected:
        size = int(np.prod(shapes[name]))
        block = np.eye(size).reshape(*shapes[name], size)
        derivative[name][..., start : start + size] = block
        start += size
    offset, u_level, y_level = (
        np.zeros(shapes[name]) if host[name] is None else host[name]
        for name in ("offset", "input_level", "output_level")
    )
    dB, dD, du = derivative["B"], derivative["D"], derivative["input_level"]
    # a = offset - B u_level, c = y_level - D u_level (`constant_terms`).
    values = Linear(
        K=host["K"], B=B, C=C, D=D, a=offset - B @ u_level, c=y_level - D @ u_level
    )
    derivatives = Linear(
        K=derivative["K"],
        B=dB,
        C=derivative["C"],
        D=dD,
        a=derivative["offset"]
        - np.einsum("amq,m->aq", dB, u_level)
        - np.einsum("am,mq->aq", B, du),
        c=derivative["output_level"]
        - np.einsum("pmq,m->pq", dD, u_level)
        - np.einsum("pm,mq->pq", D, du),
    )
    return values, derivatives


def _filled_parts(linear: LinearSystem) -> tuple:
    """`(K, B, C, D, a, c)` of a `LinearSystem` (JAX arrays): no columns for a
    missing `B`, the identity for a missing `C`, zeros for a missing `D` and for
    missing constant terms."""
    K = linear.K
    n = K.shape[0]
    B = jnp.zeros((n, 0), K.dtype) if linear.B is None else linear.B
    C = jnp.eye(n, dtype=K.dtype) if linear.C is None else linear.C
    D = jnp.zeros((C.shape[0], B.shape[1]), K.dtype) if linear.D is None else linear.D
    a, c = linear.constant_terms()
    a = jnp.zeros(n, K.dtype) if a is None else a
    c = jnp.zeros(C.shape[0], K.dtype) if c is None else c
    return K, B, C, D, a, c


@kept_jit
def _to_linear_derivatives(params, static):
    """`(parts, jacobians)`: `_filled_parts` of the model's `to_linear()` and
    their derivatives with respect to the trained arrays `params` (`jacfwd`)."""

    def parts(trained):
        return _filled_parts(eqx.combine(trained, static).to_linear())

    return parts(params), jax.jacfwd(parts)(params)


def _through_to_linear(model, trained) -> tuple[Linear, Linear] | None:
    """`linear_parameters` of a model with a `to_linear()` (else `None`), from
    `_to_linear_derivatives`."""
    to_linear = getattr(model, "to_linear", None)
    if not callable(to_linear) or not isinstance(to_linear(), LinearSystem):
        return None
    params, static = eqx.partition(model, trained)
    values, jacobians = _to_linear_derivatives(params, static)
    derivatives = []
    for value, jacobian in zip(values, jacobians):
        # Each leaf `value.shape + leaf.shape`: flattened in `split`'s order.
        columns = [
            np.asarray(leaf, np.float64).reshape(
                *value.shape, math.prod(leaf.shape[value.ndim :])
            )
            for leaf in jax.tree.leaves(jacobian)
        ]
        derivatives.append(np.concatenate([np.zeros((*value.shape, 0)), *columns], -1))
    return (
        Linear(*(np.asarray(x, np.float64) for x in values)),
        Linear(*derivatives),
    )


def _gather(d: np.ndarray, v: np.ndarray) -> np.ndarray:
    """`einsum("rcq,...c->...rq", d, v)`, `(..., r, P)`, from the nonzero entries
    of `d` (`(r, c, P)`: a selection for a `LinearSystem`'s parameters)."""
    rows, cols, params = np.nonzero(d)
    if rows.size > d.size // 8:  # dense (a `StableLinearSystem`'s `K`)
        return np.einsum("rcq,...c->...rq", d, v)
    out = np.zeros((*v.shape[:-1], d.shape[0], d.shape[2]))
    if rows.size:
        np.add.at(
            out,
            (Ellipsis, rows, params),
            d[rows, cols, params] * v[..., cols],
        )
    return out


def _columns(derivatives: Linear, start: int, stop: int) -> Linear:
    return Linear(*(x[..., start:stop] for x in derivatives))


def states(values: Linear, x0: np.ndarray, us: np.ndarray | None, T: int) -> np.ndarray:
    """The states `(N, T, n)` $x_0 \\dots x_{T-1}$ from `x0 (N, n)` driven by `us
    (N, T, m)` (or none)."""
    K, B, *_ = values
    N, n = x0.shape
    xs = np.empty((N, T, n))
    x = x0
    for t in range(T):
        xs[:, t] = x
        x = x @ K.T + values.a
        if us is not None and B.shape[1]:
            x = x + us[:, t] @ B.T
    return xs


def outputs(values: Linear, xs: np.ndarray, us: np.ndarray | None) -> np.ndarray:
    """$y_t = C x_t + D u_t + c$, `(N, T, p)`, of the states `xs (N, T, n)`."""
    ys = xs @ values.C.T + values.c
    if us is not None and values.B.shape[1]:
        ys = ys + us @ values.D.T
    return ys


def run_derivative(
    values: Linear, derivatives: Linear, xs: np.ndarray, us: np.ndarray | None
) -> np.ndarray:
    """The derivative `(N, T, p, P)` of the outputs of the run through the states
    `xs (N, T, n)` (from a fixed initial state) along each trained parameter."""
    N, T, n = xs.shape
    P = derivatives.K.shape[-1]
    p = values.C.shape[0]
    out = np.empty((N, T, p, P))
    block = max(1, BLOCK_ENTRIES // max(1, N * T * max(n, p)))
    for start in range(0, P, block):
        part = _columns(derivatives, start, min(P, start + block))
        out[..., start : start + block] = _run_derivative(values, part, xs, us)
    return out


def _run_derivative(values: Linear, d: Linear, xs, us) -> np.ndarray:
    N, T, n = xs.shape
    forcing = _gather(d.K, xs) + d.a  # (N, T, n, P)
    direct = _gather(d.C, xs) + d.c  # (N, T, p, P)
    if us is not None and values.B.shape[1]:
        forcing += _gather(d.B, us)
        direct += _gather(d.D, us)
    dx = np.zeros((N, n, d.K.shape[-1]))
    dxs = np.empty_like(forcing)
    for t in range(T):
        dxs[:, t] = dx
        dx = values.K @ dx + forcing[:, t]
    return values.C @ dxs + direct


def free_response(values: Linear, T: int) -> np.ndarray:
    """$G_t = C K^t$, `(T, p, n)`."""
    G = np.empty((T, *values.C.shape))
    row = values.C
    for t in range(T):
        G[t] = row
        row = row @ values.K
    return G


def adjoint_sum_derivative(
    values: Linear, derivatives: Linear, v: np.ndarray
) -> np.ndarray:
    """The derivative `(N, n, P)` of $\\sum_t G_t^T v_t$ (`v (N, T, p)` fixed) along
    each parameter: with $l_T = 0$, $l_t = K^T l_{t+1} + C^T v_t$ (the sum is
    $l_0$), $dl_t = dK^T l_{t+1} + K^T dl_{t+1} + dC^T v_t$."""
    K, C = values.K, values.C
    N, T, _ = v.shape
    n = K.shape[0]
    later = np.empty((N, T, n))  # l_{t+1}
    l = np.zeros((N, n))
    for t in reversed(range(T)):
        later[:, t] = l
        l = l @ K + v[:, t] @ C
    dKt = np.swapaxes(derivatives.K, 0, 1)
    dCt = np.swapaxes(derivatives.C, 0, 1)
    P = derivatives.K.shape[-1]
    total = np.empty((N, n, P))
    block = max(1, BLOCK_ENTRIES // max(1, N * T * n))
    for start in range(0, P, block):
        stop = min(P, start + block)
        forcing = _gather(dKt[..., start:stop], later) + _gather(
            dCt[..., start:stop], v
        )
        dl = np.zeros((N, n, stop - start))
        for t in reversed(range(T)):
            dl = K.T @ dl + forcing[:, t]
        total[..., start:stop] = dl
    return total


@dataclasses.dataclass(frozen=True)
class ClosedFormRun:
    """The outputs of a linear model from each experiment's least-squares initial
    state (`closed_form_run`) and their derivative.

    - `predicted`: `(N, T, p)`.
    - `derivative`: `(N, T, p, P)`, the initial states' dependence included.
    - `x0`: `(N, n)`.
    """

    predicted: np.ndarray
    derivative: np.ndarray
    x0: np.ndarray


def closed_form_run(
    values: Linear,
    derivatives: Linear,
    ys: np.ndarray,
    us: np.ndarray | None,
    mask: np.ndarray,
    weights: np.ndarray,
    *,
    ridge: bool,
) -> ClosedFormRun:
    """`predicted = z + G x0` with `x0` the weighted least-squares initial state
    of each experiment (`ys (N, T, p)` at the `mask (N, T)` steps, channel weights
    `weights (p,)`), and its derivative along each trained parameter.

    With `ridge` the normal equations are solved as `solve_x0` solves them in
    float64 (`fit`'s loss: a ridge of `eps` times the Gram matrix's trace, one step
    of iterative refinement); without, by a pseudo-inverse (`compare`'s
    `linear_x0`). The derivative of `x0` solves $M\\,dx_0 = dG^T W r - G^T W
    (dz + dG x_0)$ with $r$ the residual (the ridge's own derivative, at round-off
    level, left out as in JAX)."""
    N, T, p = ys.shape
    n = values.K.shape[0]
    G = free_response(values, T)
    forced = outputs(values, states(values, np.zeros((N, n)), us, T), us)
    W = mask.astype(np.float64)[:, :, None] * weights[None, None, :]
    b = ys - forced
    gram = np.einsum("tpn,itp,tpm->inm", G, W, G)
    if ridge:
        scale = np.trace(gram, axis1=1, axis2=2)
        eps = np.finfo(np.float64).eps
        shift = eps * scale + np.where(scale > 0, 0.0, 1.0)
        gram = gram + shift[:, None, None] * np.eye(n)[None]
        x0 = _solve(gram, np.einsum("tpn,itp->in", G, W * b))
        rest = b - np.einsum("tpn,in->itp", G, x0)  # one step of refinement
        right = np.einsum("tpn,itp->in", G, W * rest) - shift[:, None] * x0
        x0 = x0 + _solve(gram, right)
        inverse = np.linalg.inv(gram)
    else:
        A = (np.sqrt(W)[..., None] * G[None]).reshape(N, T * p, n)
        x0 = np.einsum("inr,ir->in", np.linalg.pinv(A), (np.sqrt(W) * b).reshape(N, -1))
        inverse = np.linalg.pinv(gram)
    xs = states(values, x0, us, T)
    predicted = outputs(values, xs, us)
    along = run_derivative(values, derivatives, xs, us)  # dz + dG x0
    transposed = adjoint_sum_derivative(values, derivatives, W * (ys - predicted))
    right = transposed - np.einsum("tpn,itpq->inq", G, W[..., None] * along)
    dx0 = inverse @ right  # (N, n, P)
    derivative = along + np.einsum("tpn,inq->itpq", G, dx0)
    return ClosedFormRun(predicted, derivative, x0)


def _solve(matrices: np.ndarray, right: np.ndarray) -> np.ndarray:
    """`x (N, n)` with `matrices[i] @ x[i] = right[i]` for each experiment."""
    return np.linalg.solve(matrices, right[..., None])[..., 0]
