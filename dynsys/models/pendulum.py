"""A damped pendulum with a torque input, sampled by semi-implicit Euler."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._systems.system import AbstractSystem

from ._names import Names


def angular_acceleration(gravity, length, mass, damping, theta, omega, torque):
    """The pendulum's $\\dot\\omega = -\\tfrac{g}{l}\\sin\\theta - c\\,\\omega
    + \\tfrac{u}{m l^2}$, shared by the discrete `Pendulum` and `PendulumODE`."""
    return (
        -gravity / length * jnp.sin(theta)
        - damping * omega
        + torque / (mass * length**2)
    )


class Pendulum(AbstractSystem):
    """A damped, torque-driven pendulum as a nonlinear difference system.

    State $x = (\\theta, \\omega)$ (angle from hanging down, in rad, and angular
    velocity, in rad/s); input the torque $u$ (N m). One step of length `dt`:

    $\\omega_{t+1} = \\omega_t + dt\\,(-\\tfrac{g}{l}\\sin\\theta_t - c\\,\\omega_t
    + \\tfrac{u_t}{m l^2})$, $\\quad \\theta_{t+1} = \\theta_t + dt\\,\\omega_{t+1}$.

    The physical parameters are arrays, so they can be fitted.

    **Arguments:**

    - `gravity`, `length`, `mass`, `damping`: $g$ (m/s²), $l$ (m), $m$ (kg),
        $c$ (1/s).
    - `dt`: the step (s).
    """

    gravity: Float[Array, ""]
    length: Float[Array, ""]
    mass: Float[Array, ""]
    damping: Float[Array, ""]
    dt: float = eqx.field(static=True)
    state_size: int = eqx.field(static=True, default=2, init=False)
    input_size: int = eqx.field(static=True, default=1, init=False)

    def __init__(
        self,
        gravity: ArrayLike = 9.81,
        length: ArrayLike = 1.0,
        mass: ArrayLike = 1.0,
        damping: ArrayLike = 0.1,
        dt: float = 0.05,
    ):
        self.gravity = jnp.asarray(gravity, dtype=float)
        self.length = jnp.asarray(length, dtype=float)
        self.mass = jnp.asarray(mass, dtype=float)
        self.damping = jnp.asarray(damping, dtype=float)
        self.dt = float(dt)

    def __check_init__(self):
        if not self.dt > 0:
            raise ValueError(f"Pendulum(dt=...): dt must be positive, got {self.dt}.")

    def step(self, t, x, u):
        del t
        theta, omega = x[0], x[1]
        torque = 0.0 if u is None else u[0]
        acceleration = angular_acceleration(
            self.gravity, self.length, self.mass, self.damping, theta, omega, torque
        )
        omega_next = omega + self.dt * acceleration
        theta_next = theta + self.dt * omega_next
        return jnp.stack([theta_next, omega_next])


def pendulum_names(**params) -> Names:
    """Names and units of the pendulum's channels (the parameters do not change
    them): θ (rad), ω (rad/s), torque (N m); the output is the state."""
    del params
    states = ("θ (rad)", "ω (rad/s)")
    return Names(states=states, inputs=("torque (N m)",), outputs=states)
