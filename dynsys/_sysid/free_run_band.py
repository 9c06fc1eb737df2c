"""The standard deviation of a linear model's free run (`simulation_band`): from
the derivatives of `compare`'s free run (each experiment's initial state
estimated by least squares for each model) computed on the host in NumPy
(`_fitting/linear_sensitivity.py`, no program for a `LinearSystem`); on data with
states (whose free run `compare` predicts in the states), from one kept program:
the derivatives along a block of parameter directions.

Propagated through `propagate_std`, the free run is traced again on every call
(its function is a new closure each time, so no compiled program is reused
across runs): 0.37 s of a warm `dynsys fit` on the heating record. As a
`kept_jit` function of the model, the trained mask and the data's arrays, a
warm run loads it instead. The directions go in blocks of `JACOBIAN_DIRECTIONS`
through `jax.vmap` inside the program, a block per call, as `jacobian_in_groups`
bounds the memory of the derivatives.
"""

import equinox as eqx
import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from .._compile.jit import device_array, kept_jit
from .._fitting.covariance import direction_groups
from .._fitting.host_blas import one_blas_thread
from .._fitting.linear_sensitivity import closed_form_run, linear_parameters
from .propagate import linearised_std
from .signals import arrays_only, Signals
from .validation import _free_run_or_ahead


@kept_jit
def _free_run_derivatives(model, trained, s: Signals, window: int, directions):
    """The derivatives `(g, N, T, p)` of `compare`'s free run of `model` on `s`
    (each experiment's initial state estimated for each model) along the
    `directions (g, P)` of its trained parameters (`trained`: the bool pytree of
    `ParameterCovariance.trained`, ravelled in its order)."""
    params, static = eqx.partition(model, trained)
    flat, unravel = ravel_pytree(params)

    def free_run(vector):
        system = eqx.combine(unravel(vector), static)
        return _free_run_or_ahead(system, s, None, None, window)[0]

    def derivative(direction):
        return jax.jvp(free_run, (flat,), (direction,))[1]

    return jax.vmap(derivative)(directions)


def free_run_std(covariance, model, s: Signals, window: int) -> np.ndarray:
    """$\\sqrt{\\mathrm{diag}(G \\Sigma G^T)}$, `(N, T, p)`, with $G$ the Jacobian
    of `compare`'s free run of the linear `model` on `s` with respect to
    its trained parameters and $\\Sigma$ `covariance.matrix` (float64)."""
    flat, _ = covariance.split(model)  # checks the parameter count
    linear = None if s.from_states else linear_parameters(model, covariance.trained)
    if linear is not None:  # output data: on the host, no program
        values, derivatives = linear
        with one_blas_thread(), np.errstate(all="ignore"):  # (an unstable model)
            run = closed_form_run(
                values,
                derivatives,
                np.asarray(s.ys, np.float64),
                None if s.us is None else np.asarray(s.us, np.float64),
                np.asarray(s.mask, bool),
                np.ones(s.ys.shape[-1]),
                ridge=False,
            )
            return linearised_std(run.derivative, covariance.matrix)
    count = flat.size
    group, directions = direction_groups(count, flat.dtype)  # one program per block
    arrays = arrays_only(s)
    blocks = [
        np.asarray(
            _free_run_derivatives(
                model,
                covariance.trained,
                arrays,
                window,
                device_array(directions[start : start + group]),
            ),
            np.float64,
        )
        for start in range(0, len(directions), group)
    ]
    jacobian = np.moveaxis(np.concatenate(blocks)[:count], 0, -1)  # (N, T, p, P)
    return linearised_std(jacobian, covariance.matrix)
