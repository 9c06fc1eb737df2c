"""Subspace identification (PO-MOESP) of a linear state-space model from
input-output data of several experiments."""

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._compile.jit import device_array, kept_jit
from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .._data.checks import check_data, warn_findings
from .._systems.innovation import InnovationSystem
from .._systems.system import LinearSystem
from .input_matrices import input_matrices
from .noise_model import noise_model as estimate_noise_model, past_projection
from .operating_point import data_levels, deviations
from .signals import in_shared_length, Signals, signals


_DEFAULT_HORIZON = 10
_NUMERICAL_FLOOR = 1e-10  # singular values below this (relative) count as zero
_WINDOWS_PER_ROW = 8  # default horizon: at least this many windows per data row
_MARGIN = 0.5  # decades: the least distance above the noise floor of an order's value


def _horizon(call: str, s: Signals, horizon: int | None, order: int | None) -> int:
    """The number of block rows `s` of the past and future Hankel matrices."""
    p = s.ys.shape[-1]
    m = 0 if s.us is None else s.us.shape[-1]
    shortest = min(s.lengths)
    if horizon is not None:
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 2:
            raise ValueError(
                f"{call}(horizon=...): horizon must be an integer >= 2, got "
                f"{horizon!r}."
            )
        for i, T in enumerate(s.lengths):
            if T < 2 * horizon:
                raise ValueError(
                    f"{call}(horizon=...): horizon {horizon} needs experiments of at "
                    f"least 2 * horizon = {2 * horizon} steps, but experiment {i} has "
                    f"{T}; the largest horizon possible is {shortest // 2}."
                )
        return horizon
    wanted = _DEFAULT_HORIZON
    needed = 2
    if order is not None:
        needed = math.ceil(order / p) + 1
        wanted = max(wanted, needed)

    def windows(h: int) -> int:
        return sum(T - 2 * h + 1 for T in s.lengths)

    largest = _largest_horizon(call, s)
    preferred = largest
    while preferred > 2 and windows(preferred) < _WINDOWS_PER_ROW * 2 * preferred * (
        m + p
    ):
        preferred -= 1
    return min(largest, max(needed, min(wanted, preferred)))


def _largest_horizon(call: str, s: Signals) -> int:
    """The longest horizon the data allow; `ValueError` when even 2 is too long."""
    p = s.ys.shape[-1]
    m = 0 if s.us is None else s.us.shape[-1]
    shortest = min(s.lengths)

    def windows(h: int) -> int:
        return sum(T - 2 * h + 1 for T in s.lengths)

    # Each experiment gives T_i - 2s + 1 windows; the LQ step needs at least as many
    # windows in all as rows 2s(m + p) (+ 1 for a constant), and the noise floor of
    # the singular values is flat enough to read the order from only with several
    # times as many.
    largest = shortest // 2
    while largest >= 2 and windows(largest) < 2 * largest * (m + p) + 1:
        largest -= 1
    if largest < 2:
        raise ValueError(
            f"{call}(data=...): too little data for subspace identification: the "
            f"shortest experiment has {shortest} steps; need experiments of at least "
            f"4 steps and about {4 * (m + p) + 1} steps in all."
        )
    return largest


def largest_order(data) -> int:
    """The largest order `fit_subspace` can identify from `data`: `(s - 1) p` for the
    longest horizon `s` the data allow (cheap: no factorisation).

    **Raises:**

    `ValueError` when the data are too short for subspace identification at all.
    """
    call = "fit_subspace"
    s = signals(data, call)
    return (_largest_horizon(call, s) - 1) * s.ys.shape[-1]


def _hankel(signal: Array, start: int, s: int, count: int) -> Array:
    """Rows `j = 0..count-1` of `[signal[start + j], ..., signal[start + j + s - 1]]`,
    shape `(count, s * width)`."""
    index = start + np.arange(count)[:, None] + np.arange(s)[None, :]
    return signal[index].reshape(count, -1)


def _window_factors(
    ys: Array, us: Array | None, lengths: Array, horizon: int, constant: bool
) -> Array:
    """The triangular factor of each experiment's windows `[U_f, 1, U_p, Y_p, Y_f]`
    (one row per window; the column of ones only with `constant`; the rows of
    windows past an experiment's end are zero, which leaves the factor unchanged),
    one experiment at a time, shape `(N, r', r)`."""
    count = ys.shape[1] - 2 * horizon + 1

    def factor(args):
        y, u, length = args
        blocks = []
        if u is not None:
            blocks.append(_hankel(u, horizon, horizon, count))
        if constant:  # a constant output term is projected out like the inputs
            blocks.append(jnp.ones((count, 1), y.dtype))
        if u is not None:
            blocks.append(_hankel(u, 0, horizon, count))
        blocks += [_hankel(y, 0, horizon, count), _hankel(y, horizon, horizon, count)]
        valid = jnp.arange(count) < length - 2 * horizon + 1
        rows = jnp.concatenate(blocks, axis=1) * valid[:, None]
        return jnp.linalg.qr(rows, mode="r")

    return jax.lax.map(factor, (ys, us, lengths))


