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
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Real

from .._systems.controller import AbstractController
from .._systems.system import AbstractSystem
from .adjoint import (
    AbstractAdjoint,
    Checkpointed,
    is_linear_case,
    linear_case_problem,
    LinearAdjoint,
)


StepOutputs = tuple[
    Float[Array, "T+1 n"], Float[Array, "T m"] | None, Float[Array, "T p"]
]
BatchOutputs = tuple[
    Float[Array, "N T+1 n"], Float[Array, "N T m"] | None, Float[Array, "N T p"]
]


def closed_loop_input(
    controller: AbstractController | None,
    t: Real[Array, ""],
    x: Float[Array, " n"],
    u_open: Float[Array, " m"] | None,
) -> Float[Array, " m"] | None:
    """The input applied at time `t`: feedback plus open-loop input, either optional."""
    if controller is None:
        return u_open
    u = controller(t, x)
    return u if u_open is None else u + u_open


def make_step(
    system: AbstractSystem, controller: AbstractController | None
) -> Callable:
    """The scan body of one closed-loop step: `(x_t, (t, u_open)) -> (x_{t+1}, rec)`.

    `rec = (x_{t+1}, u_t, y_t)`; `x_{t+1}` is cast to the dtype of `x_t` so that the
    carry's dtype is stable.
    """

    def step(x, t_and_input):
        t, u_open = t_and_input
        u = closed_loop_input(controller, t, x, u_open)
        y = system.output(t, x, u)
        x_next = system.step(t, x, u).astype(x.dtype)
        return x_next, (x_next, u, y)

    return step


def _batch_input_axis(inputs, size):
    """`(inputs for vmap, in_axis)`: a leading axis of 1 broadcasts unmapped."""
    if inputs is None:
        return None, None
    if inputs.shape[0] == size:
        return inputs, 0
    return inputs[0], None


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
        ts: Real[Array, " T+1"],
        inputs: Float[Array, "T m"] | None,
        adjoint: AbstractAdjoint,
    ) -> StepOutputs:
        """Return `(x_0 … x_T, u_0 … u_{T-1}, y_0 … y_{T-1})` for one trajectory."""

    def rollout_batch(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        x0: Float[Array, "N n"],
        ts: Real[Array, " T+1"],
        inputs: Float[Array, "N T m"] | Float[Array, "1 T m"] | None,
        adjoint: AbstractAdjoint,
    ) -> BatchOutputs:
        """`rollout` for `N` trajectories; `inputs` may have a leading axis of 1."""
        inputs, axis = _batch_input_axis(inputs, x0.shape[0])
        single = lambda x, u: self.rollout(system, controller, x, ts, u, adjoint)  # noqa: E731
        return jax.vmap(single, in_axes=(0, axis))(x0, inputs)


# --- Solvers of the affine recurrence x_{t+1} = M x_t + b_t (one trajectory) -------
#
# Each returns the full trajectory x_0 … x_T, shape (T+1, n). `b_seq` is `(T, n)`, a
# `Factored` input term, or None, and `b_const` is `(n,)` or None;
# b_t = b_seq[t] + b_const.


class Factored(NamedTuple):
    """The input term $b_t = B w_t$ kept as its factors: `inputs (N or 1, T, m)` and
    `matrix (n, m)`. `Chunked` works with the `m`-wide inputs directly (its
    block-Toeplitz product is then `size·m` wide instead of `size·n`); the other
    solvers take `dense(b_seq)`."""

    inputs: Float[Array, "N T m"]
    matrix: Float[Array, "n m"]


def _dense(b_seq):
    """`b_seq` as an array `(N or 1, T, n)` (a `Factored` term multiplied out)."""
    if isinstance(b_seq, Factored):
        return jnp.einsum("ntm,am->nta", b_seq.inputs, b_seq.matrix)
    return b_seq


def _add(x, *terms):
    for term in terms:
        if term is not None:
            x = x + term
    return x


