"""Continuous-time systems: ODEs, exact discretisation, and sampling with diffrax."""

import abc
import math
from typing import Literal, TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from .._custom_types import Input, Output, State, Time
from .._type_checks import checks_own_arguments
from .system import (
    _as_float_arrays,
    AbstractSystem,
    affine_map,
    check_state_space_shapes,
    LinearSystem,
    state_space_output,
)


if TYPE_CHECKING:  # imported where used: diffrax takes 0.7 s, and a discrete-time
    import diffrax  # fit (every `dynsys fit` of a data file) never needs it


class AbstractODE(eqx.Module):
    """A continuous-time dynamical system.

    $\\dot x(t) = \\mathrm{vector\\_field}(t, x(t), u(t))$ and
    $y(t) = \\mathrm{output}(t, x(t), u(t))$.

    Subclass it for your own ODEs: declare the parameters as fields, implement
    `vector_field`, and provide `state_size` and `input_size` (as fields or
    properties). `output` defaults to the full state. An ODE is not itself a system
    that `rollout` can step: sample it with `Sampled(ode, dt)` (any ODE) or
    `discretize(ode, dt)` (a `LinearODE`, exactly).

    **Example:**

    ```python
    class Decay(dynsys.AbstractODE):
        rate: jax.Array
        state_size: int = eqx.field(static=True, default=1)
        input_size: int = eqx.field(static=True, default=0)

        def vector_field(self, t, x, u):
            return -self.rate * x
    ```
    """

    state_size: eqx.AbstractVar[int]
    input_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def vector_field(self, t: Time, x: State, u: Input) -> State:
        """The time derivative of the state.

        **Arguments:**

        - `t`: the time (a scalar).
        - `x`: the state, shape `(n,)`.
        - `u`: the input, shape `(m,)`, or `None` when `input_size == 0`.

        **Returns:**

        $\\dot x$, shape `(n,)`.
        """

    def output(self, t: Time, x: State, u: Input) -> Output:
        """The measured output $y(t)$; by default the full state, shape `(p,)`."""
        del t, u
        return x

    @property
    def output_size(self) -> int:
        """The size `p` of the output; by default `state_size`."""
        return self.state_size


class LinearODE(AbstractODE):
    """A linear time-invariant continuous-time system.

    $\\dot x = A x + B u$, $\\quad y = C x + D u$.

    All arrays are converted to one common floating dtype; every array is a trainable
    leaf.

    **Arguments:**

    - `A`: state matrix, shape `(n, n)`.
    - `B`: input matrix, shape `(n, m)`; `None` for a system without input.
    - `C`: output matrix, shape `(p, n)`; `None` means $y = x$.
    - `D`: feedthrough matrix, shape `(p, m)` (with `p = n` when `C` is `None`);
        needs `B`.

    **Raises:**

    `ValueError` naming the argument, the expected and the actual shape.

    **Example:**

    ```python
    oscillator = dynsys.LinearODE(A=jnp.array([[0.0, 1.0], [-1.0, -0.1]]),
                                  B=jnp.array([[0.0], [1.0]]))
    ```
    """

    A: Float[Array, "n n"]
    B: Float[Array, "n m"] | None
    C: Float[Array, "p n"] | None
    D: Float[Array, "p m"] | None

    @checks_own_arguments
    def __init__(
        self,
        A: Real[ArrayLike, "n n"],
        B: Real[ArrayLike, "n m"] | None = None,
        C: Real[ArrayLike, "p n"] | None = None,
        D: Real[ArrayLike, "p m"] | None = None,
    ):
        self.A, self.B, self.C, self.D = _as_float_arrays(A, B, C, D)

    def __check_init__(self):
        check_state_space_shapes("LinearODE", "A", self.A, self.B, self.C, self.D)

    @property
    def state_size(self) -> int:
        return self.A.shape[-1]

    @property
    def input_size(self) -> int:
        return 0 if self.B is None else self.B.shape[-1]

    @property
    def output_size(self) -> int:
        return self.state_size if self.C is None else self.C.shape[-2]

    def vector_field(self, t: Time, x: State, u: Input) -> State:
        del t
        return affine_map(self.A, x, self.B, u)

    def output(self, t: Time, x: State, u: Input) -> Output:
        del t
        return state_space_output(self.C, self.D, x, u)


def _concrete_dt(call: str, dt) -> float | None:
    """Check a sampling period: its float value when concrete, `None` when traced."""
    if isinstance(dt, bool) or not (
        isinstance(dt, (int, float)) or hasattr(dt, "dtype")
    ):
        raise TypeError(f"{call}(dt=...): dt must be a real scalar, got {type(dt)}.")
    if jnp.ndim(dt) != 0:
        raise ValueError(
            f"{call}(dt=...): dt must be a scalar, got shape {tuple(jnp.shape(dt))}."
        )
    try:
        value = float(dt)
    except jax.errors.ConcretizationTypeError:
        return None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{call}(dt=...): dt must be a positive finite number, got {value}."
        )
    return value


