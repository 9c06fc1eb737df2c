"""The change-of-basis freedom of a linear state-space model, and the local
coordinates that remove it (data-driven local coordinates, McKelvey, Helmersson and
Ribarits 2004).

For every invertible `T (n, n)` the models `(K, B, C, D)` and
`(T K T^{-1}, T B, C T^{-1}, D)` have the same input–output behaviour, so an
output-error loss whose initial states are estimated (in closed form) is constant
along that `n^2`-dimensional family. Its tangent space at a model is spanned by, for
each `X (n, n)` (`T = I + \\epsilon X`),

$$\\delta K = X K - K X, \\quad \\delta B = X B, \\quad \\delta C = -C X, \\quad
\\delta D = 0, \\quad \\delta\\,\\mathrm{offset} = X\\,\\mathrm{offset},$$

and the residuals' Jacobian is zero along it. A Gauss–Newton step therefore needs
the Jacobian only on the orthogonal complement of those directions: `P - n^2`
forward-mode derivatives instead of `P`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, PyTree

from .._systems.system import LinearSystem


def _gauge_model(params: PyTree, static: PyTree) -> LinearSystem | None:
    """The `LinearSystem` of `params = (model, x0s)` when its whole change-of-basis
    family is trainable (`K`, `C` and, where present, `B` and `offset` are
    trainable in full, and no initial state is), else `None`."""
    if not (isinstance(params, tuple) and len(params) == 2):
        return None
    model_params, x0s = params
    if x0s is not None or type(model_params) is not LinearSystem:
        return None
    if model_params.K is None or model_params.C is None:
        return None
    model = eqx.combine(params, static)[0]
    for name in ("B", "offset"):
        if getattr(model, name) is not None and getattr(model_params, name) is None:
            return None
    return model


def similarity_tangents(params: PyTree, static: PyTree) -> Float[Array, "P n2"] | None:
    """The tangents of the change-of-basis family at a linear model, as columns in
    the coordinates of `ravel_pytree(params)`.

    **Arguments:**

    - `params`: the trainable part `(model, x0s)` of `fit`'s parameters (the arrays
        that train; `None` elsewhere), `static` the rest.

    **Returns:**

    `(P, n^2)`: column `i n + j` is the tangent for `X = e_i e_j^T`; `None` when the
    model is not a `LinearSystem` with an output matrix whose family is trainable
    (then there is no such freedom to remove).
    """
    model = _gauge_model(params, static)
    if model is None:
        return None
    n = model.state_size
    zeros = jax.tree.map(jnp.zeros_like, params)

    def tangent(X):
        parts = {"K": X @ model.K - model.K @ X, "C": -model.C @ X}
        if model.B is not None:
            parts["B"] = X @ model.B
        if model.offset is not None:
            parts["offset"] = X @ model.offset
        names = tuple(parts)
        moved = eqx.tree_at(
            lambda p: tuple(getattr(p[0], name) for name in names),
            zeros,
            tuple(parts[name] for name in names),
        )
        return ravel_pytree(moved)[0]

    generators = jnp.eye(n * n, dtype=model.K.dtype).reshape(n * n, n, n)
    return jax.vmap(tangent, out_axes=1)(generators)


def complement_basis(tangents: Float[Array, "P g"]) -> Float[Array, "P P-g"]:
    """An orthonormal basis of the orthogonal complement of the span of `tangents`
    (assumed of full column rank `g`, as it is for a minimal model).

    **Arguments:**

    - `tangents`: `(P, g)` with `g < P`.

    **Returns:**

    `(P, P - g)` with orthonormal columns, each orthogonal to every tangent.
    """
    num_params, g = tangents.shape
    # The complete QR's last P - g columns span the complement of the first g's
    # span, which is that of `tangents` when they have full column rank.
    q, _ = jnp.linalg.qr(tangents, mode="complete")
    return q[:, g:num_params]


def step_basis(params: PyTree, static: PyTree) -> Float[Array, "P Q"] | None:
    """The directions a gauge-free step of `params` moves in: `complement_basis` of
    `similarity_tangents`, or `None` (all directions) when the model has no
    change-of-basis freedom (or not fewer directions than parameters)."""
    tangents = similarity_tangents(params, static)
    if tangents is None or tangents.shape[1] >= tangents.shape[0]:
        return None
    return complement_basis(tangents)


def masked_step_basis(
    params: PyTree, static: PyTree, free: Float[Array, " P"]
) -> Float[Array, "P W"]:
    """`step_basis` for a model padded with frozen parameters (`padded.py`): the
    directions in which only `free` parameters move and the change-of-basis family
    of the free block does not, with as many columns as the unpadded model's
    `step_basis` has at the padded size, so that every padding of one size shares
    one compiled program.

    **Arguments:**

    - `params`, `static`: as `similarity_tangents`'s, the model padded (its frozen
        entries zero outside the free block of `K`).
    - `free`: `(P,)`, 1 for a parameter that moves and 0 for a frozen one, in the
        coordinates of `ravel_pytree(params)`; the change-of-basis generators kept
        are `X = e_i e_j^T` with `K[i, j]` free.

    **Returns:**

    `(P, W)`: `W = P - n^2` at the padded size `n` (`P` without change-of-basis
    freedom); the columns span the complement of the free block's tangents and
    the frozen parameters, orthonormal, and zero columns fill the rest.
    """
    tangents = similarity_tangents(params, static)
    num_params = free.shape[0]
    if tangents is None:
        tangents = jnp.zeros((num_params, 0), free.dtype)
        kept = jnp.zeros(0, free.dtype)
    else:
        unravel = ravel_pytree(params)[1]
        kept = unravel(free)[0].K.reshape(-1)
    # The tangents of the kept generators vanish on the frozen parameters (the
    # padded model is block diagonal), so they and the frozen unit vectors are
    # independent: with them first, a complete QR's last columns span the rest.
    columns = jnp.concatenate([tangents * kept[None, :], jnp.diag(1.0 - free)], axis=1)
    active = jnp.concatenate([kept, 1.0 - free]) > 0.5
    first = jnp.argsort(jnp.logical_not(active), stable=True)[:num_params]
    q, _ = jnp.linalg.qr(columns[:, first], mode="complete")
    width = num_params - tangents.shape[1]
    index = jnp.arange(num_params - width, num_params)
    used = index >= jnp.sum(active)
    return q[:, num_params - width :] * used[None, :] * free[:, None]
