"""A structured quasi-Newton estimate of the second-order part of a least-squares
Hessian (Dennis, Gay and Welsch 1981, the model NL2SOL switches to).

For the loss $\\tfrac12\\lVert r(\\theta)\\rVert^2$ the Hessian is $J^\\top J + S$
with $S = \\sum_i r_i \\nabla^2 r_i$. Gauss–Newton drops `S`, which on a problem
whose residuals stay large at the optimum (a model that cannot fit the data
exactly, noisy data) makes it converge only linearly. `S` is estimated instead from
the gradients already computed: after a step `s`, the secant condition
$S_+ s = y^\\#$ with $y^\\# = g_+ - g - J_+^\\top J_+ s$ ($g = J^\\top r$).
"""

import jax.numpy as jnp
from jaxtyping import Array, Float


def update_secant(
    secant: Float[Array, "P P"],
    step: Float[Array, " P"],
    gradient_change: Float[Array, " P"],
    curvature_step: Float[Array, " P"],
) -> Float[Array, "P P"]:
    """The Dennis–Gay–Welsch update of `secant` (the estimate of `S`) after `step`.

    **Arguments:**

    - `secant`: `(P, P)` symmetric, the estimate at the point the step left.
    - `step`: `(P,)` the accepted step `s`.
    - `gradient_change`: `(P,)` `y = g_+ - g`, the change of `J^T r`.
    - `curvature_step`: `(P,)` `J_+^T J_+ s` at the new point.

    **Returns:**

    `(P, P)` the symmetric estimate closest to `secant` (in the norm weighted by
    the secant pair) with `S_+ s = y - J_+^T J_+ s`, after shrinking `secant` by
    `min(1, |s^T y#| / |s^T S s|)` (Dennis, Gay and Welsch's sizing, which keeps
    an estimate from earlier, far-away points from dominating). Only sized when
    `y^T s` is not positive (no curvature information along `s`).
    """
    target = gradient_change - curvature_step  # y#
    moved = secant @ step
    along = step @ moved
    wanted = step @ target
    sizing = jnp.where(
        jnp.abs(along) > 0,
        jnp.minimum(1.0, jnp.abs(wanted) / jnp.where(along == 0, 1.0, jnp.abs(along))),
        1.0,
    )
    secant = sizing * secant
    moved = sizing * moved
    curvature = gradient_change @ step
    norms = jnp.linalg.norm(gradient_change) * jnp.linalg.norm(step)
    tiny = jnp.finfo(step.dtype).eps * norms
    usable = curvature > tiny
    denominator = jnp.where(usable, curvature, 1.0)
    error = target - moved
    correction = (
        jnp.outer(error, gradient_change) + jnp.outer(gradient_change, error)
    ) / denominator - (error @ step) * jnp.outer(
        gradient_change, gradient_change
    ) / denominator**2
    return jnp.where(usable, secant + correction, secant)
