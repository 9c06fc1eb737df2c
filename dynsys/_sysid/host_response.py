"""Frequency and step responses of linear discrete-time systems, and their standard
deviations by linearisation, computed on the host with numpy in float64: what the
figures draw.

`frequency_response`, `step_response`, `step_response_band` and the `covariance=`
of `frequency_response` compute the same in JAX (differentiable, under `jit`). A
figure needs each once, for one small system: tracing and lowering those programs
took 0.2-0.5 s per figure of a `dynsys fit` run (more for several inputs and
outputs), the arithmetic well under a millisecond. Here the derivative of the
model's matrices with respect to its trained parameters (`matrix_sensitivity`,
`_fitting/linear_sensitivity.py`) is a selection for a `LinearSystem`, built on
the host, and one small kept program for other linear models; the responses and
their derivatives follow from it in closed form.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._fitting.linear_sensitivity import linear_parameters
from .propagate import _check_covariance, linearised_std
from .response import _discrete, _needs_input


class Matrices(NamedTuple):
    """`K (n, n)`, `B (n, m)`, `C (p, n)`, `D (p, m)` as float64 numpy arrays (the
    identity for a missing `C`, zeros for a missing `D`); with derivatives, each
    has a last axis of the `P` trained parameters."""

    K: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray


class Sensitivity(NamedTuple):
    """A fitted linear model's matrices, their derivatives with respect to its
    trained parameters, and the parameters' covariance `(P, P)`."""

    matrices: Matrices
    derivatives: Matrices
    covariance: np.ndarray


def _filled(K, B, C, D) -> tuple:
    """`(K, B, C, D)` with no columns for a missing `B`, the identity for a missing
    `C` and zeros for a missing `D` (numpy or JAX arrays, as given)."""
    xp = jnp if isinstance(K, jax.Array) else np
    B = xp.zeros((K.shape[0], 0), K.dtype) if B is None else B
    C = xp.eye(K.shape[0], dtype=K.dtype) if C is None else C
    D = xp.zeros((C.shape[0], B.shape[1]), K.dtype) if D is None else D
    return K, B, C, D


def matrices_of(system, call: str) -> Matrices:
    """The matrices of a linear system with inputs (a `LinearSystem` or a system
    with `to_linear()`), in float64."""
    linear = _discrete(call, system)
    _needs_input(call, linear.B)
    parts = (linear.K, linear.B, linear.C, linear.D)
    parts = [None if x is None else np.asarray(x, np.float64) for x in parts]
    return Matrices(*_filled(*parts))


def frequency_response_from_matrices(
    matrices: Matrices, w_sample: np.ndarray
) -> np.ndarray:
    """$C (z I - K)^{-1} B + D$ at $z = e^{i w}$, `w_sample` `(F,)` in rad/sample;
    complex, shape `(F, p, m)`."""
    K, B, C, D = matrices
    return C @ np.linalg.solve(_resolvent(K, w_sample), _stacked(B, len(w_sample))) + D


def _resolvent(K: np.ndarray, w_sample: np.ndarray) -> np.ndarray:
    """$z I - K$ at each $z = e^{i w}$, `(F, n, n)`."""
    z = np.exp(1j * np.asarray(w_sample, np.float64))
    return z[:, None, None] * np.eye(K.shape[0]) - K


def _stacked(matrix: np.ndarray, count: int) -> np.ndarray:
    return np.broadcast_to(matrix, (count, *matrix.shape))


def _resolvent_products(matrices: Matrices, w_sample: np.ndarray) -> tuple:
    """`(H (F, p, m), X = (zI - K)^{-1} B (F, n, m), Y = C (zI - K)^{-1} (F, p, n))`."""
    K, B, C, D = matrices
    resolvent, count = _resolvent(K, w_sample), len(w_sample)
    X = np.linalg.solve(resolvent, _stacked(B, count))
    Y = np.linalg.solve(np.swapaxes(resolvent, 1, 2), _stacked(C.T, count))
    return C @ X + D, X, np.swapaxes(Y, 1, 2)


def step_response_from_matrices(matrices: Matrices, num_steps: int) -> np.ndarray:
    """$s_t = D + \\sum_{k<t} C K^k B$ for $t < $ `num_steps`, shape
    `(num_steps, p, m)`."""
    K, B, C, D = matrices
    markov = np.empty((num_steps, *D.shape))
    markov[0] = D
    KB = B
    for t in range(1, num_steps):
        markov[t] = C @ KB
        KB = K @ KB
    return np.cumsum(markov, axis=0)


