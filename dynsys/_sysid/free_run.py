"""The free run of a linear model with least-squares initial states, in NumPy: the
same numbers as `compare`, without compiling a program per model (an order scan
scores tens of models of different sizes)."""

import numpy as np

from .._systems.system import constant_terms, LinearSystem
from .convolution import decays, delayed_response, powers, recursion_states
from .signals import Signals


def _numpy(a) -> np.ndarray | None:
    return None if a is None else np.asarray(a, dtype=np.float64)


def free_run(model: LinearSystem, s: Signals) -> np.ndarray:
    """The outputs of `model` run freely over each experiment of `s`, from the
    initial state that best explains the measured outputs (least squares, as
    `estimate_x0`), driven by the measured inputs.

    **Arguments:**

    - `model`: a `LinearSystem` (with its offset and levels).
    - `s`: the data's `Signals` (`ys (N, T, p)`, `us (N, T, m)` or `None`, `mask`).

    **Returns:**

    The predicted outputs, shape `(N, T, p)` (non-finite where the model diverges).
    """
    K, B, D = _numpy(model.K), _numpy(model.B), _numpy(model.D)
    n = K.shape[0]
    C = np.eye(n) if model.C is None else _numpy(model.C)
    a, c = constant_terms(  # in NumPy: no program compiled per model
        *(
            _numpy(v)
            for v in (model.B, model.D, model.offset, model.input_level)
            + (model.output_level,)
        )
    )
    ys = np.asarray(s.ys, dtype=np.float64)
    us = None if s.us is None or B is None else np.asarray(s.us, dtype=np.float64)
    N, T, p = ys.shape
    with np.errstate(all="ignore"):
        rows = powers(K, C, T)
        if decays(K):
            forced = _forced_by_sums(rows, B, D, a, c, us, ys.shape)
        else:
            forced = _forced_by_recursion(K, B, C, D, a, c, us, ys.shape)
        weight = np.asarray(s.mask, dtype=np.float64)
        predicted = np.empty_like(forced)
        for i in range(N):
            A = (rows * weight[i][:, None, None]).reshape(T * p, n)
            residual = ((ys[i] - forced[i]) * weight[i][:, None]).reshape(-1)
            if np.all(np.isfinite(A)) and np.all(np.isfinite(residual)):
                x0 = np.linalg.lstsq(A, residual, rcond=None)[0]
            else:
                x0 = np.full(n, np.nan)
            predicted[i] = forced[i] + rows @ x0
    return predicted


def _forced_by_sums(rows, B, D, a, c, us, shape) -> np.ndarray:
    """The response `(N, T, p)` from a zero state, given the rows $C K^t$
    `(T, p, n)`: the sums over past inputs by FFT (`convolution.py`)."""
    T = shape[1]
    forced = np.zeros(shape)
    if us is not None:
        forced += delayed_response(rows @ B, us)
        if D is not None:
            forced += us @ D.T
    if a is not None:  # the constant input's response: a running sum
        forced[:, 1:] += np.cumsum(rows @ a, axis=0)[: T - 1]
    if c is not None:
        forced += c
    return forced


def _forced_by_recursion(K, B, C, D, a, c, us, shape) -> np.ndarray:
    """`_forced_by_sums` by the recursion (`recursion_states`): for a model whose
    response does not decay (FFT sums would lose the early steps' digits)."""
    forcing = np.zeros((shape[0], shape[1], K.shape[0]))
    if us is not None:
        forcing += us @ B.T
    if a is not None:
        forcing += a
    forced = recursion_states(K, forcing) @ C.T
    if us is not None and D is not None:
        forced += us @ D.T
    return forced if c is None else forced + c
