"""Rollout methods: how trajectories are computed.

`Sequential` runs one `lax.scan` over time and is valid for everything. For linear
cases (a `LinearSystem` with open-loop inputs and/or `LinearFeedback`) the rollout is
the affine recurrence $x_{t+1} = M x_t + b_t$ with $M = K - BG$ and
$b_t = B w_t + \\mathrm{offset}$; `Parallel` and `Chunked` solve that recurrence
with fewer sequential steps, and `LinearAdjoint` solves its adjoint recurrence with
the same solver.
"""

import abc
import functools
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Real

from .._type_checks import checks_own_arguments
from .._systems.controller import AbstractController
from .._systems.system import AbstractSystem
from .adjoint import (
    AbstractAdjoint,
    Checkpointed,
    is_linear_case,
    linear_case_problem,
    LinearAdjoint,
)
from .affine import (
    _batch_input_axis,
    _batched,
    _chunked_or_scan_solve,
    _chunked_solve_batch,
    _parallel_solve,
    _scan_solve_batch,
)
from .linear_path import _linear_rollout_batch
from .step import make_step


# T1 stands for T+1 (jaxtyping checks a symbolic axis only when its names are bound
# before it, and `T` is not when `inputs` is None).
StepOutputs = tuple[
    Float[Array, "T1 n"], Float[Array, "T m"] | None, Float[Array, "T p"]
]
BatchOutputs = tuple[
    Float[Array, "N T1 n"], Float[Array, "N T m"] | None, Float[Array, "N T p"]
]


class AbstractMethod(eqx.Module):
    """How `rollout` computes trajectories.

    A method implements `rollout` for one trajectory; `rollout_batch` (a batch
    flattened to one leading axis) defaults to `jax.vmap` over it, and methods that
    gain from seeing the whole batch (one matrix product over all trajectories)
    override it. `check` rejects the cases a method cannot handle.
    """

    @abc.abstractmethod
    def check(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        has_inputs: bool,
        adjoint: AbstractAdjoint,
    ) -> None:
        """Raise `ValueError` if this method cannot roll out this case."""

    @abc.abstractmethod
    def rollout(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        x0: Float[Array, " n"],
        ts: Real[Array, " T1"],
        inputs: Float[Array, "T m"] | None,
        adjoint: AbstractAdjoint,
    ) -> StepOutputs:
        """Return `(x_0 … x_T, u_0 … u_{T-1}, y_0 … y_{T-1})` for one trajectory."""

    def rollout_batch(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        x0: Float[Array, "N n"],
        ts: Real[Array, " T1"],
        inputs: Float[Array, "N T m"] | Float[Array, "1 T m"] | None,
        adjoint: AbstractAdjoint,
    ) -> BatchOutputs:
        """`rollout` for `N` trajectories; `inputs` may have a leading axis of 1."""
        inputs, axis = _batch_input_axis(inputs, x0.shape[0])
        single = lambda x, u: self.rollout(system, controller, x, ts, u, adjoint)  # noqa: E731
        return jax.vmap(single, in_axes=(0, axis))(x0, inputs)


class _AbstractLinearMethod(AbstractMethod):
    """A method that solves the affine recurrence of a linear case."""

    @abc.abstractmethod
    def _solver(self, adjoint: AbstractAdjoint) -> Callable:
        """`solve(M, x0, b_seq, b_const, num_steps) -> x_0 … x_T` (one trajectory)."""

    def _name(self) -> str:
        return f"{type(self).__name__}()"

    def check(self, system, controller, has_inputs, adjoint):
        del has_inputs
        problem = linear_case_problem(self._name(), system, controller)
        if problem is not None:
            raise ValueError(f"rollout(method={self._name()}): {problem}")

    def rollout(self, system, controller, x0, ts, inputs, adjoint):
        batch_inputs = None if inputs is None else inputs[None]
        xs, us, ys = self.rollout_batch(
            system, controller, x0[None], ts, batch_inputs, adjoint
        )
        return xs[0], None if us is None else us[0], ys[0]

    def rollout_batch(self, system, controller, x0, ts, inputs, adjoint):
        solve = self._solver(adjoint)
        return _linear_rollout_batch(solve, system, controller, x0, ts, inputs, adjoint)