def matrix_sensitivity(covariance, model=None) -> Sensitivity:
    """The matrices of a fitted linear model (default the covariance's own) and
    their derivatives with respect to its trained parameters, in the order of the
    covariance's rows.

    **Raises:**

    `TypeError` for a covariance that is not a `ParameterCovariance` or a model that
    is not linear; `ValueError` for a model with another number of trained
    parameters than the covariance.
    """
    call = "matrix_sensitivity"
    covariance = _check_covariance(call, covariance)
    model = covariance.model if model is None else model
    _discrete(call, model)
    covariance.split(model)  # checks the parameter count
    values, derivatives = linear_parameters(model, covariance.trained)
    return Sensitivity(
        Matrices(values.K, values.B, values.C, values.D),
        Matrices(derivatives.K, derivatives.B, derivatives.C, derivatives.D),
        np.asarray(covariance.matrix, np.float64),
    )


def _with_inputs(sensitivity: Sensitivity, call: str) -> None:
    """The error of `call` for a model without inputs (`B` is `None`)."""
    _needs_input(call, sensitivity.matrices.B if sensitivity.matrices.B.size else None)


def frequency_band(
    sensitivity: Sensitivity, w_sample: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`(response, magnitude_std)`, both `(F, p, m)`: the frequency response at
    `w_sample` rad/sample and the standard deviation of its magnitude, as
    `frequency_response(model, w, covariance=...)` gives them; $d|H| =
    \\mathrm{Re}(\\bar H\\,dH) / |H|$ (0 where $H = 0$, as in JAX).
    """
    _with_inputs(sensitivity, "frequency_response")
    H, dH = _response_and_derivative(sensitivity, w_sample)
    magnitude = np.abs(H)
    safe = np.where(magnitude == 0.0, 1.0, magnitude)
    gradient = np.real(np.conj(H)[..., None] * dH) / safe[..., None]
    return H, linearised_std(gradient, sensitivity.covariance)


def static_gain_band(sensitivity: Sensitivity) -> tuple[np.ndarray, np.ndarray]:
    """`(gain, std)`, both `(p, m)`: the static gain $C (I - K)^{-1} B + D$ (the
    response at $z = 1$) and its standard deviation, as
    `static_gain_uncertainty` gives them."""
    _with_inputs(sensitivity, "static_gain_uncertainty")
    H, dH = _response_and_derivative(sensitivity, np.zeros(1))
    return np.real(H[0]), linearised_std(np.real(dH[0]), sensitivity.covariance)


def _response_and_derivative(
    sensitivity: Sensitivity, w_sample: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`(H (F, p, m), dH (F, p, m, P))`: the frequency response at `w_sample`
    rad/sample and its derivative with respect to the trained parameters; with $R
    = (zI - K)^{-1}$, $dH = dC\\,RB + CR\\,dK\\,RB + CR\\,dB + dD$."""
    dK, dB, dC, dD = sensitivity.derivatives
    H, X, Y = _resolvent_products(sensitivity.matrices, w_sample)
    dH = (
        np.einsum("ikq,fkj->fijq", dC, X)
        + np.einsum("fia,fajq->fijq", Y, np.einsum("abq,fbj->fajq", dK, X))
        + np.einsum("fia,ajq->fijq", Y, dB)
        + dD[None]
    )
    return H, dH


def step_band(
    sensitivity: Sensitivity, num_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """`(response, std)`, both `(num_steps, p, m)`: the step response and its
    standard deviation, as `step_response_band` gives them; the derivative of
    $K^k B$ follows $d(K^{k+1} B) = dK\\,K^k B + K\\,d(K^k B)$."""
    _with_inputs(sensitivity, "step_response_band")
    K, B, C, D = sensitivity.matrices
    dK, dB, dC, dD = sensitivity.derivatives
    d_markov = np.empty((num_steps, *dD.shape))
    d_markov[0] = dD
    KB, dKB = B, dB
    for t in range(1, num_steps):
        d_markov[t] = np.einsum("ikq,kj->ijq", dC, KB) + np.einsum(
            "ik,kjq->ijq", C, dKB
        )
        KB, dKB = (
            K @ KB,
            np.einsum("abq,bj->ajq", dK, KB) + np.einsum("ab,bjq->ajq", K, dKB),
        )
    gradient = np.cumsum(d_markov, axis=0)
    return step_response_from_matrices(sensitivity.matrices, num_steps), linearised_std(
        gradient, sensitivity.covariance
    )
