"""Goodness-of-fit metrics: NRMSE, fit percentage, spectral radius."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._custom_types import checks_own_arguments
from .._systems.system import AbstractSystem


def _pair(name: str, y, y_hat) -> tuple[Array, Array]:
    y, y_hat = jnp.asarray(y), jnp.asarray(y_hat)
    if y.shape != y_hat.shape:
        raise ValueError(
            f"{name}(y, y_hat): y and y_hat must have the same shape, got "
            f"{tuple(y.shape)} and {tuple(y_hat.shape)}."
        )
    if y.ndim < 1 or y.size == 0:
        raise ValueError(
            f"{name}(y, y_hat): expected non-empty arrays of shape (..., p), got "
            f"{tuple(y.shape)}."
        )
    return y, y_hat


def no_variance(spread, peak, count, dtype):
    """Whether a channel's spread $\\lVert y - \\bar y\\rVert$ (over `count` samples of
    largest magnitude `peak`) is at most what round-off in `dtype` gives a constant:
    then its NRMSE and fit % are undefined (NaN), not 0 % or $-\\infty$."""
    eps = jnp.finfo(dtype).eps if jnp.issubdtype(dtype, jnp.floating) else 1e-16
    # NumPy arrays stay on the host: no small program compiled per call.
    sqrt = np.sqrt if isinstance(spread, np.ndarray) else jnp.sqrt
    return spread <= 16.0 * eps * peak * sqrt(count)


def _ratio(name: str, y, y_hat, per_channel: bool) -> Array:
    y, y_hat = _pair(name, y, y_hat)
    y = y.reshape(-1, y.shape[-1])
    y_hat = y_hat.reshape(-1, y.shape[-1])
    error = jnp.linalg.norm(y - y_hat, axis=0)
    spread = jnp.linalg.norm(y - jnp.mean(y, axis=0, keepdims=True), axis=0)
    flat = no_variance(spread, jnp.max(jnp.abs(y), axis=0), y.shape[0], y.dtype)
    ratio = jnp.where(flat, jnp.nan, error / jnp.where(flat, 1.0, spread))
    return ratio if per_channel else jnp.mean(ratio)


@checks_own_arguments
def nrmse(
    y: Float[ArrayLike, "... p"], y_hat: Float[ArrayLike, "... p"], *, per_channel=False
) -> Float[Array, ""] | Float[Array, " p"]:
    """Normalised root-mean-square error, channel by channel.

    For each channel (last axis) $j$, over all samples (every leading axis, e.g.
    trajectories and time):
    $\\mathrm{NRMSE}_j = \\lVert y_j - \\hat y_j \\rVert / \\lVert y_j - \\bar y_j
    \\rVert$, i.e. the RMS error divided by the channel's standard deviation. 0 is a
    perfect fit; 1 is no better than predicting the mean.

    **Arguments:**

    - `y`: the measured values, shape `(..., p)`.
    - `y_hat`: the predicted values, the same shape.
    - `per_channel`: return the `(p,)` values instead of their mean.

    **Returns:**

    A scalar (the mean over channels), or shape `(p,)`. A channel with no variance
    (constant, to round-off) gives `nan`: its NRMSE is undefined.

    **Raises:**

    `ValueError` if the shapes differ.

    **Example:**

    ```python
    dynsys.nrmse(jnp.array([[0.0], [2.0]]), jnp.array([[0.5], [1.5]]))  # 0.5
    ```
    """
    return _ratio("nrmse", y, y_hat, per_channel)


@checks_own_arguments
def fit_percent(
    y: Float[ArrayLike, "... p"], y_hat: Float[ArrayLike, "... p"], *, per_channel=False
) -> Float[Array, ""] | Float[Array, " p"]:
    """The fit percentage $100\\,(1 - \\lVert y - \\hat y\\rVert / \\lVert y - \\bar
    y\\rVert)$, channel by channel (so `100 * (1 - nrmse)` per channel).

    100 is a perfect fit, 0 no better than the mean; it can be negative.

    **Arguments:**

    - `y`, `y_hat`, `per_channel`: as for `nrmse`.

    **Returns:**

    A scalar (the mean over channels), or shape `(p,)`. A channel with no variance
    (constant, to round-off) gives `nan` ("undefined (no variance)"), never 100 or
    $-\\infty$.

    **Example:**

    ```python
    dynsys.fit_percent(jnp.array([[0.0], [2.0]]), jnp.array([[0.5], [1.5]]))  # 50.0
    ```
    """
    values = 100.0 * (1.0 - _ratio("fit_percent", y, y_hat, per_channel=True))
    return values if per_channel else jnp.mean(values)


@checks_own_arguments
def spectral_radius(system: AbstractSystem | Float[ArrayLike, "n n"]) -> float:
    """The largest eigenvalue modulus $\\rho(K) = \\max_i |\\lambda_i(K)|$.

    The system $x_{t+1} = K x_t$ is asymptotically stable exactly when
    $\\rho(K) < 1$.

    **Arguments:**

    - `system`: a square matrix `K`, or a system with a `K` attribute (a
        `LinearSystem` or a `StableLinearSystem`).

    **Returns:**

    $\\rho(K)$ as a Python float.

    **Raises:**

    `ValueError` for a non-square matrix or a system without `K`.

    **Example:**

    ```python
    dynsys.spectral_radius(jnp.array([[0.5, 1.0], [0.0, -0.8]]))  # 0.8
    ```
    """
    if isinstance(system, AbstractSystem):
        if not hasattr(system, "K"):
            raise ValueError(
                f"spectral_radius(system=...): {type(system).__name__} has no "
                "transition matrix K."
            )
        system = system.K  # pyright: ignore[reportAttributeAccessIssue]
    K = jnp.asarray(system)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(
            f"spectral_radius(system=...): expected a square matrix (n, n), got "
            f"{tuple(K.shape)}."
        )
    # On the host (LAPACK's geev, as jnp.linalg.eigvals on CPU): no program to
    # compile for a number.
    return float(np.max(np.abs(np.linalg.eigvals(np.asarray(K)))))
