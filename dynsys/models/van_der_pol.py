"""The van der Pol oscillator, with a forcing input."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._systems.ode import AbstractODE, Sampled

from ._names import Names


class VanDerPol(AbstractODE):
    """The forced van der Pol oscillator, a nonlinear ODE with a stable limit cycle.

    $\\ddot x - \\mu (1 - x^2)\\dot x + x = u$, as the first-order system with state
    $(x, \\dot x)$:

    $\\dot x_1 = x_2$, $\\quad \\dot x_2 = \\mu (1 - x_1^2) x_2 - x_1 + u$.

    **Arguments:**

    - `mu`: the nonlinear damping $\\mu \\ge 0$ (an array, so it can be fitted);
        $\\mu = 0$ is the harmonic oscillator, large $\\mu$ is stiff (relaxation
        oscillations).
    """

    mu: Float[Array, ""]
    state_size: int = eqx.field(static=True, default=2, init=False)
    input_size: int = eqx.field(static=True, default=1, init=False)

    def __init__(self, mu: ArrayLike = 1.0):
        self.mu = jnp.asarray(mu, dtype=float)

    def vector_field(self, t, x, u):
        del t
        forcing = 0.0 if u is None else u[0]
        return jnp.stack([x[1], self.mu * (1 - x[0] ** 2) * x[1] - x[0] + forcing])


def van_der_pol(mu: float = 1.0, dt: float = 0.1) -> Sampled:
    """The `VanDerPol` oscillator sampled every `dt` (forcing held between samples)."""
    return Sampled(VanDerPol(mu), dt)


def van_der_pol_names(**params) -> Names:
    """Names of the van der Pol channels. The oscillator is dimensionless, so
    its position is in arbitrary units (a.u.) and time in s (as sampled):
    x (a.u.), dx/dt (a.u./s), forcing u (a.u./s²); the output is the state."""
    del params
    states = ("x (a.u.)", "dx/dt (a.u./s)")
    return Names(states=states, inputs=("forcing u (a.u./s²)",), outputs=states)
