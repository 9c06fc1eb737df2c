"""The default choice of solver for `fit` (Levenberg–Marquardt for small problems,
L-BFGS for large ones), the resolution of a `LevenbergMarquardt` to a problem's
size and dtype, and `train`'s objective for a user's loss function. The solvers
themselves: `solver_base.py` (the protocol), `levenberg_marquardt.py`,
`optax_solver.py`."""

import dataclasses
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .levenberg_marquardt import LevenbergMarquardt
from .optax_solver import describe as describe, LBFGS, OptaxSolver
from .solver_base import AbstractObjective, AbstractSolver, tolerances as tolerances


class LossFunction(AbstractObjective):
    """A user's `loss_fn(model)` or `loss_fn(model, batch)` (as given to `train`)."""

    loss_fn: Any = eqx.field(static=True)
    with_batch: bool = eqx.field(static=True)

    def loss(self, model, batch):
        return self.loss_fn(model, batch) if self.with_batch else self.loss_fn(model)


# The default optimiser: Levenberg–Marquardt while its Jacobian (residuals x
# parameters) has at most this many entries (128 MiB in float64) and the model at
# most PARAMETER_LIMIT trained parameters (each accepted step costs one forward-mode
# derivative per parameter and a factorisation of J^T J). In float64, larger models
# (up to LARGE_PARAMETER_LIMIT parameters, and at most NORMAL_WORK_LIMIT multiply-adds
# for J^T J per step) still get it, with J^T J accumulated over groups of
# experiments whose Jacobian is within JACOBIAN_LIMIT. Else L-BFGS.
JACOBIAN_LIMIT = 2**24
PARAMETER_LIMIT = 256
LARGE_PARAMETER_LIMIT = 1024
NORMAL_WORK_LIMIT = 2**37
DEFAULT_MAX_STEPS = {"lm": 200, "lbfgs": 1000, "optax": 1000}


def experiment_groups(num_residuals: int, num_params: int, num_experiments: int) -> int:
    """The fewest groups of experiments (a divisor of `num_experiments`) whose
    Jacobian each has at most `JACOBIAN_LIMIT` entries; 0 when even one experiment's
    has more."""
    per_experiment = num_residuals // max(1, num_experiments) * num_params
    for groups in range(1, num_experiments + 1):
        size = num_experiments // groups
        if num_experiments % groups == 0 and size * per_experiment <= JACOBIAN_LIMIT:
            return groups
    return 0


def default_strategy(
    num_residuals: int,
    num_params: int,
    dtype,
    rtol=None,
    atol=None,
    num_experiments: int = 1,
) -> tuple[AbstractSolver, str]:
    """The default solver for a least-squares objective (`num_residuals` in all,
    over `num_experiments` experiments), and its kind."""
    default_rtol, default_atol = tolerances(dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    normal = jnp.dtype(dtype) == jnp.float64
    small = num_residuals * num_params <= JACOBIAN_LIMIT
    lm = LevenbergMarquardt(rtol, atol)
    sizes = (num_residuals, num_params, dtype, num_experiments)
    if num_params <= PARAMETER_LIMIT and small:
        return resolved_levenberg_marquardt(lm, *sizes), "lm"
    groups = experiment_groups(num_residuals, num_params, num_experiments)
    affordable = num_residuals * num_params**2 <= NORMAL_WORK_LIMIT
    if normal and groups and num_params <= LARGE_PARAMETER_LIMIT and affordable:
        return resolved_levenberg_marquardt(lm, *sizes), "lm"
    return LBFGS(rtol=rtol**0.75), "lbfgs"


def resolved_levenberg_marquardt(
    solver: LevenbergMarquardt,
    num_residuals: int,
    num_params: int,
    dtype,
    num_experiments: int = 1,
) -> LevenbergMarquardt:
    """`solver` with what it left to the problem decided, as the default does:
    tolerances `None` the dtype's (`tolerances`); the normal equations in float64
    (else a QR of the Jacobian); experiments in groups (`blocks`) where the whole
    Jacobian would have more than `JACOBIAN_LIMIT` entries (normal equations
    only)."""
    default_rtol, default_atol = tolerances(dtype)
    normal = solver.normal_equations
    if normal is None:
        normal = bool(jnp.dtype(dtype) == jnp.float64)
    blocks = solver.blocks
    if blocks is None:
        blocks = 1
        if normal and num_residuals * num_params > JACOBIAN_LIMIT:
            blocks = experiment_groups(num_residuals, num_params, num_experiments) or 1
    return dataclasses.replace(
        solver,
        rtol=default_rtol if solver.rtol is None else solver.rtol,
        atol=default_atol if solver.atol is None else solver.atol,
        normal_equations=normal,
        blocks=blocks,
    )


def as_solver(solver, call: str) -> AbstractSolver:
    """`solver=` as a solver: an `AbstractSolver` itself, an optax transform
    wrapped in an `OptaxSolver`; a one-line `TypeError` naming `call` otherwise."""
    if isinstance(solver, AbstractSolver):
        return solver
    if callable(getattr(solver, "init", None)) and callable(
        getattr(solver, "update", None)
    ):
        return OptaxSolver(solver)
    raise TypeError(
        f"{call}(solver=...): expected None, a solver (LevenbergMarquardt(), "
        f"LBFGS(), OptaxSolver(transform)) or an optax transform, got "
        f"{type(solver).__name__}."
    )
