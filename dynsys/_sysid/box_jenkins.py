"""Box–Jenkins models by prediction-error minimisation, returned in innovation
form."""

from typing import NamedTuple

import numpy as np
import scipy.linalg

from .._fitting.host_blas import on_one_blas_thread
from .._systems.innovation import InnovationSystem
from .._type_checks import checks_own_arguments
from .polynomial import (
    check_inputs,
    check_length,
    check_orders,
    delayed,
    Experiments,
    experiments,
    filtered,
    hannan_rissanen,
    innovation_system,
    largest_root,
    monic,
    observer_form,
    padded,
    reflected,
    warn_unconverged,
)
from .prediction_error import minimise


class BoxJenkins(NamedTuple):
    """The polynomials of $y_t = \\sum_j B_j(q) / F_j(q)\\, u_{j, t-nk} + C(q) /
    D(q)\\, e_t$: `b (nb, m)` (column `j` is $B_j$), `f (nf, m)` (column `j`
    is $F_j$ without its leading 1), `c (nc,)`, `d (nd,)`, `nk`, the innovation
    variance and the number of accepted minimisation steps."""

    b: np.ndarray
    f: np.ndarray
    c: np.ndarray
    d: np.ndarray
    nk: int
    variance: float
    steps: int
    converged: bool


def _split(theta, nb: int, nf: int, nc: int, m: int):
    b = theta[: nb * m].reshape(nb, m)
    f = theta[nb * m : (nb + nf) * m].reshape(nf, m)
    c = theta[(nb + nf) * m : (nb + nf) * m + nc]
    return b, f, c, theta[(nb + nf) * m + nc :]