@kept_jit
def _observability_svd(
    ys: Array,
    us: Array | None,
    lengths: Array,
    horizon: int,
    constant: bool,
) -> tuple[Array, Array]:
    """The left singular vectors and singular values of the block of the LQ factor
    (of `[U_f; U_p; Y_p; Y_f] = L Q^T` over the windows of every experiment, divided
    by the square root of their number) that maps the past to the future outputs."""
    p = ys.shape[-1]
    m = 0 if us is None else us.shape[-1]
    factors = _window_factors(ys, us, lengths, horizon, constant)
    R = jnp.linalg.qr(factors.reshape(-1, factors.shape[-1]), mode="r")
    # The windows' count from `lengths` (an array): a static count would make
    # records of other lengths, padded alike, compile a program each.
    windows = jnp.sum(lengths - 2 * horizon + 1).astype(R.dtype)
    L = R.T / jnp.sqrt(windows)
    a, b = horizon * m + int(constant), horizon * (m + p)
    U, S, _ = jnp.linalg.svd(L[a + b :, a : a + b], full_matrices=False)
    return U, S


def _projected_singular_values(
    call: str, s: Signals, horizon: int, constant: bool
) -> tuple[Array, Array]:
    """`_observability_svd` of the data, after checking there are enough windows."""
    p = s.ys.shape[-1]
    m = 0 if s.us is None else s.us.shape[-1]
    windows = sum(T - 2 * horizon + 1 for T in s.lengths)
    rows = 2 * horizon * (m + p) + int(constant)
    if windows < rows:
        raise ValueError(
            f"{call}(horizon=...): horizon {horizon} gives {windows} data windows in "
            f"all, fewer than the {rows} rows of the data matrix; use a shorter "
            "horizon or more data."
        )
    padded = in_shared_length(s, "subspace")  # a file of another length: no program
    return _observability_svd(
        padded.ys, padded.us, device_array(s.lengths), horizon, constant
    )


