"""Goodness-of-fit metrics: NRMSE, fit percentage, spectral radius.

NRMSE and fit % are defined once, here (`channel_nrmse`); everything that reports
them (`fit`, `compare`, the order scan, the experiments) calls these functions, with
`xp=np` on the host and `xp=jnp` (the default) under `jit`. The rule for a flat
channel (one whose measured output has no variance around its mean, to round-off)
is the same everywhere: its NRMSE and fit % are undefined, `nan` (never 100 %, 0 %
or $-\\infty$), and a mean over channels is taken over the channels that are defined.
"""

import math
from types import ModuleType

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._type_checks import checks_own_arguments
from .._systems.system import AbstractSystem


def _checked(name: str, y, y_hat, mask, xp: ModuleType):
    """`(y, y_hat, mask)` as arrays of `xp`, after the checks every metric shares."""
    if xp is not np and xp is not jnp:
        raise ValueError(
            f"{name}(xp=...): expected numpy or jax.numpy, got "
            f"{getattr(xp, '__name__', xp)!r}."
        )
    y, y_hat = xp.asarray(y), xp.asarray(y_hat)
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
    if mask is not None:
        mask = xp.asarray(mask, dtype=bool)
        if mask.shape != y.shape[:-1]:
            raise ValueError(
                f"{name}(mask=...): mask must have the shape of y without its last "
                f"axis, {tuple(y.shape[:-1])}, got {tuple(mask.shape)}."
            )
    return y, y_hat, mask


def no_variance(spread, peak, count, dtype, xp: ModuleType = jnp):
    """Whether a channel's spread $\\lVert y - \\bar y\\rVert$ (over `count` samples of
    largest magnitude `peak`) is at most what round-off in `dtype` gives a constant:
    then its NRMSE and fit % are undefined (NaN), not 0 % or $-\\infty$."""
    eps = xp.finfo(dtype).eps if xp.issubdtype(dtype, xp.floating) else 1e-16
    return spread <= 16.0 * eps * peak * xp.sqrt(count)


def channel_nrmse(
    y, y_hat, *, mask=None, axis=None, xp: ModuleType = jnp, call="nrmse"
):
    """The NRMSE of each channel (last axis): the one definition every other metric
    and report uses.

    $\\lVert y_j - \\hat y_j\\rVert / \\lVert y_j - \\bar y_j\\rVert$ over the valid
    samples pooled over `axis` (default: every leading axis), $\\bar y_j$ their mean.

    - A flat channel (`no_variance`: no spread beyond round-off, or no valid sample)
      gives `nan`: undefined, never a division by zero.
    - A prediction that is not finite on a valid sample (a model that diverged) has
      an infinite error: `inf` (fit % $-\\infty$), also where it is `nan`.

    **Arguments:**

    - `y`, `y_hat`: measured and predicted values, the same shape `(..., p)`.
    - `mask`: `None` (every sample valid) or booleans of shape `y.shape[:-1]`, `True`
        at the valid samples (padded experiments).
    - `axis`: the leading axes pooled (an int or a tuple); `None` for all of them.
    - `xp`: the array module, `jax.numpy` (traceable under `jit`) or `numpy` (on the
        host, in the arrays' own precision).
    - `call`: the name the error messages give.

    **Returns:**

    The NRMSE per channel: shape `(p,)`, or the leading axes not pooled followed by
    `p`.
    """
    y, y_hat, mask = _checked(call, y, y_hat, mask, xp)
    if axis is None:  # pool every leading axis
        y, y_hat = y.reshape(-1, y.shape[-1]), y_hat.reshape(-1, y.shape[-1])
        mask = None if mask is None else mask.reshape(-1)
        axis = 0
    if mask is None:
        count = math.prod(y.shape[a] for a in np.atleast_1d(axis))
        mean = xp.mean(y, axis=axis, keepdims=True)
        error = xp.sqrt(xp.sum((y - y_hat) ** 2, axis=axis))
        spread = xp.sqrt(xp.sum((y - mean) ** 2, axis=axis))
        peak = xp.max(xp.abs(y), axis=axis)
    else:
        valid = mask[..., None]
        total = xp.sum(valid, axis=axis, keepdims=True)
        mean = xp.sum(xp.where(valid, y, 0), axis=axis, keepdims=True) / xp.maximum(
            total, 1
        )
        error = xp.sqrt(xp.sum(xp.where(valid, y - y_hat, 0) ** 2, axis=axis))
        spread = xp.sqrt(xp.sum(xp.where(valid, y - mean, 0) ** 2, axis=axis))
        peak = xp.max(xp.where(valid, xp.abs(y), 0), axis=axis)
        count = xp.sum(valid, axis=axis)
    flat = no_variance(spread, peak, count, y.dtype, xp) | (count == 0)
    error = xp.where(xp.isfinite(error), error, xp.inf)
    return xp.where(flat, xp.nan, error / xp.where(flat, 1, spread))


def channel_fit_percent(
    y, y_hat, *, mask=None, axis=None, xp: ModuleType = jnp, call="fit_percent"
):
    """The fit % of each channel, $100\\,(1 - \\mathrm{NRMSE})$ with the NRMSE of
    `channel_nrmse` (same arguments, same rule for flat channels: `nan`)."""
    ratio = channel_nrmse(y, y_hat, mask=mask, axis=axis, xp=xp, call=call)
    return 100.0 * (1.0 - ratio)