def box_jenkins_errors(
    data: Experiments, b, f, c, d, nk: int, jacobian: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """The one-step prediction errors $e = (D / C)(y - \\sum_j w_j)$, $w_j =
    (B_j / F_j) u_{j, t-nk}$, of every experiment from zero initial conditions,
    concatenated `(R,)`, and their Jacobian with respect to `(b, f, c, d)`:
    $\\partial e / \\partial b_{k, j} = -(D / C F_j)\\, u_{j, t-nk-k}$,
    $\\partial e / \\partial f_{k, j} = (D / C F_j)\\, w_{j, t-k}$,
    $\\partial e / \\partial c_k = -e_{t-k} / C$, $\\partial e / \\partial d_k =
    v_{t-k} / C$ with $v = y - \\sum_j w_j$."""
    nb, m = b.shape
    C, D = monic(c), monic(d)
    us = data.us or (None,) * len(data.ys)
    errors, jacobians = [], []
    for y, u in zip(data.ys, us):
        ws = []
        if u is not None:
            for j in range(m):
                numerator = padded(np.concatenate([np.zeros(nk), b[:, j]]), nk + nb + 1)
                ws.append(filtered(numerator, monic(f[:, j]), u[:, j]))
        v = y - sum(ws) if ws else y
        e = filtered(D, C, v)
        errors.append(e)
        if not jacobian:
            continue
        b_columns, f_columns = [], []
        for j in range(len(ws)):
            denominator = np.convolve(C, monic(f[:, j]))
            u_f = filtered(D, denominator, u[:, j])
            w_f = filtered(D, denominator, ws[j])
            b_columns.append([-delayed(u_f, nk + k) for k in range(nb)])
            f_columns.append([delayed(w_f, k) for k in range(1, f.shape[0] + 1)])
        # theta's order: b row-major (lag, input), then f likewise
        columns = [b_columns[j][k] for k in range(nb) for j in range(len(ws))]
        columns += [f_columns[j][k] for k in range(f.shape[0]) for j in range(len(ws))]
        e_f, v_f = filtered([1.0], C, e), filtered([1.0], C, v)
        columns += [-delayed(e_f, k) for k in range(1, c.size + 1)]
        columns += [delayed(v_f, k) for k in range(1, d.size + 1)]
        jacobians.append(
            np.stack(columns, axis=1) if columns else np.zeros((y.size, 0))
        )
    return np.concatenate(errors), (np.concatenate(jacobians) if jacobian else None)


def _minimise(data: Experiments, theta, orders, nk: int, fixed_noise=None):
    """`minimise` over `theta = (b, f, c, d)` with every `F_j` and `C` kept stable;
    with `fixed_noise = (c, d)`, over `(b, f)` only (an output-error fit)."""
    nb, nf, nc, nd, m = orders

    def parts(theta):
        if fixed_noise is None:
            return _split(theta, nb, nf, nc, m)
        b, f, _, _ = _split(theta, nb, nf, 0, m)
        return (b, f, *fixed_noise)

    def evaluate(theta):
        r, J = box_jenkins_errors(data, *parts(theta), nk)
        return r, J if fixed_noise is None else J[:, : (nb + nf) * m]

    def feasible(theta):
        b, f, c, _ = parts(theta)
        stable = [largest_root(monic(f[:, j])) < 1.0 for j in range(m)]
        return all(stable) and largest_root(monic(c)) < 1.0

    return minimise(evaluate, theta, feasible), parts


def _start(data: Experiments, nb: int, nf: int, nc: int, nd: int, nk: int):
    """A start `(b, f, c, d)`: an ARX model of orders `(nf, nb, nk)` (its `A`,
    reflected into the unit disc, the start of every `F_j`), refined as an
    output-error model (`C = D = 1`); then `D`, `C` as Hannan and Rissanen's
    ARMA estimate of what that model leaves, $v = y - \\sum_j w_j$."""
    m = data.num_inputs
    f = np.zeros((nf, m))
    b = np.zeros((nb, m))
    if m and (nb or nf):
        a, b, _ = hannan_rissanen(data, nf, nb, 0, nk)
        f = np.repeat(reflected(monic(a))[1:, None], m, axis=1)
        theta = np.concatenate([b.ravel(), f.ravel()])
        empty = (np.zeros(0), np.zeros(0))
        found, parts = _minimise(data, theta, (nb, nf, 0, 0, m), nk, empty)
        b, f, _, _ = parts(found.theta)
    if nc == 0 and nd == 0:
        return b, f, np.zeros(0), np.zeros(0)
    v, _ = box_jenkins_errors(data, b, f, np.zeros(0), np.zeros(0), nk, False)
    pieces = np.split(v, np.cumsum([y.size for y in data.ys])[:-1])
    residual = data._replace(ys=tuple(pieces), us=None)
    d, _, c = hannan_rissanen(residual, nd, 0, nc, 0)
    return b, f, c, d


def box_jenkins_polynomials(
    data: Experiments, nb: int, nc: int, nd: int, nf: int, nk: int
) -> BoxJenkins:
    """The Box–Jenkins polynomials that minimise the sum of squared one-step
    prediction errors (`box_jenkins_errors`) over every experiment."""
    m = data.num_inputs
    nb, nf = (nb, nf) if m else (0, 0)
    b, f, c, d = _start(data, nb, nf, nc, nd, nk)
    theta = np.concatenate([b.ravel(), f.ravel(), c, d])
    found, parts = _minimise(data, theta, (nb, nf, nc, nd, m), nk)
    b, f, c, d = parts(found.theta)
    variance = float(found.residuals @ found.residuals) / max(found.residuals.size, 1)
    return BoxJenkins(b, f, c, d, nk, variance, found.steps, found.converged)


def box_jenkins_state_space(model: BoxJenkins):
    """`(K, B, C, D | None, L)`, the innovation form of the Box–Jenkins model:
    block diagonal, one observer form (`observer_form`) per input of order
    $\\max(nf, nk + nb - 1)$ for $B_j q^{-nk} / F_j$, then one of order
    $\\max(nc, nd)$ for $C / D$, whose `B` column is the Kalman gain ($L_i = c_i
    - d_i$); `C` sums the blocks' outputs, `D` only when `nk = 0`."""
    b, f, nk = model.b, model.f, model.nk
    nb, m = b.shape
    nf = f.shape[0]
    blocks = []
    n_g = max(nf, nk + nb - 1 if nb else 0)
    feedthrough = np.zeros((1, m))
    for j in range(m):
        numerator = np.zeros(n_g + 1)
        numerator[nk : nk + nb] = b[:, j]
        K, B, C, D = observer_form(padded(monic(f[:, j]), n_g + 1), numerator[:, None])
        blocks.append((K, B, C))
        feedthrough[0, j] = D[0, 0]
    n_h = max(model.c.size, model.d.size)
    K_h, L_h, C_h, _ = observer_form(
        padded(monic(model.d), n_h + 1), padded(monic(model.c), n_h + 1)[:, None]
    )
    K = scipy.linalg.block_diag(*[k for k, _, _ in blocks], K_h)
    sizes = [k.shape[0] for k, _, _ in blocks]
    n = K.shape[0]
    B = np.zeros((n, m))
    row = 0
    for j, (_, B_j, _) in enumerate(blocks):
        B[row : row + sizes[j], j] = B_j[:, 0]
        row += sizes[j]
    C = np.concatenate([c for _, _, c in blocks] + [C_h], axis=1)
    L = np.zeros((n, 1))
    L[row:] = L_h
    D = feedthrough if nk == 0 and m and nb else None
    return K, B, C, D, L


@on_one_blas_thread
@checks_own_arguments
def fit_box_jenkins(
    data, nb: int, nc: int, nd: int, nf: int, nk: int = 1, *, offset: bool = True
) -> InnovationSystem:
    """A Box–Jenkins model fitted by prediction-error minimisation, returned in
    innovation form.

    The model (single output, any number of inputs) is
    $y_t = \\sum_j \\frac{B_j(q)}{F_j(q)} u_{j, t-nk} + \\frac{C(q)}{D(q)} e_t$
    with $B_j(q) = b_{0j} + \\dots + b_{nb-1, j} q^{-nb+1}$ (`nb` coefficients
    per input, as MATLAB's `bj`), monic $F_j$ (`nf`), $C$ (`nc`), $D$ (`nd`), and
    $e_t$ white: the plant and the noise have their own dynamics. The coefficients
    minimise the sum of squared one-step prediction errors
    $e_t = (D / C)(y_t - \\sum_j (B_j / F_j) u_{j, t-nk})$ over every step of every
    experiment, signals taken as zero before each start: Levenberg–Marquardt on
    the exact Jacobian, from an ARX model refined as an output-error model, and a
    Hannan–Rissanen estimate of `C` and `D` from what it leaves. Every $F_j$ and
    $C$ is kept stable (the predictor filters with $1 / F_j$ and $1 / C$).

    The returned `InnovationSystem` is block diagonal: the observer form of each
    $B_j q^{-nk} / F_j$ (order $\\max(nf, nk + nb - 1)$ each), then that of
    $C / D$ (order $\\max(nc, nd)$) driven by the innovations, Kalman gain
    $L_i = c_i - d_i$ in its block. Its Kalman predictor gives the polynomials'
    one-step predictions; its noise-free part is $\\sum_j B_j / F_j$. With
    `offset` (the default) the data's means are removed first and kept as
    `input_level` and `output_level`.

    **Arguments:**

    - `data`: a `Dataset` with one output `ys (N, T, 1)` and inputs `us (N, T, m)`
        (or none: then `nb = nf = 0`, an ARMA model).
    - `nb`, `nc`, `nd`, `nf`: the numbers of coefficients of each `B_j`, `C`,
        `D`, `F_j` (each `>= 0`; together a state).
    - `nk`: the input delay in steps (`>= 0`; 0 gives a feedthrough `D`).
    - `offset`: remove and keep the operating point; `False` fits the raw data.

    **Returns:**

    An `InnovationSystem` of order $m \\max(nf, nk + nb - 1) + \\max(nc, nd)$,
    `kalman_gain (n, 1)`, `innovation_covariance (1, 1)`, `dt` from the data.

    **Raises:**

    `ValueError` (one line, naming the argument) for a negative order or `nk`, a
    model without a state, data with several outputs, `nb` or `nf > 0` without
    inputs, or data with no more equations than parameters; `TypeError` for a
    non-integer order.

    **Example:**

    ```python
    model = dynsys.fit_box_jenkins(data, nb=2, nc=1, nd=1, nf=2, nk=1)
    dynsys.compare(model, data).fit_percent      # the free run of B / F
    ```
    """
    call = "fit_box_jenkins"
    check_orders(call, {"nb": nb, "nc": nc, "nd": nd, "nf": nf}, nk)
    prepared = experiments(call, data, offset)
    check_inputs(call, prepared, {"nb": nb, "nf": nf})
    if nb == 0 and nf > 0:
        raise ValueError(
            f"{call}(nf=...): without B (nb=0) the denominator F is not "
            f"identifiable, so nf must be 0, got {nf}."
        )
    m = prepared.num_inputs
    n = m * max(nf, nk + nb - 1 if nb else 0) + max(nc, nd)
    if n == 0:
        raise ValueError(
            f"{call}(nb=..., nc=..., nd=..., nf=...): the model needs a state, "
            f"nf >= 1, nc >= 1, nd >= 1 or nk + nb >= 2, got nb={nb}, nc={nc}, "
            f"nd={nd}, nf={nf}, nk={nk}."
        )
    lags = max(nf, nk + nb - 1 if nb else 0, nc, nd)
    check_length(call, prepared, (nb + nf) * m + nc + nd, lags)
    model = box_jenkins_polynomials(prepared, nb, nc, nd, nf, nk)
    if not model.converged:
        warn_unconverged(call, model.steps)
    K, B, C, D, L = box_jenkins_state_space(model)
    return innovation_system(K, B, C, D, L, model.variance, prepared)
