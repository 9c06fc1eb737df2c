"""`simulate`: synthetic datasets from a system, with process and measurement noise."""

import math

import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float, PRNGKeyArray

from .._custom_types import Input, Output, State, Time
from .._type_checks import checks_own_arguments
from .._rollout.rollout import rollout
from .._systems.ode import _AbstractSampledODE, AbstractODE
from .._systems.system import AbstractSystem
from .construction import _float_dtype
from .dataset import Dataset


class _WithProcessNoise(AbstractSystem):
    """`system` with additive process noise passed as extra input columns."""

    system: AbstractSystem

    @property
    def state_size(self) -> int:
        return self.system.state_size

    @property
    def input_size(self) -> int:
        return self.system.input_size + self.system.state_size

    @property
    def dt(self):
        return getattr(self.system, "dt", None)

    @property
    def output_size(self) -> int:
        return self.system.output_size

    def _system_input(self, u: Float[ArrayLike, " k"]) -> Input:
        """The system's own inputs: the first `m` of the `k = m + n` columns."""
        m = self.system.input_size
        assert u is not None
        return u[:m] if m > 0 else None

    def step(self, t: Time, x: State, u: Input) -> State:
        m = self.system.input_size
        assert u is not None
        return self.system.step(t, x, self._system_input(u)) + u[m:]

    def output(self, t: Time, x: State, u: Input) -> Output:
        return self.system.output(t, x, self._system_input(u))


def _output_is_state(system) -> bool:
    """Whether `system.output` is the plain state: a state-space model without `C`
    and `D`, a sampled ODE whose ODE's output is the state, or a system that does not
    override `output`."""
    if hasattr(system, "C") and hasattr(system, "D"):
        return system.C is None and system.D is None
    if isinstance(system, _AbstractSampledODE):
        if type(system).output is _AbstractSampledODE.output:
            return _output_is_state(system.ode)
        return False
    if isinstance(system, AbstractODE):
        return type(system).output is AbstractODE.output
    return type(system).output is AbstractSystem.output


def _checked_inputs(inputs, N: int, num_steps: int, m: int, dtype):
    """`inputs` as `(N, T, m)` of `dtype` (a `(T, m)` array is shared by every
    trajectory), or `None` for a system without inputs."""
    if inputs is None and m > 0:
        raise ValueError(
            f"simulate(inputs=...): the system takes inputs (input_size={m}); pass "
            f"inputs of shape (N, T, m) = ({N}, {num_steps}, {m})."
        )
    if inputs is None:
        return None
    inputs = jnp.asarray(inputs, dtype=dtype)
    if m == 0:
        raise ValueError(
            "simulate(inputs=...): the system takes no input (input_size=0), "
            f"got inputs of shape {tuple(inputs.shape)}."
        )
    if inputs.ndim == 2:
        inputs = jnp.broadcast_to(inputs, (N, *inputs.shape))
    if inputs.shape != (N, num_steps, m):
        raise ValueError(
            f"simulate(inputs=...): inputs must have shape (N, T, m) = ({N}, "
            f"{num_steps}, {m}) or (T, m), got {tuple(inputs.shape)}."
        )
    return inputs


def _checked_x0s(x0s, n: int):
    """`x0s` as an inexact `(N, n)` array."""
    x0s = jnp.asarray(x0s)
    if not jnp.issubdtype(x0s.dtype, jnp.inexact):
        x0s = x0s.astype(_float_dtype())
    if x0s.ndim != 2 or x0s.shape[1] != n:
        raise ValueError(
            f"simulate(x0s=...): x0s must have shape (N, n) = (N, {n}), got "
            f"{tuple(x0s.shape)}."
        )
    return x0s


def _check_steps_and_noise(num_steps, process_noise, measurement_noise, key):
    """`simulate`'s checks of the number of steps, the noise levels and the key."""
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(
            f"simulate(num_steps=...): expected a positive integer, got {num_steps!r}."
        )
    for name, value in (
        ("process_noise", process_noise),
        ("measurement_noise", measurement_noise),
    ):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(
                f"simulate({name}=...): expected a finite number >= 0, got {value!r}."
            )
    if (process_noise or measurement_noise) and key is None:
        raise ValueError(
            "simulate(key=...): a PRNG key is needed for the noise, got key=None."
        )