_METHODS = ("zoh", "bilinear", "euler")


@checks_own_arguments
def discretize(
    ode: LinearODE,
    dt: Real[ArrayLike, ""],
    method: Literal["zoh", "bilinear", "euler"] = "zoh",
) -> LinearSystem:
    """Sample a `LinearODE` every `dt`, the input held constant in between.

    - `"zoh"` (zero-order hold, exact): $K = e^{A\\,dt}$ and
        $B_d = \\int_0^{dt} e^{A s}\\,ds\\,B$, both read off the exponential of the
        augmented matrix $\\begin{bmatrix} A & B \\\\ 0 & 0 \\end{bmatrix} dt$, so
        $x_k = x(k\\,dt)$ exactly for piecewise-constant inputs (also for singular
        $A$).
    - `"bilinear"` (Tustin, the trapezoidal rule):
        $K = (I - A\\,dt/2)^{-1}(I + A\\,dt/2)$, $B_d = (I - A\\,dt/2)^{-1} B\\,dt$.
    - `"euler"` (forward Euler): $K = I + A\\,dt$, $B_d = B\\,dt$.

    `C` and `D` are kept as they are: the output is read at the sample instants. The
    result is differentiable with respect to `A`, `B` and `dt` (pass `dt` as a JAX
    array to differentiate with respect to it).

    **Arguments:**

    - `ode`: a `LinearODE`.
    - `dt`: the sampling period, a positive finite scalar (Python number or 0-d array).
    - `method`: `"zoh"` (default), `"bilinear"` or `"euler"`.

    **Returns:**

    A `LinearSystem(K, B_d, C, D)`. When `dt` is concrete (not traced), the system also
    carries `dt` as its time label, so `rollout` reports times `t0 + k * dt`; under a
    transformation that traces `dt` (e.g. `jax.grad` with respect to `dt`) the label
    is left out and times are step indices.

    **Raises:**

    `TypeError` if `ode` is not a `LinearODE`; `ValueError` if `dt` is not a positive
    finite scalar or `method` is unknown. When `dt` is traced, its value is checked at
    run time by `eqx.error_if`, with the same message.

    **Example:**

    ```python
    ode = dynsys.LinearODE(A=jnp.array([[0.0, 1.0], [-1.0, -0.1]]),
                           B=jnp.array([[0.0], [1.0]]))
    system = dynsys.discretize(ode, 0.1)   # LinearSystem with K = expm(0.1 A)
    ```
    """
    if not isinstance(ode, LinearODE):
        raise TypeError(
            "discretize(ode=...): only a LinearODE can be discretized in closed form, "
            f"got {type(ode).__name__}; sample a general AbstractODE with "
            "Sampled(ode, dt)."
        )
    if method not in _METHODS:
        raise ValueError(
            f"discretize(method=...): method must be one of {', '.join(_METHODS)}, "
            f"got {method!r}."
        )
    label = _concrete_dt("discretize", dt)
    dtype = jnp.result_type(ode.A, dt)
    A = ode.A.astype(dtype)
    B = None if ode.B is None else ode.B.astype(dtype)
    dt = jnp.asarray(dt, dtype=dtype)
    if label is None:
        dt = eqx.error_if(
            dt,
            ~(jnp.isfinite(dt) & (dt > 0)),
            "discretize(dt=...): dt must be a positive finite number.",
        )
    n = A.shape[0]
    identity = jnp.eye(n, dtype=dtype)
    if method == "zoh":
        if B is None:
            K = jax.scipy.linalg.expm(A * dt)
        else:
            m = B.shape[1]
            augmented = jnp.zeros((n + m, n + m), dtype)
            augmented = augmented.at[:n, :n].set(A).at[:n, n:].set(B)
            exponential = jax.scipy.linalg.expm(augmented * dt)
            K, B = exponential[:n, :n], exponential[:n, n:]
    elif method == "bilinear":
        left = identity - A * (dt / 2)
        K = jnp.linalg.solve(left, identity + A * (dt / 2))
        if B is not None:
            B = jnp.linalg.solve(left, B * dt)
    else:
        K = identity + A * dt
        if B is not None:
            B = B * dt
    return LinearSystem(K, B, ode.C, ode.D, dt=label)


def _vector_field(t, x, args):
    ode, u = args
    return ode.vector_field(t, x, u)


