"""Initial states that best explain measured outputs: closed-form least squares."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .._systems.neural_state_space import NeuralStateSpace
from .._systems.system import AbstractSystem, LinearSystem
from .signals import arrays_only, check_model_matches, linear_of, Signals, signals


def observability_rows(
    K: Float[Array, "n n"], C: Float[Array, "p n"], num_steps: int
) -> Float[Array, "T p n"]:
    """$C K^t$ for $t = 0 \\dots T-1$, shape `(T, p, n)`."""

    def body(CKt, _):
        return CKt @ K, CKt

    _, rows = jax.lax.scan(body, C, None, length=num_steps)
    return rows


def forced_outputs(
    system: LinearSystem, us: Float[Array, "N T m"] | None, num_steps: int, N: int
) -> Float[Array, "N T p"]:
    """The outputs $y_0 \\dots y_{T-1}$ of `system` from $x_0 = 0$ driven by `us` (and
    the offset and levels), for `N` experiments; `C = I` when `system.C` is `None`."""
    n = system.state_size
    x = jnp.zeros((N, n), system.K.dtype)
    xs_in = None if us is None else jnp.swapaxes(us, 0, 1)
    state_constant, output_constant = system.constant_terms()

    def body(x, u):
        y = x if system.C is None else x @ system.C.T
        x_next = x @ system.K.T
        if u is not None and system.B is not None:
            x_next = x_next + u @ system.B.T
            if system.D is not None:
                y = y + u @ system.D.T
        if state_constant is not None:
            x_next = x_next + state_constant[None]
        if output_constant is not None:
            y = y + output_constant[None]
        return x_next, y

    _, ys = jax.lax.scan(body, x, xs_in, length=num_steps)
    return jnp.swapaxes(ys, 0, 1)


def linear_x0(
    system: LinearSystem,
    ys: Float[Array, "N T p"],
    us: Float[Array, "N T m"] | None,
    mask: Bool[Array, "N T"],
) -> Float[Array, "N n"]:
    """The array-level core of `estimate_x0` for a linear system: per experiment,
    $\\hat x_0 = \\arg\\min \\sum_{t:\\,\\mathrm{mask}} \\lVert y_t - C K^t x_0 -
    z_t \\rVert^2$ with $z_t$ the output from $x_0 = 0$ (a pseudo-inverse, so an
    unobservable direction gets 0)."""
    N, T, p = ys.shape
    n = system.state_size
    C = jnp.eye(n, dtype=system.K.dtype) if system.C is None else system.C
    rows = observability_rows(system.K, C, T)
    # `where`, not a product: a record padded past its end (`in_shared_length`)
    # must not turn an unstable model's large powers there into nan.
    inside = mask[..., None]
    residual = jnp.where(inside, ys - forced_outputs(system, us, T, N), 0.0)
    A = jnp.where(inside[..., None], rows[None], 0.0)
    A = A.reshape(N, T * p, n)
    return jnp.einsum("nij,nj->ni", jnp.linalg.pinv(A), residual.reshape(N, T * p))


@on_one_blas_thread
@checks_own_arguments
def estimate_x0(model: AbstractSystem, data) -> Float[Array, "N n"]:
    """The initial state of each experiment that best explains its measurements.

    For a linear model ($x_{t+1} = K x_t + B u_t + \\mathrm{offset}$,
    $y_t = C x_t + D u_t$: a `LinearSystem`, or any system with a `to_linear()` such
    as `StableLinearSystem` and `Discretized`) the outputs are affine in $x_0$,
    $y_t = C K^t x_0 + z_t$ ($z_t$ the response to the inputs and offset from
    $x_0 = 0$), so

    $$\\hat x_0 = \\arg\\min_{x_0} \\sum_{t < T_i} \\lVert y_t - C K^t x_0 - z_t
    \\rVert^2$$

    is a linear least-squares problem per experiment, solved in closed form (a
    pseudo-inverse: a direction of $x_0$ that the outputs do not see gets 0). It is
    exact on noise-free data, uses only each experiment's first `lengths[i]` steps,
    and is written in `jax.numpy`: it runs under `jax.jit` and is differentiable with
    respect to the model.

    The measurements are the data's outputs `ys`; data without outputs uses its
    states $x_0 \\dots x_{T-1}$ (with $C = I$, $D = 0$). For a model that is not
    linear, the data must have states: the result is then the measured $x_0$ of each
    experiment.

    **Arguments:**

    - `model`: the system (`output_size` equal to the data's outputs, or `state_size`
        to its states; `input_size` equal to its inputs).
    - `data`: a `Dataset` with `N` experiments.

    **Returns:**

    The initial states, shape `(N, n)`.

    **Raises:**

    `ValueError` when the model's sizes do not match the data, or the model is not
    linear and the data has no states.

    **Example:**

    ```python
    system = dynsys.LinearSystem(jnp.array([[0.9, 0.2], [0.0, 0.7]]),
                                 jnp.array([[0.0], [1.0]]))
    us = jax.random.normal(jax.random.key(0), (3, 50, 1))
    x0s = jnp.array([[1.0, -1.0], [0.5, 0.0], [0.0, 2.0]])
    data = dynsys.Dataset(dynsys.rollout(system, x0s, 50, inputs=us).xs, us)
    dynsys.estimate_x0(system, data)  # x0s
    ```
    """
    call = "estimate_x0"
    s = signals(data, call)
    check_model_matches(call, model, s)
    check_initial_states(call, model, s)
    return _initial_states_compiled(model, arrays_only(s))


def check_initial_states(call: str, model: AbstractSystem, s: Signals) -> None:
    """One-line `ValueError` when `estimate_x0` cannot give `model`'s initial
    states on the data `s`: a model that is not linear needs the data's states."""
    if linear_of(model) is not None:
        return
    if s.xs is None and isinstance(model, NeuralStateSpace):
        raise ValueError(
            f"{call}(model=...): a NeuralStateSpace starts from the state its encoder "
            "(the StateEncoder that fit_neural returns and saves beside the model) "
            "reads from the first encoder.past samples: "
            f"{_neural_start(call)}."
        )
    if s.xs is None:
        raise ValueError(
            f"{call}(model=...): the initial state is estimated in closed form "
            f"for linear models only, got {type(model).__name__} and data "
            "without states; pass x0 explicitly, or fit it (dynsys.fit)."
        )
    if s.xs.shape[-1] != model.state_size:
        raise ValueError(
            f"{call}(model=..., data=...): the model is not linear, so its initial "
            f"states are the data's measured states, but those have "
            f"{s.xs.shape[-1]} columns and the model's state_size is "
            f"{model.state_size}."
        )


def _neural_start(call: str) -> str:
    """The call that starts a neural model from its encoder, for `call`'s error."""
    x0 = "x0=dynsys.neural_initial_state(encoder, data)"
    if call == "compare":
        return "compare(model, data, encoder=encoder)"
    return f"{x0}, the state at sample encoder.past"


def initial_states_of(model: AbstractSystem, s: Signals) -> Float[Array, "N n"]:
    """The array part of `estimate_x0` on checked signals (traceable)."""
    linear = linear_of(model)
    if linear is None:
        return s.xs[:, 0]
    if s.from_states:
        linear = LinearSystem(
            linear.K, linear.B, offset=linear.offset, input_level=linear.input_level
        )
    return linear_x0(linear, s.ys, s.us, s.mask)


# One compiled program per model structure and data shape (not one per operation).
_initial_states_compiled = eqx.filter_jit(initial_states_of)
