"""Set-point tracking of outputs through an observer: a controller that sees the
observer's estimate and the set point, the steady state a linear model holds at a
set point, and the LQG tracking controller in the same form as a trained one."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._custom_types import State, Time
from .._systems.controller import AbstractController, LinearFeedback
from .lqg import _linear, lqr_gain


class SetPointFeedback(AbstractController):
    """A controller of an `ObservedPlant` (state $z = (x, \\hat x)$) that tracks a
    schedule of output set points: $u_t = \\bar u + c(t, [\\hat x_t; r_t])$, with
    $c$ the wrapped controller, $\\bar u$ the operating-point input and $r_t$ the
    set point at step $t$ as a deviation from the operating-point output.

    $r_t$ is row $k$ of `references` at step $k$ (the last row after the end),
    $k = t$ for a loop without a sample time, $k = t / dt$ with one. `references`
    is held constant under differentiation, so that training changes only $c$.

    **Arguments:**

    - `controller`: $c$, an `AbstractController` of `n + p` features.
    - `references`: $r$, shape `(T, p)`.
    - `input_level`: $\\bar u$, shape `(m,)`.
    - `plant_state_size`: `n_p`, the size of the plant's part of $z$.
    - `dt`: the loop's sample time (`ObservedPlant.dt`), or `None`.
    """

    controller: AbstractController
    references: Float[Array, "T p"]
    input_level: Float[Array, " m"]
    plant_state_size: int = eqx.field(static=True)
    dt: float | None = eqx.field(static=True)

    def __init__(
        self,
        controller: AbstractController,
        references: Real[ArrayLike, "T p"],
        input_level: Real[ArrayLike, " m"],
        plant_state_size: int,
        dt: float | None = None,
    ):
        self.controller = controller
        self.references = jnp.asarray(references, dtype=jnp.result_type(float))
        self.input_level = jnp.asarray(input_level, dtype=jnp.result_type(float))
        self.plant_state_size = plant_state_size
        self.dt = dt

    def __call__(self, t: Time, z: State) -> Float[Array, " m"]:
        references = jax.lax.stop_gradient(self.references)
        last = references.shape[0] - 1
        steps = jnp.asarray(t) if self.dt is None else jnp.asarray(t) / self.dt
        step = jnp.clip(jnp.round(steps).astype(jnp.int32), 0, last)
        features = jnp.concatenate(
            [z[self.plant_state_size :], references[step].astype(z.dtype)]
        )
        level = jax.lax.stop_gradient(self.input_level)
        return level + self.controller(t, features)


class Clipped(AbstractController):
    """A controller whose output is clipped to `[-bound, bound]` (a hard actuator
    limit: what a controller designed without the limit meets on the plant).

    **Arguments:**

    - `controller`: any `AbstractController`.
    - `bound`: the limit, a positive number.
    """

    controller: AbstractController
    bound: float = eqx.field(static=True)

    def __call__(self, t: Time, x: State) -> Float[Array, " m"]:
        return jnp.clip(self.controller(t, x), -self.bound, self.bound)


def steady_state_map(model) -> tuple[np.ndarray, np.ndarray]:
    """`(N_x, N_u)` of shapes `(n, p)` and `(m, p)`: the state and input deviations
    $x = N_x r$, $u = N_u r$ at which the linear model rests with the output
    deviation $r$: $(K - I) x + B u = 0$, $C x + D u = r$ (the least-squares
    solution of least norm where it is not unique or not exact)."""
    linear = _linear("steady_state_map", model)
    K, B = np.asarray(linear.K, np.float64), np.asarray(linear.B, np.float64)
    n, m = B.shape
    C = np.eye(n) if linear.C is None else np.asarray(linear.C, np.float64)
    D = np.zeros((C.shape[0], m)) if linear.D is None else np.asarray(linear.D)
    M = np.block([[K - np.eye(n), B], [C, D]])
    solution = np.linalg.pinv(M)[:, n:]
    return solution[:n], solution[n:]


def lqg_set_point_controller(model, output_weight, input_weight) -> LinearFeedback:
    """The LQR tracking law on the estimate and set point $[\\hat x; r]$:
    $u = N_u r - G (\\hat x - N_x r)$ with $G$ = `lqr_gain(model, output_weight=,
    input_weight=)`, as a `LinearFeedback` of `n + p` features (for
    `SetPointFeedback`). With the observer's Kalman gain, this is LQG."""
    G = lqr_gain(model, output_weight=output_weight, input_weight=input_weight)
    N_x, N_u = steady_state_map(model)
    return LinearFeedback(np.concatenate([G, -(N_u + G @ N_x)], axis=1))
