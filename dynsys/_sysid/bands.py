"""Uncertainty of the identifiable quantities of a fitted linear model: poles
(natural frequency, damping, confidence ellipses), static gains, step responses;
propagated from a `ParameterCovariance` by linearisation."""

import equinox as eqx
import numpy as np
from jaxtyping import Array

from .._compile.jit import device_array
from .._type_checks import checks_own_arguments
from .free_run_band import free_run_std
from .host_response import matrix_sensitivity, static_gain_band
from .propagate import _check_covariance, linearised_std, propagate_std
from .response import _discrete, step_response
from .signals import linear_of, signals
from .validation import compare


class PoleUncertainty(eqx.Module):
    """The poles of a fitted linear model with their standard deviations (from
    `pole_uncertainty`), sorted as `modes` sorts them (by natural frequency).

    **Fields:**

    - `eigenvalues`: complex, `(n,)`, of `K`.
    - `eigenvalue_covariance`: `(n, 2, 2)`, the covariance of each eigenvalue's
        (real, imaginary) parts: the confidence ellipse in the complex plane.
    - `natural_frequency`, `natural_frequency_std`: `(n,)`, as in `modes` (rad/s
        with a `dt`, else rad per sample).
    - `damping_ratio`, `damping_std`: `(n,)`.
    """

    eigenvalues: Array
    eigenvalue_covariance: Array
    natural_frequency: Array
    natural_frequency_std: Array
    damping_ratio: Array
    damping_std: Array


def _eigenvalue_gradients(K: np.ndarray, dK: np.ndarray):
    """`(eigenvalues (n,), d eigenvalue / d theta (n, P) complex)` by first-order
    perturbation: $d\\lambda = w^H dK\\, v / (w^H v)$ with the left and right
    eigenvectors $w$, $v$ (simple eigenvalues)."""
    eigenvalues, right = np.linalg.eig(K)
    left = np.linalg.inv(right).conj().T  # columns: left eigenvectors, w^H v = 1
    gradients = np.einsum("ji,jkp,ki->ip", left.conj(), dK, right)
    return eigenvalues, gradients


def _at(covariance, model):
    """The model to linearise at: `model`, by default the fitted one."""
    return covariance.model if model is None else model


@checks_own_arguments
def pole_uncertainty(covariance, model=None) -> PoleUncertainty:
    """The poles of a fitted linear model, their confidence ellipses and the
    standard deviations of their natural frequencies and damping ratios, by
    linearisation (first-order eigenvalue perturbation through $K(\\theta)$).
    Unchanged by a change of state basis.

    **Arguments:**

    - `covariance`: a `ParameterCovariance` (`FitResult.covariance`).
    - `model`: the model (default: the one the covariance belongs to); a
        `LinearSystem` or a system with `to_linear()`.

    **Returns:**

    A `PoleUncertainty`.

    **Example:**

    ```python
    result = dynsys.fit(dynsys.fit_subspace(data, 2), data, progress=False)
    poles = dynsys.pole_uncertainty(result.covariance)
    poles.natural_frequency, poles.natural_frequency_std
    ```
    """
    covariance = _check_covariance("pole_uncertainty", covariance)
    linear = _discrete("pole_uncertainty", _at(covariance, model))
    # dK/dtheta from the program the figures' bands share (traced once).
    dK = matrix_sensitivity(covariance, model).derivatives.K
    K = np.asarray(linear.K, np.float64)
    eigenvalues, gradients = _eigenvalue_gradients(K, dK)
    dt = 1.0 if linear.dt is None else linear.dt
    with np.errstate(divide="ignore", invalid="ignore"):
        poles = np.log(eigenvalues.astype(np.complex128)) / dt
        pole_gradients = gradients / (eigenvalues[:, None] * dt)
        frequency = np.abs(poles)
        damping = -poles.real / frequency
        d_frequency = (poles.conj()[:, None] * pole_gradients).real / frequency[:, None]
        d_damping = (
            -pole_gradients.real / frequency[:, None]
            + poles.real[:, None] * d_frequency / frequency[:, None] ** 2
        )
    parts = np.stack([gradients.real, gradients.imag], axis=1)  # (n, 2, P)
    ellipses = np.einsum("iap,pq,ibq->iab", parts, covariance.matrix, parts)
    order = np.lexsort((eigenvalues.imag, frequency))
    return PoleUncertainty(
        device_array(eigenvalues[order]),
        device_array(ellipses[order]),
        device_array(frequency[order]),
        device_array(linearised_std(d_frequency, covariance.matrix)[order]),
        device_array(damping[order]),
        device_array(linearised_std(d_damping, covariance.matrix)[order]),
    )


@checks_own_arguments
def static_gain_uncertainty(covariance, model=None) -> tuple[Array, Array]:
    """The static (DC) gain $C (I - K)^{-1} B + D$ of a fitted linear model and
    its standard deviation, by linearisation.

    **Arguments:**

    - `covariance`, `model`: as for `pole_uncertainty`.

    **Returns:**

    `(gain, std)`, both `(p, m)`.
    """
    covariance = _check_covariance("static_gain_uncertainty", covariance)
    # In closed form from the derivatives of K, B, C, D (the program
    # `pole_uncertainty` and the figures' bands share), on the host.
    gain, std = static_gain_band(matrix_sensitivity(covariance, model))
    return device_array(gain), device_array(std)


@checks_own_arguments
def step_response_band(covariance, num_steps: int, model=None) -> tuple[Array, Array]:
    """The step response of a fitted linear model and its standard deviation at
    each step, by linearisation.

    **Returns:**

    `(response, std)`, both `(num_steps, p, m)`.
    """
    covariance = _check_covariance("step_response_band", covariance)
    model = _at(covariance, model)
    std = propagate_std(
        lambda system: step_response(system, num_steps), covariance, model
    )
    return step_response(model, num_steps), device_array(std)


@checks_own_arguments
def simulation_band(covariance, data, model=None) -> tuple[Array, Array]:
    """The free run of a fitted model on `data` (as `compare` predicts it, each
    experiment's initial state estimated for each model) and its standard
    deviation at each step, by linearisation.

    **Arguments:**

    - `covariance`, `model`: as for `pole_uncertainty`.
    - `data`: a `Dataset` with the model's inputs and outputs.

    **Returns:**

    `(predicted, std)`, both `(N, T, p)`.
    """
    covariance = _check_covariance("simulation_band", covariance)
    model = _at(covariance, model)
    # A linear model as the `LinearSystem` it is: the same free run, from the
    # program the run's validation compiled for it (compare checks the sizes).
    linear = linear_of(model)
    comparison = compare(model if linear is None else linear, data)
    if linear is not None:  # compare's own free run, closed forms
        s = signals(data, "simulation_band")
        std = free_run_std(covariance, model, s, 2 * model.state_size)
    else:
        std = propagate_std(
            lambda system: compare(system, data).predicted, covariance, model
        )
    return comparison.predicted, device_array(std)
