"""ARMAX models by prediction-error minimisation, returned in innovation form."""

from typing import NamedTuple

import numpy as np

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
    warn_unconverged,
)
from .prediction_error import minimise


class Armax(NamedTuple):
    """The polynomials of $A(q) y_t = B(q) u_{t-nk} + C(q) e_t$: `a (na,)`,
    `b (nb, m)` (row `j` multiplies $u_{t-nk-j}$), `c (nc,)` (`A`, `C` monic), `nk`,
    the innovation variance and the number of accepted minimisation steps."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    nk: int
    variance: float
    steps: int
    converged: bool


def _split(theta, na: int, nb: int, m: int):
    return theta[:na], theta[na : na + nb * m].reshape(nb, m), theta[na + nb * m :]


def armax_errors(
    data: Experiments, a, b, c, nk: int, jacobian: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """The one-step prediction errors $e = (A y - B u_{t-nk}) / C$ of every
    experiment from zero initial conditions, concatenated `(R,)`, and their
    Jacobian `(R, na + nb m + nc)` with respect to `(a, b, c)`:
    $\\partial e_t / \\partial a_i = y_{t-i} / C$, $\\partial e_t / \\partial b_{j}
    = -u_{t-nk-j} / C$, $\\partial e_t / \\partial c_k = -e_{t-k} / C$."""
    A, C = monic(a), monic(c)
    nb = b.shape[0]
    us = data.us or (None,) * len(data.ys)
    errors, jacobians = [], []
    for y, u in zip(data.ys, us):
        w = filtered(A, [1.0], y)
        if u is not None and nb:
            w = w - sum(delayed(u, nk + j) @ b[j] for j in range(nb))
        e = filtered([1.0], C, w)
        errors.append(e)
        if not jacobian:
            continue
        y_f = filtered([1.0], C, y)
        columns = [delayed(y_f, i) for i in range(1, a.size + 1)]
        if u is not None and nb:
            u_f = filtered([1.0], C, u)
            columns += [-delayed(u_f, nk + j) for j in range(nb)]
        e_f = filtered([1.0], C, e)
        columns += [-delayed(e_f, k) for k in range(1, c.size + 1)]
        columns = [col[:, None] if col.ndim == 1 else col for col in columns]
        jacobians.append(
            np.concatenate(columns, axis=1) if columns else np.zeros((y.size, 0))
        )
    return np.concatenate(errors), (np.concatenate(jacobians) if jacobian else None)


def armax_polynomials(data: Experiments, na: int, nb: int, nc: int, nk: int) -> Armax:
    """The ARMAX polynomials that minimise the sum of squared one-step prediction
    errors (`armax_errors`) over every experiment, from the Hannan–Rissanen start."""
    m = data.num_inputs
    nb_used = nb if m else 0
    a, b, c = hannan_rissanen(data, na, nb_used, nc, nk)
    theta = np.concatenate([a, b.ravel(), c])

    def evaluate(theta):
        return armax_errors(data, *_split(theta, na, nb_used, m), nk)

    def feasible(theta):
        return largest_root(monic(theta[na + nb_used * m :])) < 1.0

    found = minimise(evaluate, theta, feasible)
    a, b, c = _split(found.theta, na, nb_used, m)
    variance = float(found.residuals @ found.residuals) / max(found.residuals.size, 1)
    return Armax(a, b, c, nk, variance, found.steps, found.converged)


def armax_state_space(model: Armax):
    """`(K (n, n), B (n, m), C (1, n), D (1, m) | None, L (n, 1))`, the innovation
    form of the ARMAX model, with $n = \\max(na, nk + nb - 1, nc)$: the observer
    form (`observer_form`) of $B(q) q^{-nk} / A(q)$ and $C(q) / A(q)$, whose
    last column is the Kalman gain; `D` only when `nk = 0`."""
    a, b, c, nk = model.a, model.b, model.c, model.nk
    nb, m = b.shape
    n = max(a.size, nk + nb - 1 if nb else 0, c.size)
    numerators = np.zeros((n + 1, m + 1))
    numerators[nk : nk + nb, :m] = b
    numerators[:, m] = padded(monic(c), n + 1)
    K, B, C, D = observer_form(padded(monic(a), n + 1), numerators)
    return K, B[:, :m], C, (D[:, :m] if nk == 0 and m else None), B[:, m:]


@on_one_blas_thread
@checks_own_arguments
def fit_armax(
    data, na: int, nb: int, nc: int, nk: int = 1, *, offset: bool = True
) -> InnovationSystem:
    """An ARMAX model fitted by prediction-error minimisation, returned in
    innovation form.

    The model (single output, any number of inputs) is
    $A(q) y_t = B(q) u_{t-nk} + C(q) e_t$ with $A(q) = 1 + a_1 q^{-1} + \\dots +
    a_{na} q^{-na}$, $B(q) = B_0 + B_1 q^{-1} + \\dots + B_{nb-1} q^{-nb+1}$
    (`nb` coefficients per input, as MATLAB's `armax`), $C(q) = 1 + c_1 q^{-1} +
    \\dots + c_{nc} q^{-nc}$, and $e_t$ white. The coefficients minimise the sum of
    squared one-step prediction errors $e_t = (A y_t - B u_{t-nk}) / C$ over every
    step of every experiment, each experiment's signals taken as zero before its
    start: Levenberg–Marquardt on the exact Jacobian (filters of the data), from
    Hannan and Rissanen's start (a long ARX model's equation errors estimate the
    innovations, then one least-squares regression gives `A`, `B`, `C`). `C` is kept
    stable (roots inside the unit circle), so the predictor is; `A` need not be.

    The returned `InnovationSystem` is the observer form of order
    $n = \\max(na, nk + nb - 1, nc)$: $K$ has $-a_i$ in its first column, $C = [1,
    0, \\dots, 0]$, and the Kalman gain is $L_i = c_i - a_i$; its Kalman predictor
    (`predict`, `compare(..., horizon=1)`) gives the same one-step predictions as
    the polynomials, and its noise-free part (`compare`, `rollout`) is $B / A$.
    With `offset` (the default) the data's means are removed first and kept as
    `input_level` and `output_level`.

    **Arguments:**

    - `data`: a `Dataset` with one output `ys (N, T, 1)` and inputs `us (N, T, m)`
        (or none: then `nb = 0`, an ARMA model).
    - `na`, `nb`, `nc`: the numbers of coefficients of `A`, `B` (per input) and `C`
        (each `>= 0`; together a state: `n >= 1`).
    - `nk`: the input delay in steps (`>= 0`; 0 gives a feedthrough `D`).
    - `offset`: remove and keep the operating point (above); `False` fits the raw
        data.

    **Returns:**

    An `InnovationSystem(K (n, n), B (n, m), C (1, n), D (1, m) | None,
    kalman_gain (n, 1), innovation_covariance (1, 1))`, `dt` from the data.

    **Raises:**

    `ValueError` (one line, naming the argument) for a negative order or `nk`, a
    model without a state, data with several outputs, `nb > 0` without inputs, or
    data with no more equations than parameters; `TypeError` for a non-integer
    order.

    **Example:**

    ```python
    model = dynsys.fit_armax(data, na=2, nb=2, nc=1, nk=1)   # one output
    dynsys.compare(model, data, horizon=1).fit_percent      # Kalman predictor
    ```
    """
    call = "fit_armax"
    check_orders(call, {"na": na, "nb": nb, "nc": nc}, nk)
    prepared = experiments(call, data, offset)
    check_inputs(call, prepared, {"nb": nb})
    m = prepared.num_inputs
    n = max(na, nk + nb - 1 if nb else 0, nc)
    if n == 0:
        raise ValueError(
            f"{call}(na=..., nb=..., nc=...): the model needs a state, na >= 1, "
            f"nc >= 1 or nk + nb >= 2, got na={na}, nb={nb}, nc={nc}, nk={nk}."
        )
    check_length(call, prepared, na + nb * m + nc, n)
    model = armax_polynomials(prepared, na, nb, nc, nk)
    if not model.converged:
        warn_unconverged(call, model.steps)
    K, B, C, D, L = armax_state_space(model)
    return innovation_system(K, B, C, D, L, model.variance, prepared)
