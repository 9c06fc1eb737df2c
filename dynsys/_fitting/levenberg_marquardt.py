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

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, PyTree

from .._type_checks import checks_own_arguments
from .gauge import masked_step_basis, step_basis
from .secant import update_secant
from .solver_base import AbstractSolver, tolerances
from .separable import (
    linear_directions,
    projected_jacobian,
    step_basis as separable_step_basis,
)


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


def factorise_model(
    hessian: Float[Array, "Q Q"],
    gradient: Float[Array, " Q"],
    basis: Float[Array, "P Q"] | None,
    scale: Float[Array, " P"],
) -> Factorisation:
    """The `Factorisation` of a quadratic model whose Hessian along `basis` is
    `hessian` (symmetric, possibly indefinite), with gradient `gradient = J^T r`
    along `basis`, under the damping scales `scale` (as `factorise_normal` returns
    them). A trial step is a minimiser of the damped model only where
    `curvatures + damping > 0`."""
    inverse_root = _inverse_root(scale)
    if basis is None:
        # The scaled directions are the unit vectors: W = diag(d)^(-1/2).
        scaled = inverse_root[:, None] * inverse_root[None, :] * hessian
        curvatures, vectors = jnp.linalg.eigh(scaled)
        return Factorisation(
            directions=inverse_root[:, None] * vectors,
            curvatures=curvatures,
            gradient=vectors.T @ (inverse_root * gradient),
        )
    # diag(d)^(-1/2) basis = U T with orthonormal U (P, Q): the model in the
    # coordinates of U is T H T^T, and the gradient's part T g.
    orthonormal, triangle = jnp.linalg.qr(inverse_root[:, None] * basis)
    curvatures, vectors = jnp.linalg.eigh(triangle @ hessian @ triangle.T)
    return Factorisation(
        directions=inverse_root[:, None] * (orthonormal @ vectors),
        curvatures=curvatures,
        gradient=vectors.T @ (triangle @ gradient),
    )


def _inverse_root(scale: Float[Array, " P"]) -> Float[Array, " P"]:
    """`diag(d)^(-1/2)` of the damping scales, floored so that a parameter without
    effect still has a finite step."""
    eps = jnp.finfo(scale.dtype).eps
    scale_floor = jnp.maximum(scale, eps * jnp.max(scale) + jnp.finfo(scale.dtype).tiny)
    return 1 / jnp.sqrt(scale_floor)


