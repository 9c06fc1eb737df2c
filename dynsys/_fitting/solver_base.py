"""The two protocols of the training loop: what is minimised (`AbstractObjective`)
and how (`AbstractSolver`: Levenberg–Marquardt, L-BFGS, any optax transform)."""

import abc

import equinox as eqx
import jax.numpy as jnp


def tolerances(dtype) -> tuple[float, float]:
    """`(rtol, atol)` of the default solvers for parameters of `dtype`."""
    # `atol` stays well above the dtype's round-off: a residual of size ~1 changes by
    # about `eps` between two evaluations that differ only in rounding (float32's eps
    # is 1.2e-7), so an `atol` below a few eps is met on some CPUs and XLA
    # optimisation levels and never on others.
    if jnp.dtype(dtype) == jnp.float64:
        return 1e-8, 1e-10
    return 1e-5, 8 * float(jnp.finfo(jnp.float32).eps)


class AbstractSolver(eqx.Module):
    """How `fit` and `train` minimise an objective: a small module (compared by
    value, so that an equal solver built again reuses the compiled chunk of steps)
    whose methods are traced inside one jitted chunk of steps.

    A chunk calls `begin` once, then `step` once per step (plus one extra first
    step that only prepares the state when `warmup` is true; its outputs are not
    recorded), then `end`; `init` gives the state carried between chunks.

    The solvers: `LevenbergMarquardt` (least-squares objectives, `fit` only),
    `LBFGS`, and `OptaxSolver` (any optax transform; `fit(solver=transform)` and
    `train(solver=transform)` wrap a plain transform in one).
    """

    name: eqx.AbstractVar[str]
    warmup: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def init(self, params):
        """The state carried between chunks (arrays only) for the trainable
        `params`."""

    @abc.abstractmethod
    def begin(self, objective, params, static, carry, batch):
        """The state used inside a chunk, from the carried state `carry`."""

    @abc.abstractmethod
    def step(self, objective, params, static, state, batch):
        """One update: `(loss, finite, new_params, new_state, converged)`, where
        `loss` is the loss of `params` (the model before the update), `finite`
        whether it and its derivatives are finite, and `converged` whether the
        solver's tolerances are met (the loop then stops)."""

    @abc.abstractmethod
    def end(self, state):
        """The carried state at the end of a chunk."""

    @property
    @abc.abstractmethod
    def stops_at_tolerance(self) -> bool:
        """Whether the solver stops at its own tolerance (`num_steps` is then a
        cap, not a plan)."""


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

    def num_residuals(self, batch) -> int | None:
        """The length of the residual vector on `batch`, counted without tracing
        the residuals, or `None` where the objective cannot count it (then
        Levenberg–Marquardt traces the residuals once to learn it)."""
        del batch
        return None
