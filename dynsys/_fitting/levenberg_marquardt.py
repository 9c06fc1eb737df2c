"""Levenberg–Marquardt on a residual vector, as a strategy of the training loop:
scaled damping, the Jacobian built and factorised once per accepted point (on the
gauge-free directions of a linear model), and every trial step and its predicted
reduction read off that factorisation.

Why not `optimistix.LevenbergMarquardt`: its step linearises the residuals at every
trial point and evaluates the linearisation again for the trust region's predicted
reduction, which doubles the traced rollout; its damping is `lambda I`, which on a
lightly damped model (parameters whose effects differ by orders of magnitude) makes
it crawl (200 steps where the scaled damping below needs 16 to 60); and its descent
cannot be told that `n^2` directions of a linear model leave the loss unchanged.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, PyTree

from .gauge import step_basis


def all_finite(tree: PyTree) -> Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


class Factorisation(eqx.Module):
    """The damped Gauss–Newton steps at one point, for every damping at once.

    With `J (R, P)` the Jacobian of the residuals `r (R,)` and `d (P,)` the damping
    scales, the step $\\delta(\\lambda) = \\arg\\min_\\delta \\lVert J\\delta + r
    \\rVert^2 + \\lambda \\sum_i d_i \\delta_i^2$ is
    `-directions @ (gradient / (curvatures + lambda))`, and its predicted change of
    the sum of squares $\\lVert J\\delta + r\\rVert^2 - \\lVert r \\rVert^2$ is
    `sum(curvatures c^2) - 2 sum(gradient c)` with `c = gradient / (curvatures +
    lambda)`: no Jacobian product per trial step.
    """

    directions: Float[Array, "P Q"]  # diag(d)^(-1/2) V
    curvatures: Float[Array, " Q"]  # e: J^T J = diag(d)^(1/2) V diag(e) V^T ...
    gradient: Float[Array, " Q"]  # V^T diag(d)^(-1/2) J^T r

    def coefficients(self, damping: Float[Array, ""]) -> Float[Array, " Q"]:
        return self.gradient / (self.curvatures + damping)

    def step(self, damping: Float[Array, ""]) -> Float[Array, " P"]:
        """$\\delta(\\lambda)$, shape `(P,)`."""
        return -(self.directions @ self.coefficients(damping))

    def predicted_change(self, damping: Float[Array, ""]) -> Float[Array, ""]:
        """$\\lVert J\\delta(\\lambda) + r\\rVert^2 - \\lVert r\\rVert^2$ (negative
        unless the gradient is zero)."""
        c = self.coefficients(damping)
        return jnp.sum(self.curvatures * c**2) - 2 * jnp.sum(self.gradient * c)

    def remaining(self) -> Float[Array, ""]:
        """The decrease of the sum of squares a full Gauss–Newton step predicts,
        $r^\\top J (J^\\top J)^+ J^\\top r$ (curvatures at round-off level of the
        largest count as zero)."""
        eps = jnp.finfo(self.curvatures.dtype).eps
        floor = eps * jnp.max(self.curvatures)
        return jnp.sum(self.gradient**2 / (self.curvatures + floor))


def factorise(
    jac: Float[Array, "R Q"],
    residual: Float[Array, " R"],
    basis: Float[Array, "P Q"] | None,
    scale: Float[Array, " P"],
    normal_equations: bool,
) -> tuple[Factorisation, Float[Array, " P"]]:
    """The `Factorisation` of the Jacobian `jac @ basis.T` (the Jacobian on the
    directions `basis`, which the residuals do not change along anything
    orthogonal to), with damping scales `d = max(scale, diag(J^T J))`.

    **Arguments:**

    - `jac`: `(R, Q)`, the residuals' derivatives along the columns of `basis`.
    - `residual`: `(R,)`.
    - `basis`: `(P, Q)` orthonormal columns, or `None` for the identity (`Q = P`).
    - `scale`: `(P,)` the damping scales so far (zeros at the first point).
    - `normal_equations`: form `jac^T jac` (float64); else a QR of `[jac | r]`,
        which keeps the accuracy of a QR solve (float32).

    **Returns:**

    The factorisation and the new damping scales `d (P,)`.
    """
    num_residuals, q = jac.shape
    if normal_equations or num_residuals <= q:
        return factorise_normal(jac.T @ jac, jac.T @ residual, basis, scale)
    r_factor = jnp.linalg.qr(
        jnp.concatenate([jac, residual[:, None]], axis=1), mode="r"
    )
    return _scaled(r_factor[:q, :q], r_factor[:q, q], basis, scale)


def factorise_normal(
    normal: Float[Array, "Q Q"],
    gradient: Float[Array, " Q"],
    basis: Float[Array, "P Q"] | None,
    scale: Float[Array, " P"],
) -> tuple[Factorisation, Float[Array, " P"]]:
    """`factorise` from the normal equations: `normal = J^T J (Q, Q)` and `gradient
    = J^T r (Q,)` (accumulated block by block when `J` itself is too large)."""
    # A square root F (Q, Q) of J^T J and q with F^T q = J^T r.
    curvatures, vectors = jnp.linalg.eigh(normal)
    roots = jnp.sqrt(jnp.maximum(curvatures, 0.0))
    factor = roots[:, None] * vectors.T
    projected = vectors.T @ gradient
    rhs = jnp.where(roots > 0, projected / jnp.where(roots > 0, roots, 1.0), 0.0)
    return _scaled(factor, rhs, basis, scale)


def _scaled(factor, rhs, basis, scale) -> tuple[Factorisation, Float[Array, " P"]]:
    """The `Factorisation` of `F basis^T` (`F (Q, Q)` with `F^T F = J^T J`, `rhs
    (Q,)` with `F^T rhs = J^T r`) under Moré's damping scales."""
    full = factor if basis is None else factor @ basis.T  # (Q, P): F basis^T
    # Damping scales: the largest diag(J^T J) seen so far (Moré 1978), floored so
    # that a parameter without effect still has a finite step.
    scale = jnp.maximum(scale, jnp.sum(full**2, axis=0))
    eps = jnp.finfo(scale.dtype).eps
    scale_floor = jnp.maximum(scale, eps * jnp.max(scale) + jnp.finfo(scale.dtype).tiny)
    inverse_root = 1 / jnp.sqrt(scale_floor)
    left, singular, right_t = jnp.linalg.svd(
        full * inverse_root[None, :], full_matrices=False
    )
    factorisation = Factorisation(
        directions=inverse_root[:, None] * right_t.T,
        curvatures=singular**2,
        gradient=singular * (left.T @ rhs),
    )
    return factorisation, scale