def _time_major(b_seq):
    """`b_seq` as an array `(T, N or 1, n)`, the layout a scan over time reads.

    A `Factored` term is moved time-first while it is `m` wide, then multiplied out
    by one two-dimensional product `(T*N, m) @ (m, n)`.
    """
    if not isinstance(b_seq, Factored):
        return jnp.moveaxis(b_seq, 1, 0)
    inputs = jnp.moveaxis(b_seq.inputs, 1, 0)
    flat = inputs.reshape(-1, inputs.shape[-1]) @ b_seq.matrix.T
    return flat.reshape(inputs.shape[:-1] + (flat.shape[-1],))


def _scan_solve_batch(scan, M, x0, b_seq, b_const, num_steps):
    """The sequential solver for a whole batch: the carry is `(N, n)`.

    A `Factored` input term of a large step (`N * n**2 >= 32768` multiply-adds)
    stays `m` wide: the scan reads `u_t (N, m)` and adds `u_t @ B^T` in its body,
    like a hand-written scan. Multiplied out beforehand, its reverse pass would
    form `dB` as one product contracting all `N*T` rows, which XLA's CPU backend
    runs slowly (the whole gradient of 64 trajectories, `n = 32`, `m = 4`,
    `T = 1000` took 2x as long). For smaller steps the extra product per step
    costs more than that, and the term is multiplied out by `_time_major`.
    """
    n = x0.shape[-1]
    Mt = M.T
    b_const = None if b_const is None else b_const[None]
    if b_seq is None:
        xs = jnp.zeros((num_steps, 0), x0.dtype)
        body = lambda x, _: (_add(x @ Mt, b_const), x)  # noqa: E731
    elif isinstance(b_seq, Factored) and b_seq.inputs.shape[0] * n * n >= 32768:
        xs = jnp.moveaxis(b_seq.inputs, 1, 0)  # (T, N, m)
        Bt = b_seq.matrix.T
        body = lambda x, u: (_add(x @ Mt, u @ Bt, b_const), x)  # noqa: E731
    else:
        xs = _time_major(b_seq)  # (T, N or 1, n)
        body = lambda x, b: (_add(x @ Mt, b, b_const), x)  # noqa: E731
    final, before = scan(body, x0, xs)
    return jnp.moveaxis(jnp.concatenate([before, final[None]], axis=0), 0, 1)


def _parallel_solve(M, x0, b_seq, b_const, num_steps):
    n = x0.shape[0]
    b = jnp.zeros((num_steps, n), x0.dtype) if b_seq is None else b_seq
    if b_const is not None:
        b = b + b_const[None, :]
    # Elements (A_t, b_t); the first, (0, x_0), makes the scan yield x_0 … x_T.
    matrices = jnp.concatenate(
        [jnp.zeros((1, n, n), M.dtype), jnp.broadcast_to(M, (num_steps, n, n))]
    )
    offsets = jnp.concatenate([x0[None], b], axis=0)

    def compose(first, second):
        a1, b1 = first
        a2, b2 = second
        return (
            jnp.einsum("...ij,...jk->...ik", a2, a1),
            jnp.einsum("...ij,...j->...i", a2, b1) + b2,
        )

    _, xs = jax.lax.associative_scan(compose, (matrices, offsets))
    return xs


def _transposed_powers(M, count):
    """`[I, M^T, (M^T)², …, (M^T)^(count-1)]`, shape `(count, n, n)`, by a scan.

    A scan (not a loop unrolled in Python, nor doubling) keeps the number of
    compiled operations, and so the compile time, independent of `count`.
    """
    eye = jnp.eye(M.shape[0], dtype=M.dtype)
    Mt = M.T

    def body(P, _):
        return P @ Mt, P

    _, powers = jax.lax.scan(body, eye, None, length=count)
    return powers


