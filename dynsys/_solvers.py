"""Optimiser strategies for `train` and `fit`: optax transforms, L-BFGS with its line
search, and Levenberg–Marquardt (optimistix) on a residual vector.

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
import lineax as lx
import optax
import optimistix as optx
from jaxtyping import Array, PyTree


def all_finite(tree: PyTree) -> Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


class AbstractObjective(eqx.Module):
    """What a strategy minimises: `loss(model, batch) -> scalar`; a least-squares
    objective also has `residuals(model, batch) -> (R,)` with `loss = sum(r**2)`."""

    @abc.abstractmethod
    def loss(self, model, batch):
        """The scalar loss of `model` on `batch`."""

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

    optimizer: Any = eqx.field(static=True)
    name: str = eqx.field(static=True)
    rtol: float | None = eqx.field(static=True, default=None)
    patience: int = eqx.field(static=True, default=3)
    warmup: bool = eqx.field(static=True, default=False)

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


class _Residuals(eqx.Module):
    objective: AbstractObjective
    static: Any

    def __call__(self, params, batch):
        return self.objective.residuals(eqx.combine(params, self.static), batch), None


class LevenbergMarquardtStrategy(eqx.Module):
    """Levenberg–Marquardt on the objective's residual vector,
    `optimistix.LevenbergMarquardt(rtol, atol)` (a QR solve of the damped
    Gauss–Newton system with lineax; the Jacobian is materialised).

    Its iterates do not depend on how steps are grouped into dispatches: a chunk
    starts by evaluating the residuals and Jacobian at the current point and reusing
    the trust-region step size carried from the previous chunk, which is the state
    the next step would have had.
    """

    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    name: str = eqx.field(static=True, default="Levenberg–Marquardt (optimistix)")
    # Each chunk starts with one step whose loss is not recorded (see begin).
    warmup: bool = eqx.field(static=True, default=True)

    def _solver(self):
        return optx.LevenbergMarquardt(
            rtol=self.rtol, atol=self.atol, linear_solver=lx.QR()
        )

    def init(self, params):
        dtype = jax.tree.leaves(params)[0].dtype
        return (jnp.array(1.0, dtype), jnp.array(False))

    def begin(self, objective, params, static, carry, batch):
        step_size, terminate = carry
        fn = _Residuals(objective, static)
        solver = self._solver()
        f_struct = jax.eval_shape(lambda: fn(params, batch)[0])
        state = solver.init(fn, params, batch, {}, f_struct, None, frozenset())
        # The carried step size has the parameters' dtype (optimistix starts from a
        # default-precision 1.0, which would promote float32 parameters).
        state = eqx.tree_at(lambda s: s.search_state.step_size, state, step_size)
        # The chunk's first (warm-up) step evaluates the residuals and Jacobian at
        # `params` and accepts them; `terminate` carries a convergence seen at the end
        # of the previous chunk through it.
        return eqx.tree_at(lambda s: s.terminate, state, terminate)

    def end(self, state):
        return (state.search_state.step_size, state.terminate)

    def step(self, objective, params, static, state, batch):
        fn = _Residuals(objective, static)
        residual = state.f_info.residual
        loss = jnp.sum(residual**2)
        finite = jnp.isfinite(loss) & all_finite(residual)
        converged = state.terminate
        new_params, new_state, _ = self._solver().step(
            fn, params, batch, {}, state, frozenset()
        )
        carried = state.first_step & state.terminate
        new_state = eqx.tree_at(
            lambda s: s.terminate, new_state, new_state.terminate | carried
        )
        return loss, finite, new_params, new_state, converged


# The default optimiser: Levenberg–Marquardt while its Jacobian (residuals x
# parameters) has at most this many entries (128 MiB in float64) and the model at
# most PARAMETER_LIMIT trained parameters (each step costs one forward-mode
# derivative per parameter and a QR of the Jacobian), else L-BFGS.
JACOBIAN_LIMIT = 2**24
PARAMETER_LIMIT = 256
DEFAULT_MAX_STEPS = {"lm": 200, "lbfgs": 1000, "optax": 1000}


def tolerances(dtype) -> tuple[float, float]:
    """`(rtol, atol)` of the default optimisers for parameters of `dtype`."""
    return (1e-8, 1e-10) if jnp.dtype(dtype) == jnp.float64 else (1e-5, 1e-7)


def default_strategy(
    num_residuals: int, num_params: int, dtype, rtol=None, atol=None
) -> tuple[Any, str]:
    """The default optimiser for a least-squares objective, and its kind."""
    default_rtol, default_atol = tolerances(dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    small = num_residuals * num_params <= JACOBIAN_LIMIT
    if num_params <= PARAMETER_LIMIT and small:
        return LevenbergMarquardtStrategy(rtol, atol), "lm"
    return lbfgs_strategy(rtol), "lbfgs"


_LBFGS: dict[float, Any] = {}


def lbfgs_strategy(rtol: float) -> OptaxStrategy:
    # One transform object per tolerance, so that the compiled chunk is reused.
    if rtol not in _LBFGS:
        _LBFGS[rtol] = OptaxStrategy(
            optax.lbfgs(), "L-BFGS with zoom line search (optax)", rtol=rtol**0.75
        )
    return _LBFGS[rtol]


def describe(optimizer) -> str:
    """A short name for an optax transform (for `FitResult.optimizer`)."""
    init = getattr(optimizer, "init", None)
    qualname = getattr(init, "__qualname__", "")
    name = qualname.split(".<locals>")[0] if qualname else type(optimizer).__name__
    return f"optax ({name})" if name else "optax"
