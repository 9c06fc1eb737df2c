"""The covariance of fitted parameters: Gauss–Newton at the optimum, from the
residual Jacobian and the residual variance of each channel.

A state-space model has a change-of-basis freedom (`K -> T K T^{-1}`, `B -> T B`,
`C -> C T^{-1}` leaves every prediction unchanged), so `J^T J` is singular along
those directions and the covariance of the raw matrix entries is not defined. The
pseudo-inverse gives one covariance among many; what it predicts for an
identifiable quantity (poles, static gains, the frequency response: functions the
basis does not change, whose gradients lie in the row space of `J`) is the same
for every generalised inverse, hence for every basis. Propagate it to such
quantities (`dynsys._sysid.bands`) rather than reading the raw entries.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from .._compile.jit import device_array, top_level_jit
from .host_blas import one_blas_thread
from .linear_sensitivity import closed_form_run, linear_parameters
from .losses import FitObjective


# The largest residual Jacobian (entries) and parameter count `fit` computes the
# covariance for; past these it reports why it did not.
COVARIANCE_JACOBIAN_LIMIT = 2**24
COVARIANCE_PARAMETER_LIMIT = 4096


def _rank_tolerance(dtype) -> float:
    """Singular values of `J` below this fraction of the largest count as zero:
    `eps ** 0.75` in float64 (1.8e-12), `eps ** 0.5` in float32 (3.5e-4), above the
    round-off of the basis directions' zero singular values."""
    eps = float(jnp.finfo(dtype).eps)
    return eps ** (0.75 if jnp.dtype(dtype) == jnp.float64 else 0.5)


def gauss_newton_covariance(
    jacobian: Float[ArrayLike, "R P"],
    residuals: Float[ArrayLike, " R"],
    num_channels: int,
    xp=jnp,
) -> tuple[Float[ArrayLike, "P P"], Float[ArrayLike, " c"], ArrayLike]:
    """The Gauss–Newton covariance of least-squares parameters,
    $\\Sigma = H^+ J^T S J H^+$ with $H = J^T J$ and $S$ the diagonal of each
    residual's channel variance (a sandwich: the channels of a weighted loss may
    have different noise levels; with one channel it is $\\sigma^2 H^+$).

    Residual `k` belongs to channel `k % num_channels` (the channel axis is the
    fastest, as in `fit`'s residual vectors). Rows whose residual and Jacobian are
    all zero (padded steps) do not count. A channel's variance is its residuals'
    sum of squares over its valid rows less its share of the identifiable
    parameters (`rank / num_channels`). Traceable (`jit`, `vmap`); with `xp=numpy`,
    the same arithmetic on the host.

    **Arguments:**

    - `jacobian`: `(R, P)`, the derivative of the residuals at the optimum.
    - `residuals`: `(R,)`, the residuals there.
    - `num_channels`: `c`, the number of channels.
    - `xp`: the array module, `jax.numpy` (default) or `numpy`.

    **Returns:**

    `(covariance (P, P), channel_variance (c,), rank)`: `rank` is the number of
    identifiable parameter directions (`P` less the basis freedom).
    """
    left, singular, right_t = xp.linalg.svd(jacobian, full_matrices=False)
    tolerance = _rank_tolerance(jacobian.dtype) * xp.max(singular)
    kept = singular > tolerance
    inverse = xp.where(kept, 1.0 / xp.where(kept, singular, 1.0), 0.0)
    rank = xp.sum(kept)
    channel = xp.arange(residuals.shape[0]) % num_channels
    valid = (residuals != 0) | xp.any(jacobian != 0, axis=1)
    one_hot = (channel[:, None] == xp.arange(num_channels)[None]) & valid[:, None]
    squares = one_hot.T.astype(residuals.dtype) @ residuals**2
    count = xp.sum(one_hot, axis=0).astype(residuals.dtype)
    dof = xp.maximum(count - rank / num_channels, 1.0)
    variance = squares / dof
    # V S^-1 U^T S_r U S^-1 V^T, with S_r the residual variances.
    row_variance = xp.where(valid, variance[channel], 0.0)
    middle = left.T @ (row_variance[:, None] * left)
    scaled = right_t.T * inverse[None]
    return scaled @ middle @ scaled.T, variance, rank