_DEFAULT_RTOL = 1e-6
_DEFAULT_ATOL = 1e-8


class _AbstractSampledODE(AbstractSystem):
    """A discrete-time system made from an ODE sampled every `dt`: its sizes and
    output are the ODE's."""

    ode: eqx.AbstractVar[AbstractODE]

    @property
    def state_size(self) -> int:
        return self.ode.state_size

    @property
    def input_size(self) -> int:
        return self.ode.input_size

    @property
    def output_size(self) -> int:
        return self.ode.output_size

    def output(self, t: Time, x: State, u: Input) -> Output:
        return self.ode.output(t, x, u)


class Sampled(_AbstractSampledODE):
    """An ODE sampled every `dt`, the input held constant between samples.

    `step(t, x, u)` integrates $\\dot x = f(s, x, u)$ over $s \\in [t, t + dt]$ with
    diffrax and returns $x(t + dt)$; `output(t, x, u)` is the ODE's output. Because
    the system has `dt`, `rollout` passes the times `t0 + k * dt`, so a controller acts
    at the sample times, and batches are vmapped as for any system. Gradients
    flow through the solver with diffrax's `RecursiveCheckpointAdjoint` (exact
    reverse mode through the solver's steps, with bounded memory) unless another
    `adjoint` is given.

    **Arguments:**

    - `ode`: an `AbstractODE`.
    - `dt`: the sampling period, a positive finite Python number (static).
    - `solver`: a diffrax solver; default `diffrax.Tsit5()` (5th order, adaptive).
    - `rtol`, `atol`: tolerances of the default adaptive step-size controller
        `diffrax.PIDController(rtol, atol)`; default `1e-6` and `1e-8`. For float32
        states, `rtol=1e-4, atol=1e-6` is a sensible choice.
    - `stepsize_controller`: a diffrax step-size controller, instead of `rtol`/`atol`
        (e.g. `diffrax.ConstantStepSize()` for a fixed step).
    - `dt0`: the first inner step; `None` lets an adaptive controller choose it, and
        means one inner step per sample with a constant step size.
    - `max_steps`: the most inner solver steps per sample.
    - `adjoint`: a diffrax adjoint; default `diffrax.RecursiveCheckpointAdjoint()`.

    **Raises:**

    `TypeError`/`ValueError` at construction for a bad `ode`, `dt`, `max_steps`, or
    `rtol`/`atol` given together with `stepsize_controller`. At run time (under `jit`
    and `vmap` too), the error of `eqx.error_if` (`eqx.EquinoxRuntimeError` under
    `eqx.filter_jit`, else `jax.errors.JaxRuntimeError`) when the solver fails on a
    sample interval (e.g. it needs more than `max_steps` steps), instead of returning
    garbage.

    **Example:**

    ```python
    class Decay(dynsys.AbstractODE):
        rate: jax.Array
        state_size: int = eqx.field(static=True, default=1)
        input_size: int = eqx.field(static=True, default=0)

        def vector_field(self, t, x, u):
            return -self.rate * x

    system = dynsys.Sampled(Decay(rate=jnp.array(0.5)), dt=0.1)
    traj = dynsys.rollout(system, jnp.array([1.0]), 20)   # x_k = exp(-0.05 k)
    ```
    """

    ode: AbstractODE
    dt: float = eqx.field(static=True)
    solver: "diffrax.AbstractSolver"
    stepsize_controller: "diffrax.AbstractStepSizeController"
    adjoint: "diffrax.AbstractAdjoint"
    dt0: float | None = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        ode: AbstractODE,
        dt: float,
        *,
        solver: "diffrax.AbstractSolver | None" = None,
        rtol: float | None = None,
        atol: float | None = None,
        stepsize_controller: "diffrax.AbstractStepSizeController | None" = None,
        dt0: float | None = None,
        max_steps: int = 4096,
        adjoint: "diffrax.AbstractAdjoint | None" = None,
    ):
        import diffrax

        if not isinstance(ode, AbstractODE):
            raise TypeError(
                f"Sampled(ode=...): expected an AbstractODE, got {type(ode).__name__}."
            )
        value = _concrete_dt("Sampled", dt)
        if value is None:
            raise TypeError(
                "Sampled(dt=...): dt must be concrete (it is static: a Python number); "
                "to differentiate with respect to dt, use discretize(ode, dt) for a "
                "LinearODE."
            )
        if stepsize_controller is None:
            stepsize_controller = diffrax.PIDController(
                rtol=_DEFAULT_RTOL if rtol is None else rtol,
                atol=_DEFAULT_ATOL if atol is None else atol,
            )
        elif rtol is not None or atol is not None:
            raise ValueError(
                "Sampled(rtol=..., atol=...): rtol and atol set the default "
                "PIDController; with stepsize_controller given, set them there."
            )
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise TypeError(
                f"Sampled(max_steps=...): max_steps must be an int, got {max_steps!r}."
            )
        self.ode = ode
        self.dt = value
        self.solver = diffrax.Tsit5() if solver is None else solver
        self.stepsize_controller = stepsize_controller
        self.adjoint = (
            diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
        )
        self.dt0 = None if dt0 is None else float(dt0)
        self.max_steps = max_steps

    def __check_init__(self):
        if self.max_steps < 1:
            raise ValueError(
                "Sampled(max_steps=...): max_steps must be a positive integer, got "
                f"{self.max_steps}."
            )
        if self.dt0 is not None and not (math.isfinite(self.dt0) and self.dt0 > 0):
            raise ValueError(
                f"Sampled(dt0=...): dt0 must be a positive finite number, got "
                f"{self.dt0}."
            )

    def step(self, t: Time, x: State, u: Input) -> State:
        import diffrax

        dtype = jnp.result_type(x.dtype, float)
        t = jnp.asarray(t, dtype=dtype)
        dt0 = self.dt0
        if dt0 is None and isinstance(
            self.stepsize_controller, diffrax.ConstantStepSize
        ):
            dt0 = self.dt
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(_vector_field),
            self.solver,
            t0=t,
            t1=t + self.dt,
            dt0=dt0,
            y0=x,
            args=(self.ode, u),
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=self.stepsize_controller,
            adjoint=self.adjoint,
            max_steps=self.max_steps,
            throw=False,
        )
        x_next = solution.ys[0]
        return eqx.error_if(
            x_next,
            solution.result != diffrax.RESULTS.successful,
            f"Sampled.step: the ODE solver failed on a sample interval [t, t + dt] "
            f"(dt={self.dt}, max_steps={self.max_steps}, "
            f"solver={type(self.solver).__name__}): it needed more than max_steps "
            "steps or broke down, so the next state would be wrong. Increase "
            "max_steps, relax rtol/atol, or check the ODE for blow-up or stiffness. "
            "To find the failing time, run with EQX_ON_ERROR=nan: the states turn NaN "
            "from that sample on.",
        )


