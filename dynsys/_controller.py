"""Controllers: $u_t = \\mathrm{controller}(t, x_t)$."""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._custom_types import State, Time


class AbstractController(eqx.Module):
    """A state-feedback controller $u_t = \\mathrm{controller}(t, x_t)$.

    Subclass it and implement `__call__`. Every inexact array field is trainable
    through `rollout`.
    """

    @abc.abstractmethod
    def __call__(self, t: Time, x: State) -> Float[Array, " m"]:
        """The input to apply at time `t` in state `x` (shape `(n,)`); shape `(m,)`."""


class LinearFeedback(AbstractController):
    """Static linear state feedback $u = -G x$.

    **Arguments:**

    - `gain`: the gain matrix $G$, shape `(m, n)`.

    **Example:**

    ```python
    controller = dynsys.LinearFeedback(gain=jnp.array([[0.5, 1.0]]))
    traj = dynsys.rollout(system, x0, 50, controller=controller)
    ```
    """

    gain: Float[Array, "m n"]

    def __init__(self, gain: Float[ArrayLike, "m n"]):
        gain = jnp.asarray(gain)
        if not jnp.issubdtype(gain.dtype, jnp.inexact):
            gain = gain.astype(jnp.result_type(float))
        self.gain = gain

    def __check_init__(self):
        if self.gain.ndim != 2:
            raise ValueError(
                "LinearFeedback(gain=...): gain must have shape (m, n), "
                f"got {tuple(self.gain.shape)}."
            )

    def __call__(self, t: Time, x: State) -> Float[Array, " m"]:
        del t
        return -(self.gain @ x)
