"""A damped pendulum with a torque input, as a continuous-time ODE."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._systems.ode import AbstractODE, Sampled

from .pendulum import angular_acceleration


class PendulumODE(AbstractODE):
    """A damped, torque-driven pendulum in continuous time.

    State $x = (\\theta, \\omega)$ (angle from hanging down, in rad, and angular
    velocity, in rad/s); input the torque $u$ (N m):

    $\\dot\\theta = \\omega$, $\\quad \\dot\\omega = -\\tfrac{g}{l}\\sin\\theta
    - c\\,\\omega + \\tfrac{u}{m l^2}$.

    The physical parameters are arrays, so they can be fitted. Sample it with
    `Sampled(PendulumODE(), dt)` or use `pendulum_ode(...)`.

    **Arguments:**

    - `gravity`, `length`, `mass`, `damping`: $g$ (m/s²), $l$ (m), $m$ (kg),
        $c$ (1/s).
    """

    gravity: Float[Array, ""]
    length: Float[Array, ""]
    mass: Float[Array, ""]
    damping: Float[Array, ""]
    state_size: int = eqx.field(static=True, default=2, init=False)
    input_size: int = eqx.field(static=True, default=1, init=False)

    def __init__(
        self,
        gravity: ArrayLike = 9.81,
        length: ArrayLike = 1.0,
        mass: ArrayLike = 1.0,
        damping: ArrayLike = 0.1,
    ):
        self.gravity = jnp.asarray(gravity, dtype=float)
        self.length = jnp.asarray(length, dtype=float)
        self.mass = jnp.asarray(mass, dtype=float)
        self.damping = jnp.asarray(damping, dtype=float)

    def vector_field(self, t, x, u):
        del t
        theta, omega = x[0], x[1]
        torque = 0.0 if u is None else u[0]
        acceleration = angular_acceleration(
            self.gravity, self.length, self.mass, self.damping, theta, omega, torque
        )
        return jnp.stack([omega, acceleration])


def pendulum_ode(
    gravity: float = 9.81,
    length: float = 1.0,
    mass: float = 1.0,
    damping: float = 0.1,
    dt: float = 0.05,
) -> Sampled:
    """The `PendulumODE` sampled every `dt` (torque held between samples)."""
    return Sampled(PendulumODE(gravity, length, mass, damping), dt)
