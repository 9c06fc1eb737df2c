"""A linear system whose transition matrix is stable by construction."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._custom_types import Input, Output, State, Time
from .._type_checks import checks_own_arguments
from .system import (
    _as_float_arrays,
    AbstractSystem,
    check_levels,
    check_state_space_shapes,
    level_output,
    LinearSystem,
    shape_error,
)


_EPS = 1e-6  # S = L L^T + _EPS I is positive definite whatever L is.


class StableLinearSystem(AbstractSystem):
    """A linear system $x_{t+1} = K x_t + B u_t + \\mathrm{offset}$,
    $y_t = C x_t + D u_t$, whose $K$ has spectral radius below `bound` for every
    value of its parameters; like `LinearSystem` it may carry an operating point
    (`input_level`, `output_level`: $u_t$ and $y_t$ above are then deviations from
    them).

    $K = S^{-1} M S$ with $S = L L^\\top + \\epsilon I$ (symmetric positive definite,
    so invertible) and $M = \\mathrm{bound}\\; W / \\sqrt{1 + \\sigma_{\\max}(W)^2}$.
    Then $\\rho(K) = \\rho(M) \\le \\lVert M \\rVert_2 = \\mathrm{bound}\\;
    \\sigma_{\\max}/\\sqrt{1 + \\sigma_{\\max}^2} < \\mathrm{bound}$. The parameters
    `W` and `L` are unconstrained, so any optimiser keeps $K$ stable. Every $K$ with
    $\\rho(K) < \\mathrm{bound}$ has such a form (take $S^2$ a Lyapunov matrix of
    $K$), so nothing stable is excluded; `from_linear` finds one.

    **Arguments:**

    - `W`: unconstrained, shape `(n, n)`.
    - `L`: unconstrained, shape `(n, n)`.
    - `B`: input matrix, shape `(n, m)`, or `None`.
    - `C`: output matrix, shape `(p, n)`; `None` means $y_t = x_t$.
    - `D`: feedthrough matrix, shape `(p, m)` (with `p = n` when `C` is `None`);
        needs `B`.
    - `offset`: constant term, shape `(n,)`, or `None`.
    - `bound`: the bound on the spectral radius (a positive Python float).
    - `dt`: optional sampling period, only used to label time.
    - `input_level`, `output_level`: the operating point, shapes `(m,)`, `(p,)`, or
        `None` (see `LinearSystem`).

    **Raises:**

    `ValueError` naming the argument and the expected and actual shape.

    **Example:**

    ```python
    model = dynsys.StableLinearSystem(W=10.0 * jnp.eye(2), L=jnp.eye(2))
    dynsys.spectral_radius(model.K) < 1.0  # True, whatever W and L
    ```
    """

    W: Float[Array, "n n"]
    L: Float[Array, "n n"]
    B: Float[Array, "n m"] | None
    C: Float[Array, "p n"] | None
    D: Float[Array, "p m"] | None
    offset: Float[Array, " n"] | None
    bound: float = eqx.field(static=True)
    dt: float | None = eqx.field(static=True)
    input_level: Float[Array, " m"] | None
    output_level: Float[Array, " p"] | None

    @checks_own_arguments
    def __init__(
        self,
        W: Real[ArrayLike, "n n"],
        L: Real[ArrayLike, "n n"],
        B: Real[ArrayLike, "n m"] | None = None,
        C: Real[ArrayLike, "p n"] | None = None,
        D: Real[ArrayLike, "p m"] | None = None,
        offset: Real[ArrayLike, " n"] | None = None,
        *,
        bound: float = 1.0,
        dt: float | None = None,
        input_level: Real[ArrayLike, " m"] | None = None,
        output_level: Real[ArrayLike, " p"] | None = None,
    ):
        arrays = _as_float_arrays(W, L, B, C, D, offset, input_level, output_level)
        self.W, self.L, self.B, self.C, self.D, self.offset = arrays[:6]
        self.input_level, self.output_level = arrays[6:]
        self.bound = float(bound)
        self.dt = None if dt is None else float(dt)

    def __check_init__(self):
        call = "StableLinearSystem"
        check_state_space_shapes(call, "W", self.W, self.B, self.C, self.D, self.offset)
        check_levels(
            call, self.input_size, self.output_size, self.input_level, self.output_level
        )
        n = self.W.shape[0]
        if self.L.shape != (n, n):
            raise shape_error(call, "L", f"(n, n) = ({n}, {n})", self.L.shape)
        if not (np.isfinite(self.bound) and self.bound > 0):
            raise ValueError(
                "StableLinearSystem(bound=...): bound must be a positive number, "
                f"got {self.bound}."
            )
        if self.dt is not None and not self.dt > 0:
            raise ValueError(
                f"StableLinearSystem(dt=...): dt must be positive, got {self.dt}."
            )

    @property
    def state_size(self) -> int:
        return self.W.shape[-1]

    @property
    def input_size(self) -> int:
        return 0 if self.B is None else self.B.shape[-1]

    @property
    def output_size(self) -> int:
        return self.state_size if self.C is None else self.C.shape[-2]

    @property
    def K(self) -> Float[Array, "n n"]:
        """The transition matrix $K = S^{-1} M S$, with $\\rho(K) < $ `bound`."""
        n = self.state_size
        sigma = jnp.linalg.svd(self.W, compute_uv=False)[0]
        M = (self.bound / jnp.sqrt(1 + sigma**2)) * self.W
        S = self.L @ self.L.T + _EPS * jnp.eye(n, dtype=self.L.dtype)
        return jnp.linalg.solve(S, M @ S)

    def to_linear(self) -> LinearSystem:
        """The same system as a `LinearSystem` (computes `K` once; differentiable)."""
        return LinearSystem(
            self.K,
            self.B,
            self.C,
            self.D,
            offset=self.offset,
            dt=self.dt,
            input_level=self.input_level,
            output_level=self.output_level,
        )

    def step(self, t: Time, x: State, u: Input) -> State:
        # For long rollouts, `to_linear()` first avoids recomputing K at every step;
        # `fit` does that.
        return self.to_linear().step(t, x, u)

    def output(self, t: Time, x: State, u: Input) -> Output:
        del t
        return level_output(self.C, self.D, x, u, self.input_level, self.output_level)

    @classmethod
    @checks_own_arguments
    def from_linear(
        cls, system: LinearSystem, *, bound: float = 1.0, margin: float = 1e-3
    ) -> "StableLinearSystem":
        """The `StableLinearSystem` with the same `K`, `B`, `C`, `D`, `offset` and
        levels as `system`.

        If $\\rho(K) \\ge (1 - \\mathrm{margin})\\,\\mathrm{bound}$, `K` is first
        scaled down to spectral radius $(1 - \\mathrm{margin})\\,\\mathrm{bound}$ (a
        stable starting point near the given one), so an unstable least-squares
        estimate can be used to start a stable fit.

        **Arguments:**

        - `system`: a `LinearSystem` (its `C` and `D` are carried over).
        - `bound`: the spectral-radius bound of the result.
        - `margin`: the relative distance to the bound that an estimate is pulled to.

        **Returns:**

        A `StableLinearSystem` whose `K` equals `system.K` (to round-off) when it was
        inside the bound.

        **Raises:**

        `ValueError` if `margin` is not in `(0, 1)`.
        """
        if not 0.0 < margin < 1.0:
            raise ValueError(
                "StableLinearSystem.from_linear(margin=...): margin must be in (0, 1), "
                f"got {margin}."
            )
        K = np.asarray(system.K, dtype=np.float64)
        n = K.shape[0]
        rho = float(np.max(np.abs(np.linalg.eigvals(K))))
        limit = (1.0 - margin) * bound
        if rho > limit:
            K = K * (limit / rho)
            rho = limit
        # Lyapunov matrix P of K / gamma: (K/g)^T P (K/g) - P = -I, so that
        # ||P^{1/2} K P^{-1/2}||_2 < gamma < bound.
        gamma = 0.5 * (rho + bound)
        Kg = K / gamma
        kron = np.kron(Kg.T, Kg.T)
        P = np.linalg.solve(np.eye(n * n) - kron, np.eye(n).reshape(-1)).reshape(n, n)
        P = 0.5 * (P + P.T)
        eigenvalues, vectors = np.linalg.eigh(P)
        S = (vectors * np.sqrt(eigenvalues)) @ vectors.T
        S = S / np.min(np.sqrt(eigenvalues))  # smallest eigenvalue 1
        M = S @ K @ np.linalg.inv(S)
        sigma = np.linalg.norm(M, 2)
        W = M / np.sqrt(bound**2 - sigma**2)
        L = np.linalg.cholesky(S - _EPS * np.eye(n))
        dtype = system.K.dtype
        return cls(
            jnp.asarray(W, dtype),
            jnp.asarray(L, dtype),
            system.B,
            system.C,
            system.D,
            system.offset,
            bound=bound,
            dt=system.dt,
            input_level=system.input_level,
            output_level=system.output_level,
        )
