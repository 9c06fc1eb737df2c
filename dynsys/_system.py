"""Discrete-time systems: $x_{t+1} = \\mathrm{step}(t, x_t, u_t)$."""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._custom_types import Input, Output, State, Time


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


def _shape_error(argument: str, expected: str, actual: tuple[int, ...]) -> ValueError:
    return ValueError(
        f"LinearSystem({argument}=...): {argument} must have shape {expected}, "
        f"got {tuple(actual)}."
    )


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
        if self.K.ndim != 2 or self.K.shape[0] != self.K.shape[1]:
            raise _shape_error("K", "(n, n) (a square matrix)", self.K.shape)
        n = self.K.shape[0]
        if self.B is not None and (self.B.ndim != 2 or self.B.shape[0] != n):
            raise _shape_error("B", f"(n, m) = ({n}, m)", self.B.shape)
        if self.C is not None and (self.C.ndim != 2 or self.C.shape[1] != n):
            raise _shape_error("C", f"(p, n) = (p, {n})", self.C.shape)
        if self.D is not None:
            if self.B is None:
                raise ValueError(
                    "LinearSystem(D=...): D needs an input matrix B, but B is None."
                )
            p, m = self.output_size, self.input_size
            if self.D.shape != (p, m):
                raise _shape_error("D", f"(p, m) = ({p}, {m})", self.D.shape)
        if self.offset is not None and self.offset.shape != (n,):
            raise _shape_error("offset", f"(n,) = ({n},)", self.offset.shape)
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
        x_next = self.K @ x
        if self.B is not None and u is not None:
            x_next = x_next + self.B @ u
        if self.offset is not None:
            x_next = x_next + self.offset
        return x_next

    def output(self, t: Time, x: State, u: Input) -> Output:
        del t
        y = x if self.C is None else self.C @ x
        if self.D is not None and u is not None:
            y = y + self.D @ u
        return y
