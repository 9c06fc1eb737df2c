"""Controllers: $u_t = \\mathrm{controller}(t, x_t)$."""

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, Real

from .._custom_types import State, Time
from .._type_checks import checks_own_arguments


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

    @checks_own_arguments
    def __init__(self, gain: Real[ArrayLike, "m n"]):
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


def as_bound(bound, size: int, where: str) -> tuple[float, ...] | None:
    """Normalise an actuator bound to a tuple of `size` positive floats (or `None`)."""
    if bound is None:
        return None
    values = np.asarray(bound, dtype=np.float64)
    if values.ndim == 0:
        values = np.full((size,), float(values))
    if values.shape != (size,):
        raise ValueError(
            f"{where}(bound=...): bound must be a scalar or have shape (m,) = "
            f"({size},), got {values.shape}."
        )
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(
            f"{where}(bound=...): bound must be positive and finite, got "
            f"{values.tolist()}."
        )
    return tuple(float(v) for v in values)


def saturate(z: Float[Array, " m"], bound: tuple[float, ...] | None) -> Array:
    """$u = b \\odot \\tanh(z / b)$: smooth, slope 1 at zero, $|u_i| < b_i$."""
    if bound is None:
        return z
    b = jnp.asarray(bound, dtype=z.dtype)
    return b * jnp.tanh(z / b)


def check_state(x: ArrayLike, state_size: int, where: str) -> None:
    if jnp.shape(x) != (state_size,):
        raise ValueError(
            f"{where}: the state x must have shape (n,) = ({state_size},), got "
            f"{tuple(jnp.shape(x))}."
        )


def time_feature(t: Time, dtype) -> Float[Array, " 1"]:
    return jnp.reshape(jnp.asarray(t).astype(dtype), (1,))


class MLPController(AbstractController):
    """A multilayer perceptron on $(x, t)$: $u = \\mathrm{MLP}([x; t])$.

    Hidden layers use `activation`; the output layer is affine, then optionally
    saturated to the actuator limits, $u = b \\odot \\tanh(z / b)$ (slope 1 at zero,
    $|u_i| < b_i$).

    **Arguments:**

    - `state_size`: the state size `n`.
    - `input_size`: the number of inputs `m` it returns.
    - `width_size`: the width of the hidden layers.
    - `depth`: the number of hidden layers (`0`: an affine map).
    - `activation`: the hidden activation (default `jax.nn.tanh`).
    - `use_time`: feed the time `t` as an extra input feature (default `True`).
    - `bound`: optional actuator limit $b$, a positive scalar or shape `(m,)`.
    - `dtype`: parameter dtype (default: JAX's default float).
    - `key`: a `jax.random` key for the initialisation (that of `eqx.nn.MLP`).

    **Raises:**

    `ValueError` for a bad `bound`, and at trace time for a state of the wrong shape.

    **Example:**

    ```python
    controller = dynsys.MLPController(2, 1, width_size=16, depth=2, bound=2.0,
                                      key=jax.random.key(0))
    u = controller(0.0, jnp.array([0.1, 0.0]))  # shape (1,), |u| < 2
    ```
    """

    mlp: eqx.nn.MLP
    state_size: int = eqx.field(static=True)
    input_size: int = eqx.field(static=True)
    use_time: bool = eqx.field(static=True)
    bound: tuple[float, ...] | None = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        state_size: int,
        input_size: int,
        width_size: int,
        depth: int,
        *,
        activation: Callable[[Array], Array] = jax.nn.tanh,
        use_time: bool = True,
        bound: Real[ArrayLike, "..."] | None = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        for name, value, low in [
            ("state_size", state_size, 1),
            ("input_size", input_size, 1),
            ("width_size", width_size, 1),
            ("depth", depth, 0),
        ]:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(
                    f"MLPController({name}=...): expected an integer >= {low}, got "
                    f"{value!r}."
                )
        self.state_size = state_size
        self.input_size = input_size
        self.use_time = bool(use_time)
        self.bound = as_bound(bound, input_size, "MLPController")
        self.mlp = eqx.nn.MLP(
            state_size + int(self.use_time),
            input_size,
            width_size,
            depth,
            activation=activation,
            dtype=dtype,
            key=key,
        )

    def __call__(self, t: Time, x: State) -> Float[Array, " m"]:
        check_state(x, self.state_size, "MLPController")
        dtype = self.mlp.layers[0].weight.dtype
        features = x.astype(dtype)
        if self.use_time:
            features = jnp.concatenate([features, time_feature(t, dtype)])
        return saturate(self.mlp(features), self.bound)
