"""Responses of linear systems: frequency, step and impulse responses, and modes."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

from .._compile.jit import device_array
from .._type_checks import checks_own_arguments
from .._systems.ode import LinearODE
from .._systems.system import LinearSystem
from .propagate import propagate_std
from .signals import linear_of


def _discrete(call: str, system) -> LinearSystem:
    linear = linear_of(system)
    if linear is None:
        hint = (
            "; discretise it first (dynsys.discretize(ode, dt))"
            if isinstance(system, LinearODE)
            else ""
        )
        raise TypeError(
            f"{call}(system=...): expected a linear discrete-time system (a "
            "LinearSystem, or a system with to_linear() such as StableLinearSystem or "
            f"Discretized), got {type(system).__name__}{hint}."
        )
    return linear


def _needs_input(call: str, B) -> None:
    if B is None:
        raise ValueError(
            f"{call}(system=...): the system has no input (B is None), so it has no "
            "input-to-output response."
        )


def _output_matrix(C, n: int, dtype) -> Array:
    return jnp.eye(n, dtype=dtype) if C is None else C


@checks_own_arguments
def frequency_response(
    system, frequencies: Float[ArrayLike, " F"], *, covariance=None
) -> Complex[Array, "F p m"] | tuple[Complex[Array, "F p m"], Float[Array, "F p m"]]:
    """The frequency response $H(e^{i \\omega\\,dt}) = C (e^{i \\omega\\,dt} I - K)^{-1}
    B + D$ of a linear discrete-time system.

    `frequencies` $\\omega$ are in rad/s when the system has a sampling period `dt`
    (e.g. from `discretize` or `fit_subspace` on timed data), otherwise in rad per
    sample (`dt = 1`; the Nyquist frequency is $\\pi$). A `LinearODE` (continuous
    time) gives $C (i\\omega I - A)^{-1} B + D$, $\\omega$ in rad/s. The offset, if
    any, is not part of the response.

    **Arguments:**

    - `system`: a `LinearSystem`, a system with `to_linear()` (`StableLinearSystem`,
        `Discretized`), or a `LinearODE`; it must have inputs.
    - `frequencies`: shape `(F,)`.
    - `covariance`: optionally the `ParameterCovariance` of `system`'s trained
        parameters (`FitResult.covariance`).

    **Returns:**

    Complex, shape `(F, p, m)`: entry `[f, i, j]` is the gain and phase from input `j`
    to output `i` (magnitude `jnp.abs`, phase `jnp.angle`). With a `covariance`,
    `(response, magnitude_std)`, both `(F, p, m)`: the standard deviation of
    $|H|$ by linearisation (a 95 % band is about $\\pm 1.96$ of it).

    **Raises:**

    `TypeError` for a system that is not linear; `ValueError` for one without input
    or frequencies that are not 1-D.

    **Example:**

    ```python
    system = dynsys.LinearSystem(jnp.array([[0.5]]), jnp.array([[1.0]]))
    dynsys.frequency_response(system, jnp.array([0.0]))  # [[[2+0j]]]: 1 / (1 - 0.5)
    ```
    """
    response = _frequency_response(system, frequencies)
    if covariance is None:
        return response
    std = propagate_std(
        lambda model: jnp.abs(_frequency_response(model, frequencies)),
        covariance,
        system,
    )
    return response, jnp.asarray(std)


def _frequency_response(system, frequencies) -> Array:
    call = "frequency_response"
    w = frequencies
    if not isinstance(w, jax.Array):  # host data: no program compiled to move it
        w = jax.device_put(np.asarray(w))
    if w.ndim != 1:
        raise ValueError(
            f"{call}(frequencies=...): frequencies must have shape (F,), got "
            f"{tuple(w.shape)}."
        )
    if isinstance(system, LinearODE):
        square, B, C, D = system.A, system.B, system.C, system.D
        dt = 0.0
    else:
        linear = _discrete(call, system)
        square, B, C, D = linear.K, linear.B, linear.C, linear.D
        dt = 1.0 if linear.dt is None else float(linear.dt)
    _needs_input(call, B)
    return _response_at((square, B, C, D), w, dt)


@functools.partial(jax.jit, static_argnames="dt")
def _response_at(matrices, w, dt: float) -> Array:
    """$C (z I - K)^{-1} B + D$ at $z = e^{i w\\,dt}$ (at $z = i w$ for `dt == 0`,
    continuous time), shape `(F, p, m)`."""
    square, B, C, D = matrices
    points = 1j * w if dt == 0.0 else jnp.exp(1j * w * dt)
    n = square.shape[0]
    C = _output_matrix(C, n, square.dtype)
    identity = jnp.eye(n, dtype=square.dtype)
    resolvent = points[:, None, None] * identity[None] - square[None]
    H = C[None] @ jnp.linalg.solve(
        resolvent, jnp.broadcast_to(B, (w.shape[0], *B.shape))
    )
    if D is not None:
        H = H + D[None]
    return H


def _impulse(call: str, system, num_steps: int, cumulative: bool = False) -> Array:
    linear = _discrete(call, system)
    _needs_input(call, linear.B)
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(
            f"{call}(num_steps=...): num_steps must be a positive int, got "
            f"{num_steps!r}."
        )
    matrices = (linear.K, linear.B, linear.C, linear.D)
    return _markov_parameters(matrices, num_steps, cumulative)


@functools.partial(jax.jit, static_argnames=("num_steps", "cumulative"))
def _markov_parameters(matrices, num_steps: int, cumulative: bool = False) -> Array:
    """$D, CB, CKB, \\dots$ (`num_steps` of them, `(num_steps, p, m)`), or their
    running sum (the step response) when `cumulative`."""
    K, B, C, D = matrices
    C = _output_matrix(C, K.shape[0], K.dtype)
    first = jnp.zeros((C.shape[0], B.shape[1]), K.dtype) if D is None else D

    def body(KB, _):
        return K @ KB, C @ KB

    _, rest = jax.lax.scan(body, B, None, length=num_steps - 1)
    markov = jnp.concatenate([first[None], rest], axis=0)
    return jnp.cumsum(markov, axis=0) if cumulative else markov


@checks_own_arguments
def impulse_response(system, num_steps: int) -> Float[Array, "num_steps p m"]:
    """The impulse response (Markov parameters) of a linear discrete-time system from
    $x_0 = 0$: $h_0 = D$, $h_t = C K^{t-1} B$ for $t \\ge 1$.

    Entry `[t, i, j]` is output `i` at step `t` after a unit impulse on input `j` at
    step 0. The offset, if any, is not part of the response.

    **Arguments:**

    - `system`: a `LinearSystem` or a system with `to_linear()`, with inputs.
    - `num_steps`: the number of steps `T` (a positive int).

    **Returns:**

    Shape `(num_steps, p, m)`.

    **Raises:**

    `TypeError` for a system that is not linear; `ValueError` for one without input
    or a bad `num_steps`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(jnp.array([[0.5]]), jnp.array([[1.0]]))
    dynsys.impulse_response(system, 4)[:, 0, 0]  # [0, 1, 0.5, 0.25]
    ```
    """
    return _impulse("impulse_response", system, num_steps)


@checks_own_arguments
def step_response(system, num_steps: int) -> Float[Array, "num_steps p m"]:
    """The step response of a linear discrete-time system from $x_0 = 0$: entry
    `[t, i, j]` is output `i` at step `t` when input `j` is 1 from step 0 on,
    $s_t = D + \\sum_{k=0}^{t-1} C K^k B$ (the running sum of `impulse_response`).
    It tends to the DC gain $C (I - K)^{-1} B + D$ for a stable system.

    **Arguments:**

    - `system`, `num_steps`: as for `impulse_response`.

    **Returns:**

    Shape `(num_steps, p, m)`.

    **Raises:**

    As `impulse_response`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(jnp.array([[0.5]]), jnp.array([[1.0]]))
    dynsys.step_response(system, 4)[:, 0, 0]  # [0, 1, 1.5, 1.75]
    ```
    """
    return _impulse("step_response", system, num_steps, cumulative=True)


class Modes(eqx.Module):
    """The modes of a linear system (from `modes`), sorted by natural frequency.

    **Fields:**

    - `eigenvalues`: complex, shape `(n,)`: of $K$ (discrete time) or $A$ (continuous
        time).
    - `natural_frequency`: shape `(n,)`, $\\omega_n = |s|$ with $s = \\log(\\lambda)
        / dt$ (discrete time) or $s = \\lambda$ (continuous time); in rad/s when `dt`
        is known, else in rad per sample. An eigenvalue 0 gives `inf`.
    - `damping_ratio`: shape `(n,)`, $\\zeta = -\\mathrm{Re}(s) / |s|$: 1 for a real
        stable pole, between 0 and 1 for a damped oscillation, negative when
        unstable; `nan` for a pole at $s = 0$ (an integrator, $\\lambda = 1$).
    - `dt`: the sampling period used (`None`: rad per sample; `0.0`: continuous time).
    """

    eigenvalues: Complex[Array, " n"]
    natural_frequency: Float[Array, " n"]
    damping_ratio: Float[Array, " n"]
    dt: float | None = eqx.field(static=True)


def _continuous_poles(eigenvalues: np.ndarray, dt: float) -> np.ndarray:
    """$s = \\log(\\lambda) / dt$; an eigenvalue exactly 0 gives $s = -\\infty$ with
    no NumPy warning (dividing $\\log 0 = -\\infty$ as a complex number would
    make $\\infty \\cdot 0$, a NaN)."""
    eigenvalues = eigenvalues.astype(np.complex128)
    poles = np.full_like(eigenvalues, -np.inf)
    nonzero = eigenvalues != 0
    poles[nonzero] = np.log(eigenvalues[nonzero]) / dt
    return poles


def modes(system) -> Modes:
    """Eigenvalues, natural frequencies and damping ratios of a linear system.

    For a discrete-time system with sampling period $dt$, each eigenvalue $\\lambda$
    of $K$ maps to the continuous-time pole $s = \\log(\\lambda) / dt$ (principal
    logarithm; $dt = 1$ when the system has no `dt`, giving rad per sample); the
    natural frequency is $|s|$ and the damping ratio $-\\mathrm{Re}(s)/|s|$. So a
    `LinearODE` with poles $-\\zeta\\omega_n \\pm i\\omega_n\\sqrt{1-\\zeta^2}$
    discretised by `discretize(ode, dt)` gives back $\\omega_n$ and $\\zeta$ (for
    $\\omega_n dt\\sqrt{1-\\zeta^2} < \\pi$). A `LinearODE` uses $s = \\lambda$.
    Computed on the host with numpy (an eigendecomposition; not differentiable).

    **Arguments:**

    - `system`: a `LinearSystem`, a system with `to_linear()`, or a `LinearODE`.

    **Returns:**

    A `Modes`.

    **Raises:**

    `TypeError` for a system that is not linear.

    **Example:**

    ```python
    ode = dynsys.LinearODE(jnp.array([[0.0, 1.0], [-4.0, -0.8]]))  # wn 2, zeta 0.2
    m = dynsys.modes(dynsys.discretize(ode, 0.1))
    m.natural_frequency, m.damping_ratio  # [2, 2], [0.2, 0.2]
    ```
    """
    if isinstance(system, LinearODE):
        eigenvalues = np.linalg.eigvals(np.asarray(system.A, np.float64))
        poles, dt = eigenvalues.astype(np.complex128), 0.0
    else:
        linear = _discrete("modes", system)
        eigenvalues = np.linalg.eigvals(np.asarray(linear.K, np.float64))
        dt = linear.dt
        poles = _continuous_poles(eigenvalues, 1.0 if dt is None else dt)
    frequency = np.abs(poles)
    with np.errstate(invalid="ignore", divide="ignore"):
        damping = -poles.real / frequency  # nan for s = 0
    damping = np.where(np.isinf(frequency), 1.0, damping)  # eigenvalue 0
    order = np.lexsort((eigenvalues.imag, frequency))
    return Modes(
        # complex as documented: eigvals gives a real array when all are real
        device_array(eigenvalues.astype(np.complex128)[order]),
        device_array(frequency[order]),
        device_array(damping[order]),
        dt,
    )