def _scaled(factor, rhs, basis, scale) -> tuple[Factorisation, Float[Array, " P"]]:
    """The `Factorisation` of `F basis^T` (`F (Q, Q)` with `F^T F = J^T J`, `rhs
    (Q,)` with `F^T rhs = J^T r`) under Moré's damping scales."""
    full = factor if basis is None else factor @ basis.T  # (Q, P): F basis^T
    # Damping scales: the largest diag(J^T J) seen so far (Moré 1978), floored so
    # that a parameter without effect still has a finite step.
    scale = jnp.maximum(scale, jnp.sum(full**2, axis=0))
    inverse_root = _inverse_root(scale)
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
    objective can count them (`AbstractObjective.num_residuals`), rather than
    traced (a trace of the residuals is a trace of the whole rollout, a fifth of a
    second of every compilation of a chunk)."""
    count = objective.num_residuals(batch)
    if count is None:
        return jax.eval_shape(
            lambda: objective.residuals(eqx.combine(params, static), batch)
        )
    arrays = [params, batch, objective]
    leaves = jax.tree.leaves(eqx.filter(arrays, eqx.is_inexact_array))
    return jax.ShapeDtypeStruct((count,), jnp.result_type(*leaves))


def split_experiments(batch: dict, blocks: int) -> dict:
    """`batch` (arrays with `N` experiments on their leading axis) as `blocks`
    groups: every array `(N, ...)` becomes `(blocks, N / blocks, ...)`."""
    return jax.tree.map(lambda x: x.reshape(blocks, -1, *x.shape[1:]), batch)


class _Linearisation(eqx.Module):
    """The Gauss–Newton model at the accepted point, along `basis`."""

    normal: Float[Array, "Q Q"]  # J^T J
    gradient: Float[Array, " Q"]  # J^T r
    basis: Float[Array, "P Q"] | None

    def full(self, vector: Float[Array, " Q"]) -> Float[Array, " P"]:
        return vector if self.basis is None else self.basis @ vector

    def reduced(self, vector: Float[Array, "P *rest"]) -> Float[Array, "Q *rest"]:
        return vector if self.basis is None else self.basis.T @ vector


class _State(eqx.Module):
    first: Bool[Array, ""]  # the chunk's warm-up step: take the point as it is
    residual: Float[Array, " R"]  # at the accepted point
    factorisation: Factorisation  # Gauss–Newton's, at the accepted point
    newton: Factorisation  # with the secant estimate of S, at the accepted point
    linearisation: _Linearisation  # at the accepted point (secant only)
    secant: Float[Array, "0 0"] | Float[Array, "P P"]  # the estimate of S (secant only)
    use_newton: Bool[Array, ""]  # the augmented model predicted the last step better
    scale: Float[Array, " P"]  # damping scales (largest diag(J^T J) so far)
    damping: Float[Array, ""]  # lambda
    growth: Float[Array, ""]  # the factor lambda grows by at the next rejection
    terminate: Bool[Array, ""]

    def model(self) -> tuple[Factorisation, Float[Array, ""]]:
        """The model the next step is taken on and the damping of its step: the
        augmented one when it predicted the last step better (`use_newton`), else
        Gauss–Newton's. An indefinite augmented model's damping is raised past its
        most negative curvature (by 1 %, and round-off), so that the step minimises
        the damped model."""
        curvatures = self.newton.curvatures
        shift = jnp.maximum(0.0, -jnp.min(curvatures)) * 1.01 + _round_off(curvatures)
        chosen = _select(self.use_newton, self.newton, self.factorisation)
        return chosen, jnp.where(self.use_newton, self.damping + shift, self.damping)

    def remaining(self) -> Float[Array, ""]:
        """The decrease of the sum of squares that the model of the next step
        predicts for its undamped minimiser; Gauss–Newton's where the augmented
        model is not convex (it has no minimiser then)."""
        curvatures = self.newton.curvatures
        convex = jnp.min(curvatures) > _round_off(curvatures)
        chosen = _select(self.use_newton & convex, self.newton, self.factorisation)
        return chosen.remaining()


def _round_off(curvatures: Float[Array, " Q"]) -> Float[Array, ""]:
    return jnp.finfo(curvatures.dtype).eps * jnp.max(jnp.abs(curvatures))


def _select(condition, if_true: PyTree, if_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


def _directions(point, basis):
    """The directions of the Jacobian's columns as rows `(Q, P)`: `basis`'s columns,
    or every parameter when `basis` is `None`."""
    return jnp.eye(point.size, dtype=point.dtype) if basis is None else basis.T


@checks_own_arguments  # (__check_init__)
class LevenbergMarquardt(AbstractSolver):
    """Levenberg–Marquardt on the objective's residual vector: what `fit(solver=
    None)` picks for problems of up to some hundred parameters. Needs no learning
    rate; `fit` only (it needs the residuals of a least-squares loss).

    **Arguments:**

    - `rtol`, `atol`: the tolerances of the stopping test below; `None` (default):
        the parameters' dtype's, `(1e-8, 1e-10)` in float64, `(1e-5, 8 eps)` (8 eps = 9.5e-7) in
        float32.
    - `separable`: `None` (default); `"exact"` or `"kaufman"`: on the output error
        of a `LinearSystem` (no state offset, every array trained, initial states
        estimated, normal equations over all experiments at once), `B`, `D` and the
        output level are eliminated by least squares at every point (variable
        projection, `"exact"`; or Kaufman's cheaper step, `"kaufman"`); elsewhere
        it changes nothing. Fewer steps, each dearer: docs/fitting.md.
    - `normal_equations`: form `J^T J` (`None`: in float64) or else a QR of the
        Jacobian (float32's accuracy).
    - `blocks`: accumulate `J^T J` over this many groups of experiments, holding
        one group's Jacobian at a time (normal equations only); `None`: as many as
        the Jacobian's size needs.
    - `secant`: step on `J^T J + S` (a secant estimate of the second-order term)
        whenever that model predicted the last step better (normal equations only).

    **Example:**

    ```python
    result = dynsys.fit(model, data, solver=dynsys.LevenbergMarquardt(rtol=1e-6))
    ```

    How it steps:

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

    With the normal equations (float64), it switches between two models of the loss
    as NL2SOL does (Dennis, Gay and Welsch 1981): Gauss–Newton's `J^T J`, and `J^T
    J + S` with `S` the secant estimate of the residuals' second-order term
    (`secant.py`). After every step it keeps the model whose prediction of that
    step's change of the loss was the closer. Gauss–Newton alone converges only
    linearly where the residuals stay large at the optimum (every real record: the
    model cannot fit the data exactly); on the shared real records the switching
    takes fewer steps on 12 of 18 record-orders (up to half as many), more on 3,
    to the same loss or a lower one on all but one (docs/benchmarks.md).

    It stops when an accepted step changes every parameter by less than
    `atol + rtol |theta|` and every residual by less than `atol + rtol |r|`, or when
    the model of the next step predicts a further decrease of the loss below what
    the loss resolves (`_settled`).

    Its iterates do not depend on how steps are grouped into dispatches: a chunk
    starts by taking the Jacobian at the current point (a warm-up step), with the
    damping and its scales carried from the previous chunk.
    """

    rtol: float | None = eqx.field(static=True, default=None)
    atol: float | None = eqx.field(static=True, default=None)
    # B, D and the output level eliminated by least squares (`separable.py`):
    # `None`, "exact" (variable projection) or "kaufman" (Kaufman's step). `fit`
    # sets it to `None` where the objective does not allow it.
    separable: str | None = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="Levenberg–Marquardt (scaled)")
    warmup: bool = eqx.field(static=True, default=True)
    normal_equations: bool | None = eqx.field(static=True, default=None)
    # Experiments in groups: J^T J and J^T r are accumulated group by group, so
    # that the Jacobian of only one group is ever held (normal equations only).
    blocks: int | None = eqx.field(static=True, default=None)
    # Switch to the model with a secant estimate of S (`secant.py`) whenever it
    # predicted the last step better than Gauss–Newton's (normal equations only).
    secant: bool = eqx.field(static=True, default=True)
    # A padded model's free parameters (1) and frozen ones (0), in the coordinates
    # of the raveled parameters (`padded.py`); `None`: every parameter is free.
    free: Float[Array, " P"] | None = None

    def __check_init__(self):
        if self.separable not in (None, "exact", "kaufman"):
            raise ValueError(
                "LevenbergMarquardt(separable=...): expected None, 'exact' or "
                f"'kaufman', got {self.separable!r}."
            )

    @property
    def stops_at_tolerance(self) -> bool:
        return True

    def resolved(self, dtype) -> "LevenbergMarquardt":
        """This solver with what it leaves to the parameters' `dtype` decided:
        tolerances, normal equations (float64), and one group of experiments where
        `blocks` is `None` (`fit` sizes the groups beforehand)."""
        if None not in (self.rtol, self.atol, self.normal_equations, self.blocks):
            return self
        rtol, atol = tolerances(dtype)
        normal = self.normal_equations
        return dataclasses.replace(
            self,
            rtol=rtol if self.rtol is None else self.rtol,
            atol=atol if self.atol is None else self.atol,
            normal_equations=(
                bool(jnp.dtype(dtype) == jnp.float64) if normal is None else normal
            ),
            blocks=1 if self.blocks is None else self.blocks,
        )

    @property
    def _uses_secant(self) -> bool:
        return bool(self.secant and self.normal_equations)

    def init(self, params):
        flat, _ = ravel_pytree(params)
        resolved = self.resolved(flat.dtype)
        if resolved is not self:
            return resolved.init(params)
        # damping (1e-3 of the scaled curvature, Nielsen's start), growth, scales,
        # terminate, the estimate of S, whether to step on the augmented model.
        size = flat.size if self._uses_secant else 0
        return (
            jnp.array(1e-3, flat.dtype),
            jnp.array(2.0, flat.dtype),
            jnp.zeros(flat.shape, flat.dtype),
            jnp.array(False),
            jnp.zeros((size, size), flat.dtype),
            jnp.array(False),
        )

    def begin(self, objective, params, static, carry, batch):
        damping, growth, scale, terminate, secant, use_newton = carry
        flat, unravel = ravel_pytree(params)
        resolved = self.resolved(flat.dtype)
        if resolved is not self:
            return resolved.begin(objective, params, static, carry, batch)
        residual_struct = _residual_struct(objective, params, static, batch)
        basis_struct = jax.eval_shape(lambda: self._basis(objective, params, static))
        q = flat.size if basis_struct is None else basis_struct.shape[1]
        zeros = jnp.zeros
        factorisation = Factorisation(
            zeros((flat.size, q), flat.dtype),
            zeros(q, flat.dtype),
            zeros(q, flat.dtype),
        )
        linearisation = _Linearisation(
            zeros((q, q), flat.dtype),
            zeros(q, flat.dtype),
            None if basis_struct is None else zeros(basis_struct.shape, flat.dtype),
        )
        return _State(
            jnp.array(True),
            zeros(residual_struct.shape, residual_struct.dtype),
            factorisation,
            factorisation,
            linearisation,
            secant,
            use_newton,
            scale,
            damping,
            growth,
            terminate,
        )

    def end(self, state):
        return (
            state.damping,
            state.growth,
            state.scale,
            state.terminate,
            state.secant,
            state.use_newton,
        )

    def _basis(self, objective, params, static):
        if self.free is not None:
            return masked_step_basis(params, static, self.free)
        if self.separable is not None:
            return separable_step_basis(params, static)
        return step_basis(params, static) if objective.gauge_free else None

    def step(self, objective, params, static, state: _State, batch):
        flat, unravel = ravel_pytree(params)
        resolved = self.resolved(flat.dtype)
        if resolved is not self:
            return resolved.step(objective, params, static, state, batch)

        def residuals(point):
            return objective.residuals(eqx.combine(unravel(point), static), batch)

        loss = jnp.sum(state.residual**2)
        finite = jnp.isfinite(loss) & all_finite(state.residual)
        converged = state.terminate & jnp.logical_not(state.first)

        model, model_damping = state.model()
        delta = jnp.where(state.first, 0.0, model.step(model_damping))
        if self.free is not None:  # exactly zero on the frozen parameters
            delta = delta * self.free
        # The trial point with the parts the objective determines set to their
        # optimum there (`complete`; most objectives return the point itself).
        trial = flat + delta
        candidate = unravel(trial)
        completed = objective.complete(candidate, static, batch)
        if completed is not candidate:
            trial = ravel_pytree(completed)[0]
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
        predicted = model.predicted_change(model_damping)
        actual = trial_loss - loss
        # The gain ratio rho = actual / predicted (both negative for a good step).
        usable = jnp.isfinite(trial_loss) & (predicted < 0)
        ratio = jnp.where(usable, actual / jnp.where(usable, predicted, -1.0), -1.0)
        accept = state.first | (ratio > 1e-3)

        # Which model the next step is taken on, from this step's change of the
        # loss (kept at the warm-up step, which takes no step).
        use_newton = state.use_newton
        if self._uses_secant:
            better = self._better_model(state, delta, actual)
            use_newton = jnp.where(state.first, state.use_newton, better)

        def accepted(_):
            return self._at_accepted_point(
                objective,
                unravel,
                static,
                state,
                batch,
                residuals,
                trial,
                trial_residual,
                delta,
            )

        def rejected(_):
            return (
                state.factorisation,
                state.newton,
                state.linearisation,
                state.secant,
                state.scale,
            )

        factorisation, newton, linearisation, secant, scale = jax.lax.cond(
            accept, accepted, rejected, None
        )
        damping, growth = self._next_damping(state, accept, ratio)
        small = self._small_step(flat, trial, state.residual, trial_residual)
        new_state = _State(
            jnp.array(False),
            jnp.where(accept, trial_residual, state.residual),
            factorisation,
            newton,
            linearisation,
            secant,
            use_newton,
            scale,
            damping,
            growth,
            state.terminate,
        )
        terminate = (accept & jnp.logical_not(state.first) & small) | (
            accept & self._settled(new_state, trial_residual)
        )
        terminate = terminate | (state.first & state.terminate)
        new_state = eqx.tree_at(lambda s: s.terminate, new_state, terminate)
        new_params = unravel(jnp.where(accept, trial, flat))
        return loss, finite, new_params, new_state, converged

    def _at_accepted_point(
        self, objective, unravel, static, state, batch, residuals, point, residual, step
    ):
        """The models at the accepted `point` (where `residuals` is `residual`,
        reached by `step`): Gauss–Newton's factorisation, the augmented one, the
        linearisation and the secant estimate they come from, and the damping
        scales."""
        basis = self._basis(objective, unravel(point), static)
        linear = None  # Kaufman's separable step: B, D and the level projected out
        if self.separable == "kaufman":
            linear = linear_directions(unravel(point))
        if not self._uses_secant:
            if self.blocks > 1:
                factorisation, scale = self._factorise_blocks(
                    objective, unravel, static, point, basis, state, batch
                )
            else:
                factorisation, scale = self._factorise(
                    residuals, point, residual, basis, state, linear
                )
            return (
                factorisation,
                factorisation,
                state.linearisation,
                state.secant,
                scale,
            )
        if self.blocks > 1:
            linearisation = self._linearise_blocks(
                objective, unravel, static, point, basis, batch
            )
        else:
            linearisation = self._linearise(residuals, point, residual, basis, linear)
        normal, gradient = linearisation.normal, linearisation.gradient
        factorisation, scale = factorise_normal(normal, gradient, basis, state.scale)
        secant = self._update_secant(state, linearisation, step)
        reduced_secant = linearisation.reduced(linearisation.reduced(secant).T)
        newton = factorise_model(normal + reduced_secant, gradient, basis, scale)
        return factorisation, newton, linearisation, secant, scale

    def _next_damping(self, state: _State, accept, ratio):
        """Nielsen's update of the damping and of its growth factor (both kept at
        the warm-up step)."""
        shrink = jnp.maximum(1 / 3, 1 - (2 * ratio - 1) ** 3)
        damping = jnp.where(
            accept, state.damping * shrink, state.damping * state.growth
        )
        growth = jnp.where(accept, 2.0, 2 * state.growth)
        damping = jnp.where(state.first, state.damping, damping)
        growth = jnp.where(state.first, state.growth, growth)
        return damping.astype(state.damping.dtype), growth.astype(state.growth.dtype)

    def _jacobian(self, residuals, point, basis, linear=None):
        """The residuals' Jacobian at `point` along `basis` (columns; all parameters
        when `None`), one forward-mode derivative per column: `(R, Q)`. With
        `linear` (`(P, L)` directions of parameters the residuals are linear in,
        solved for at `point`): Kaufman's Jacobian, less its part along those
        (`separable.projected_jacobian`)."""
        directions = _directions(point, basis)
        if linear is not None:
            directions = jnp.concatenate([directions, linear.T])

        def derivative(direction):
            return jax.jvp(residuals, (point,), (direction,))[1]

        jac = jax.vmap(derivative, out_axes=1)(directions)
        if linear is None:
            return jac
        q = basis.shape[1]
        return projected_jacobian(jac[:, :q], jac[:, q:])

    def _factorise(self, residuals, point, residual, basis, state, linear=None):
        """The Jacobian at `point` along `basis` and its factorisation."""
        jac = self._jacobian(residuals, point, basis, linear)
        return factorise(jac, residual, basis, state.scale, self.normal_equations)

    def _linearise(
        self, residuals, point, residual, basis, linear=None
    ) -> _Linearisation:
        """`J^T J` and `J^T r` at `point` along `basis`."""
        jac = self._jacobian(residuals, point, basis, linear)
        return _Linearisation(jac.T @ jac, jac.T @ residual, basis)

    def _update_secant(self, state: _State, new: _Linearisation, step):
        """The estimate of `S` after the accepted `step` (kept at the warm-up step)."""
        old = state.linearisation
        gradient_change = new.full(new.gradient) - old.full(old.gradient)
        curvature_step = new.full(new.normal @ new.reduced(step))
        secant = update_secant(state.secant, step, gradient_change, curvature_step)
        return jnp.where(state.first, state.secant, secant)

    def _better_model(self, state: _State, step, actual):
        """Whether the augmented model at the accepted point predicts the change
        `actual` of the sum of squares after `step` better than Gauss–Newton's."""
        old = state.linearisation
        reduced = old.reduced(step)
        gauss_newton = 2 * old.gradient @ reduced + reduced @ old.normal @ reduced
        along = old.full(reduced)
        augmented = gauss_newton + along @ state.secant @ along
        better = jnp.abs(actual - augmented) < jnp.abs(actual - gauss_newton)
        return jnp.where(jnp.isfinite(actual), better, state.use_newton)

    def _linearise_blocks(self, objective, unravel, static, point, basis, batch):
        """`_linearise` with `J^T J` and `J^T r` summed over `blocks` groups of
        experiments (each group's Jacobian built and dropped in turn): the residuals
        of one experiment depend on its data only, up to the normalisation by the
        batch's size (`objective.group_share`)."""
        directions = _directions(point, basis)

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
        return _Linearisation(normal, gradient, basis)

    def _factorise_blocks(self, objective, unravel, static, point, basis, state, batch):
        """The Gauss–Newton `Factorisation` of `_linearise_blocks`."""
        linearisation = self._linearise_blocks(
            objective, unravel, static, point, basis, batch
        )
        return factorise_normal(
            linearisation.normal, linearisation.gradient, basis, state.scale
        )

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

    def _settled(self, state: _State, residual):
        """Whether the model of the next step (`_State.remaining`) predicts a further
        decrease of the loss that the loss cannot resolve: below `rtol**2` of it, or
        below its round-off (`sqrt(R) * eps` of it for `R` residuals).

        Where Gauss–Newton converges only linearly (a large residual at the optimum,
        as with noisy data), the last steps change the loss by less than its
        round-off and the step test alone would wait for a rejected step to shrink
        the damping's trust region by chance."""
        eps = jnp.finfo(residual.dtype).eps
        resolution = self.rtol**2 + math.sqrt(residual.size) * eps
        return state.remaining() <= resolution * jnp.sum(residual**2)
