"""Discrete-time systems: $x_{t+1} = \\mathrm{step}(t, x_t, u_t)$."""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._custom_types import Input, Output, State, Time


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


def _as_float_arrays(*arrays: ArrayLike | None) -> list[Array | None]:
    present = [jnp.asarray(a) for a in arrays if a is not None]
    dtype = jnp.result_type(*present)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(float)
    return [None if a is None else jnp.asarray(a, dtype=dtype) for a in arrays]


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


class LinearSystem(AbstractSystem):
    """A linear (affine) time-invariant discrete-time system.

    $x_{t+1} = K x_t + B u_t + \\mathrm{offset}$, $\\quad y_t = C x_t + D u_t$.

    `K` is the transition matrix (often called $A$). All arrays are converted to one
    common floating dtype. Every array is a trainable leaf.

    **Arguments:**

    - `K`: transition matrix, shape `(n, n)`.
    - `B`: input matrix, shape `(n, m)`; `None` for a system without input.
    - `C`: output matrix, shape `(p, n)`; `None` means $y_t = x_t$.
    - `D`: feedthrough matrix, shape `(p, m)` (with `p = n` when `C` is `None`);
        needs `B`.
    - `offset`: constant term, shape `(n,)`; `None` for a purely linear system.
    - `dt`: optional sampling period (a Python float), only used to label time.

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

    def __init__(
        self,
        K: Float[ArrayLike, "n n"],
        B: Float[ArrayLike, "n m"] | None = None,
        C: Float[ArrayLike, "p n"] | None = None,
        D: Float[ArrayLike, "p m"] | None = None,
        offset: Float[ArrayLike, " n"] | None = None,
        *,
        dt: float | None = None,
    ):
        self.K, self.B, self.C, self.D, self.offset = _as_float_arrays(
            K, B, C, D, offset
        )
        self.dt = None if dt is None else float(dt)

    def __check_init__(self):
        check_state_space_shapes(
            "LinearSystem", "K", self.K, self.B, self.C, self.D, self.offset
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

    def step(self, t: Time, x: State, u: Input) -> State:
        del t
        return affine_map(self.K, x, self.B, u, self.offset)

    def output(self, t: Time, x: State, u: Input) -> Output:
        del t
        return state_space_output(self.C, self.D, x, u)