def _residual_struct(objective, params, static, batch) -> jax.ShapeDtypeStruct:
    """The shape and dtype of `objective.residuals` on `batch`: counted, when the
    objective can count them (`num_residuals`), rather than traced (a trace of the
    residuals is a trace of the whole rollout, a fifth of a second of every
    compilation of a chunk)."""
    count = getattr(objective, "num_residuals", None)
    if count is None:
        return jax.eval_shape(
            lambda: objective.residuals(eqx.combine(params, static), batch)
        )
    arrays = [params, batch, objective]
    leaves = jax.tree.leaves(eqx.filter(arrays, eqx.is_inexact_array))
    return jax.ShapeDtypeStruct((count(batch),), jnp.result_type(*leaves))


def split_experiments(batch: dict, blocks: int) -> dict:
    """`batch` (arrays with `N` experiments on their leading axis) as `blocks`
    groups: every array `(N, ...)` becomes `(blocks, N / blocks, ...)`."""
    return jax.tree.map(lambda x: x.reshape(blocks, -1, *x.shape[1:]), batch)


class _State(eqx.Module):
    first: Bool[Array, ""]  # the chunk's warm-up step: take the point as it is
    residual: Float[Array, " R"]  # at the accepted point
    factorisation: Factorisation  # at the accepted point
    scale: Float[Array, " P"]  # damping scales (largest diag(J^T J) so far)
    damping: Float[Array, ""]  # lambda
    growth: Float[Array, ""]  # the factor lambda grows by at the next rejection
    terminate: Bool[Array, ""]


