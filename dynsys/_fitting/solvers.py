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
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import optimistix as optx
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, PyTree

from .transform_key import by_value, ByValue


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


class _FactoredDampedNewtonState(eqx.Module):
    template: PyTree  # zeros shaped like the parameters (their structure)
    vectors: Array  # (P, P): V, the eigenvectors of J^T J
    curvatures: Array  # (P,): e, its eigenvalues
    gradient: Array  # (P,): V^T J^T r, the gradient in that basis


class FactoredDampedNewtonDescent(optx.AbstractDescent):
    """The damped Gauss–Newton (Levenberg–Marquardt) step, with the Jacobian built
    and factorised once per accepted point rather than once per trial step.

    At an accepted point the Jacobian `J (R, P)` is materialised (one forward-mode
    derivative per parameter) and reduced to `J^T J = V diag(e) V^T` and
    `w = V^T J^T r`; every trial step of the trust region then costs `O(P^2)`:
    $\\delta(\\lambda) = -V\\,(w / (e + \\lambda))$, the solution of
    $\\min \\lVert J\\delta + r \\rVert^2 + \\lambda \\lVert \\delta \\rVert^2$.

    `normal_equations=True` forms `J^T J` by one matrix product (cheapest; its
    condition number is that of `J` squared, fine in float64). Otherwise `J^T J` comes
    from a QR of `[J | r]` (its `R` factor only) and an SVD of `R`, which keeps the
    accuracy of a QR solve (used for float32).
    """

    normal_equations: bool = eqx.field(static=True)

    def init(self, y, f_info_struct):
        del f_info_struct
        flat, _ = ravel_pytree(y)
        size = flat.size
        return _FactoredDampedNewtonState(
            jax.tree.map(jnp.zeros_like, y),
            jnp.zeros((size, size), flat.dtype),
            jnp.zeros(size, flat.dtype),
            jnp.zeros(size, flat.dtype),
        )

    def query(self, y, f_info, state):
        flat, unravel = ravel_pytree(y)
        residual, _ = ravel_pytree(f_info.residual)
        num_params = flat.size

        def column(direction):
            return ravel_pytree(f_info.jac.mv(unravel(direction)))[0]

        basis = jnp.eye(num_params, dtype=flat.dtype)
        if self.normal_equations or residual.size <= num_params:
            # J^T (P, R): J^T J as the product of J^T with its transpose is about
            # twice as fast on a CPU as with the first operand transposed.
            jac_t = jax.vmap(column)(basis)
            curvatures, vectors = jnp.linalg.eigh(jac_t @ jac_t.T)
            gradient = vectors.T @ (jac_t @ residual)
        else:
            jac = jax.vmap(column, out_axes=1)(basis)
            r_factor = jnp.linalg.qr(
                jnp.concatenate([jac, residual[:, None]], axis=1), mode="r"
            )
            left, singular, right_t = jnp.linalg.svd(r_factor[:num_params, :num_params])
            vectors = right_t.T
            curvatures = singular**2
            gradient = singular * (left.T @ r_factor[:num_params, num_params])
        curvatures = jnp.maximum(curvatures, 0.0)
        return _FactoredDampedNewtonState(state.template, vectors, curvatures, gradient)

    def step(self, step_size, state):
        # lambda = 1 / step_size, as in optimistix's own damped Newton descent (a
        # step size below eps means no step).
        usable = step_size > jnp.finfo(step_size.dtype).eps
        damping = jnp.where(
            usable,
            1 / jnp.where(usable, step_size, 1),
            jnp.finfo(step_size.dtype).max,
        )
        delta = state.vectors @ (state.gradient / (state.curvatures + damping))
        _, unravel = ravel_pytree(state.template)
        return jax.tree.map(jnp.negative, unravel(delta)), optx.RESULTS.successful


class LevenbergMarquardtStrategy(eqx.Module):
    """Levenberg–Marquardt on the objective's residual vector:
    `optimistix.LevenbergMarquardt(rtol, atol)`'s trust region and stopping rule,
    with `FactoredDampedNewtonDescent` as its descent (the Jacobian is materialised
    and factorised once per accepted step; normal equations in float64, a QR in
    float32).

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
    normal_equations: bool = eqx.field(static=True, default=True)

    def _solver(self):
        solver = optx.LevenbergMarquardt(rtol=self.rtol, atol=self.atol)
        descent = FactoredDampedNewtonDescent(self.normal_equations)
        return eqx.tree_at(lambda s: s.descent, solver, descent)

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
        settled = self._settled(new_state)
        new_state = eqx.tree_at(
            lambda s: s.terminate, new_state, new_state.terminate | carried | settled
        )
        return loss, finite, new_params, new_state, converged

    def _settled(self, state):
        """Whether the Gauss–Newton model at the last accepted point predicts a
        further decrease of the loss that the loss cannot resolve: below `rtol**2`
        of it, or below its round-off (`sqrt(R) * eps` of it for `R` residuals).

        optimistix stops when an accepted step changes the parameters and residuals
        by less than its tolerances. Where Gauss–Newton converges only linearly (a
        large residual at the optimum, as with noisy data), the last steps change the
        loss by less than its round-off: the trust region rejects them one after
        another until a step small enough for that test is accepted by chance, which
        takes several extra steps, more or fewer as the round-off changes.
        """
        descent = state.descent_state
        eps = jnp.finfo(descent.curvatures.dtype).eps
        floor = eps * jnp.max(descent.curvatures)
        remaining = jnp.sum(descent.gradient**2 / (descent.curvatures + floor))
        residual = state.f_info.residual
        resolution = self.rtol**2 + math.sqrt(residual.size) * eps
        return remaining <= resolution * jnp.sum(residual**2)


# The default optimiser: Levenberg–Marquardt while its Jacobian (residuals x
# parameters) has at most this many entries (128 MiB in float64) and the model at
# most PARAMETER_LIMIT trained parameters (each accepted step costs one forward-mode
# derivative per parameter and a factorisation of J^T J), else L-BFGS.
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
        normal = jnp.dtype(dtype) == jnp.float64
        return LevenbergMarquardtStrategy(rtol, atol, normal_equations=normal), "lm"
    return lbfgs_strategy(rtol), "lbfgs"


def lbfgs_strategy(rtol: float) -> OptaxStrategy:
    return OptaxStrategy(
        optax.lbfgs(), "L-BFGS with zoom line search (optax)", rtol=rtol**0.75
    )


def describe(optimizer) -> str:
    """A short name for an optax transform (for `FitResult.optimizer`)."""
    init = getattr(optimizer, "init", None)
    qualname = getattr(init, "__qualname__", "")
    name = qualname.split(".<locals>")[0] if qualname else type(optimizer).__name__
    return f"optax ({name})" if name else "optax"
