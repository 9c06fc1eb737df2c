"""The Lotka–Volterra predator–prey model."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._systems.ode import AbstractODE, Sampled

from ._names import Names


class LotkaVolterra(AbstractODE):
    """Predator–prey dynamics, a nonlinear ODE without input.

    State $(x, y)$: prey and predator populations (keep them positive):

    $\\dot x = \\alpha x - \\beta x y$, $\\quad \\dot y = \\delta x y - \\gamma y$.

    Orbits are closed around the equilibrium $(\\gamma/\\delta, \\alpha/\\beta)$ and
    conserve $V = \\delta x - \\gamma \\ln x + \\beta y - \\alpha \\ln y$.

    **Arguments:**

    - `alpha`: prey growth rate; `beta`: predation rate; `gamma`: predator death
        rate; `delta`: predator growth per prey eaten (arrays, so they can be fitted).
    """

    alpha: Float[Array, ""]
    beta: Float[Array, ""]
    gamma: Float[Array, ""]
    delta: Float[Array, ""]
    state_size: int = eqx.field(static=True, default=2, init=False)
    input_size: int = eqx.field(static=True, default=0, init=False)

    def __init__(
        self,
        alpha: ArrayLike = 1.5,
        beta: ArrayLike = 1.0,
        gamma: ArrayLike = 3.0,
        delta: ArrayLike = 1.0,
    ):
        self.alpha = jnp.asarray(alpha, dtype=float)
        self.beta = jnp.asarray(beta, dtype=float)
        self.gamma = jnp.asarray(gamma, dtype=float)
        self.delta = jnp.asarray(delta, dtype=float)

    def vector_field(self, t, x, u):
        del t, u
        prey, predator = x[0], x[1]
        return jnp.stack(
            [
                self.alpha * prey - self.beta * prey * predator,
                self.delta * prey * predator - self.gamma * predator,
            ]
        )


def lotka_volterra(
    alpha: float = 1.5,
    beta: float = 1.0,
    gamma: float = 3.0,
    delta: float = 1.0,
    dt: float = 0.1,
) -> Sampled:
    """The `LotkaVolterra` model sampled every `dt`."""
    return Sampled(LotkaVolterra(alpha, beta, gamma, delta), dt)


def lotka_volterra_names(**params) -> Names:
    """Names of the Lotka–Volterra channels: prey and predator populations (in
    one arbitrary population unit); no input; the output is the state."""
    del params
    states = ("prey (population)", "predator (population)")
    return Names(states=states, inputs=(), outputs=states)