@dataclasses.dataclass(frozen=True)
class ParameterCovariance:
    """The covariance of a fitted model's trained parameters (what
    `FitResult.covariance` holds).

    Its rows follow the flattened trained arrays of `model` (`eqx.filter(model,
    trained)`, leaves in `jax.tree` order). Because of the change-of-basis freedom
    of state-space models, read it through identifiable quantities:
    `frequency_response(model, w, covariance=...)`, `pole_uncertainty`,
    `static_gain_uncertainty`, `propagate`.

    **Fields:**

    - `matrix`: `(P, P)`, in the parameters' units squared.
    - `model`: the model it belongs to (the fitted one).
    - `trained`: a bool pytree shaped like `model` marking the trained arrays.
    - `channel_variance`: `(c,)`, the residual variance of each channel (in the
        units of `fit`'s normalised residuals).
    - `rank`: the number of identifiable parameter directions.
    - `num_residuals`: the number of valid residuals it rests on.
    """

    matrix: np.ndarray
    model: Any
    trained: Any
    channel_variance: np.ndarray
    rank: int
    num_residuals: int

    @property
    def num_parameters(self) -> int:
        return int(self.matrix.shape[0])

    def __repr__(self) -> str:
        variance = ", ".join(f"{v:.3g}" for v in np.asarray(self.channel_variance))
        return (
            f"ParameterCovariance({self.num_parameters} parameters, {self.rank} "
            f"identifiable, {self.num_residuals} residuals, channel variance "
            f"[{variance}]; read it through identifiable quantities: "
            "print(dynsys.present(covariance.model, covariance)) shows the poles and "
            "static gains ± std)"
        )

    def split(self, model=None):
        """`(flat (P,), rebuild)`: the trained parameters of `model` (default the
        fitted one) as one vector, and `rebuild(flat) -> model`."""
        model = self.model if model is None else model
        params, static = eqx.partition(model, self.trained)
        flat, unravel = _ravelled(params)
        if flat.size != self.num_parameters:
            raise ValueError(
                "ParameterCovariance: the model has "
                f"{flat.size} trained parameters but the covariance is for "
                f"{self.num_parameters}; pass the model it was computed for."
            )

        def rebuild(vector):
            return eqx.combine(unravel(vector), static)

        return flat, rebuild


def _ravelled(params):
    """`jax.flatten_util.ravel_pytree(params)`, the vector built on the host: the
    same order and dtype, without compiling one small program per leaf shape."""
    leaves, treedef = jax.tree.flatten(params)
    dtype = jnp.result_type(*leaves) if leaves else jnp.float32
    flat = np.concatenate(
        [np.ravel(np.asarray(leaf, dtype)) for leaf in leaves] or [np.zeros(0, dtype)]
    )
    shapes = [(np.shape(leaf), jnp.result_type(leaf)) for leaf in leaves]

    def unravel(vector):
        parts, start = [], 0
        for shape, leaf_dtype in shapes:
            size = int(np.prod(shape))
            parts.append(vector[start : start + size].reshape(shape).astype(leaf_dtype))
            start += size
        return jax.tree.unflatten(treedef, parts)

    return device_array(flat), unravel


# Parameter directions whose derivatives a Jacobian is built from at once.
JACOBIAN_DIRECTIONS = 32


def jacobian_in_groups(fn: Callable, flat: Array) -> Array:
    """`jax.jacfwd(fn)(flat)`, shape `fn(flat).shape + (P,)`, built from
    `JACOBIAN_DIRECTIONS` forward-mode derivatives at a time: the derivative of a
    rollout along every parameter at once holds (parameters x steps x states^2)
    numbers (35 GB for order 40 on 534 samples); in groups, that of a group."""

    def derivative(direction):
        return jax.jvp(fn, (flat,), (direction,))[1]

    # Zero directions pad the count to whole groups: `lax.map` then has no
    # remainder, which outside `jit` would run (and compile) op by op.
    group, directions = direction_groups(flat.size, flat.dtype)
    columns = jax.lax.map(derivative, device_array(directions), batch_size=group)
    return jnp.moveaxis(columns[: flat.size], 0, -1)


