"""Linear models with a noise model in innovation form, and their Kalman predictor."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._custom_types import Input, Output, State, Time
from .._type_checks import checks_own_arguments
from .system import (
    _as_float_arrays,
    AbstractSystem,
    affine_map,
    check_levels,
    check_state_space_shapes,
    level_output,
    LinearSystem,
    shape_error,
)


class InnovationSystem(AbstractSystem):
    """A linear state-space model with a noise model, in innovation form.

    $x_{t+1} = K x_t + B (u_t - \\bar u) + L e_t$, $\\quad y_t = C x_t + D (u_t -
    \\bar u) + \\bar y + e_t$,

    where $e_t$ is white noise (the innovations, covariance `innovation_covariance`)
    and $L$ is the steady-state Kalman gain (`kalman_gain`; not to be confused with
    the transition matrix `K`). As an `AbstractSystem` (`step`, `output`, `rollout`,
    `simulate`) it is the noise-free model ($e_t = 0$), the same as `to_linear()`.
    Its one-step predictor (the Kalman filter) runs on measured outputs:

    $\\hat x_{t+1} = (K - L C) \\hat x_t + (B - L D) (u_t - \\bar u) + L (y_t -
    \\bar y)$, $\\quad \\hat y_t = C \\hat x_t + D (u_t - \\bar u) + \\bar y$;

    it is stable (spectral radius of $K - L C$ below 1) even when $K$ is not, which
    is what lets `fit(..., loss=Prediction())` fit integrating and unstable plants.

    **Arguments:**

    - `K`: transition matrix, shape `(n, n)`.
    - `B`: input matrix, shape `(n, m)`, or `None` (no input).
    - `C`: output matrix, shape `(p, n)`.
    - `D`: feedthrough, shape `(p, m)` (needs `B`), or `None`.
    - `kalman_gain`: $L$, shape `(n, p)`.
    - `innovation_covariance`: the covariance of $e_t$, shape `(p, p)`, or `None`
        (unknown).
    - `dt`, `input_level`, `output_level`: as for `LinearSystem`.

    **Raises:**

    `ValueError` naming the argument and the expected and actual shape.

    **Example:**

    ```python
    model = dynsys.InnovationSystem(K=jnp.array([[1.0]]), B=jnp.array([[0.1]]),
                                    C=jnp.array([[1.0]]),
                                    kalman_gain=jnp.array([[0.5]]))
    dynsys.spectral_radius(model.predictor().K)  # 0.5: stable, though K is not
    ```
    """

    K: Float[Array, "n n"]
    B: Float[Array, "n m"] | None
    C: Float[Array, "p n"]
    D: Float[Array, "p m"] | None
    kalman_gain: Float[Array, "n p"]
    innovation_covariance: Float[Array, "p p"] | None
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
        *,
        kalman_gain: Real[ArrayLike, "n p"],
        innovation_covariance: Real[ArrayLike, "p p"] | None = None,
        dt: float | None = None,
        input_level: Real[ArrayLike, " m"] | None = None,
        output_level: Real[ArrayLike, " p"] | None = None,
    ):
        if C is None:
            C = np.eye(np.shape(K)[0])
        (
            self.K,
            self.B,
            self.C,
            self.D,
            self.kalman_gain,
            self.innovation_covariance,
            self.input_level,
            self.output_level,
        ) = _as_float_arrays(
            K,
            B,
            C,
            D,
            kalman_gain,
            innovation_covariance,
            input_level,
            output_level,
        )
        self.dt = None if dt is None else float(dt)

    def __check_init__(self):
        call = "InnovationSystem"
        check_state_space_shapes(call, "K", self.K, self.B, self.C, self.D)
        n, p = self.state_size, self.output_size
        if self.kalman_gain.shape != (n, p):
            raise shape_error(
                call, "kalman_gain", f"(n, p) = ({n}, {p})", self.kalman_gain.shape
            )
        covariance = self.innovation_covariance
        if covariance is not None and covariance.shape != (p, p):
            raise shape_error(
                call, "innovation_covariance", f"(p, p) = ({p}, {p})", covariance.shape
            )
        check_levels(call, self.input_size, p, self.input_level, self.output_level)
        if self.dt is not None and not self.dt > 0:
            raise ValueError(f"{call}(dt=...): dt must be positive, got {self.dt}.")

    @property
    def state_size(self) -> int:
        return self.K.shape[-1]

    @property
    def input_size(self) -> int:
        return 0 if self.B is None else self.B.shape[-1]

    @property
    def output_size(self) -> int:
        return self.C.shape[-2]

    def step(self, t: Time, x: State, u: Input) -> State:
        del t
        if self.input_level is not None and u is not None:
            u = u - self.input_level
        return affine_map(self.K, x, self.B, u)

    def output(self, t: Time, x: State, u: Input) -> Output:
        del t
        return level_output(self.C, self.D, x, u, self.input_level, self.output_level)

    def to_linear(self) -> LinearSystem:
        """The noise-free model ($e_t = 0$) as a `LinearSystem`."""
        return LinearSystem(
            self.K,
            self.B,
            self.C,
            self.D,
            dt=self.dt,
            input_level=self.input_level,
            output_level=self.output_level,
        )

    @classmethod
    @checks_own_arguments
    def from_linear(
        cls,
        system: LinearSystem,
        kalman_gain: Real[ArrayLike, "n p"] | None = None,
        innovation_covariance: Real[ArrayLike, "p p"] | None = None,
    ) -> "InnovationSystem":
        """The innovation-form model with the deterministic part `system` and the gain
        `kalman_gain` (default zero: the output-error model, whose predictor is the
        free run). `ValueError` for a system with an `offset`."""
        if not isinstance(system, LinearSystem):
            raise TypeError(
                "InnovationSystem.from_linear(system=...): expected a LinearSystem, "
                f"got {type(system).__name__}."
            )
        if system.offset is not None:
            raise ValueError(
                "InnovationSystem.from_linear(system=...): the system has an offset, "
                "which the innovation form has no place for; use output levels "
                "(input_level, output_level) instead."
            )
        n, p = system.state_size, system.output_size
        if kalman_gain is None:
            kalman_gain = jnp.zeros((n, p), system.K.dtype)
        return cls(
            system.K,
            system.B,
            system.C,
            system.D,
            kalman_gain=kalman_gain,
            innovation_covariance=innovation_covariance,
            dt=system.dt,
            input_level=system.input_level,
            output_level=system.output_level,
        )

    def predictor(self) -> LinearSystem:
        """The one-step (Kalman) predictor as a `LinearSystem` whose input is the
        measured inputs and outputs stacked, $[u_t; y_t]$ (shape `(m + p,)`), and
        whose output is $\\hat y_t$: `K - L C`, `B = [B - L D, L]`, `C`, `D = [D,
        0]`, input level $[\\bar u; \\bar y]$, output level $\\bar y$."""
        L = self.kalman_gain
        n, p, m = self.state_size, self.output_size, self.input_size
        dtype = self.K.dtype
        B_u = jnp.zeros((n, 0), dtype) if self.B is None else self.B
        D_u = jnp.zeros((p, m), dtype) if self.D is None else self.D
        u_level = (
            jnp.zeros((m,), dtype) if self.input_level is None else self.input_level
        )
        y_level = (
            jnp.zeros((p,), dtype) if self.output_level is None else self.output_level
        )
        return LinearSystem(
            self.K - L @ self.C,
            jnp.concatenate([B_u - L @ D_u, L], axis=1),
            self.C,
            jnp.concatenate([D_u, jnp.zeros((p, p), dtype)], axis=1),
            dt=self.dt,
            input_level=jnp.concatenate([u_level, y_level]),
            output_level=y_level,
        )


def _deviation_predictions(
    model: InnovationSystem,
    x0: Float[ArrayLike, "N n"],
    ys: Float[ArrayLike, "N T p"],
    us: Float[ArrayLike, "N T m"] | None,
    horizon: int,
) -> Float[Array, "N T p"]:
    """$\\hat y_{t|t-k} - \\bar y$ from deviations `ys`, `us` (levels removed)."""
    K, C, L = model.K, model.C, model.kalman_gain
    A = K - L @ C
    B_bar = None
    if us is not None and model.B is not None:
        B_bar = model.B if model.D is None else model.B - L @ model.D

    def filter_step(x, inputs):
        y, u = inputs
        x_next = x @ A.T + y @ L.T
        if B_bar is not None:
            x_next = x_next + u @ B_bar.T
        return x_next, x

    time_major = (
        jnp.swapaxes(ys, 0, 1),
        None if us is None else jnp.swapaxes(us, 0, 1),
    )
    _, states = jax.lax.scan(filter_step, x0, time_major)
    states = jnp.swapaxes(states, 0, 1)  # (N, T, n): x̂_{t|t-1}, x̂_0 = x0

    def propagate(_, z):
        # z[t] = x̂_{t|t-j} becomes x̂_{t|t-j-1} = K x̂_{t-1|t-j-1} + B u_{t-1};
        # steps with fewer than j + 1 measurements before them are the free run.
        moved = z[:, :-1] @ K.T
        if us is not None and model.B is not None:
            moved = moved + us[:, :-1] @ model.B.T
        return jnp.concatenate([x0[:, None], moved], axis=1)

    states = jax.lax.fori_loop(0, horizon - 1, propagate, states)
    y_hat = states @ C.T
    if us is not None and model.D is not None:
        y_hat = y_hat + us @ model.D.T
    return y_hat


def kalman_predictions(
    model: InnovationSystem,
    x0: Float[ArrayLike, "N n"],
    ys: Float[ArrayLike, "N T p"],
    us: Float[ArrayLike, "N T m"] | None,
    horizon: int = 1,
) -> Float[Array, "N T p"]:
    """The `horizon`-step-ahead predictions $\\hat y_{t|t-k}$ of the Kalman predictor
    of `model`, from the predictor's initial state `x0` ($\\hat x_0$).

    $\\hat y_{t|t-k}$ uses the outputs up to $y_{t-k}$ and the inputs up to $u_t$:
    the predictor runs to $\\hat x_{t-k+1}$, then the noise-free model runs the last
    $k - 1$ steps with the measured inputs. The first $k - 1$ steps (fewer than $k$
    outputs before them) are the free run from `x0`. Differentiable in the model and
    `x0`; jit-compatible (`horizon` is a Python int).

    Shapes: `x0 (N, n)`, `ys (N, T, p)`, `us (N, T, m)` or `None`; returns
    `(N, T, p)` in the data's units (levels included).
    """
    if model.output_level is not None:
        ys = ys - model.output_level[None, None]
    if us is not None and model.input_level is not None:
        us = us - model.input_level[None, None]
    y_hat = _deviation_predictions(model, x0, ys, us, horizon)
    if model.output_level is None:
        return y_hat
    return y_hat + model.output_level[None, None]


def prediction_free_response(
    model: InnovationSystem, num_steps: int, horizon: int = 1
) -> Float[Array, "T p n"]:
    """`G[t] (p, n)`: how $\\hat y_{t|t-k}$ depends on the predictor's initial state;
    `kalman_predictions(model, x0, ...) = kalman_predictions(model, 0, ...) + G x0`."""
    n, p = model.state_size, model.output_size
    dtype = model.K.dtype
    eye = jnp.eye(n, dtype=dtype)
    zeros_y = jnp.zeros((n, num_steps, p), dtype)
    responses = _deviation_predictions(model, eye, zeros_y, None, horizon)
    return jnp.transpose(responses, (1, 2, 0))
