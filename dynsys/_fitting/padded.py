"""Output-error fits of linear models of several structures in one compiled program.

A structure scan refines candidates of several orders, with and without a
feedthrough `D`; compiled one by one, each is a Levenberg–Marquardt chunk of its
own (2-3 s of a cold `dynsys fit` each). Padded to one size, they share one: the
model of order `n` sits in the top-left block of a model of order `size`,

$$K = \\begin{pmatrix} K_n & 0 \\\\ 0 & 0 \\end{pmatrix}, \\quad
B = \\begin{pmatrix} B_n \\\\ 0 \\end{pmatrix}, \\quad C = (C_n \\; 0),$$

with `D = 0` where the structure has none, and every padded entry frozen: the
optimiser's steps move only the free block (`LevenbergMarquardt.free`),
on the complement of its change-of-basis family (`gauge.masked_step_basis`). The
padded states start at zero (their estimated initial states are zero) and never
reach the outputs, so the residuals, and the steps in the free block, are those of
the unpadded fit.
"""

import contextlib
import contextvars

import equinox as eqx
import jax
import numpy as np

from .._compile import known_shapes
from .._systems.system import LinearSystem
from .levenberg_marquardt import LevenbergMarquardt
from .train import _trainable


# The mask model (1 free, 0 frozen) of the padded fit in progress, read by `fit`
# when it builds its optimiser (`with_free_parameters`).
_MASK: contextvars.ContextVar = contextvars.ContextVar("dynsys_padded_mask")


class NotPaddable(Exception):
    """The fit's optimiser is not Levenberg–Marquardt (too many parameters once
    padded), or it trains initial states: it cannot hold the padding frozen, so
    the fit is not padded."""


# `pad` and `unpad` build their arrays on the host: done by JAX operations outside
# `jit`, each shape compiled a program of its own (some 25 in a structure scan,
# 0.5 s of a cold `dynsys fit`); `jax.device_put` compiles nothing.


def _block(matrix, shape):
    """`matrix` in the top-left corner of zeros of `shape`."""
    block = np.zeros(shape, matrix.dtype)
    block[tuple(slice(0, k) for k in matrix.shape)] = np.asarray(matrix)
    return jax.device_put(block)


def _corner(matrix, shape):
    """The top-left block of `shape` of `matrix`."""
    return jax.device_put(np.asarray(matrix)[tuple(slice(0, k) for k in shape)])


def _embedded(model: LinearSystem, size: int, d) -> LinearSystem:
    """`model`'s matrices in the top-left blocks of a model of order `size`, with
    feedthrough `d`."""
    p, m = model.C.shape[0], None if model.B is None else model.B.shape[1]
    return LinearSystem(
        _block(model.K, (size, size)),
        None if m is None else _block(model.B, (size, m)),
        _block(model.C, (p, size)),
        d,
        None if model.offset is None else _block(model.offset, (size,)),
        dt=model.dt,
        input_level=model.input_level,
        output_level=model.output_level,
    )


def pad(
    model: LinearSystem, size: int, feedthrough: bool
) -> tuple[LinearSystem, LinearSystem]:
    """`(padded, mask)`: `model` (order `n <= size`) as a model of order `size`,
    with a feedthrough `D` (zero where `model` has none) when `feedthrough`; and
    the same structure with 1 at the free entries and 0 at the frozen ones."""
    has_d = model.D is not None
    if has_d and not feedthrough:
        raise ValueError("pad(feedthrough=False): the model has a feedthrough D.")
    ones = jax.tree.map(lambda a: jax.device_put(np.ones_like(a)), model)
    d, d_mask = None, None
    if feedthrough:
        zeros = jax.device_put(
            np.zeros((model.C.shape[0], model.B.shape[1]), model.K.dtype)
        )
        d, d_mask = (model.D, ones.D) if has_d else (zeros, zeros)
    return _embedded(model, size, d), _embedded(ones, size, d_mask)


def unpad(padded: LinearSystem, order: int, feedthrough: bool) -> LinearSystem:
    """The order-`order` model in the top-left block of `padded` (`pad`'s inverse),
    with its `D` only when `feedthrough`."""
    n, p = order, padded.C.shape[0]
    return LinearSystem(
        _corner(padded.K, (n, n)),
        None if padded.B is None else _corner(padded.B, (n, padded.B.shape[1])),
        _corner(padded.C, (p, n)),
        padded.D if feedthrough else None,
        None if padded.offset is None else _corner(padded.offset, (n,)),
        dt=padded.dt,
        input_level=padded.input_level,
        output_level=padded.output_level,
    )


