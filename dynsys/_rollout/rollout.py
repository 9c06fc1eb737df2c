"""The rollout engine: record a trajectory into arrays allocated once."""

import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._systems.controller import AbstractController
from .._systems.system import AbstractSystem
from .._type_checks import checks_own_arguments
from .adjoint import AbstractAdjoint, Autodiff
from .method import AbstractMethod, default_method


class Trajectory(eqx.Module):
    """A recorded trajectory (or a batch of them), as returned by `rollout`.

    **Fields:**

    - `ts`: times $t_0 \\dots t_T$, shape `(T+1,)` (shared by the whole batch).
    - `xs`: states $x_0 \\dots x_T$, shape `(..., T+1, n)`.
    - `us`: inputs $u_0 \\dots u_{T-1}$, shape `(..., T, m)`; `None` for a system
        without input.
    - `ys`: outputs $y_0 \\dots y_{T-1}$, shape `(..., T, p)`, where
        $y_t = \\mathrm{output}(t, x_t, u_t)$.
    """

    # T1 stands for T+1: jaxtyping cannot check a symbolic axis ("T+1") whose names
    # are not bound by an earlier field.
    ts: Real[Array, " T1"]
    xs: Float[Array, "... T1 n"]
    us: Float[Array, "... T m"] | None
    ys: Float[Array, "... T p"]

    @property
    def num_steps(self) -> int:
        """The number of steps `T`."""
        return self.ts.shape[0] - 1

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch dimensions of `xs` (empty for one trajectory)."""
        return self.xs.shape[:-2]


def _error(argument: str, message: str) -> ValueError:
    return ValueError(f"rollout({argument}=...): {message}")


def _as_inexact(array: ArrayLike) -> Array:
    array = jnp.asarray(array)
    if not jnp.issubdtype(array.dtype, jnp.inexact):
        array = array.astype(jnp.result_type(float))
    return array


def _check_num_steps(num_steps) -> int:
    if (
        isinstance(num_steps, bool)
        or not isinstance(num_steps, numbers.Integral)
        or num_steps < 0
    ):
        raise _error(
            "num_steps",
            f"num_steps must be a non-negative Python integer, got {num_steps!r}.",
        )
    return int(num_steps)


def _check_inputs(system, inputs, num_steps, controller) -> Array | None:
    m = system.input_size
    if inputs is None:
        if m > 0 and controller is None:
            raise _error(
                "inputs",
                f"the system takes inputs (input_size={m}) but neither inputs nor "
                "controller was given; pass inputs of shape (..., num_steps, m) = "
                f"(..., {num_steps}, {m}) or a controller.",
            )
        return None
    inputs = _as_inexact(inputs)
    if m == 0:
        raise _error(
            "inputs",
            f"the system takes no input (input_size=0), got inputs of shape "
            f"{tuple(inputs.shape)}.",
        )
    if inputs.ndim < 2 or inputs.shape[-2:] != (num_steps, m):
        raise _error(
            "inputs",
            f"inputs must have shape (..., num_steps, m) = (..., {num_steps}, {m}), "
            f"got {tuple(inputs.shape)}.",
        )
    return inputs


def _times(system: AbstractSystem, t0, num_steps: int, dtype) -> Real[Array, " T1"]:
    steps = jnp.arange(num_steps + 1)
    dt = getattr(system, "dt", None)
    if dt is None:
        if isinstance(t0, numbers.Integral) or (
            isinstance(t0, jax.Array) and jnp.issubdtype(t0.dtype, jnp.integer)
        ):
            return t0 + steps
        return jnp.asarray(t0, dtype) + steps.astype(dtype)
    return jnp.asarray(t0, dtype) + dt * steps.astype(dtype)


def _check_step_shapes(system, controller, x0, t, inputs) -> jnp.dtype:
    """Check the controller's and the step's output shapes; return the state dtype."""
    n, m = system.state_size, system.input_size
    x = jax.ShapeDtypeStruct((n,), x0.dtype)
    u_open = None if inputs is None else jax.ShapeDtypeStruct((m,), inputs.dtype)
    u = u_open
    if controller is not None:
        if m == 0:
            raise _error(
                "controller",
                "the system takes no input (input_size=0), so it cannot be controlled.",
            )
        u = jax.eval_shape(controller, t, x)
        if not hasattr(u, "shape") or u.shape != (m,):
            shape = getattr(u, "shape", type(u).__name__)
            raise _error(
                "controller",
                f"the controller must return an input of shape (m,) = ({m},), the "
                f"system's input size, got {shape}.",
            )
        if u_open is not None:
            u = jax.ShapeDtypeStruct((m,), jnp.result_type(u.dtype, u_open.dtype))
    x_next = jax.eval_shape(system.step, t, x, u)
    if not hasattr(x_next, "shape") or x_next.shape != (n,):
        shape = getattr(x_next, "shape", type(x_next).__name__)
        raise _error(
            "system",
            f"{type(system).__name__}.step must return a state of shape (n,) = "
            f"({n},), got {shape}.",
        )
    return jnp.result_type(x0.dtype, x_next.dtype)


def _flatten_batch(x0, inputs, batch_shape):
    """Flatten the batch to one leading axis of size N (inputs may keep size 1).

    `x0` is broadcast to the full batch (it is small); `inputs` whose batch is a
    single trajectory keep a leading axis of 1 and are broadcast, not copied, by the
    method.
    """
    size = math.prod(batch_shape)
    n = x0.shape[-1]
    x0 = jnp.broadcast_to(x0, batch_shape + (n,)).reshape(size, n)
    if inputs is not None:
        tail = inputs.shape[-2:]
        if math.prod(inputs.shape[:-2]) == 1:
            inputs = inputs.reshape((1,) + tail)
        else:
            inputs = jnp.broadcast_to(inputs, batch_shape + tail).reshape(
                (size,) + tail
            )
    return x0, inputs


@checks_own_arguments
def rollout(
    system: AbstractSystem,
    x0: Real[ArrayLike, "... n"],
    num_steps: int,
    *,
    controller: AbstractController | None = None,
    inputs: Real[ArrayLike, "... T m"] | None = None,
    t0: Real[ArrayLike, ""] = 0,
    method: AbstractMethod | None = None,
    adjoint: AbstractAdjoint = Autodiff(),
) -> Trajectory:
    """Simulate `system` for `num_steps` steps and record the trajectory.

    $x_{t+1} = \\mathrm{step}(t, x_t, u_t)$ with $u_t = \\mathrm{controller}(t, x_t)
    + \\mathrm{inputs}_t$ (either term optional). The states, inputs and outputs are
    written by one `jax.lax.scan` into arrays allocated once; compile time does not
    depend on `num_steps`. Gradients are exact with respect to every inexact array in
    `system`, `controller`, `x0` and `inputs`. Works under `jax.jit`, `jax.vmap` and
    `jax.grad`.

    **Arguments:**

    - `system`: an `AbstractSystem`.
    - `x0`: initial state, shape `(n,)`, or `(..., n)` for a batch.
    - `num_steps`: the number of steps `T` (a non-negative Python integer).
    - `controller`: optional `AbstractController` closing the loop.
    - `inputs`: optional open-loop inputs, shape `(T, m)` or `(..., T, m)`; batch
        dimensions broadcast against those of `x0`.
    - `t0`: the initial time.
    - `method`: an `AbstractMethod`; `None` picks the fastest valid one
        (`Sequential()` is always valid).
    - `adjoint`: an `AbstractAdjoint` (`Autodiff()` by default).

    **Returns:**

    A `Trajectory` with `ts (T+1,)`, `xs (..., T+1, n)`, `us (..., T, m)` or `None`
    and `ys (..., T, p)`. The state dtype is that of `x0` promoted with the system's
    (float32 stays float32, float64 stays float64).

    **Raises:**

    `ValueError` naming the argument with the expected and actual shape.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [0.0, 0.7]]))
    traj = dynsys.rollout(system, jnp.array([1.0, -1.0]), 10)
    traj.xs.shape  # (11, 2)
    ```
    """
    num_steps = _check_num_steps(num_steps)
    args = (system, controller, x0, inputs, t0, method, adjoint)
    if _is_eager(args):
        # Called outside any JAX transformation: run one compiled program, cached by
        # the structure of the arguments (a fresh scan each call would recompile).
        # Python numbers become arrays: as static arguments, 0 and 0.0 (or 1 and
        # True) would share a cache entry.
        if x0 is not None and not isinstance(x0, jax.Array | np.ndarray):
            x0 = jnp.asarray(x0)
        if inputs is not None and not isinstance(inputs, jax.Array | np.ndarray):
            inputs = jnp.asarray(inputs)
        if isinstance(t0, numbers.Number) and not isinstance(t0, bool):
            t0 = jnp.asarray(t0)
        run = _rollout_compiled
    else:
        run = _rollout
    return run(
        system,
        x0,
        num_steps,
        controller=controller,
        inputs=inputs,
        t0=t0,
        method=method,
        adjoint=adjoint,
    )


def _is_eager(args) -> bool:
    """True when no argument is being traced and their static parts are hashable
    (so that `_rollout_compiled` can cache on them)."""
    leaves = jax.tree.leaves(args)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return False
    static = eqx.filter(args, eqx.is_array, inverse=True)
    try:
        hash(tuple(jax.tree.leaves(static)))
    except TypeError:
        return False
    return True


@checks_own_arguments
def _rollout(
    system: AbstractSystem,
    x0,
    num_steps: int,
    *,
    controller: AbstractController | None,
    inputs,
    t0,
    method: AbstractMethod | None,
    adjoint: AbstractAdjoint,
) -> Trajectory:
    """The body of `rollout` (traced: under the caller's transformation, or once per
    argument structure by `_rollout_compiled`)."""
    if not isinstance(system, AbstractSystem):
        raise TypeError(
            f"rollout(system=...): expected an AbstractSystem, got {type(system)}."
        )
    if controller is not None and not isinstance(controller, AbstractController):
        raise TypeError(
            "rollout(controller=...): expected an AbstractController, got "
            f"{type(controller)}."
        )
    num_steps = _check_num_steps(num_steps)
    n = system.state_size
    x0 = _as_inexact(x0)
    if x0.ndim < 1 or x0.shape[-1] != n:
        raise _error(
            "x0",
            f"x0 must have shape (n,) or (..., n) = (..., {n}), got {tuple(x0.shape)}.",
        )
    inputs = _check_inputs(system, inputs, num_steps, controller)
    x0_batch = x0.shape[:-1]
    inputs_batch = () if inputs is None else inputs.shape[:-2]
    try:
        batch_shape = jnp.broadcast_shapes(x0_batch, inputs_batch)
    except ValueError:
        raise _error(
            "inputs",
            f"the batch dimensions of inputs {inputs_batch} do not broadcast against "
            f"those of x0 {x0_batch}.",
        ) from None
    ts = _times(system, t0, num_steps, x0.dtype)
    dtype = _check_step_shapes(system, controller, x0, ts[0], inputs)
    x0 = x0.astype(dtype)
    if method is None:
        method = default_method(
            system,
            controller,
            inputs is not None,
            adjoint,
            num_steps,
            math.prod(batch_shape),
        )
    adjoint.check(system, controller, inputs is not None)
    method.check(system, controller, inputs is not None, adjoint)

    if not batch_shape:
        xs, us, ys = method.rollout(system, controller, x0, ts, inputs, adjoint)
        return Trajectory(ts=ts, xs=xs, us=us, ys=ys)
    flat_x0, flat_inputs = _flatten_batch(x0, inputs, batch_shape)
    xs, us, ys = method.rollout_batch(
        system, controller, flat_x0, ts, flat_inputs, adjoint
    )
    unflatten = lambda a: a.reshape(batch_shape + a.shape[1:])  # noqa: E731
    us = None if us is None else unflatten(us)
    return Trajectory(ts=ts, xs=unflatten(xs), us=us, ys=unflatten(ys))


# One compiled program per argument structure (array shapes and dtypes, static
# fields, num_steps, method, adjoint): repeated eager calls reuse it.
_rollout_compiled = eqx.filter_jit(_rollout)
