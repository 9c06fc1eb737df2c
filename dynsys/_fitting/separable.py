"""Separable least squares for the output-error fit of a linear model (variable
projection, Golub and Pereyra 1973; for state-space models Bruls, Chou, Haverkamp
and Verhaegen 1999).

Given `K` and `C`, the outputs of $x_{t+1} = K x_t + B (u_t - \\bar u)$,
$y_t = C x_t + D (u_t - \\bar u) + \\bar y$ are linear in `B`, `D`, the output
level $\\bar y$ and each experiment's initial state. `eliminate` sets those to their
weighted least-squares values, so that the fit's residuals depend on `(K, C)`
alone, and `step_basis` gives the directions of `(K, C)` that change the model:
`n p` of them (the change-of-basis family, `n^2` directions, removed). The step's
derivative is either the eliminated residuals' own (JAX's, through the
elimination: "exact") or Kaufman's (1975) approximation of it (`projected_jacobian`:
the full model's Jacobian, whose derivative `initial_states.py` structures, less
its part along the linear parameters). Levenberg–Marquardt on that problem takes
about half the steps on the real records, in the same time with Kaufman's
derivative, but ends in higher minima on some, so `fit` uses it only where the
solver asks for it (`LevenbergMarquardt(separable="exact" | "kaufman")`):
measured in docs/benchmarks.md, "What the step count depends on".
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PyTree

from .._systems.system import LinearSystem
from .gauge import complement_basis, similarity_tangents


def applies(model) -> bool:
    """Whether `eliminate` applies to `model`: a `LinearSystem` with inputs and an
    output matrix, and no state offset (whose effect the output level and the
    initial state already span)."""
    return (
        type(model) is LinearSystem
        and model.B is not None
        and model.C is not None
        and model.offset is None
    )


def linear_part_names(model: LinearSystem) -> tuple[str, ...]:
    """The fields the outputs are linear in (besides the initial state), in the
    order of the regressors' columns: `B`, then `D` and `output_level` where the
    model has them."""
    optional = ("D", "output_level")
    return ("B",) + tuple(name for name in optional if getattr(model, name) is not None)


def _regressors(model, ys, us, mask, weights):
    """For one experiment (`ys (T, p)`, `us (T, m)`, `mask (T,)`), the weighted
    regressors `F (T p, L)` of the linear parts, `G (T p, n)` of the initial state
    and the weighted data `y (T p,)` (rows of padded steps zero)."""
    K, C = model.K, model.C
    n, p, m = K.shape[0], C.shape[0], us.shape[-1]
    root = jnp.sqrt(weights)
    level = model.input_level
    deviations = us if level is None else us - level[None, :]

    def step(carry, inputs):
        state_response, power = carry
        y, u, valid = inputs
        # Column (i, j) of B's block: the output's response to a unit B[i, j].
        columns = [C @ state_response.reshape(n, n * m)]
        if model.D is not None:
            columns.append(jnp.kron(jnp.eye(p, dtype=K.dtype), u[None, :]))
        if model.output_level is not None:
            columns.append(jnp.eye(p, dtype=K.dtype))
        scale = jnp.where(valid, root, 0.0)[:, None]
        rows = (
            scale * jnp.concatenate(columns, axis=1),
            scale * (C @ power),
            scale[:, 0] * y,
        )
        state_response = jnp.einsum("nk,kim->nim", K, state_response)
        state_response = (
            state_response + jnp.eye(n, dtype=K.dtype)[:, :, None] * u[None, None, :]
        )
        return (state_response, K @ power), rows

    init = (jnp.zeros((n, n, m), K.dtype), jnp.eye(n, dtype=K.dtype))
    _, (f, g, y) = jax.lax.scan(step, init, (ys, deviations, mask))
    return f.reshape(-1, f.shape[-1]), g.reshape(-1, n), y.reshape(-1)


# The ridge, relative to columns of unit norm: combinations of regressors that
# cancel to below sqrt(RIDGE) of their size are damped rather than solved for, so
# that the solution (and the residuals) stay smooth where columns are all but
# collinear (the output level and a slow mode's initial state).
RIDGE = 1e-16


def _fitted_part(columns, targets):
    """The part of `targets (R, k)` that the ridge least-squares fit by `columns
    (R, L)` explains, and the coefficients `(L, k)`; by a QR factorisation of the
    columns (scaled to unit norm) stacked on the ridge, never by normal
    equations."""
    size = columns.shape[1]
    norms = jnp.sqrt(jnp.sum(columns**2, axis=0))
    norms = jnp.where(norms > 0, norms, 1.0)
    ridge = jnp.sqrt(RIDGE) * jnp.eye(size, dtype=columns.dtype)
    q, r = jnp.linalg.qr(jnp.concatenate([columns / norms[None, :], ridge]))
    q = q[: columns.shape[0]]
    projected = q.T @ targets
    coefficients = jax.scipy.linalg.solve_triangular(r, projected) / norms[:, None]
    return q @ projected, coefficients


def _solve(model, ys, us, mask, weights):
    """The least-squares linear parts `(L,)` (raveled in the order of
    `linear_part_names`), the initial states `(N, n)` and the weighted fitted
    outputs `(N, T p)`: each experiment's initial state eliminated first (its
    regressors and data minus what its free response explains), then the shared
    parts fitted to what is left."""
    f, g, y = jax.vmap(_regressors, in_axes=(None, 0, 0, 0, None))(
        model, ys, us, mask, weights
    )
    targets = jnp.concatenate([f, y[..., None]], axis=-1)
    explained, states = jax.vmap(_fitted_part)(g, targets)
    rest = (targets - explained).reshape(-1, targets.shape[-1])
    values = _fitted_part(rest[:, :-1], rest[:, -1:])[1][:, 0]
    # The fit by the free response is linear in its targets: that of y - F values
    # is read off the one above, without factorising G again.
    x0s = states[..., -1] - states[..., :-1] @ values
    free = explained[..., -1] - explained[..., :-1] @ values
    return values, x0s, f @ values + free


def eliminate(
    model: LinearSystem,
    ys: Float[Array, "N T p"],
    us: Float[Array, "N T m"],
    mask: Bool[Array, "N T"],
    weights: Float[Array, " p"],
) -> LinearSystem:
    """`model` with `B`, `D` and `output_level` (those it has) set to the values
    that, jointly with each experiment's initial state, minimise the weighted sum
    of squared output errors over the valid steps of `mask` (with a ridge of
    `RIDGE` on unit-norm regressors); `K`, `C` and `input_level` as they are.
    Padded steps (`mask` False) must come after an experiment's valid ones."""
    values = _solve(model, ys, us, mask, weights)[0]
    names = linear_part_names(model)
    pieces, start = [], 0
    for name in names:
        part = getattr(model, name)
        pieces.append(values[start : start + part.size].reshape(part.shape))
        start += part.size
    return eqx.tree_at(
        lambda s: tuple(getattr(s, name) for name in names), model, tuple(pieces)
    )


