"""Discrete-time systems: $x_{t+1} = \\mathrm{step}(t, x_t, u_t)$."""

import abc
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._compile.jit import device_array
from .._custom_types import Input, Output, State, Time
from .._type_checks import checks_own_arguments


class AbstractSystem(eqx.Module):
    """A discrete-time dynamical system.

    $x_{t+1} = \\mathrm{step}(t, x_t, u_t)$ and $y_t = \\mathrm{output}(t, x_t, u_t)$.

    Subclass it for your own (nonlinear) difference systems: declare the parameters as
    fields, implement `step`, and provide `state_size` and `input_size` (as fields or
    properties). `output` defaults to the full state.

    A system may also define `dt` (its sampling period); rollouts then report times
    `t0 + k * dt` instead of step indices.

    **Example:**

    ```python
    class Logistic(dynsys.AbstractSystem):
        r: jax.Array
        state_size: int = eqx.field(static=True, default=1)
        input_size: int = eqx.field(static=True, default=0)

        def step(self, t, x, u):
            return self.r * x * (1 - x)
    ```
    """

    state_size: eqx.AbstractVar[int]
    input_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def step(self, t: Time, x: State, u: Input) -> State:
        """One step of the dynamics.

        **Arguments:**

        - `t`: the current time (step index, or `t0 + k * dt` if the system has `dt`).
        - `x`: the current state, shape `(n,)`.
        - `u`: the current input, shape `(m,)`, or `None` when `input_size == 0`.

        **Returns:**

        The next state, shape `(n,)`.
        """

    def output(self, t: Time, x: State, u: Input) -> Output:
        """The measured output $y_t$; by default the full state $x_t$, shape `(p,)`."""
        del t, u
        return x

    @property
    def output_size(self) -> int:
        """The size `p` of the output $y_t$; by default `state_size`."""
        return self.state_size


def _as_float_arrays(*arrays: ArrayLike | Sequence | None) -> list[Array | None]:
    converted = [None if a is None else _on_device(a) for a in arrays]
    dtype = jnp.result_type(*[a for a in converted if a is not None])
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(float)
    return [None if a is None else jnp.asarray(a, dtype=dtype) for a in converted]


def _on_device(a: ArrayLike | Sequence) -> Array:
    """A NumPy array moved without a program (`jnp.asarray` compiles one per shape
    and dtype); anything else through `jnp.asarray` (a Python scalar stays weakly
    typed)."""
    return device_array(a) if isinstance(a, np.ndarray) else jnp.asarray(a)


def shape_error(
    call: str, argument: str, expected: str, actual: tuple[int, ...]
) -> ValueError:
    """`call(argument=...): argument must have shape expected, got actual.`"""
    return ValueError(
        f"{call}({argument}=...): {argument} must have shape {expected}, "
        f"got {tuple(actual)}."
    )


def check_state_space_shapes(
    call: str,
    square_name: str,
    square: Array,
    B: Array | None = None,
    C: Array | None = None,
    D: Array | None = None,
    offset: Array | None = None,
) -> None:
    """Check the shapes of a state-space model: `square (n, n)` (`K` or `A`),
    `B (n, m)`, `C (p, n)`, `D (p, m)` (needs `B`; `p = n` without `C`),
    `offset (n,)`; raise `ValueError` naming `call` and the argument."""
    if square.ndim != 2 or square.shape[0] != square.shape[1]:
        raise shape_error(call, square_name, "(n, n) (a square matrix)", square.shape)
    n = square.shape[0]
    if B is not None and (B.ndim != 2 or B.shape[0] != n):
        raise shape_error(call, "B", f"(n, m) = ({n}, m)", B.shape)
    if C is not None and (C.ndim != 2 or C.shape[1] != n):
        raise shape_error(call, "C", f"(p, n) = (p, {n})", C.shape)
    if D is not None:
        if B is None:
            raise ValueError(
                f"{call}(D=...): D needs an input matrix B, but B is None."
            )
        p, m = (n if C is None else C.shape[0]), B.shape[1]
        if D.shape != (p, m):
            raise shape_error(call, "D", f"(p, m) = ({p}, {m})", D.shape)
    if offset is not None and offset.shape != (n,):
        raise shape_error(call, "offset", f"(n,) = ({n},)", offset.shape)


def affine_map(
    square: Float[Array, "n n"],
    x: State,
    B: Float[Array, "n m"] | None,
    u: Input,
    offset: Float[Array, " n"] | None = None,
) -> State:
    """`square @ x + B @ u + offset`, each optional term skipped when absent."""
    result = square @ x
    if B is not None and u is not None:
        result = result + B @ u
    if offset is not None:
        result = result + offset
    return result


def state_space_output(
    C: Float[Array, "p n"] | None, D: Float[Array, "p m"] | None, x: State, u: Input
) -> Output:
    """`y = C x + D u`, with `C = I` when `None` and the `D` term when present."""
    y = x if C is None else C @ x
    if D is not None and u is not None:
        y = y + D @ u
    return y


def check_levels(
    call: str, n_inputs: int, n_outputs: int, input_level, output_level
) -> None:
    """Check an operating point: `input_level (m,)` (needs inputs), `output_level
    (p,)`; raise `ValueError` naming `call` and the argument."""
    if input_level is not None:
        if n_inputs == 0:
            raise ValueError(
                f"{call}(input_level=...): input_level needs an input matrix B, but B "
                "is None."
            )
        if input_level.shape != (n_inputs,):
            raise shape_error(
                call, "input_level", f"(m,) = ({n_inputs},)", input_level.shape
            )
    if output_level is not None and output_level.shape != (n_outputs,):
        raise shape_error(
            call, "output_level", f"(p,) = ({n_outputs},)", output_level.shape
        )


