"""A chain of masses joined by springs and dampers, driven by a force on the last."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._systems.ode import LinearODE, discretize
from .._systems.system import LinearSystem

from ._names import Names


def mass_spring_damper_matrices(
    num_masses: int = 2,
    mass: float = 1.0,
    stiffness: float = 1.0,
    damping: float = 0.2,
) -> tuple[Float[Array, "n n"], Float[Array, "n 1"]]:
    """Continuous-time matrices $(A, B)$ of the chain, $\\dot x = A x + B u$.

    Mass $i$ is tied to mass $i-1$ (mass 1 to a wall) by a spring `stiffness` and a
    damper `damping`. The state is the positions then the velocities,
    `n = 2 * num_masses`; the input is a force on the last mass.
    """
    if num_masses < 1:
        raise ValueError(
            "mass_spring_damper(num_masses=...): need at least 1 mass, "
            f"got {num_masses}."
        )
    N = num_masses
    # Tridiagonal coupling: each spring pulls its two ends together.
    coupling = 2 * jnp.eye(N) - jnp.eye(N, k=1) - jnp.eye(N, k=-1)
    coupling = coupling.at[N - 1, N - 1].set(1.0)
    A = jnp.block(
        [
            [jnp.zeros((N, N)), jnp.eye(N)],
            [-stiffness / mass * coupling, -damping / mass * coupling],
        ]
    )
    B = jnp.zeros((2 * N, 1)).at[2 * N - 1, 0].set(1.0 / mass)
    return A, B


def mass_spring_damper(
    num_masses: int = 2,
    mass: float = 1.0,
    stiffness: float = 1.0,
    damping: float = 0.2,
    dt: float = 0.1,
) -> LinearSystem:
    """The chain sampled every `dt` with the force held constant between samples.

    Exact zero-order hold, `discretize(LinearODE(A, B), dt)`:
    $K = e^{A\\,dt}$, $B_d = \\int_0^{dt} e^{A s} ds\\, B$.

    **Returns:**

    A `LinearSystem` with `n = 2 * num_masses` states and one input.
    """
    A, B = mass_spring_damper_matrices(num_masses, mass, stiffness, damping)
    return discretize(LinearODE(A, B), dt)


def mass_spring_damper_names(num_masses: int = 2, **params) -> Names:
    """Names and units of the chain's channels: positions `p1 (m)` … then
    velocities `v1 (m/s)` …, the force on the last mass (N); output = state."""
    del params
    states = tuple(f"p{i} (m)" for i in range(1, num_masses + 1)) + tuple(
        f"v{i} (m/s)" for i in range(1, num_masses + 1)
    )
    force = f"force on mass {num_masses} (N)"
    return Names(states=states, inputs=(force,), outputs=states)