# The most entries (residuals x step directions) of a padded fit's Jacobian for
# which padding pays: up to about this size a Levenberg–Marquardt step costs a few
# milliseconds, so the padded candidates' extra work is well below the 2-3 s of a
# chunk's compilation they save; on a 4,200-sample 3 x 3 record padded to order 7
# (731,000 entries) the extra work of two 30-step candidates outweighed it
# (docs/benchmarks.md, "Time to the first answer").
PADDED_JACOBIAN_LIMIT = 2**19
# The same for a fit of a lower order than the padded one, whose steps all run at
# the padded size (up to its step cap, not 30): up to about this size a padded step
# costs at most about 10 ms more, so even 200 steps cost about what the
# compilation of its own program would (`benchmarks/benchmark_chunk_level.py`).
LOWER_ORDER_PADDING_LIMIT = 2**17


def padded_size(structures) -> tuple[int, bool]:
    """The size that fits every `(order, feedthrough)` of `structures`: the
    largest order, with a feedthrough when any has one."""
    structures = list(structures)
    return max(order for order, _ in structures), any(d for _, d in structures)


# A known size is taken for at most this many more states than the fits need (the
# free block's arithmetic is the same; the padded states are simulated, masked).
MOST_EXTRA_STATES = 2


def shared_size(size: int, feedthrough: bool, data, fits) -> tuple[int, bool]:
    """The size `(order, feedthrough)` that fits needing `(size, feedthrough)` (a
    scan's candidates, a final fit) are padded to: the smallest this machine has
    padded fits of the same channels to (`data`'s signature, `known_shapes`),
    of order `size` to `size + MOST_EXTRA_STATES`, with a feedthrough where one is
    needed, for which `fits(order, feedthrough)` holds (e.g. `worth_padding`);
    else `(size, feedthrough)`. Remembered for the next fits, so that a second
    file whose candidates are smaller runs the programs of the first."""
    shape, inputs = data.ys.shape, 0 if data.us is None else data.us.shape[-1]
    signature = f"size/{shape[0]}x{inputs}x{shape[-1]}:{data.ys.dtype}"
    known = [divmod(value, 2) for value in known_shapes.known(signature)]
    fitting = [
        (order, bool(d))
        for order, d in known
        if size <= order <= size + MOST_EXTRA_STATES
        and (d or not feedthrough)
        and fits(order, bool(d))
    ]
    chosen = min(fitting, default=(size, feedthrough))
    known_shapes.remember(signature, 2 * chosen[0] + int(chosen[1]))
    return chosen


@contextlib.contextmanager
def frozen_padding(mask: LinearSystem):
    """Within it, `fit` holds the parameters that are 0 in `mask` (`pad`'s second
    model) frozen (`with_free_parameters`)."""
    token = _MASK.set(mask)
    try:
        yield
    finally:
        _MASK.reset(token)


def worth_padding(
    model: LinearSystem,
    size: int,
    feedthrough: bool,
    data,
    limit: int = PADDED_JACOBIAN_LIMIT,
) -> bool:
    """Whether fits like `model`'s on `data` (a `Dataset` with outputs) are
    padded to `(size, feedthrough)`: the padded Jacobian, residuals times
    gauge-free directions, has at most `limit` entries."""
    num_params = sum(
        np.size(a) for a in jax.tree.leaves(pad(model, size, feedthrough)[0])
    )
    return data.ys.size * (num_params - size**2) <= limit


def with_free_parameters(strategy, objective, params, filter_spec):
    """`strategy` with the free parameters of the padded fit in progress (`fit`
    calls it); unchanged outside one. Raises `NotPaddable` when the strategy is
    not Levenberg–Marquardt or the loss is not free of the state basis (initial
    states trained or measured)."""
    mask = _MASK.get(None)
    if mask is None:
        return strategy
    lm = isinstance(strategy, LevenbergMarquardt)
    if not (lm and objective.gauge_free) or params[1] is not None:
        raise NotPaddable
    trainable = _trainable((mask, params[1]), (filter_spec, True), "fit")[0]
    # `ravel_pytree`'s order, on the host (its `concatenate` would compile)
    free = np.concatenate([np.ravel(a) for a in jax.tree.leaves(trainable)])
    free = jax.device_put(free)
    return eqx.tree_at(lambda s: s.free, strategy, free, is_leaf=lambda x: x is None)