def _toeplitz(stack):
    """Block-Toeplitz matrices of a stack `(size, r, n)` of blocks `stack[k]`.

    `toeplitz[(j, c), (i, a)] = stack[i-1-j][c, a]` where `j < i`, else 0, shape
    `(size*r, size*n)`; and `to_end[(j, c), a] = stack[size-1-j][c, a]`, shape
    `(size*r, n)`. With `stack[k] = (M^k G)^T`, a chunk of drives `w (size*r,)`
    contributes `w @ toeplitz` to the chunk's states and `w @ to_end` to the next
    chunk's start.
    """
    size, r, n = stack.shape
    i = jnp.arange(size)
    lag = i[None, :] - 1 - i[:, None]  # [j, i] -> i - 1 - j
    blocks = jnp.where(
        (lag >= 0)[:, :, None, None], stack[jnp.clip(lag, 0, size - 1)], 0
    )  # [j, i, c, a]
    toeplitz = blocks.transpose(0, 2, 1, 3).reshape(size * r, size * n)
    return toeplitz, stack[::-1].reshape(size * r, n)


def _chunked_solve_batch(scan, size, M, x0, b_seq, b_const, num_steps):
    """The chunked solver for a whole batch: `x0 (N, n)`, `b_seq (N or 1, T, n)` or
    a `Factored` input term.

    Chunk `c` holds positions `c*size … c*size + size-1`; there are enough chunks to
    cover `x_0 … x_T`. The large products have the batch and chunk axes folded into
    the rows, `(N*C, n) @ (n, size*n)`, so their result is already laid out as
    `(N, time, n)`: no large array is transposed, and when `size` divides `T+1`
    none is padded or sliced either. A `Factored` term $B w_t$ enters through the
    blocks $(M^k B)^T$: its block-Toeplitz product is `(N*C, size*m) @
    (size*m, size*n)`, `size*m*n` multiply-adds per step instead of `size*n*n`.
    """
    batch, n = x0.shape
    num_chunks = -(-(num_steps + 1) // size)
    padded = num_chunks * size
    # powers[i] = (M^T)^i for i = 0 … size-1 (M^size comes from the last one).
    powers = _transposed_powers(M, size)
    jump_t = powers[-1] @ M.T  # (M^size)^T
    # x_{k+i} = M^i x_k + sum_{j<i} M^{i-1-j} b_{k+j} for i < size: as one product,
    # starts (N*C, n) @ to_states (n, size*n), with to_states[b, (i, a)] = M^i[a, b].
    to_states = powers.transpose(1, 0, 2).reshape(n, size * n)
    within = end = None
    if b_seq is not None:
        if isinstance(b_seq, Factored):
            drives, matrix = b_seq
            # (M^k B)^T = B^T (M^T)^k, shape (size, m, n).
            stack = jnp.matmul(matrix.T[None], powers)
        else:
            drives, stack = b_seq, powers
        rows, width = drives.shape[0], drives.shape[-1]
        chunks = jnp.pad(drives, ((0, 0), (0, padded - num_steps), (0, 0)))
        # Two-dimensional products: the reverse pass of a (rows, C, k) @ (k, j)
        # product contracts two axes, which XLA's CPU backend runs several times
        # slower than the same contraction over one folded axis.
        chunks = chunks.reshape(rows * num_chunks, size * width)
        toeplitz, to_end = _toeplitz(stack)
        within = (chunks @ toeplitz).reshape(rows, num_chunks, size * n)
        end = (chunks @ to_end).reshape(rows, num_chunks, n)
    if b_const is not None:
        # A constant term adds sum_{k<i} M^k b at position i of every chunk, and
        # sum_{k<size} M^k b to the next start: one cumulative sum of M^k b.
        terms = jnp.einsum("b,kba->ka", b_const, powers)  # row k: (M^k b)^T
        sums = jnp.cumsum(terms, axis=0)
        const = jnp.concatenate([jnp.zeros_like(sums[:1]), sums[:-1]]).reshape(-1)
        within = _add(const[None, None], within)
        end = _add(sums[-1][None, None], end)

    if end is None:
        free = jnp.zeros((num_chunks, 0), x0.dtype)
        _, starts = scan(lambda x, _: (x @ jump_t, x), x0, free)
    else:
        # A constant term alone gives one `end` for every chunk and trajectory.
        ends = jnp.broadcast_to(end, (batch, num_chunks, n)).transpose(1, 0, 2)
        _, starts = scan(lambda x, e: (x @ jump_t + e, x), x0, ends)
    # starts (C, N, n) is 1/size of the trajectory: moving its axes is cheap.
    starts = starts.transpose(1, 0, 2).reshape(batch * num_chunks, n)
    states = (starts @ to_states).reshape(batch, num_chunks, size * n)
    states = _add(states, within).reshape(batch, padded, n)
    if padded == num_steps + 1:
        return states
    return jax.lax.slice_in_dim(states, 0, num_steps + 1, axis=1)


def _batched(single):
    """A batched solver from a one-trajectory one (vmapped; inputs may broadcast)."""

    def solve(M, x0, b_seq, b_const, num_steps):
        b_seq, axis = _batch_input_axis(_dense(b_seq), x0.shape[0])
        fn = lambda x, b: single(M, x, b, b_const, num_steps)  # noqa: E731
        return jax.vmap(fn, in_axes=(0, axis))(x0, b_seq)

    return solve


def _reverse_solve(solve, Mt, terminal, c):
    """Solve $y_t = M^T y_{t+1} + c_t$ backwards from $y_T$; return y_0 … y_T."""
    flipped = solve(Mt, terminal, c[:, ::-1], None, c.shape[1])
    return flipped[:, ::-1]


# --- The linear path: one affine recurrence for the whole batch -------------------


def _closed_loop_matrix(K, B, G):
    return K if G is None else K - B @ G


def _states(solve, num_steps, K, B, offset, G, x0, w):
    dtype = x0.dtype
    M = _closed_loop_matrix(K, B, G).astype(dtype)
    b_seq = None if w is None else Factored(w.astype(dtype), B.astype(dtype))
    b_const = None if offset is None else offset.astype(dtype)
    return solve(M, x0, b_seq, b_const, num_steps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _states_linear_adjoint(solve, num_steps, K, B, offset, G, x0, w):
    return _states(solve, num_steps, K, B, offset, G, x0, w)


def _states_fwd(solve, num_steps, K, B, offset, G, x0, w):
    xs = _states(solve, num_steps, K, B, offset, G, x0, w)
    return xs, (K, B, offset, G, xs, w)


def _states_bwd(solve, num_steps, residuals, g):
    K, B, offset, G, xs, w = residuals
    dtype = xs.dtype
    Mt = _closed_loop_matrix(K, B, G).astype(dtype).T
    lambdas = _reverse_solve(solve, Mt, g[:, -1], g[:, :-1])  # lambda_0 … lambda_T
    later = lambdas[:, 1:]  # lambda_{t+1}, t = 0 … T-1
    # One matrix product over all trajectories and steps: sum_t lambda_{t+1} x_t^T
    # (batch and time folded into one axis: XLA's CPU backend contracts one axis
    # several times faster than two).
    n = xs.shape[-1]
    flat_later = later.reshape(-1, n)
    dM = flat_later.T @ xs[:, :-1].reshape(-1, n)
    dK = dM.astype(K.dtype)
    dB = dG = doffset = dw = None
    if G is not None:
        dG = -(B.T.astype(dtype) @ dM).astype(G.dtype)
    if B is not None:
        # u_t = w_t - G x_t, so sum_t lambda_{t+1} u_t^T = Lambda^T W - dM G^T.
        dB = jnp.zeros(B.shape, dtype)
        if w is not None:
            if w.shape[0] == later.shape[0]:
                dB = flat_later.T @ w.reshape(-1, w.shape[-1]).astype(dtype)
            else:
                dB = jnp.einsum("ta,tm->am", later.sum(0), w[0].astype(dtype))
        if G is not None:
            dB = dB - dM @ G.T.astype(dtype)
        dB = dB.astype(B.dtype)
    if offset is not None:
        doffset = later.sum((0, 1)).astype(offset.dtype)
    if w is not None:
        dw = jnp.einsum("nta,am->ntm", later, B.astype(dtype))
        if w.shape[0] != dw.shape[0]:
            dw = dw.sum(0, keepdims=True)
        dw = dw.astype(w.dtype)
    dx0 = lambdas[:, 0]
    return dK, dB, doffset, dG, dx0, dw


_states_linear_adjoint.defvjp(_states_fwd, _states_bwd)


def _linear_rollout_batch(solve, system, controller, x0, ts, inputs, adjoint):
    num_steps = ts.shape[0] - 1
    G = None if controller is None else controller.gain
    # Levels (an operating point) enter as constant terms: x_{t+1} = K x_t + B u_t + a,
    # y_t = C x_t + D u_t + c.
    state_constant, output_constant = system.constant_terms()
    args = (system.K, system.B, state_constant, G, x0, inputs)
    if isinstance(adjoint, LinearAdjoint):
        xs = _states_linear_adjoint(solve, num_steps, *args)
    else:
        xs = _states(solve, num_steps, *args)
    # Inputs and outputs of every step at once: vmapped, they are matrix products.
    before = xs[:, :-1]
    inputs_b, axis = _batch_input_axis(inputs, x0.shape[0])
    over_time = jax.vmap(closed_loop_input, in_axes=(None, 0, 0, 0))
    over_batch = jax.vmap(over_time, in_axes=(None, None, 0, axis))
    if controller is None and inputs is None:
        us = None
    elif controller is None:
        us = jnp.broadcast_to(inputs, (x0.shape[0],) + inputs.shape[1:])
    else:
        us = over_batch(controller, ts[:-1], before, inputs_b)
    ys = _outputs(system.C, system.D, before, us)
    if output_constant is not None:
        ys = ys + output_constant[None, None]
    return xs, us, ys


def _outputs(C, D, xs, us):
    """$y_t = C x_t + D u_t$ for `xs (N, T, n)` and `us (N, T, m)` or `None`; shape
    `(N, T, p)`. Each term is one product with batch and time folded into one
    axis: vmapped over both, the reverse pass (`dC`, `dD`) contracts two axes,
    which XLA's CPU backend runs several times slower."""

    def fold(a, matrix):
        flat = a.reshape(-1, a.shape[-1]) @ matrix.T
        return flat.reshape(a.shape[:-1] + (matrix.shape[0],))

    ys = xs if C is None else fold(xs, C)
    if D is not None and us is not None:
        ys = ys + fold(us, D)
    return ys


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


def _chunked_or_scan_solve(size, M, x0, b_seq, b_const, num_steps):
    """`Chunked`'s solver under `LinearAdjoint`, which also solves the adjoint
    recurrence with it; that recurrence is driven at every step by the cotangent of
    every state, an `n`-wide term (not a `Factored` `m`-wide one) whose
    block-Toeplitz product costs `size` times a scan step. So a recurrence driven
    by an `n`-wide term with large steps, `N * n**2 > 65536` multiply-adds, is
    solved by the batched scan instead."""
    batch, n = x0.shape
    dense = b_seq is not None and not isinstance(b_seq, Factored)
    if dense and batch * n * n > 65536:
        return _scan_solve_batch(jax.lax.scan, M, x0, b_seq, b_const, num_steps)
    return _chunked_solve_batch(jax.lax.scan, size, M, x0, b_seq, b_const, num_steps)


def default_method(
    system: AbstractSystem,
    controller: AbstractController | None,
    has_inputs: bool,
    adjoint: AbstractAdjoint,
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
