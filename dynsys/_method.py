"""Rollout methods: how a single trajectory is computed."""

import abc
from collections.abc import Callable

import equinox as eqx
from jaxtyping import Array, Float, Real

from ._adjoint import AbstractAdjoint
from ._controller import AbstractController
from ._system import AbstractSystem


StepOutputs = tuple[
    Float[Array, "T n"], Float[Array, "T m"] | None, Float[Array, "T p"]
]


def closed_loop_input(
    controller: AbstractController | None,
    t: Real[Array, ""],
    x: Float[Array, " n"],
    u_open: Float[Array, " m"] | None,
) -> Float[Array, " m"] | None:
    """The input applied at time `t`: feedback plus open-loop input, either optional."""
    if controller is None:
        return u_open
    u = controller(t, x)
    return u if u_open is None else u + u_open


def make_step(
    system: AbstractSystem, controller: AbstractController | None
) -> Callable:
    """The scan body of one closed-loop step: `(x_t, (t, u_open)) -> (x_{t+1}, rec)`.

    `rec = (x_{t+1}, u_t, y_t)`; `x_{t+1}` is cast to the dtype of `x_t` so that the
    carry's dtype is stable.
    """

    def step(x, t_and_input):
        t, u_open = t_and_input
        u = closed_loop_input(controller, t, x, u_open)
        y = system.output(t, x, u)
        x_next = system.step(t, x, u).astype(x.dtype)
        return x_next, (x_next, u, y)

    return step


class AbstractMethod(eqx.Module):
    """How `rollout` computes one trajectory (batches are vmapped over it)."""

    @abc.abstractmethod
    def check(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        has_inputs: bool,
    ) -> None:
        """Raise `ValueError` if this method cannot roll out this case."""

    @abc.abstractmethod
    def rollout(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        x0: Float[Array, " n"],
        ts: Real[Array, " T+1"],
        inputs: Float[Array, "T m"] | None,
        adjoint: AbstractAdjoint,
    ) -> StepOutputs:
        """Return `(x_1 … x_T, u_0 … u_{T-1}, y_0 … y_{T-1})` for one trajectory."""


class Sequential(AbstractMethod):
    """One `jax.lax.scan` over time: valid for every system and controller.

    The scan writes each step's state, input and output into arrays allocated once;
    compile time does not depend on the number of steps.
    """

    def check(self, system, controller, has_inputs):
        del system, controller, has_inputs

    def rollout(self, system, controller, x0, ts, inputs, adjoint):
        step = make_step(system, controller)
        _, (xs, us, ys) = adjoint.scan(step, x0, (ts[:-1], inputs))
        return xs, us, ys


def default_method(
    system: AbstractSystem, controller: AbstractController | None, has_inputs: bool
) -> AbstractMethod:
    """The method `rollout` uses when none is given."""
    del system, controller, has_inputs
    return Sequential()
