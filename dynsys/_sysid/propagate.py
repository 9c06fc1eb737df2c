"""Uncertainty of any function of a fitted model: linearised propagation of a
`ParameterCovariance`, and Monte Carlo samples to check it."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from .._type_checks import checks_own_arguments
from .._fitting.covariance import jacobian_in_groups, ParameterCovariance


def _check_covariance(call: str, covariance) -> ParameterCovariance:
    if not isinstance(covariance, ParameterCovariance):
        raise TypeError(
            f"{call}(covariance=...): expected a ParameterCovariance (a fit's "
            f"FitResult.covariance), got {type(covariance).__name__}."
        )
    return covariance


@checks_own_arguments
def propagate_std(
    fn: Callable, covariance: ParameterCovariance, model=None
) -> np.ndarray:
    """The standard deviation of each entry of `fn(model)` by linearisation,
    $\\sqrt{\\mathrm{diag}(G \\Sigma G^T)}$ with $G$ the Jacobian of `fn` with
    respect to the trained parameters (forward mode, `jacobian_in_groups`).

    `fn` should be identifiable (unchanged by a change of state basis: responses,
    poles, gains); then the result does not depend on the model's basis.

    **Arguments:**

    - `fn`: `fn(model) -> real array` of any shape.
    - `covariance`: a `ParameterCovariance` (e.g. `FitResult.covariance`).
    - `model`: the model to linearise at (default: the fitted one).

    **Returns:**

    A float64 numpy array shaped like `fn(model)`.
    """
    covariance = _check_covariance("propagate_std", covariance)
    flat, rebuild = covariance.split(model)
    # Not wrapped in one `jax.jit`: on the CPU that program (jax 0.10, batched
    # `solve`s of a frequency response inside `lax.map`) deadlocked at random.
    jacobian = jacobian_in_groups(lambda v: fn(rebuild(v)), flat)
    return linearised_std(np.asarray(jacobian, np.float64), covariance.matrix)


def linearised_std(gradient: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """$\\sqrt{\\mathrm{diag}(G \\Sigma G^T)}$ for `gradient` `(..., P)` and the
    covariance `matrix` `(P, P)`: shaped like `gradient` without its last axis."""
    rows = gradient.reshape(-1, gradient.shape[-1])
    # A product, then a sum: `einsum("ip,pq,iq->i")` runs its three-index loop
    # without BLAS (a step response's band, 800 rows of 148 parameters: 12 ms).
    variance = np.sum((rows @ matrix) * rows, axis=1)
    return np.sqrt(np.maximum(variance, 0.0)).reshape(gradient.shape[:-1])


@checks_own_arguments
def monte_carlo(
    fn: Callable,
    covariance: ParameterCovariance,
    num_samples: int,
    *,
    key: PRNGKeyArray,
    model=None,
) -> Array:
    """`fn` of models whose trained parameters are drawn from
    $N(\\hat\\theta, \\Sigma)$: a check of `propagate_std` where `fn` is far from
    linear over the spread.

    **Returns:**

    Shape `(num_samples, *fn(model).shape)`.
    """
    covariance = _check_covariance("monte_carlo", covariance)
    flat, rebuild = covariance.split(model)
    values, vectors = np.linalg.eigh(covariance.matrix)
    root = vectors * np.sqrt(np.maximum(values, 0.0))[None]
    normal = jax.random.normal(key, (num_samples, flat.size), flat.dtype)
    draws = flat[None] + normal @ jnp.asarray(root.T, flat.dtype)
    return jax.vmap(lambda vector: fn(rebuild(vector)))(draws)