def order_from_singular_values(singular_values: Array, max_order: int) -> int:
    """The order from the singular values (see `fit_subspace`): how many of them lie
    clearly above the noise floor."""
    sigma = np.asarray(singular_values, dtype=np.float64)
    if sigma.size == 0 or not sigma[0] > 0:
        return 1
    levels = np.log10(np.maximum(sigma, _NUMERICAL_FLOOR * sigma[0]))
    lower = levels[sigma.size // 2 :]
    floor = np.median(lower)
    margin = max(_MARGIN, 2.0 * (floor - lower[-1]))
    return int(min(max_order, max(1, np.sum(levels > floor + margin))))


def _prepared(call: str, data, offset: bool):
    """The data's `Signals` (deviations from their means with `offset`, on output
    data), the levels `(ū, ȳ)` removed (or `(None, None)`), and whether a constant
    output term is projected out."""
    s = signals(data, call)
    if not isinstance(offset, bool):
        raise ValueError(f"{call}(offset=...): expected True or False, got {offset!r}.")
    if not offset or s.from_states:
        return s, (None, None), False
    u_bar, y_bar = data_levels(s)
    return deviations(s, u_bar, y_bar), (u_bar, y_bar), True


@on_one_blas_thread
@checks_own_arguments
def subspace_singular_values(
    data, *, horizon: int | None = None, offset: bool = True
) -> Float[Array, " k"]:
    """The singular values that `fit_subspace` chooses the order from.

    They are those of the part of the future outputs (the next `horizon` steps) that
    the past inputs and outputs explain once the future inputs are accounted for
    (PO-MOESP). On noise-free data of an order-$n$ system exactly $n$ are nonzero; with
    noise the rest form a floor. Divided by the square root of the number of data
    windows, so they do not grow with the amount of data.

    **Arguments:**

    - `data`: a `Dataset` with outputs `ys` (or states `xs` when it has no outputs),
        and inputs `us` or none; experiments may have different lengths.
    - `horizon`: the number of past and future steps `s` (default as for
        `fit_subspace` without `order`).
    - `offset`: as for `fit_subspace` (remove the means, and project out a constant).

    **Returns:**

    Shape `(s p,)`, in decreasing order (`p` output channels).

    **Raises:**

    `ValueError` as `fit_subspace`.

    **Example:**

    ```python
    values = dynsys.subspace_singular_values(data)   # data: a Dataset
    ```
    """
    call = "subspace_singular_values"
    s, _, constant = _prepared(call, data, offset)
    horizon = _horizon(call, s, horizon, None)
    return _projected_singular_values(call, s, horizon, constant)[1]


def _check_options(call: str, s: Signals, order, feedthrough: bool) -> None:
    """`fit_subspace`'s checks of `order` and `feedthrough` (one-line errors)."""
    if order is not None and (
        isinstance(order, bool) or not isinstance(order, int) or order < 1
    ):
        raise ValueError(
            f"{call}(order=...): order must be a positive integer or None, got "
            f"{order!r}."
        )
    if feedthrough and s.us is None:
        raise ValueError(
            f"{call}(feedthrough=True): the data has no inputs, so there is no D to "
            "estimate."
        )


def _max_order(call: str, s: Signals, horizon: int, order: int | None) -> int:
    """The largest order `horizon` allows, `(horizon - 1) * p`; `order` must not
    exceed it."""
    p = s.ys.shape[-1]
    max_order = (horizon - 1) * p
    if order is not None and order > max_order:
        raise ValueError(
            f"{call}(order=...): with horizon {horizon} and {p} output channels the "
            f"largest order possible is (horizon - 1) * p = {max_order}, got {order}; "
            "pass a longer horizon (if the experiments are long enough)."
        )
    return max_order


@on_one_blas_thread
@checks_own_arguments
def fit_subspace(
    data,
    order: int | None = None,
    *,
    horizon: int | None = None,
    feedthrough: bool = False,
    offset: bool = True,
    noise_model: bool = False,
) -> LinearSystem | InnovationSystem:
    """A linear state-space model identified from input-output data by a subspace
    method (PO-MOESP), from all experiments at once.

    The model is $x_{t+1} = K x_t + B u_t$, $y_t = C x_t\\,(+ D u_t)$: $C$ and $K$
    from the observability matrix that an LQ factorisation and an SVD of the past
    and future block Hankel matrices give (windows never cross experiments), then
    $B$ (and $D$) by least squares over every step, each experiment's initial state
    estimated jointly. On noise-free data of an order-`order` system it is exact up
    to a change of state basis. How it works, and how the order is chosen:
    docs/system-identification.md.

    With `offset` (the default) the model describes the deviations from an
    operating point: the means $\\bar u$, $\\bar y$ of the data's inputs and outputs
    are removed first, a constant output term is projected out with the inputs
    (so data that do not sit at their mean, such as a step from rest, stay exact),
    and the model keeps `input_level` $= \\bar u$ and `output_level` $= \\bar y$
    plus that constant: it simulates raw data in physical units.

    **Arguments:**

    - `data`: a `Dataset` with outputs `ys (N, T, p)` (or states when it has none)
        and inputs `us (N, T, m)` or none; experiments may have different lengths.
    - `order`: the state dimension `n`; `None` chooses it from the singular values
        (`subspace_singular_values`). At most `(horizon - 1) * p`.
    - `horizon`: the number of past and future steps `s` in each window; default
        `max(10, ceil(order / p) + 1)`, shortened (not below `ceil(order / p) + 1`)
        until the data give at least 8 windows per row of the data matrix
        ($\\sum_i (T_i - 2s + 1) \\ge 8 \\cdot 2s(m+p)$), and to what the shortest
        experiment allows. Each experiment needs at least `2 s` steps.
    - `feedthrough`: estimate `D` (direct feedthrough $y_t = \\dots + D u_t$);
        otherwise `D` is `None`.
    - `offset`: estimate the operating point (above); `False` fits
        $y_t = C x_t + D u_t$ to the raw data. Data with states but no outputs are
        always fitted raw.
    - `noise_model`: also estimate the noise model and return an
        `InnovationSystem`: the state of each data window is estimated (the part of
        its future outputs that its past explains, mapped through the
        observability matrix), and the Kalman gain and innovation covariance come
        from the covariances of the state and output residuals through the
        filter's Riccati equation (docs/noise-models.md).

    When the estimated `K` is unstable or marginal (spectral radius at least
    0.999), `B` and `D` are estimated from those state estimates and then through the
    (stable) Kalman predictor, whose regressors decay instead of growing like
    $K^t$, with or without `noise_model`.

    **Returns:**

    A `LinearSystem(K, B, C, D)` (an `InnovationSystem` with `noise_model`) with
    `K (n, n)`, `B (n, m)` (`None` without inputs), `C (p, n)`, `D (p, m)` or
    `None`, `input_level (m,)` and `output_level (p,)` with `offset` (else `None`),
    and `dt` from the data's times when they are uniform.

    **Raises:**

    `ValueError` (one line) when `order` exceeds the largest the horizon allows (and
    names it), `horizon` is too long for an experiment (names it), there is too
    little data, or `feedthrough` is asked without inputs.

    **Example:**

    ```python
    model = dynsys.fit_subspace(data, order=2)       # data: a Dataset with ys, us
    model = dynsys.fit_subspace(data)                # order from the singular values
    ```
    """
    call = "fit_subspace"
    basis = subspace_basis(call, data, horizon=horizon, offset=offset, order=order)
    _check_options(call, basis.signals, order, feedthrough)
    warn_findings(call, check_data(data, order=order))
    if order is None:
        order = order_from_singular_values(basis.singular_values, basis.max_order)
        order = max(1, order)
    return realise(call, basis, order, feedthrough, noise_model)


class SubspaceBasis(NamedTuple):
    """What every order's realisation shares: the prepared data, the horizon and
    the SVD of the projected future outputs (`U (s p, k)`, `singular_values (k,)`).
    """

    signals: Signals
    levels: tuple  # (u_bar, y_bar), or (None, None) without an operating point
    constant: bool
    horizon: int
    max_order: int
    U: Array
    singular_values: Array
    # The windows' `past_projection` (computed at the first call, then kept).
    past: Callable[[], tuple[np.ndarray, np.ndarray]]


def subspace_basis(
    call: str, data, *, horizon: int | None, offset: bool, order: int | None
) -> SubspaceBasis:
    """The data prepared and factorised once for `realise` (`order` only sets the
    default horizon and is checked against the largest the horizon allows)."""
    return subspace_bases(call, data, horizon=horizon, offset=offset)(order)


def subspace_bases(call: str, data, *, horizon: int | None, offset: bool):
    """A function `order -> SubspaceBasis` that factorises the data once per
    horizon (an order scan: most orders share the default horizon)."""
    s, levels, constant = _prepared(call, data, offset)
    factorised = {}

    def basis(order: int | None) -> SubspaceBasis:
        _check_options(call, s, order, False)
        rows = _horizon(call, s, horizon, order)
        max_order = _max_order(call, s, rows, order)
        if rows not in factorised:
            U, S = _projected_singular_values(call, s, rows, constant)
            past = functools.cache(lambda: past_projection(s, rows, constant))
            factorised[rows] = U, S, past
        U, S, past = factorised[rows]
        return SubspaceBasis(s, levels, constant, rows, max_order, U, S, past)

    return basis


@checks_own_arguments
def realise(
    call: str, basis: SubspaceBasis, order: int, feedthrough: bool, noise_model: bool
) -> LinearSystem | InnovationSystem:
    """The order-`order` model of `basis` (see `fit_subspace`)."""
    if not isinstance(noise_model, bool):
        raise ValueError(
            f"{call}(noise_model=...): expected True or False, got {noise_model!r}."
        )
    s, (u_bar, y_bar), constant = basis.signals, basis.levels, basis.constant
    p = s.ys.shape[-1]
    K, C, gamma = _state_matrices(basis.U, basis.singular_values, order, p, s.ys.dtype)
    B, D, c = input_matrices(K, C, s.ys, s.us, s.mask, feedthrough, constant)
    L = covariance = None
    if noise_model or _needs_noise_model(K, B, D):
        B, D, c, L, covariance = estimate_noise_model(
            K, C, B, D, c, gamma, s, basis.horizon, feedthrough, constant, basis.past()
        )
    # Added on the host: an eager `+` compiles a program per shape.
    output_level = (
        None if c is None else device_array(np.asarray(y_bar) + np.asarray(c))
    )
    linear = LinearSystem(
        K, B, C, D, dt=s.dt, input_level=u_bar, output_level=output_level
    )
    if not noise_model:
        return linear
    return InnovationSystem.from_linear(linear, L, covariance)


def _needs_noise_model(K: Array, B: Array | None, D: Array | None) -> bool:
    """Whether `B`, `D` are to be re-estimated through the predictor: `K` unstable
    or marginal (spectral radius at least 0.999), or `B`, `D` not finite."""
    values = np.asarray(K, np.float64)
    if not np.all(np.isfinite(values)):
        return False
    radius = float(np.max(np.abs(np.linalg.eigvals(values))))
    finite = all(a is None or bool(np.all(np.isfinite(np.asarray(a)))) for a in (B, D))
    return radius >= 0.999 or not finite


def _state_matrices(U: Array, S: Array, order: int, p: int, dtype):
    """`(K, C, gamma)`: the observability matrix $\\Gamma = U_n S_n^{1/2}$
    `(s p, n)`, `C` its first block row and `K` from its shift invariance (least
    squares), in `dtype`."""
    U = np.asarray(U, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    gamma = U[:, :order] * np.sqrt(S[:order])[None, :]
    K = np.linalg.lstsq(gamma[:-p], gamma[p:], rcond=None)[0]
    return tuple(device_array(a, dtype) for a in (K, gamma[:p], gamma))