class Sequential(AbstractMethod):
    """One `jax.lax.scan` over time: valid for every system and controller.

    The scan writes each step's state, input and output into arrays allocated once;
    compile time does not depend on the number of steps. With `LinearAdjoint()` the
    forward and adjoint recurrences are both plain scans.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    traj = dynsys.rollout(system, jnp.ones(2), 20, method=dynsys.Sequential())
    ```
    """

    def check(self, system, controller, has_inputs, adjoint):
        del system, controller, has_inputs, adjoint

    def rollout(self, system, controller, x0, ts, inputs, adjoint):
        if isinstance(adjoint, LinearAdjoint):
            return _AbstractLinearMethod.rollout(
                self, system, controller, x0, ts, inputs, adjoint
            )
        step = make_step(system, controller)
        _, (xs, us, ys) = adjoint.scan(step, x0, (ts[:-1], inputs))
        xs = jnp.concatenate([x0[None], xs], axis=0)
        return xs, us, ys

    def rollout_batch(self, system, controller, x0, ts, inputs, adjoint):
        if is_linear_case(system, controller):
            scan = jax.lax.scan if isinstance(adjoint, LinearAdjoint) else adjoint.scan
            solve = functools.partial(_scan_solve_batch, scan)
            return _linear_rollout_batch(
                solve, system, controller, x0, ts, inputs, adjoint
            )
        # One scan over time whose carry is the whole batch (each step vmapped):
        # every step is one batched product, and the stacked outputs are moved to
        # the batch-first layout once at the end.
        inputs_b, axis = _batch_input_axis(inputs, x0.shape[0])
        if axis == 0:
            inputs_b = jnp.moveaxis(inputs_b, 1, 0)  # time first, for the scan
        step = jax.vmap(make_step(system, controller), in_axes=(0, (None, axis)))
        _, (xs, us, ys) = adjoint.scan(step, x0, (ts[:-1], inputs_b))
        xs = jnp.concatenate([x0[None], xs], axis=0)
        move = lambda a: None if a is None else jnp.moveaxis(a, 0, 1)  # noqa: E731
        return move(xs), move(us), move(ys)


class Parallel(_AbstractLinearMethod):
    """A parallel prefix scan over affine maps: $O(\\log T)$ sequential depth.

    Step $t$ of a linear case is the affine map $x \\mapsto M x + b_t$ with
    $M = K - BG$ and $b_t = B w_t + \\mathrm{offset}$. Affine maps compose
    associatively, $(M_2, b_2) \\circ (M_1, b_1) = (M_2 M_1, M_2 b_1 + b_2)$, so
    `jax.lax.associative_scan` computes every state in $O(\\log T)$ rounds. The work
    is $O(T n^3)$ for the matrix products (shared by the whole batch) plus
    $O(T n^2)$ per trajectory: it pays off on accelerators, for small states and
    long horizons. Valid for a `LinearSystem` with open-loop inputs and/or a
    `LinearFeedback`; with `Autodiff()` or `LinearAdjoint()` (whose reverse pass is
    a parallel scan too).

    **Raises:**

    `ValueError` (at `rollout`) for a non-linear case or `Checkpointed()`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    traj = dynsys.rollout(system, jnp.ones(2), 1000, method=dynsys.Parallel())
    ```
    """

    def check(self, system, controller, has_inputs, adjoint):
        super().check(system, controller, has_inputs, adjoint)
        if isinstance(adjoint, Checkpointed):
            raise ValueError(
                "rollout(method=Parallel()): Checkpointed() recomputes segments of a "
                "sequential scan, and an associative scan has none; use "
                "Parallel() with Autodiff() or LinearAdjoint(), or Chunked() / "
                "Sequential() with Checkpointed()."
            )

    def _solver(self, adjoint):
        del adjoint
        return _batched(_parallel_solve)


@checks_own_arguments  # (__check_init__)
class Chunked(_AbstractLinearMethod):
    """Advance `size` steps at once by one matrix product with stacked powers of $M$.

    For a linear time-invariant case $x_{t+1} = M x_t + b_t$ ($M = K - BG$), the
    states of a chunk follow from its first state by
    $x_{k+i} = M^i x_k + \\sum_{j<i} M^{i-1-j} b_{k+j}$, $i < \\text{size}$: one
    product with the stacked powers $[I, M, \\dots, M^{\\text{size}-1}]$ plus one with
    a block-Toeplitz matrix of powers for the inputs. A short scan of $T/\\text{size}$
    steps carries the chunk starts
    ($x_{k+\\text{size}} = M^{\\text{size}} x_k + \\dots$);
    the states of all chunks and all trajectories then come from one large matrix
    product. This turns $T$ small products into $T/\\text{size}$ steps and a few large
    ones. Works with every adjoint (`Checkpointed()` checkpoints the scan over
    chunks; `LinearAdjoint()` solves the adjoint recurrence chunked as well).

    Caveat: powers of $M$ up to `size` appear. If $\\|M\\| > 1$ they grow and the
    rounding error of a state can grow by $\\|M\\|^{\\text{size}}$ relative to
    `Sequential()`; keep `size` small for unstable systems, or use float64.

    **Arguments:**

    - `size`: steps per chunk (a positive integer). A horizon that is not a multiple
        of `size` is padded internally.

    **Raises:**

    `ValueError` if `size` is not a positive integer; at `rollout`, for a non-linear
    case.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    traj = dynsys.rollout(system, jnp.ones(2), 1000, method=dynsys.Chunked(25))
    ```
    """

    size: int = eqx.field(static=True)

    def __check_init__(self):
        s = self.size
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(
                f"Chunked(size=...): size must be a positive integer, got {s!r}."
            )

    def _name(self) -> str:
        return f"Chunked({self.size})"

    def _solver(self, adjoint):
        if isinstance(adjoint, LinearAdjoint):
            return functools.partial(_chunked_or_scan_solve, self.size)
        return functools.partial(_chunked_solve_batch, adjoint.scan, self.size)