def _noisy_rollout(system, x0s, num_steps: int, inputs, process_noise, key_w):
    """The rollout from `x0s`, with the process noise (drawn with `key_w`) added
    to each step."""
    if process_noise:
        N, n = x0s.shape
        noise = process_noise * jax.random.normal(
            key_w, (N, num_steps, n), dtype=x0s.dtype
        )
        both = noise if inputs is None else jnp.concatenate([inputs, noise], axis=-1)
        return rollout(_WithProcessNoise(system), x0s, num_steps, inputs=both)
    return rollout(system, x0s, num_steps, inputs=inputs)


def _measured(system, traj, inputs, measurement_noise, key_v) -> Dataset:
    """The `Dataset` of `traj`, with the measurement noise (drawn with `key_v`)
    on the outputs, or on the states when the output is the plain state."""
    xs = traj.xs
    if not _output_is_state(system):
        ys = traj.ys
        if measurement_noise:
            ys = ys + measurement_noise * jax.random.normal(key_v, ys.shape, ys.dtype)
        return Dataset(xs, inputs, traj.ts, ys=ys)
    if measurement_noise:
        xs = xs + measurement_noise * jax.random.normal(key_v, xs.shape, xs.dtype)
    return Dataset(xs, inputs, traj.ts)


@checks_own_arguments
def simulate(
    system: AbstractSystem,
    x0s: Float[ArrayLike, "N n"],
    num_steps: int,
    *,
    inputs: Float[ArrayLike, "N T m"] | Float[ArrayLike, "T m"] | None = None,
    process_noise: float = 0.0,
    measurement_noise: float = 0.0,
    key: PRNGKeyArray | None = None,
) -> Dataset:
    """Make a synthetic `Dataset` by simulating `system` from each initial state.

    $x_{t+1} = \\mathrm{step}(t, x_t, u_t) + \\sigma_w w_t$, with $w_t$ standard
    normal. When the system's output is the plain state (the default `output`, or a
    `LinearSystem` without `C` and `D`), the dataset records the noisy states
    $x_t + \\sigma_v v_t$ for $t = 0 \\dots T$ and has no `ys`. Otherwise it records
    the measured outputs $y_t = \\mathrm{output}(t, x_t, u_t) + \\sigma_v v_t$ for
    $t = 0 \\dots T-1$ as `ys`, and the noise-free states as `xs`.

    **Arguments:**

    - `system`: an `AbstractSystem`.
    - `x0s`: initial states, shape `(N, n)`.
    - `num_steps`: the number of steps `T` of each trajectory.
    - `inputs`: shape `(N, T, m)`, or `(T, m)` shared by all trajectories; required
        exactly when the system takes inputs.
    - `process_noise`: the standard deviation $\\sigma_w$ of the process noise.
    - `measurement_noise`: the standard deviation $\\sigma_v$ of the measurement
        noise, added to every output $y_t$ (or, for a system whose output is the
        state, to every recorded state, including $x_0$).
    - `key`: a PRNG key; required when any noise is non-zero.

    **Returns:**

    A `Dataset` with `xs (N, T+1, n)`, `us (N, T, m)` (or `None`), `ys (N, T, p)`
    when the system has outputs (else `None`) and the times of the rollout as `ts`
    `(T+1,)`.

    **Raises:**

    `ValueError` naming the argument for bad shapes, negative noise or a missing key.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    data = dynsys.simulate(system, jnp.eye(2), 20, measurement_noise=0.01,
                           key=jax.random.key(0))
    data.xs.shape  # (2, 21, 2)
    measured = dynsys.LinearSystem(K=system.K, C=jnp.array([[1.0, 0.0]]))
    data = dynsys.simulate(measured, jnp.eye(2), 20, measurement_noise=0.01,
                           key=jax.random.key(0))
    data.ys.shape  # (2, 20, 1); data.xs are the noise-free states
    ```
    """
    if not isinstance(system, AbstractSystem):
        raise TypeError(
            f"simulate(system=...): expected an AbstractSystem, got {type(system)}."
        )
    x0s = _checked_x0s(x0s, system.state_size)
    _check_steps_and_noise(num_steps, process_noise, measurement_noise, key)
    N = x0s.shape[0]
    inputs = _checked_inputs(inputs, N, num_steps, system.input_size, x0s.dtype)
    key_w, key_v = jax.random.split(key) if key is not None else (None, None)
    traj = _noisy_rollout(system, x0s, num_steps, inputs, process_noise, key_w)
    return _measured(system, traj, inputs, measurement_noise, key_v)
