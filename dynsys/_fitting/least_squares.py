"""Closed-form one-step least squares (DMD with control) on state data."""

import math

import jax.numpy as jnp
import numpy as np

from .._type_checks import checks_own_arguments
from .._data.dataset import Dataset
from .._systems.system import LinearSystem


def step_mask(data) -> np.ndarray:
    """`data.step_mask` (True where `t < lengths[i]`), all True for data without
    lengths."""
    mask = getattr(data, "step_mask", None)
    if mask is not None:
        return np.asarray(mask)
    return np.ones((data.num_trajectories, data.num_steps), bool)


def _check_data(call: str, data) -> Dataset:
    if not isinstance(data, Dataset):
        raise TypeError(
            f"{call}(data=...): expected a dynsys.Dataset, got {type(data)}."
        )
    return data


@checks_own_arguments
def fit_least_squares(
    data: Dataset, *, ridge: float = 0.0, offset: bool = False
) -> LinearSystem:
    """The one-step least-squares `LinearSystem` (DMD with control) for `data`.

    Stacks every transition $(x_t, u_t) \\to x_{t+1}$ of every trajectory (the
    first `lengths[i]` of experiments of different lengths) and solves

    $\\min_{K, B, c} \\sum_{i,t} \\lVert x^i_{t+1} - K x^i_t - B u^i_t - c \\rVert^2
    + \\mathrm{ridge}\\,(\\lVert K \\rVert_F^2 + \\lVert B \\rVert_F^2)$

    by an orthogonal (QR/SVD) least-squares solve, not the normal equations, so
    noise-free data give `K` and `B` to round-off. The `offset` $c$ is not
    penalised. With measurement noise on the states this estimate is biased
    (errors in variables); `fit(..., loss=Simulation())` is not.

    **Arguments:**

    - `data`: a `Dataset`; `B` is estimated when it has inputs.
    - `ridge`: the Tikhonov weight ($\\ge 0$).
    - `offset`: also estimate a constant term $c$.

    **Returns:**

    A `LinearSystem(K, B, offset=...)`, with `dt` from `data.ts` when uniform.

    **Raises:**

    `ValueError` if `ridge` is negative, or if without ridge the regressors
    $[x_t, u_t, 1]$ do not have full column rank (too few transitions, or inputs
    that do not excite the system), which would make the estimate not unique.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]),
                                 B=jnp.array([[0.0], [1.0]]))
    us = jax.random.normal(jax.random.key(1), (4, 30, 1))
    data = dynsys.simulate(system, jnp.ones((4, 2)), 30, inputs=us)
    estimate = dynsys.fit_least_squares(data)   # estimate.K == system.K to round-off
    ```
    """
    data = _check_data("fit_least_squares", data)
    if getattr(data, "xs", None) is None:
        raise ValueError(
            "fit_least_squares(data=...): the data have outputs only (no states); "
            "the one-step least-squares estimate needs measured states. Use "
            "fit_subspace(data) for input-output data."
        )
    if not (isinstance(ridge, int | float) and math.isfinite(ridge) and ridge >= 0):
        raise ValueError(
            f"fit_least_squares(ridge=...): expected a finite number >= 0, got "
            f"{ridge!r}."
        )
    n, m = data.state_size, data.input_size
    # Only the valid transitions of ragged experiments (t < lengths[i]).
    valid = np.asarray(step_mask(data)).reshape(-1)
    X = data.xs[:, :-1].reshape(-1, n)[valid]
    Y = data.xs[:, 1:].reshape(-1, n)[valid]
    columns = [X]
    if m:
        assert data.us is not None
        columns.append(data.us.reshape(-1, m)[valid])
    if offset:
        columns.append(jnp.ones((X.shape[0], 1), X.dtype))
    Z = jnp.concatenate(columns, axis=1)
    d = Z.shape[1]
    if ridge > 0:
        penalised = jnp.sqrt(ridge) * jnp.eye(n + m, d, dtype=Z.dtype)
        Z = jnp.concatenate([Z, penalised], axis=0)
        Y = jnp.concatenate([Y, jnp.zeros((n + m, n), Y.dtype)], axis=0)
    else:
        rank = int(np.linalg.matrix_rank(np.asarray(Z)))
        if rank < d:
            names = "[x_t" + (", u_t" if m else "") + (", 1" if offset else "") + "]"
            raise ValueError(
                f"fit_least_squares(data=...): the regressors {names} have rank "
                f"{rank} < {d} over {Z.shape[0]} transitions, so the estimate is not "
                "unique; use more (or more varied) trajectories and inputs, or "
                "ridge > 0."
            )
    theta, *_ = jnp.linalg.lstsq(Z, Y)
    K = theta[:n].T
    B = theta[n : n + m].T if m else None
    c = theta[n + m] if offset else None
    return LinearSystem(K, B, offset=c, dt=data.dt)
