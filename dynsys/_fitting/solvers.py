"""Optimiser strategies for `train` and `fit`: optax transforms, L-BFGS with its line
search, and Levenberg–Marquardt on a residual vector (`levenberg_marquardt.py`).

Each strategy is a small `eqx.Module` (hashable by value, so the compiled training
chunk is reused across calls) with four parts, all traced inside one jitted chunk of
steps:

- `init(params)`: the state carried between dispatches (arrays only);
- `begin(objective, params, static, carry, batch)`: the state used inside a chunk;
- `step(objective, params, static, state, batch)`: one update, returning
    `(loss, finite, new_params, new_state, converged)`, where `loss` is the loss of
    `params` (the model before the update);
- `end(state)`: back to the carried state;
- `warmup`: whether each chunk starts with one extra step that only prepares the
    state (its outputs are not recorded).
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .levenberg_marquardt import all_finite, LevenbergMarquardtStrategy
from .transform_key import by_value, ByValue


class AbstractObjective(eqx.Module):
    """What a strategy minimises: `loss(model, batch) -> scalar`; a least-squares
    objective also has `residuals(model, batch) -> (R,)` with `loss = sum(r**2)`."""

    @abc.abstractmethod
    def loss(self, model, batch):
        """The scalar loss of `model` on `batch`."""

    @property
    def gauge_free(self) -> bool:
        """Whether the loss is unchanged by a change of a linear model's state basis
        (its initial states are estimated from the data), so that a step need not
        move along that family (see `gauge.py`)."""
        return False

    def complete(self, params, static, batch):
        """`params` with the parts the objective determines itself (given the
        others) set to their optimum: a least-squares objective that eliminates
        some parameters (`FitObjective.separable`) says which; others return
        `params` itself. Levenberg–Marquardt calls it on every trial point before
        evaluating it."""
        del static, batch
        return params

    def group_share(self, group_batch, batch):
        """`s` with `residuals(model, batch)` restricted to the experiments of
        `group_batch` equal to `s * residuals(model, group_batch)`: a
        least-squares objective that normalises by its batch's size says by how
        much (1 when it does not normalise)."""
        del group_batch, batch
        return 1.0

    def residuals(self, model, batch):
        """The residual vector `(R,)`; only least-squares objectives have one (the
        default optimiser asks for it only of those)."""
        raise TypeError(
            f"{type(self).__name__} is not a least-squares objective: it has no "
            "residuals."
        )


class LossFunction(AbstractObjective):
    """A user's `loss_fn(model)` or `loss_fn(model, batch)` (as given to `train`)."""

    loss_fn: Any = eqx.field(static=True)
    with_batch: bool = eqx.field(static=True)

    def loss(self, model, batch):
        return self.loss_fn(model, batch) if self.with_batch else self.loss_fn(model)


def _has_line_search_value(state) -> bool:
    """Whether an optax state stores the objective value (L-BFGS's line search)."""
    paths = jax.tree_util.tree_flatten_with_path(state)[0]
    return any(
        getattr(key, "name", None) == "value" for path, _ in paths for key in path
    )


class OptaxStrategy(eqx.Module):
    """Any optax transform. Transforms with a line search (`optax.lbfgs`) get the
    extra `value`, `grad`, `value_fn` arguments, and the value and gradient the line
    search stored are reused (`optax.value_and_grad_from_state`).

    With `rtol`, the run has converged when the loss decreased by less than
    `rtol * |loss|` in `patience` consecutive steps.
    """

    # Compared by value (`transform_key`): an equal transform built again reuses the
    # compiled chunk.
    transform: ByValue = eqx.field(static=True, converter=by_value)
    name: str = eqx.field(static=True)
    rtol: float | None = eqx.field(static=True, default=None)
    patience: int = eqx.field(static=True, default=3)
    warmup: bool = eqx.field(static=True, default=False)

    @property
    def optimizer(self):
        """The optax transform."""
        return self.transform.transform

    def init(self, params):
        state = self.optimizer.init(params)
        if self.rtol is None:
            return state
        dtype = jax.tree.leaves(params)[0].dtype
        return (state, jnp.array(jnp.inf, dtype), jnp.array(0))

    def begin(self, objective, params, static, carry, batch):
        del objective, params, static, batch
        return carry

    def end(self, state):
        return state

    def step(self, objective, params, static, state, batch):
        import optax

        opt_state = state if self.rtol is None else state[0]

        def value_fn(p):
            return objective.loss(eqx.combine(p, static), batch)

        if _has_line_search_value(opt_state):
            loss, grads = optax.value_and_grad_from_state(value_fn)(
                params, state=opt_state
            )
        else:
            loss, grads = jax.value_and_grad(value_fn)(params)
        finite = jnp.isfinite(loss) & all_finite(grads)
        if isinstance(self.optimizer, optax.GradientTransformationExtraArgs):
            updates, new_opt_state = self.optimizer.update(
                grads, opt_state, params, value=loss, grad=grads, value_fn=value_fn
            )
        else:
            updates, new_opt_state = self.optimizer.update(grads, opt_state, params)
        new_params = eqx.apply_updates(params, updates)
        if self.rtol is None:
            return loss, finite, new_params, new_opt_state, jnp.array(False)
        _, previous, count = state
        small = previous - loss <= self.rtol * jnp.abs(loss)
        count = jnp.where(small, count + 1, 0)
        converged = count >= self.patience
        return loss, finite, new_params, (new_opt_state, loss, count), converged


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


def tolerances(dtype) -> tuple[float, float]:
    """`(rtol, atol)` of the default optimisers for parameters of `dtype`."""
    return (1e-8, 1e-10) if jnp.dtype(dtype) == jnp.float64 else (1e-5, 1e-7)


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
) -> tuple[Any, str]:
    """The default optimiser for a least-squares objective (`num_residuals` in all,
    over `num_experiments` experiments), and its kind."""
    default_rtol, default_atol = tolerances(dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    normal = jnp.dtype(dtype) == jnp.float64
    small = num_residuals * num_params <= JACOBIAN_LIMIT
    if num_params <= PARAMETER_LIMIT and small:
        return LevenbergMarquardtStrategy(rtol, atol, normal_equations=normal), "lm"
    groups = experiment_groups(num_residuals, num_params, num_experiments)
    affordable = num_residuals * num_params**2 <= NORMAL_WORK_LIMIT
    if normal and groups and num_params <= LARGE_PARAMETER_LIMIT and affordable:
        return LevenbergMarquardtStrategy(rtol, atol, blocks=groups), "lm"
    return lbfgs_strategy(rtol), "lbfgs"


def lbfgs_strategy(rtol: float) -> OptaxStrategy:
    import optax

    return OptaxStrategy(
        optax.lbfgs(), "L-BFGS with zoom line search (optax)", rtol=rtol**0.75
    )


def describe(optimizer) -> str:
    """A short name for an optax transform (for `FitResult.optimizer`)."""
    init = getattr(optimizer, "init", None)
    qualname = getattr(init, "__qualname__", "")
    name = qualname.split(".<locals>")[0] if qualname else type(optimizer).__name__
    return f"optax ({name})" if name else "optax"
