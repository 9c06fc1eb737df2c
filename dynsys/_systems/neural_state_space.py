"""Neural state-space models: a base system (usually linear) plus neural corrections
in the state update and the output, equal to the base system before training."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, Real

from .._custom_types import Input, Output, State, Time
from .._type_checks import checks_own_arguments
from .layered import LayeredController
from .system import AbstractSystem


def residual_mlp(
    in_size: int,
    out_size: int,
    width_size: int,
    depth: int,
    *,
    activation: Callable[[Array], Array] = jax.nn.tanh,
    dtype,
    key,
) -> LayeredController:
    """A layered MLP `z (in_size,) -> (out_size,)` (`activation` on the hidden
    layers, tanh by default) whose last layer is zero, so that it outputs exactly
    0 until trained."""
    net = LayeredController.mlp(
        in_size, out_size, width_size, depth, use_time=False,
        activation=activation, dtype=dtype, key=key,
    )  # fmt: skip
    last = net.layers[-1]
    return eqx.tree_at(
        lambda n: (n.layers[-1].weight, n.layers[-1].context_weight, n.layers[-1].bias),
        net,
        (
            jnp.zeros_like(last.weight),
            jnp.zeros_like(last.context_weight),
            jnp.zeros_like(last.bias),
        ),
    )


def _scale(values, name: str, size: int, dtype, default: float) -> Array:
    if values is None:
        return jnp.full((size,), default, dtype)
    values = jnp.asarray(values, dtype)
    if values.shape != (size,):
        raise ValueError(
            f"NeuralStateSpace({name}=...): {name} must have shape ({size},), got "
            f"{tuple(values.shape)}."
        )
    return values


class NeuralStateSpace(AbstractSystem):
    """A nonlinear state-space model: a base system plus two neural corrections.

    $$x_{t+1} = f_0(t, x_t, u_t) + s_x \\odot F(z_t), \\qquad
    y_t = g_0(t, x_t, u_t) + s_y \\odot G(z_t),$$

    where $f_0, g_0$ are the base system's `step` and `output` (a `LinearSystem`
    from `fit_subspace`, or any `AbstractSystem`: a grey-box model), $z_t = [(x_t -
    \\mu_x) / s_x; (u_t - \\mu_u) / s_u]$ is the normalised state and input, and
    $F$, $G$ are layered MLPs (`LayeredController`s fed $z_t$) whose last layer is
    zero at construction: the untrained model *is* the base system. The
    normalisation ($\\mu_x, s_x, \\mu_u, s_u, s_y$, from the data) is stored in the
    model and not trained (its gradient is stopped).

    **Arguments:**

    - `base`: the `AbstractSystem` the corrections are added to.
    - `width_size`, `depth`: each MLP's hidden width and number of layers (>= 2).
    - `state_mean`, `state_scale`: $\\mu_x, s_x$, shape `(n,)` (default 0 and 1).
    - `input_mean`, `input_scale`: $\\mu_u, s_u$, shape `(m,)` (default 0 and 1).
    - `output_scale`: $s_y$, shape `(p,)` (default 1).
    - `output_correction`: whether to learn $G$ (default `True`).
    - `activation`: the hidden layers' activation (default `tanh`).
    - `key`: a `jax.random` key.

    **Raises:**

    `ValueError` naming the argument when a scale has the wrong shape.

    **Example:**

    ```python
    linear = dynsys.fit_subspace(data, order=2)
    model = dynsys.NeuralStateSpace(linear, width_size=16, depth=2,
                                    key=jax.random.key(0))
    # rollout(model, ...) equals rollout(linear, ...) until model is trained
    ```
    """

    base: AbstractSystem
    state_net: LayeredController
    output_net: LayeredController | None
    state_mean: Float[Array, " n"]
    state_scale: Float[Array, " n"]
    input_mean: Float[Array, " m"]
    input_scale: Float[Array, " m"]
    output_scale: Float[Array, " p"]

    @checks_own_arguments
    def __init__(
        self,
        base: AbstractSystem,
        *,
        width_size: int = 32,
        depth: int = 2,
        state_mean: Real[ArrayLike, " n"] | None = None,
        state_scale: Real[ArrayLike, " n"] | None = None,
        input_mean: Real[ArrayLike, " m"] | None = None,
        input_scale: Real[ArrayLike, " m"] | None = None,
        output_scale: Real[ArrayLike, " p"] | None = None,
        output_correction: bool = True,
        activation: Callable[[Array], Array] = jax.nn.tanh,
        key: PRNGKeyArray,
    ):
        if not isinstance(base, AbstractSystem):
            raise TypeError(
                f"NeuralStateSpace(base=...): expected an AbstractSystem, got "
                f"{type(base).__name__}."
            )
        leaves = jax.tree.leaves(eqx.filter(base, eqx.is_inexact_array))
        dtype = leaves[0].dtype if leaves else jnp.result_type(float)
        n, m, p = base.state_size, base.input_size, base.output_size
        self.base = base
        self.state_mean = _scale(state_mean, "state_mean", n, dtype, 0.0)
        self.state_scale = _scale(state_scale, "state_scale", n, dtype, 1.0)
        self.input_mean = _scale(input_mean, "input_mean", m, dtype, 0.0)
        self.input_scale = _scale(input_scale, "input_scale", m, dtype, 1.0)
        self.output_scale = _scale(output_scale, "output_scale", p, dtype, 1.0)
        k_state, k_output = jax.random.split(key)
        kwargs = dict(activation=activation, dtype=dtype)
        self.state_net = residual_mlp(
            n + m, n, width_size, depth, key=k_state, **kwargs
        )
        self.output_net = (
            residual_mlp(n + m, p, width_size, depth, key=k_output, **kwargs)
            if output_correction
            else None
        )

    @property
    def state_size(self) -> int:
        return self.base.state_size

    @property
    def input_size(self) -> int:
        return self.base.input_size

    @property
    def output_size(self) -> int:
        return self.base.output_size

    @property
    def dt(self) -> float | None:
        """The base system's sampling period, if it has one."""
        return getattr(self.base, "dt", None)

    def features(self, x: State, u: Input) -> Float[Array, " z"]:
        """$z = [(x - \\mu_x) / s_x; (u - \\mu_u) / s_u]$, shape `(n + m,)` (`(n,)`
        without inputs: `u` is then `None`, and `m` has no size to check against)."""
        stop = jax.lax.stop_gradient
        parts = [(x - stop(self.state_mean)) / stop(self.state_scale)]
        if u is not None and self.input_size:
            parts.append((u - stop(self.input_mean)) / stop(self.input_scale))
        return jnp.concatenate(parts)

    def step(self, t: Time, x: State, u: Input) -> State:
        z = self.features(x, u)
        correction = jax.lax.stop_gradient(self.state_scale) * self.state_net(t, z)
        return self.base.step(t, x, u) + correction

    def output(self, t: Time, x: State, u: Input) -> Output:
        y = self.base.output(t, x, u)
        if self.output_net is None:
            return y
        z = self.features(x, u)
        return y + jax.lax.stop_gradient(self.output_scale) * self.output_net(t, z)