def default_method(
    system: AbstractSystem,
    controller: AbstractController | None,
    has_inputs: bool,
    adjoint: AbstractAdjoint | None,
    num_steps: int,
    batch_size: int = 1,
) -> AbstractMethod:
    """The method `rollout` uses when none is given (see docs/performance.md).

    - Not a linear case (any other system or controller): `Sequential()`.
    - A linear case with `num_steps < 64`: `Sequential()` (nothing to gain).
    - Otherwise `Chunked(size)` with `size` from `default_chunk_size`, unless that
        is below 4: then `Sequential()`. Below 4 means a large state with few
        trajectories (the powers of $M$ would cost more than the rollout), or
        open-loop inputs with more than $n/2$ inputs and large steps (the
        block-Toeplitz input term, `size * m * n` multiply-adds per step, would
        cost more than twice the scan's `n * n`).
    """
    del adjoint
    if not is_linear_case(system, controller) or num_steps < 64:
        return Sequential()
    input_size = system.input_size if has_inputs else 0
    size = default_chunk_size(
        system.state_size, num_steps, has_inputs, batch_size, input_size=input_size
    )
    return Chunked(size) if size >= 4 else Sequential()


def default_chunk_size(
    state_size: int,
    num_steps: int,
    has_inputs: bool = True,
    batch_size: int = 1,
    *,
    input_size: int = 1,
) -> int:
    """The chunk size `Chunked` gets by default.

    First an ideal size, about $\\sqrt{(T+1) N / n}$ for $N$ trajectories: this
    balances the scan over chunks ($N n^2$ per chunk) against the powers of $M$
    ($n^3$ per power). Then a cap:

    - at most $2^{21}$ numbers in the stacked powers;
    - with `m` open-loop inputs, also at most $\\sqrt{T}$ (the powers and the chunk
        starts are two scans, of `size` and $T/\\text{size}$ steps) and at most
        $2n/m$: the block-Toeplitz input term, `size * m * n` multiply-adds per
        step, then costs at most twice a scan step's `n * n`. Where a batched scan
        step is tiny ($N \\ge 2$ and $N n^2 \\le 8192$: it then costs mostly loop
        overhead and transposes), the cap is at least 4.

    Then, if a divisor of $T+1$ lies within a factor of 4 of it (2 with inputs,
    whose Toeplitz term grows with the size; under the cap, and not below 4), the
    nearest such divisor: the chunks then tile $x_0 \\dots x_T$ exactly and the
    trajectory is never padded and sliced (a copy of the whole trajectory).
    A result below 4 means chunking does not pay (`default_method` then picks
    `Sequential()`).
    """
    n = max(state_size, 1)
    length = num_steps + 1
    ideal = math.isqrt(length * max(batch_size, 1) // n)
    cap = 2**21 // (n * n)
    if has_inputs:
        per_input = 2 * n // max(input_size, 1)
        if batch_size >= 2 and batch_size * n * n <= 8192:
            per_input = max(per_input, 4)
        cap = min(cap, math.isqrt(num_steps), per_input)
    cap = max(1, min(cap, length))
    ideal = max(1, min(ideal, cap))
    # A larger size costs more with inputs (the Toeplitz term grows with it): move
    # by at most 2x there, 4x without; and never below 4 from an ideal of 4 or more.
    spread = 2 if has_inputs else 4
    low = max(1, ideal // spread, min(ideal, 4))
    divisors = [d for d in range(low, min(spread * ideal, cap) + 1) if length % d == 0]
    if not divisors:
        return ideal
    return min(divisors, key=lambda d: abs(math.log(d / ideal)))
