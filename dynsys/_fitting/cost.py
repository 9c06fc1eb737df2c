"""Costs of trajectories: quadratic regulation and tracking costs."""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._rollout.rollout import Trajectory
from .._type_checks import checks_own_arguments


def _weighted_square(
    e: Float[Array, "... k"], W, size: int, where: str, name: str
) -> Array:
    """$e^\\top W e$ over the last axis, for a scalar, diagonal `(k,)` or `(k, k)` W."""
    W = jnp.asarray(W)
    if not jnp.issubdtype(W.dtype, jnp.inexact):
        W = W.astype(jnp.result_type(float))
    if W.ndim == 0:
        return W * jnp.sum(e * e, axis=-1)
    if W.shape == (size,):
        return (e * e) @ W
    if W.shape == (size, size):
        return jnp.einsum("...i,ij,...j->...", e, W, e)
    raise ValueError(
        f"{where}({name}=...): {name} must be a scalar, shape ({size},) (a diagonal) "
        f"or ({size}, {size}), got {tuple(W.shape)}."
    )


def _check_trajectory(traj, where: str) -> None:
    if not isinstance(traj, Trajectory):
        raise TypeError(
            f"{where}(traj=...): expected a Trajectory (from rollout), got "
            f"{type(traj).__name__}."
        )


def _input_cost(traj: Trajectory, R, where: str) -> Array | float:
    if R is None:
        return 0.0
    if traj.us is None:
        raise ValueError(
            f"{where}(R=...): R was given but the trajectory has no inputs "
            "(traj.us is None)."
        )
    return _weighted_square(traj.us, R, traj.us.shape[-1], where, "R")


def _broadcast_reference(reference, target_shape, where: str, what: str) -> Array:
    reference = jnp.asarray(reference)
    try:
        shape = jnp.broadcast_shapes(reference.shape, target_shape)
    except ValueError:
        shape = None
    if reference.ndim == 0 or shape != tuple(target_shape):
        size = target_shape[-1]
        raise ValueError(
            f"{where}(reference=...): reference must have shape ({size},), "
            f"(T, {size}) or a shape broadcasting to {what} {tuple(target_shape)}, "
            f"got {tuple(reference.shape)}."
        )
    # Broadcast explicitly: rank promotion may be set to "raise".
    return jnp.broadcast_to(reference, target_shape)


def _mean_over_batch(per_time: Array) -> Scalar:
    """Sum over time (axis -1), then mean over the batch dims."""
    return jnp.mean(jnp.sum(per_time, axis=-1))


@checks_own_arguments
def quadratic_cost(
    traj: Trajectory,
    Q: Float[ArrayLike, "..."],
    R: Float[ArrayLike, "..."] | None = None,
    *,
    Q_final: Float[ArrayLike, "..."] | None = None,
) -> Float[Array, ""]:
    """The quadratic regulation cost of a (batch of) trajectories.

    $J = \\operatorname{mean}_{\\text{batch}} \\Big[\\sum_{t=0}^{T-1} \\big(x_t^\\top Q
    x_t + u_t^\\top R u_t\\big) + x_T^\\top Q_f x_T\\Big]$, the finite-horizon cost of
    linear-quadratic control.

    **Arguments:**

    - `traj`: a `Trajectory` from `rollout`, `xs (..., T+1, n)`, `us (..., T, m)`.
    - `Q`: state weight: a scalar, shape `(n,)` (a diagonal) or `(n, n)`.
    - `R`: optional input weight: a scalar, `(m,)` or `(m, m)`.
    - `Q_final`: optional terminal weight $Q_f$ on $x_T$, like `Q` (default: none).

    **Returns:**

    A scalar.

    **Raises:**

    `ValueError` naming the weight whose shape is wrong, or `R` for a trajectory
    without inputs.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[1.0, 0.1], [0.0, 1.0]]),
                                 B=jnp.array([[0.0], [0.1]]))
    controller = dynsys.LinearFeedback(jnp.array([[1.0, 1.5]]))
    traj = dynsys.rollout(system, jnp.array([[1.0, 0.0], [0.0, 1.0]]), 50,
                          controller=controller)
    cost = dynsys.quadratic_cost(traj, Q=jnp.eye(2), R=0.1, Q_final=10.0)
    ```
    """
    where = "quadratic_cost"
    _check_trajectory(traj, where)
    return _cost(traj, traj.xs, Q, R, Q_final, where)


def _cost(traj, errors, Q, R, Q_final, where) -> Array:
    n = errors.shape[-1]
    running = _weighted_square(errors[..., :-1, :], Q, n, where, "Q")
    running = running + _input_cost(traj, R, where)
    total = _mean_over_batch(running)
    if Q_final is not None:
        final = _weighted_square(errors[..., -1, :], Q_final, n, where, "Q_final")
        total = total + jnp.mean(final)
    return total


@checks_own_arguments
def tracking_cost(
    traj: Trajectory,
    reference: Float[ArrayLike, "... n"],
    Q: Float[ArrayLike, "..."] = 1.0,
    R: Float[ArrayLike, "..."] | None = None,
    *,
    Q_final: Float[ArrayLike, "..."] | None = None,
    outputs: bool = False,
) -> Float[Array, ""]:
    """The quadratic cost of the tracking error to a reference.

    With `outputs=False` (default), $e_t = x_t - r_t$ and
    $J = \\operatorname{mean}_{\\text{batch}} \\Big[\\sum_{t=0}^{T-1} \\big(e_t^\\top Q
    e_t + u_t^\\top R u_t\\big) + e_T^\\top Q_f e_T\\Big]$; with `outputs=True`, the
    outputs are compared instead, $e_t = y_t - r_t$ for $t < T$ (no terminal term).

    **Arguments:**

    - `traj`: a `Trajectory` from `rollout`.
    - `reference`: $r$: a constant `(n,)` (or `(p,)` for outputs), a reference
        trajectory `(T+1, n)` (`(T, p)` for outputs), or one per batch element
        `(..., T+1, n)`.
    - `Q`: error weight: a scalar (default `1.0`), a diagonal `(n,)` or `(n, n)`.
    - `R`: optional input weight, as in `quadratic_cost`.
    - `Q_final`: optional terminal weight on $e_T$ (states only).
    - `outputs`: track the outputs `ys` instead of the states `xs`.

    **Returns:**

    A scalar.

    **Raises:**

    `ValueError` if the reference does not broadcast against the trajectory, for a
    bad weight shape, or for `Q_final` with `outputs=True`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9]]), B=jnp.array([[0.1]]))
    controller = dynsys.LinearFeedback(jnp.array([[0.5]]))
    traj = dynsys.rollout(system, jnp.array([0.0]), 20, controller=controller)
    cost = dynsys.tracking_cost(traj, reference=jnp.array([1.0]), R=0.01)
    ```
    """
    where = "tracking_cost"
    _check_trajectory(traj, where)
    if outputs:
        if Q_final is not None:
            raise ValueError(
                f"{where}(Q_final=...): outputs have no terminal value (ys stops at "
                "y_{T-1}); Q_final needs outputs=False."
            )
        errors = traj.ys - _broadcast_reference(reference, traj.ys.shape, where, "ys")
        running = _weighted_square(errors, Q, errors.shape[-1], where, "Q")
        return _mean_over_batch(running + _input_cost(traj, R, where))
    errors = traj.xs - _broadcast_reference(reference, traj.xs.shape, where, "xs")
    return _cost(traj, errors, Q, R, Q_final, where)