class LevenbergMarquardtStrategy(eqx.Module):
    """Levenberg–Marquardt on the objective's residual vector.

    Each step evaluates the residuals at one trial point `params + delta(lambda)`;
    when the decrease is at least a thousandth of the predicted one the point is
    accepted, and only then is the Jacobian built (one forward-mode derivative per
    direction) and factorised (`factorise`). The damping is scaled by the largest
    `diag(J^T J)` seen (Moré's scaling: invariant to the units of each parameter)
    and updated as Nielsen (1999) proposes: times `max(1/3, 1 - (2 rho - 1)^3)`
    after an accepted step with gain ratio `rho`, times 2, 4, 8, ... after rejected
    ones.

    On a linear model whose initial states are estimated (output error), the
    directions are the complement of its change-of-basis family (`gauge.py`): the
    loss is constant along that family, so the Jacobian needs `n^2` fewer
    derivatives and the step is the same as on all parameters.

    It stops when an accepted step changes every parameter by less than
    `atol + rtol |theta|` and every residual by less than `atol + rtol |r|`, or when
    the Gauss–Newton model predicts a further decrease of the loss below what the
    loss resolves (`_settled`).

    Its iterates do not depend on how steps are grouped into dispatches: a chunk
    starts by taking the Jacobian at the current point (a warm-up step), with the
    damping and its scales carried from the previous chunk.
    """

    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    name: str = eqx.field(static=True, default="Levenberg–Marquardt (scaled)")
    warmup: bool = eqx.field(static=True, default=True)
    normal_equations: bool = eqx.field(static=True, default=True)
    # Experiments in groups: J^T J and J^T r are accumulated group by group, so
    # that the Jacobian of only one group is ever held (normal equations only).
    blocks: int = eqx.field(static=True, default=1)

    def init(self, params):
        flat, _ = ravel_pytree(params)
        # damping (1e-3 of the scaled curvature, Nielsen's start), growth, scales,
        # terminate.
        return (
            jnp.array(1e-3, flat.dtype),
            jnp.array(2.0, flat.dtype),
            jnp.zeros(flat.shape, flat.dtype),
            jnp.array(False),
        )

    def begin(self, objective, params, static, carry, batch):
        damping, growth, scale, terminate = carry
        flat, unravel = ravel_pytree(params)
        residual_struct = _residual_struct(objective, params, static, batch)
        basis_struct = jax.eval_shape(lambda: self._basis(objective, params, static))
        q = flat.size if basis_struct is None else basis_struct.shape[1]
        zeros = jnp.zeros
        factorisation = Factorisation(
            zeros((flat.size, q), flat.dtype),
            zeros(q, flat.dtype),
            zeros(q, flat.dtype),
        )
        return _State(
            jnp.array(True),
            zeros(residual_struct.shape, residual_struct.dtype),
            factorisation,
            scale,
            damping,
            growth,
            terminate,
        )

    def end(self, state):
        return (state.damping, state.growth, state.scale, state.terminate)

    def _basis(self, objective, params, static):
        return step_basis(params, static) if objective.gauge_free else None

    def step(self, objective, params, static, state: _State, batch):
        flat, unravel = ravel_pytree(params)

        def residuals(point):
            return objective.residuals(eqx.combine(unravel(point), static), batch)

        loss = jnp.sum(state.residual**2)
        finite = jnp.isfinite(loss) & all_finite(state.residual)
        converged = state.terminate & jnp.logical_not(state.first)

        delta = jnp.where(state.first, 0.0, state.factorisation.step(state.damping))
        trial = flat + delta
        trial_residual = residuals(trial)
        if trial_residual.shape != state.residual.shape or (
            trial_residual.dtype != state.residual.dtype
        ):
            raise TypeError(
                f"{type(objective).__name__}.residuals returned shape "
                f"{trial_residual.shape} {trial_residual.dtype}; its num_residuals "
                f"said {state.residual.shape} {state.residual.dtype}."
            )
        trial_loss = jnp.sum(trial_residual**2)
        predicted = state.factorisation.predicted_change(state.damping)
        actual = trial_loss - loss
        # The gain ratio rho = actual / predicted (both negative for a good step).
        usable = jnp.isfinite(trial_loss) & (predicted < 0)
        ratio = jnp.where(usable, actual / jnp.where(usable, predicted, -1.0), -1.0)
        accept = state.first | (ratio > 1e-3)

        def accepted(_):
            basis = self._basis(objective, unravel(trial), static)
            if self.blocks > 1:
                return self._factorise_blocks(
                    objective, unravel, static, trial, basis, state, batch
                )
            return self._factorise(residuals, trial, trial_residual, basis, state)

        def rejected(_):
            return state.factorisation, state.scale

        factorisation, scale = jax.lax.cond(accept, accepted, rejected, None)
        damping = jnp.where(
            state.first,
            state.damping,
            jnp.where(
                accept,
                state.damping * jnp.maximum(1 / 3, 1 - (2 * ratio - 1) ** 3),
                state.damping * state.growth,
            ),
        )
        growth = jnp.where(
            state.first, state.growth, jnp.where(accept, 2.0, 2 * state.growth)
        ).astype(state.growth.dtype)
        small = self._small_step(flat, trial, state.residual, trial_residual)
        terminate = (accept & jnp.logical_not(state.first) & small) | (
            accept & self._settled(factorisation, trial_residual)
        )
        terminate = terminate | (state.first & state.terminate)
        new_state = _State(
            jnp.array(False),
            jnp.where(accept, trial_residual, state.residual),
            factorisation,
            scale,
            damping.astype(state.damping.dtype),
            growth,
            terminate,
        )
        new_params = unravel(jnp.where(accept, trial, flat))
        return loss, finite, new_params, new_state, converged

    def _factorise(self, residuals, point, residual, basis, state):
        """The Jacobian at `point` along `basis` (columns; all parameters when
        `None`), one forward-mode derivative per column, and its factorisation."""
        directions = (
            jnp.eye(point.size, dtype=point.dtype) if basis is None else basis.T
        )

        def derivative(direction):
            return jax.jvp(residuals, (point,), (direction,))[1]

        jac = jax.vmap(derivative, out_axes=1)(directions)
        return factorise(jac, residual, basis, state.scale, self.normal_equations)

    def _factorise_blocks(self, objective, unravel, static, point, basis, state, batch):
        """`_factorise` with `J^T J` and `J^T r` summed over `blocks` groups of
        experiments (each group's Jacobian built and dropped in turn): the residuals
        of one experiment depend on its data only, up to the normalisation by the
        batch's size (`objective.group_share`)."""
        directions = (
            jnp.eye(point.size, dtype=point.dtype) if basis is None else basis.T
        )

        def group(totals, group_batch):
            def residuals(p):
                return objective.residuals(eqx.combine(unravel(p), static), group_batch)

            def derivative(direction):
                return jax.jvp(residuals, (point,), (direction,))

            values, jac = jax.vmap(derivative, out_axes=(None, 1))(directions)
            share = objective.group_share(group_batch, batch)
            normal, gradient = totals
            normal = normal + share**2 * (jac.T @ jac)
            return (normal, gradient + share**2 * (jac.T @ values)), None

        q = directions.shape[0]
        zeros = (jnp.zeros((q, q), point.dtype), jnp.zeros(q, point.dtype))
        groups = split_experiments(batch, self.blocks)
        (normal, gradient), _ = jax.lax.scan(group, zeros, groups)
        return factorise_normal(normal, gradient, basis, state.scale)

    def _small_step(self, flat, trial, residual, trial_residual):
        """Every parameter and every residual changed by less than `atol + rtol`
        times its size."""
        y_small = jnp.all(
            jnp.abs(trial - flat) < self.atol + self.rtol * jnp.abs(trial)
        )
        f_small = jnp.all(
            jnp.abs(trial_residual - residual)
            < self.atol + self.rtol * jnp.abs(trial_residual)
        )
        return y_small & f_small

    def _settled(self, factorisation: Factorisation, residual):
        """Whether the Gauss–Newton model at the accepted point predicts a further
        decrease of the loss that the loss cannot resolve: below `rtol**2` of it, or
        below its round-off (`sqrt(R) * eps` of it for `R` residuals).

        Where Gauss–Newton converges only linearly (a large residual at the optimum,
        as with noisy data), the last steps change the loss by less than its
        round-off and the step test alone would wait for a rejected step to shrink
        the damping's trust region by chance."""
        eps = jnp.finfo(residual.dtype).eps
        resolution = self.rtol**2 + math.sqrt(residual.size) * eps
        return factorisation.remaining() <= resolution * jnp.sum(residual**2)
