"""A stable start from an unstable subspace estimate: the unstable eigenvalues of
`K` reflected into the unit disc, then `B`, `D` and the output level estimated
again by least squares for the new `K`."""

import jax.numpy as jnp
import numpy as np

from .._compile.jit import device_array
from .._systems.system import LinearSystem
from .input_matrices import input_matrices
from .operating_point import deviations
from .signals import check_model_matches, signals


def reflected(K, radius: float = 0.999):
    """`K` with each eigenvalue $\\lambda$ of modulus at least 1 replaced by
    `radius` $/ \\bar\\lambda$ (its reflection in the unit circle, pulled just
    inside), the eigenvectors kept; real when `K` is (conjugate pairs stay pairs).
    """
    K = np.asarray(K, dtype=np.float64)
    values, vectors = np.linalg.eig(K)
    outside = np.abs(values) >= radius
    values = np.where(outside, radius / np.conj(np.where(outside, values, 1.0)), values)
    rebuilt = vectors @ np.diag(values) @ np.linalg.inv(vectors)
    return rebuilt.real


def stabilised_start(model: LinearSystem, data) -> LinearSystem:
    """`model` with its unstable eigenvalues reflected into the unit disc
    (`reflected`) and `B`, `D` and the output level re-estimated on `data` (each
    experiment's initial state estimated jointly, in closed form); `C`, the input
    level and `dt` are kept.

    The least squares for `B`, `D` and the initial states is well conditioned
    only for a stable `K`: with an unstable one the initial state's regressors grow
    like $K^t$ and squeeze `B` towards zero (a model that ignores its input).

    **Arguments:**

    - `model`: a `LinearSystem` with outputs (`C`), e.g. from `fit_subspace`.
    - `data`: the `Dataset` it was estimated from (outputs `ys`).

    **Returns:**

    A `LinearSystem` whose `K` has spectral radius below 1.

    **Raises:**

    `ValueError` when the model does not match the data or the data has no
    outputs.
    """
    call = "stabilised_start"
    s = signals(data, call)
    check_model_matches(call, model, s)
    if s.from_states or model.C is None:
        raise ValueError(
            f"{call}(data=...): needs input-output data and a model with C."
        )
    dtype = model.K.dtype
    K = device_array(reflected(model.K), dtype)
    u_bar, y_bar = model.input_level, model.output_level
    level = y_bar is not None
    # Zeros and the level's sum made on the host: an eager `jnp` operation compiles
    # a program of its own (a warm run must trace nothing).
    if level or u_bar is not None:  # least squares on the deviations
        zero_u = None if s.us is None else np.zeros(s.us.shape[-1], dtype)
        zero_y = np.zeros(s.ys.shape[-1], dtype)
        s = deviations(
            s, zero_u if u_bar is None else u_bar, zero_y if y_bar is None else y_bar
        )
    B, D, c = input_matrices(K, model.C, s.ys, s.us, s.mask, model.D is not None, level)
    output_level = device_array(np.asarray(y_bar) + np.asarray(c)) if level else None
    return LinearSystem(
        K,
        B,
        model.C,
        D,
        model.offset,
        dt=model.dt,
        input_level=u_bar,
        output_level=output_level,
    )
