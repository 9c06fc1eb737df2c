"""Solvers of the affine recurrence $x_{t+1} = M x_t + b_t$ for a batch of
trajectories: a scan, an associative (parallel) scan, and chunks of `size` steps by
one product with the stacked powers of $M$.

Each returns the trajectories $x_0 \\dots x_T$, shape `(N, T+1, n)`. `b_seq` is
`(N or 1, T, n)`, a `Factored` input term, or None, and `b_const` is `(n,)` or None;
$b_t$ = `b_seq[t] + b_const`.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def _batch_input_axis(inputs, size):
    """`(inputs for vmap, in_axis)`: a leading axis of 1 broadcasts unmapped."""
    if inputs is None:
        return None, None
    if inputs.shape[0] == size:
        return inputs, 0
    return inputs[0], None


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
        # One chunk axis of its own: without a `b_seq`, `end` is this term alone.
        end = _add(jnp.broadcast_to(sums[-1], (1, num_chunks, n)), end)

    if end is None:
        free = jnp.zeros((num_chunks, 0), x0.dtype)
        _, starts = scan(lambda x, _: (x @ jump_t, x), x0, free)
    else:
        ends = jnp.broadcast_to(end, (batch,) + end.shape[1:]).transpose(1, 0, 2)
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