def constant_terms(
    B: ArrayLike | None,
    D: ArrayLike | None,
    offset: ArrayLike | None,
    input_level: ArrayLike | None,
    output_level: ArrayLike | None,
) -> tuple[ArrayLike | None, ArrayLike | None]:
    """The constant terms `(a, c)` of the same system written without levels,
    $x_{t+1} = K x_t + B u_t + a$, $y_t = C x_t + D u_t + c$: $a = \\mathrm{offset}
    - B \\bar u$, $c = \\bar y - D \\bar u$ (`None` where zero)."""
    a, c = offset, output_level
    if input_level is not None and B is not None:
        shift = -(B @ input_level)
        a = shift if a is None else a + shift
        if D is not None:
            c = -(D @ input_level) if c is None else c - D @ input_level
    return a, c


def level_output(
    C: Float[Array, "p n"] | None,
    D: Float[Array, "p m"] | None,
    x: State,
    u: Input,
    input_level: Float[Array, " m"] | None,
    output_level: Float[Array, " p"] | None,
) -> Output:
    """$y = C x + D (u - \\bar u) + \\bar y$, each level skipped when `None`."""
    if input_level is not None and u is not None:
        u = u - input_level
    y = state_space_output(C, D, x, u)
    return y if output_level is None else y + output_level


class LinearSystem(AbstractSystem):
    """A linear (affine) time-invariant discrete-time system, optionally about an
    operating point.

    $x_{t+1} = K x_t + B (u_t - \\bar u) + \\mathrm{offset}$, $\\quad
    y_t = C x_t + D (u_t - \\bar u) + \\bar y$,

    with the input and output levels $\\bar u$ (`input_level`) and $\\bar y$
    (`output_level`) zero unless given. An identified model carries them
    (`fit_subspace` removes the estimation data's means and keeps them here), so it
    is simulated and compared on raw data in physical units; $K, B, C, D$ describe
    the deviations from the operating point, and so do `frequency_response`,
    `step_response` and `to_control`.

    `K` is the transition matrix (often called $A$). All arrays are converted to one
    common floating dtype. Every array is a trainable leaf (`fit` can estimate the
    levels too).

    **Arguments:**

    - `K`: transition matrix, shape `(n, n)`.
    - `B`: input matrix, shape `(n, m)`; `None` for a system without input.
    - `C`: output matrix, shape `(p, n)`; `None` means $y_t = x_t$.
    - `D`: feedthrough matrix, shape `(p, m)` (with `p = n` when `C` is `None`);
        needs `B`.
    - `offset`: constant term, shape `(n,)`; `None` for a purely linear system.
    - `dt`: optional sampling period (a Python float), only used to label time.
    - `input_level`: $\\bar u$, shape `(m,)` (needs `B`), or `None` (zero).
    - `output_level`: $\\bar y$, shape `(p,)`, or `None` (zero).

    **Raises:**

    `ValueError` naming the argument, the expected and the actual shape.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]),
                                 B=jnp.array([[0.0], [1.0]]))
    ```
    """

    K: Float[Array, "n n"]
    B: Float[Array, "n m"] | None
    C: Float[Array, "p n"] | None
    D: Float[Array, "p m"] | None
    offset: Float[Array, " n"] | None
    dt: float | None = eqx.field(static=True)
    input_level: Float[Array, " m"] | None
    output_level: Float[Array, " p"] | None

    @checks_own_arguments
    def __init__(
        self,
        K: Real[ArrayLike, "n n"],
        B: Real[ArrayLike, "n m"] | None = None,
        C: Real[ArrayLike, "p n"] | None = None,
        D: Real[ArrayLike, "p m"] | None = None,
        offset: Real[ArrayLike, " n"] | None = None,
        *,
        dt: float | None = None,
        input_level: Real[ArrayLike, " m"] | None = None,
        output_level: Real[ArrayLike, " p"] | None = None,
    ):
        (
            self.K,
            self.B,
            self.C,
            self.D,
            self.offset,
            self.input_level,
            self.output_level,
        ) = _as_float_arrays(K, B, C, D, offset, input_level, output_level)
        self.dt = None if dt is None else float(dt)

    def __check_init__(self):
        check_state_space_shapes(
            "LinearSystem", "K", self.K, self.B, self.C, self.D, self.offset
        )
        check_levels(
            "LinearSystem",
            self.input_size,
            self.output_size,
            self.input_level,
            self.output_level,
        )
        if self.dt is not None and not self.dt > 0:
            raise ValueError(
                f"LinearSystem(dt=...): dt must be positive, got {self.dt}."
            )

    @property
    def state_size(self) -> int:
        return self.K.shape[-1]

    @property
    def input_size(self) -> int:
        return 0 if self.B is None else self.B.shape[-1]

    @property
    def output_size(self) -> int:
        return self.state_size if self.C is None else self.C.shape[-2]

    def constant_terms(self) -> tuple[Array | None, Array | None]:
        """`(a, c)`: the system as $x_{t+1} = K x_t + B u_t + a$, $y_t = C x_t + D u_t
        + c$ in raw units (`None` where zero); see `constant_terms`."""
        return constant_terms(
            self.B, self.D, self.offset, self.input_level, self.output_level
        )

    def step(self, t: Time, x: State, u: Input) -> State:
        del t
        if self.input_level is not None and u is not None:
            u = u - self.input_level
        return affine_map(self.K, x, self.B, u, self.offset)

    def output(self, t: Time, x: State, u: Input) -> Output:
        del t
        return level_output(self.C, self.D, x, u, self.input_level, self.output_level)
