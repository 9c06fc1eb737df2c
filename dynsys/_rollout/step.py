"""One closed-loop step, the body of every scan over time: the input applied at
time `t` (feedback plus open-loop input) and the next state."""

from collections.abc import Callable

from jaxtyping import Array, Float, Real

from .._systems.controller import AbstractController
from .._systems.system import AbstractSystem


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