def channel_mean(values, xp: ModuleType = jnp):
    """The mean over the last axis of the values that are defined (not `nan`, i.e.
    not a flat channel); `nan` where none is."""
    values = xp.asarray(values)
    defined = ~xp.isnan(values)
    count = xp.sum(defined, axis=-1)
    total = xp.sum(xp.where(defined, values, 0), axis=-1)
    return xp.where(count > 0, total / xp.maximum(count, 1), xp.nan)


# A structure scan's candidate whose mean fit % is below this has diverged (an
# error over 11 times the outputs' spread; a model whose free run grows without
# bound scores fit % like -1e65): `OrderCandidate.diverged`.
DIVERGED_FIT_PERCENT = -1000.0
# Below this a fit % is printed "diverged", not as its digits: an error 10^4 times
# the output's spread is a free run that ran away (a nearly flat output scores
# -4,500 % with a small error, and is explained instead).
RUNAWAY_FIT_PERCENT = -1e6


def fit_percent_text(value: float, digits: int = 1) -> str:
    """A fit % as the tables print it: `"80.9"`, `"undefined"` for a channel
    without variance (`nan`), or `"diverged"` below `RUNAWAY_FIT_PERCENT` (and
    for `-inf`)."""
    if math.isnan(value):
        return "undefined"
    if not value > RUNAWAY_FIT_PERCENT:
        return "diverged"
    return f"{value:.{digits}f}"


@checks_own_arguments
def nrmse(
    y: Float[ArrayLike, "... p"],
    y_hat: Float[ArrayLike, "... p"],
    *,
    per_channel: bool = False,
    mask: Bool[ArrayLike, "..."] | None = None,
    xp: ModuleType = jnp,
) -> Float[Array, ""] | Float[Array, " p"] | Float[np.ndarray, "*p"]:
    """Normalised root-mean-square error, channel by channel.

    For each channel (last axis) $j$, over all samples (every leading axis, e.g.
    trajectories and time):
    $\\mathrm{NRMSE}_j = \\lVert y_j - \\hat y_j \\rVert / \\lVert y_j - \\bar y_j
    \\rVert$, i.e. the RMS error divided by the channel's standard deviation. 0 is a
    perfect fit; 1 is no better than predicting the mean.

    A channel with no variance (its measured values constant, to round-off) has no
    NRMSE: it gives `nan`, never a division by zero. A prediction that is not finite
    on a valid sample gives `inf`.

    **Arguments:**

    - `y`: the measured values, shape `(..., p)`.
    - `y_hat`: the predicted values, the same shape.
    - `per_channel`: return the `(p,)` values instead of their mean.
    - `mask`: optional booleans of shape `y.shape[:-1]`, `True` at the samples that
        count (e.g. the valid steps of padded experiments); default all.
    - `xp`: the array module that computes it: `jax.numpy` (the default; works under
        `jit`) or `numpy` (on the host, in the arrays' precision, no compilation).

    **Returns:**

    A scalar (the mean over the channels that have an NRMSE; `nan` when none has),
    or shape `(p,)` (`nan` for each channel without variance). An array of `xp`.

    **Raises:**

    `ValueError` if the shapes differ or `mask` has the wrong shape.

    **Example:**

    ```python
    dynsys.nrmse(jnp.array([[0.0], [2.0]]), jnp.array([[0.5], [1.5]]))  # 0.5
    dynsys.nrmse(np.array([[0.0], [2.0]]), np.array([[0.5], [1.5]]), xp=np)  # 0.5
    ```
    """
    values = channel_nrmse(y, y_hat, mask=mask, xp=xp, call="nrmse")
    return values if per_channel else channel_mean(values, xp)


@checks_own_arguments
def fit_percent(
    y: Float[ArrayLike, "... p"],
    y_hat: Float[ArrayLike, "... p"],
    *,
    per_channel: bool = False,
    mask: Bool[ArrayLike, "..."] | None = None,
    xp: ModuleType = jnp,
) -> Float[Array, ""] | Float[Array, " p"] | Float[np.ndarray, "*p"]:
    """The fit percentage $100\\,(1 - \\lVert y - \\hat y\\rVert / \\lVert y - \\bar
    y\\rVert)$, channel by channel (so `100 * (1 - nrmse)` per channel).

    100 is a perfect fit, 0 no better than the mean; it can be negative. This is the
    number `compare`, `fit`'s metrics, `select_order` and `dynsys fit` report.

    **Arguments:**

    - `y`, `y_hat`, `per_channel`, `mask`, `xp`: as for `nrmse`.

    **Returns:**

    A scalar (the mean over the channels that have a fit %), or shape `(p,)`. A
    channel with no variance (constant, to round-off) gives `nan` ("undefined (no
    variance)"), never 100 or $-\\infty$; the mean over channels leaves it out and is
    `nan` only when no channel varies. A prediction that is not finite on a valid
    sample gives $-\\infty$.

    **Example:**

    ```python
    dynsys.fit_percent(jnp.array([[0.0], [2.0]]), jnp.array([[0.5], [1.5]]))  # 50.0
    ```
    """
    values = channel_fit_percent(y, y_hat, mask=mask, xp=xp, call="fit_percent")
    return values if per_channel else channel_mean(values, xp)


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
    K = np.asarray(system)  # on the host: `jnp.asarray` would compile a program
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(
            f"spectral_radius(system=...): expected a square matrix (n, n), got "
            f"{tuple(K.shape)}."
        )
    # On the host (LAPACK's geev, as jnp.linalg.eigvals on CPU): no program to
    # compile for a number.
    return float(np.max(np.abs(np.linalg.eigvals(K))))