class Discretized(_AbstractSampledODE):
    """A `LinearODE` kept in continuous time and discretised when it steps.

    `step(t, x, u)` is that of `discretize(ode, dt, method)`, so its trainable arrays
    are the ODE's `A`, `B`, `C`, `D`: fitting it (with `dynsys.fit` or `dynsys.train`)
    runs gradient descent through the matrix exponential and identifies the
    continuous-time matrices from sampled data. `to_linear()` gives the equivalent
    `LinearSystem`; call it once outside a loop when only the discrete system is
    needed (each `step` recomputes the discretisation).

    **Arguments:**

    - `ode`: a `LinearODE`.
    - `dt`: the sampling period, a positive finite Python number (static; also the
        time label for `rollout`).
    - `method`: `"zoh"` (default), `"bilinear"` or `"euler"`, as in `discretize`.

    **Raises:**

    `TypeError`/`ValueError` as `discretize`.

    **Example:**

    ```python
    model = dynsys.Discretized(dynsys.LinearODE(-jnp.eye(2), jnp.ones((2, 1))), 0.1)
    model.to_linear().K  # expm(-0.1 I)
    ```
    """

    ode: LinearODE
    dt: float = eqx.field(static=True)
    method: str = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        ode: LinearODE,
        dt: float,
        method: Literal["zoh", "bilinear", "euler"] = "zoh",
    ):
        if not isinstance(ode, LinearODE):
            raise TypeError(
                "Discretized(ode=...): expected a LinearODE, got "
                f"{type(ode).__name__}; sample a general AbstractODE with "
                "Sampled(ode, dt)."
            )
        value = _concrete_dt("Discretized", dt)
        if value is None:
            raise TypeError(
                "Discretized(dt=...): dt must be concrete (it is static: a Python "
                "number); to differentiate with respect to dt, use discretize(ode, dt)."
            )
        if method not in _METHODS:
            raise ValueError(
                f"Discretized(method=...): method must be one of "
                f"{', '.join(_METHODS)}, got {method!r}."
            )
        self.ode = ode
        self.dt = value
        self.method = method

    def to_linear(self) -> LinearSystem:
        """The equivalent `LinearSystem`, `discretize(ode, dt, method)`."""
        return discretize(self.ode, self.dt, self.method)

    def step(self, t: Time, x: State, u: Input) -> State:
        return self.to_linear().step(t, x, u)