def direction_groups(count: int, dtype) -> tuple[int, np.ndarray]:
    """`(group, directions)`: the group size (`JACOBIAN_DIRECTIONS`, or fewer for a
    smaller `count`) and the unit directions of `count` parameters, `(padded,
    count)` on the host, padded with zero rows to a whole number of groups."""
    group = max(1, min(JACOBIAN_DIRECTIONS, count))
    padded = -(-count // group) * group
    return group, np.eye(padded, count, dtype=dtype)


def trained_mask(model, filter_spec) -> Any:
    """The bool pytree (shaped like `model`) of its trained arrays: selected by
    `filter_spec` and inexact, as `train` selects them."""
    selected, _ = eqx.partition(model, filter_spec)
    return jax.tree.map(eqx.is_inexact_array, selected, is_leaf=lambda x: x is None)


def _residual_jacobian(objective, params, batch, mask):
    """`(J (R, P), r (R,), P_model)` at `params = (model, x0s)`, float64 when JAX
    has it enabled."""
    trained, static = eqx.partition(params, mask)
    flat, unravel = ravel_pytree(trained)
    num_model = ravel_pytree(trained[0])[0].size
    if jax.config.jax_enable_x64:
        flat = flat.astype(jnp.float64)
        batch = jax.tree.map(
            lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, batch
        )
        static = jax.tree.map(
            lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, static
        )
        objective = jax.tree.map(
            lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x,
            objective,
        )

    def residuals(vector):
        return objective.residuals(eqx.combine(unravel(vector), static), batch)

    return jacobian_in_groups(residuals, flat), residuals(flat), num_model


@top_level_jit
def _covariance_parts(objective, params, batch, mask, num_channels: int):
    jacobian, residuals, num_model = _residual_jacobian(objective, params, batch, mask)
    matrix, variance, rank = gauss_newton_covariance(jacobian, residuals, num_channels)
    valid = jnp.sum((residuals != 0) | jnp.any(jacobian != 0, axis=1))
    return matrix[:num_model, :num_model], variance, rank, valid


def _host_residual_jacobian(objective, params, batch, trained):
    """`(J (R, P), r (R,))` of the output-error (simulation) loss with closed-form
    initial states of a `LinearSystem`, on the host in float64
    (`linear_sensitivity.py`): the Jacobian `_covariance_parts` compiles a program
    for, without compiling one. `None` for any other objective or model, or
    without float64 in JAX (that program then computes in float32)."""
    model, x0s = params
    if not (
        jax.config.jax_enable_x64
        and isinstance(objective, FitObjective)
        and objective.outputs
        and isinstance(objective.kind, str)
        and objective.kind == "simulation"
        and objective.x0 == "closed_form"
        and objective.separable is None
        and x0s is None
    ):
        return None
    linear = linear_parameters(model, trained)
    if linear is None:
        return None
    values, derivatives = linear
    mask = np.asarray(batch["mask"], bool)
    ys = np.where(mask[..., None], np.asarray(batch["ys"], np.float64), 0.0)
    us = batch.get("us")
    if us is not None:
        us = np.where(mask[..., None], np.asarray(us, np.float64), 0.0)
    weights = np.asarray(objective.weights, np.float64)
    run = closed_form_run(values, derivatives, ys, us, mask, weights, ridge=True)
    # `FitObjective._weighted`: sqrt(w_c) at the valid steps, over sqrt(p count).
    p = ys.shape[-1]
    scale = np.where(mask[..., None], np.sqrt(weights), 0.0) / np.sqrt(
        p * max(int(np.sum(mask)), 1)
    )
    residuals = (scale * (run.predicted - ys)).reshape(-1)
    jacobian = (scale[..., None] * run.derivative).reshape(residuals.size, -1)
    return jacobian, residuals


def fit_covariance(
    objective, params, batch, filter_spec, num_channels: int
) -> tuple[ParameterCovariance | None, str | None]:
    """The covariance of the trained model parameters of a least-squares fit at
    `params = (model, x0s)` (its optimum), or `None` and the reason. Trained
    initial states count as parameters; the model's block is returned (their
    marginal covariance).

    **Arguments:**

    - `objective`: a least-squares objective (`residuals(params, batch)`).
    - `params`: `(model, x0s)`.
    - `batch`: the data as the objective reads them.
    - `filter_spec`: which parts of the model trained (as given to `fit`).
    - `num_channels`: the width of the residuals' channel axis.
    """
    model = params[0]
    mask = (trained_mask(model, filter_spec), trained_mask(params[1], True))
    num_params = sum(leaf.size for leaf in jax.tree.leaves(eqx.filter(params, mask)))
    num_residuals = objective.num_residuals(batch)
    if num_params > COVARIANCE_PARAMETER_LIMIT:
        return None, (
            f"not computed: {num_params} trained parameters (more than "
            f"{COVARIANCE_PARAMETER_LIMIT})"
        )
    if num_params * num_residuals > COVARIANCE_JACOBIAN_LIMIT:
        return None, (
            f"not computed: the residual Jacobian ({num_residuals} x {num_params}) "
            f"is larger than {COVARIANCE_JACOBIAN_LIMIT} entries"
        )
    not_finite = "not computed: the residual Jacobian is not finite at the fit"
    with one_blas_thread(), np.errstate(all="ignore"):  # (an unstable model)
        host = _host_residual_jacobian(objective, params, batch, mask[0])
        if host is not None:
            jacobian, residuals = host
            if not (np.all(np.isfinite(jacobian)) and np.all(np.isfinite(residuals))):
                return None, not_finite
            matrix, variance, rank = gauss_newton_covariance(
                jacobian, residuals, num_channels, xp=np
            )
            valid = np.sum((residuals != 0) | np.any(jacobian != 0, axis=1))
    if host is None:
        matrix, variance, rank, valid = _covariance_parts(
            objective, params, batch, mask, num_channels
        )
    matrix = np.asarray(matrix, np.float64)
    if not np.all(np.isfinite(matrix)):
        return None, not_finite
    if int(valid) <= int(rank):
        return None, (
            f"not computed: {int(valid)} residuals for {int(rank)} identifiable "
            "parameters leave no degrees of freedom for the noise variance"
        )
    covariance = ParameterCovariance(
        matrix=matrix,
        model=model,
        trained=mask[0],
        channel_variance=np.asarray(variance, np.float64),
        rank=int(rank),
        num_residuals=int(valid),
    )
    return covariance, None


class LazyCovariance:
    """`fit_covariance` computed on first request and kept (a fit does not pay for
    the Jacobian unless its covariance is read)."""

    def __init__(self, objective, params, batch, filter_spec, num_channels: int):
        self._arguments = (objective, params, batch, filter_spec, num_channels)
        self._result: tuple[ParameterCovariance | None, str | None] | None = None

    def at(self, params) -> "LazyCovariance":
        """The same covariance at other `params = (model, x0s)` (not yet computed):
        for a model taken out of the padded one it was fitted in (`padded.py`)."""
        if self._arguments is None:
            raise ValueError("LazyCovariance.at: the covariance was already computed.")
        objective, _, batch, filter_spec, num_channels = self._arguments
        return LazyCovariance(objective, params, batch, filter_spec, num_channels)

    def __repr__(self) -> str:
        if self._result is None:
            return (
                "<the fit's parameter covariance, computed when FitResult.covariance "
                "is first read>"
            )
        covariance, reason = self._result
        if covariance is None:
            return f"<no covariance: {reason}>"
        return repr(covariance)

    def result(self) -> tuple[ParameterCovariance | None, str | None]:
        if self._result is None:
            try:
                self._result = fit_covariance(*self._arguments)
            except (TypeError, ValueError) as error:
                self._result = (None, f"not computed: {error}")
            except jax.errors.JaxRuntimeError as error:  # out of memory, say
                first = str(error).splitlines()[0] if str(error) else type(error)
                self._result = (None, f"not computed: {first}")
            self._arguments = None
        return self._result
