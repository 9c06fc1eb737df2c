"""Solvers built on optax: any optax transform (`OptaxSolver`), and L-BFGS with its
zoom line search and a convergence test (`LBFGS`, what `fit` picks for problems too
large for Levenberg–Marquardt)."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .levenberg_marquardt import all_finite
from .solver_base import AbstractSolver, tolerances
from .transform_key import by_value, ByValue


def _has_line_search_value(state) -> bool:
    """Whether an optax state stores the objective value (L-BFGS's line search)."""
    paths = jax.tree_util.tree_flatten_with_path(state)[0]
    return any(
        getattr(key, "name", None) == "value" for path, _ in paths for key in path
    )


def describe(transform) -> str:
    """A short name for an optax transform (for `FitResult.optimizer`)."""
    init = getattr(transform, "init", None)
    qualname = getattr(init, "__qualname__", "")
    name = qualname.split(".<locals>")[0] if qualname else type(transform).__name__
    return f"optax ({name})" if name else "optax"


class OptaxSolver(AbstractSolver):
    """Any optax transform as a solver of `fit`, `train` or `fit_neural`.

    Transforms with a line search (`optax.lbfgs()`) get the extra `value`, `grad`
    and `value_fn` arguments, and the value and gradient the line search stored
    are reused. A plain transform passed as `solver=` is wrapped in one of these.

    **Arguments:**

    - `transform`: an `optax.GradientTransformation` (e.g. `optax.adam(1e-3)`).
        Compared by what it computes, so that an equal transform built again
        reuses the compiled steps.
    - `name`: its name in `FitResult.optimizer` (default: from the transform).
    - `rtol`: with a value, the run has converged when the loss decreased by less
        than `rtol * |loss|` in `patience` consecutive steps; `None` (default):
        it runs all `num_steps`.
    - `patience`: see `rtol`.

    **Example:**

    ```python
    solver = dynsys.OptaxSolver(optax.adam(1e-3))
    ```
    """

    transform: ByValue = eqx.field(static=True)
    name: str = eqx.field(static=True)
    rtol: float | None = eqx.field(static=True)
    patience: int = eqx.field(static=True)
    warmup: bool = eqx.field(static=True)

    def __init__(
        self,
        transform,
        name: str | None = None,
        rtol: float | None = None,
        patience: int = 3,
        warmup: bool = False,
    ):
        self.transform = by_value(transform)
        self.name = describe(self.transform.transform) if name is None else name
        self.rtol = rtol
        self.patience = patience
        self.warmup = warmup

    def __check_init__(self):
        transform = self.transform.transform
        init = getattr(transform, "init", None)
        if not (callable(init) and callable(getattr(transform, "update", None))):
            raise TypeError(
                "OptaxSolver(transform=...): expected an optax "
                f"GradientTransformation, got {type(transform).__name__}."
            )

    @property
    def optimizer(self):
        """The optax transform."""
        return self.transform.transform

    @property
    def stops_at_tolerance(self) -> bool:
        return self.rtol is not None

    def init(self, params):
        return _init(self.optimizer, self.rtol, params)

    def begin(self, objective, params, static, carry, batch):
        del objective, params, static, batch
        return carry

    def end(self, state):
        return state

    def step(self, objective, params, static, state, batch):
        solver = (self.optimizer, self.rtol, self.patience)
        return _step(*solver, objective, params, static, state, batch)


class LBFGS(AbstractSolver):
    """L-BFGS with optax's zoom line search, and a convergence test: what
    `fit(solver=None)` picks for problems too large for Levenberg–Marquardt (and
    with `adjoint=LinearAdjoint()`). Needs no learning rate.

    **Arguments:**

    - `rtol`: the run has converged when the loss decreased by less than `rtol *
        |loss|` in `patience` consecutive steps; `None` (default): the parameters'
        dtype's default, `1e-8 ** 0.75` in float64, `1e-5 ** 0.75` in float32.
    - `patience`: see `rtol`.
    - `memory_size`: the number of past steps whose curvature it keeps.

    **Example:**

    ```python
    result = dynsys.fit(model, data, solver=dynsys.LBFGS())
    ```
    """

    rtol: float | None = eqx.field(static=True, default=None)
    patience: int = eqx.field(static=True, default=3)
    memory_size: int = eqx.field(static=True, default=10)
    name: str = eqx.field(static=True, default="L-BFGS with zoom line search (optax)")
    warmup: bool = eqx.field(static=True, default=False)

    @property
    def optimizer(self):
        """The optax transform, `optax.lbfgs`."""
        import optax

        return optax.lbfgs(memory_size=self.memory_size)

    @property
    def stops_at_tolerance(self) -> bool:
        return True

    def _rtol(self, params) -> float:
        if self.rtol is not None:
            return self.rtol
        return tolerances(jax.tree.leaves(params)[0].dtype)[0] ** 0.75

    def init(self, params):
        return _init(self.optimizer, self._rtol(params), params)

    def begin(self, objective, params, static, carry, batch):
        del objective, params, static, batch
        return carry

    def end(self, state):
        return state

    def step(self, objective, params, static, state, batch):
        solver = (self.optimizer, self._rtol(params), self.patience)
        return _step(*solver, objective, params, static, state, batch)


def _init(transform, rtol, params):
    """The carried state of an optax transform, with the convergence test's loss
    and count where `rtol` is given."""
    state = transform.init(params)
    if rtol is None:
        return state
    dtype = jax.tree.leaves(params)[0].dtype
    return (state, jnp.array(jnp.inf, dtype), jnp.array(0))


def _step(transform, rtol, patience, objective, params, static, state, batch):
    """One update of an optax transform (`AbstractSolver.step`)."""
    import optax

    opt_state = state if rtol is None else state[0]

    def value_fn(p):
        return objective.loss(eqx.combine(p, static), batch)

    if _has_line_search_value(opt_state):
        loss, grads = optax.value_and_grad_from_state(value_fn)(params, state=opt_state)
    else:
        loss, grads = jax.value_and_grad(value_fn)(params)
    finite = jnp.isfinite(loss) & all_finite(grads)
    if isinstance(transform, optax.GradientTransformationExtraArgs):
        updates, new_opt_state = transform.update(
            grads, opt_state, params, value=loss, grad=grads, value_fn=value_fn
        )
    else:
        updates, new_opt_state = transform.update(grads, opt_state, params)
    new_params = eqx.apply_updates(params, updates)
    if rtol is None:
        return loss, finite, new_params, new_opt_state, jnp.array(False)
    _, previous, count = state
    small = previous - loss <= rtol * jnp.abs(loss)
    count = jnp.where(small, count + 1, 0)
    converged = count >= patience
    return loss, finite, new_params, (new_opt_state, loss, count), converged