def outputs(
    model: LinearSystem,
    ys: Float[Array, "N T p"],
    us: Float[Array, "N T m"],
    mask: Bool[Array, "N T"],
    weights: Float[Array, " p"],
) -> tuple[Float[Array, "N T p"], Float[Array, "N n"]]:
    """The outputs `(N, T, p)` of `eliminate(model, ...)` from the least-squares
    initial states `(N, n)`, and those states, from one solve by orthogonal
    factorisations (zero at padded steps): what `initial_states.closed_form`
    gives for the eliminated model, without its normal equations, whose squared
    condition number turns the residuals of a nearly unstable model into noise."""
    _, x0s, fitted = _solve(model, ys, us, mask, weights)
    root = jnp.sqrt(weights)
    fitted = fitted.reshape(ys.shape) / root[None, None, :]
    return jnp.where(mask[..., None], fitted, 0.0), x0s


def step_basis(params: PyTree, static: PyTree) -> Float[Array, "P Q"]:
    """The directions a separable step moves in, as orthonormal columns in the
    coordinates of `ravel_pytree(params)` (`params = (model, None)`, every array of
    the `LinearSystem` trainable): those that move `K` and `C` only, orthogonal to
    the change-of-basis family's tangents there; `Q = n p`."""
    model = params[0]
    selected, size = _raveled_entries(params, (model.K, model.C))
    tangents = similarity_tangents(params, static)[selected]
    basis = complement_basis(tangents)
    return jnp.zeros((size, basis.shape[1]), basis.dtype).at[selected].set(basis)


def _raveled_entries(params: PyTree, arrays) -> tuple[np.ndarray, int]:
    """The positions of the entries of `arrays` (leaves of `params`) in
    `ravel_pytree(params)`, and its size."""
    leaves = jax.tree.leaves(params)
    moving = [np.full(leaf.size, any(leaf is x for x in arrays)) for leaf in leaves]
    return np.nonzero(np.concatenate(moving))[0], sum(leaf.size for leaf in leaves)


def linear_directions(params: PyTree) -> Float[Array, "P L"]:
    """The unit directions of `B`, `D` and the output level (those the model has)
    as columns in the coordinates of `ravel_pytree(params)`."""
    model = params[0]
    linear = [getattr(model, name) for name in linear_part_names(model)]
    selected, size = _raveled_entries(params, linear)
    eye = np.zeros((size, selected.size))
    eye[selected, np.arange(selected.size)] = 1.0
    return jnp.asarray(eye, model.K.dtype)


def projected_jacobian(jac_nonlinear, jac_linear):
    """Kaufman's (1975) Jacobian of the variable-projection residuals: the
    full residuals' derivatives along the nonlinear directions `(R, Q)` less their
    part explained by the derivatives along the linear ones `(R, L)`."""
    return jac_nonlinear - _fitted_part(jac_linear, jac_nonlinear)[0]
