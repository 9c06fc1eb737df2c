"""What the polynomial model structures (ARMAX, Box–Jenkins) share: the data as
single-output experiments, the argument checks, zero-initial-condition filters and
delays, the Hannan–Rissanen start, and the observer-form realisation of a
polynomial transfer function.

Polynomials in the delay operator $q^{-1}$ are NumPy arrays of their coefficients,
`[1, a_1, ..., a_n]` for a monic one. Everything runs on the host in float64:
identification is outside `jit`, and filters compiled per data shape would cost
more than they compute (as `operating_point.py` explains)."""

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._systems.innovation import InnovationSystem
from .arx import _check_int
from .operating_point import data_levels, deviations
from .signals import signals


class Experiments(NamedTuple):
    """The data as the polynomial fits read it: each experiment's output `(T_i,)`
    and inputs `(T_i, m)` (or `None`), levels removed when `u_bar`, `y_bar` are
    given (`None` otherwise)."""

    ys: tuple[np.ndarray, ...]
    us: tuple[np.ndarray, ...] | None
    u_bar: np.ndarray | None
    y_bar: np.ndarray | None
    dt: float | None
    dtype: object

    @property
    def num_inputs(self) -> int:
        return 0 if self.us is None else self.us[0].shape[-1]

    @property
    def num_samples(self) -> int:
        return sum(y.size for y in self.ys)


def experiments(call: str, data, offset: bool) -> Experiments:
    """The single-output `Experiments` of `data` (one-line `ValueError` naming
    `data` for several outputs, `offset` for a non-boolean)."""
    if not isinstance(offset, bool):
        raise ValueError(f"{call}(offset=...): expected True or False, got {offset!r}.")
    s = signals(data, call)
    p = s.ys.shape[-1]
    if p != 1:
        what = "states (no outputs)" if s.from_states else "output channels"
        raise ValueError(
            f"{call}(data=...): the polynomial structures are single-output; the "
            f"data has {p} {what}, expected 1 output (fit each output on its own, "
            "or use fit_subspace)."
        )
    u_bar = y_bar = None
    if offset:
        u_bar, y_bar = data_levels(s)
        s = deviations(s, u_bar, y_bar)
        u_bar = None if u_bar is None else np.asarray(u_bar, np.float64)
        y_bar = np.asarray(y_bar, np.float64)
    ys = np.asarray(s.ys, np.float64)
    us = None if s.us is None else np.asarray(s.us, np.float64)
    return Experiments(
        ys=tuple(ys[i, :T, 0] for i, T in enumerate(s.lengths)),
        us=None if us is None else tuple(us[i, :T] for i, T in enumerate(s.lengths)),
        u_bar=u_bar,
        y_bar=y_bar,
        dt=s.dt,
        dtype=s.ys.dtype,
    )


def check_orders(call: str, orders: dict, nk) -> None:
    """One-line errors for orders (`{name: value}`) or `nk` that are not
    non-negative integers."""
    for name, value in (*orders.items(), ("nk", nk)):
        _check_int(call, name, value, 0)


def check_inputs(call: str, data: Experiments, input_orders: dict) -> None:
    """`ValueError` when data without inputs is given input orders (`nb`, `nf`)."""
    if data.num_inputs > 0:
        return
    for name, value in input_orders.items():
        if value > 0:
            raise ValueError(
                f"{call}({name}=...): the data has no inputs, so {name} must be 0, "
                f"got {value}."
            )


def check_length(call: str, data: Experiments, parameters: int, lags: int) -> None:
    """`ValueError` naming `data` when it gives no more equations (steps past the
    longest lag, over every experiment) than the model has parameters."""
    equations = sum(max(0, y.size - lags) for y in data.ys)
    if equations <= parameters:
        raise ValueError(
            f"{call}(data=...): too short for the model: {data.num_samples} samples "
            f"give {equations} equations past the longest lag ({lags}) for "
            f"{parameters} parameters; expected more equations than parameters."
        )


def delayed(x: np.ndarray, k: int) -> np.ndarray:
    """`x` delayed by `k >= 0` steps along its first axis, zeros before the start:
    `out[t] = x[t - k]`."""
    if k == 0:
        return x
    out = np.zeros_like(x)
    if k < x.shape[0]:
        out[k:] = x[:-k]
    return out


def monic(coefficients) -> np.ndarray:
    """`[1, c_1, ..., c_n]` from `(c_1, ..., c_n)`."""
    return np.concatenate([[1.0], np.asarray(coefficients, np.float64)])


def filtered(numerator, denominator, x: np.ndarray) -> np.ndarray:
    """$N(q) / M(q)\\, x$ along the first axis from zero initial conditions (the
    signal is zero before its start); `denominator[0]` is 1."""
    import scipy.signal  # here: importing it costs every command about 1 s

    return scipy.signal.lfilter(numerator, denominator, x, axis=0)


def largest_root(polynomial) -> float:
    """The largest modulus of the roots of `[1, c_1, ..., c_n]` in $z$ (0 when
    `n = 0`): below 1 when $1 / C(q)$ is a stable filter."""
    polynomial = np.asarray(polynomial, np.float64)
    if polynomial.size <= 1:
        return 0.0
    return float(np.max(np.abs(np.roots(polynomial))))


def reflected(polynomial, radius: float = 0.99) -> np.ndarray:
    """`[1, c_1, ..., c_n]` with each root outside the disc of `radius` moved
    inside: reflected through the unit circle ($z \\to 1 / \\bar z$), then pulled
    to `radius` at most. The spectrum of the filter is kept up to a gain, which is
    how a start for a noise model or denominator is made stable."""
    polynomial = np.asarray(polynomial, np.float64)
    if largest_root(polynomial) < radius:
        return polynomial
    roots = np.roots(polynomial)
    outside = np.abs(roots) > 1.0
    roots[outside] = 1.0 / np.conj(roots[outside])
    modulus = np.abs(roots)
    roots = np.where(
        modulus > radius, roots * radius / np.maximum(modulus, 1e-300), roots
    )
    return np.real(np.poly(roots))


def lagged_columns(x: np.ndarray, first: int, count: int) -> list[np.ndarray]:
    """`[x delayed by first, ..., x delayed by first + count - 1]` (each `x`'s
    shape)."""
    return [delayed(x, first + k) for k in range(count)]


def regression(blocks, target, start: int) -> tuple[np.ndarray, np.ndarray]:
    """`(rows (T - start, columns), target (T - start,))` of one experiment: each
    block `(T,)` or `(T, m)` becomes columns, rows from step `start`."""
    columns = [b[:, None] if b.ndim == 1 else b for b in blocks]
    if not columns:
        return np.zeros((target.size - start, 0)), target[start:]
    return np.concatenate(columns, axis=1)[start:], target[start:]


def least_squares(rows_targets) -> np.ndarray:
    """The least-squares solution of the stacked `(rows, targets)` pairs."""
    rows = np.concatenate([r for r, _ in rows_targets])
    targets = np.concatenate([t for _, t in rows_targets])
    if rows.shape[1] == 0:
        return np.zeros(0)
    return np.linalg.lstsq(rows, targets, rcond=None)[0]


def _input_blocks(u: np.ndarray | None, nb: int, nk: int) -> list[np.ndarray]:
    """Columns $u_{t-nk}, \\dots, u_{t-nk-nb+1}$, each `(T, m)`."""
    return [] if u is None or nb == 0 else lagged_columns(u, nk, nb)


def _long_arx_residuals(data: Experiments, nk: int, order: int) -> list[np.ndarray]:
    """The equation errors of a long ARX model (`order` past outputs and inputs),
    an estimate of the innovations; zero over each experiment's first `order`
    steps."""
    us = data.us or (None,) * len(data.ys)
    pairs = []
    for y, u in zip(data.ys, us):
        blocks = lagged_columns(-y, 1, order) + _input_blocks(u, order, nk)
        pairs.append(regression(blocks, y, order))
    theta = least_squares(pairs)
    residuals = []
    for y, u in zip(data.ys, us):
        blocks = lagged_columns(-y, 1, order) + _input_blocks(u, order, nk)
        rows, _ = regression(blocks, y, 0)
        e = y - rows @ theta
        e[:order] = 0.0
        residuals.append(e)
    return residuals


def hannan_rissanen(
    data: Experiments, na: int, nb: int, nc: int, nk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A start for the ARMAX model $A y = B u_{t-nk} + C e$: `(a (na,), b (nb, m),
    c (nc,))`.

    Hannan and Rissanen's two steps: a long ARX model's equation errors estimate
    the innovations $\\hat e$, then $y_t$ is regressed on $-y_{t-i}$,
    $u_{t-nk-j}$ and $\\hat e_{t-k}$ by least squares. `C` is reflected into the
    unit disc (`reflected`) so that the predictor it gives is stable. Without `nc`
    (or data too short for a long model) it is the ARX estimate with `c = 0`."""
    m = data.num_inputs
    us = data.us or (None,) * len(data.ys)
    shortest = min(y.size for y in data.ys)
    samples = data.num_samples
    # Long enough to whiten an ARMA of these orders, short enough for the data.
    order = min(max(20, 3 * (na + nc)), shortest // 4, samples // (8 * (1 + m)))
    if nc > 0 and order > nc:
        innovations = _long_arx_residuals(data, nk, order)
        start, nc_used = order, nc
    else:
        innovations = [np.zeros_like(y) for y in data.ys]
        start, nc_used = 0, 0
    lags = max(na, nk + nb - 1 if nb else 0, nc_used)
    pairs = []
    for y, u, e in zip(data.ys, us, innovations):
        blocks = lagged_columns(-y, 1, na) + _input_blocks(u, nb, nk)
        blocks += lagged_columns(e, 1, nc_used)
        pairs.append(regression(blocks, y, max(start, lags)))
    theta = least_squares(pairs)
    a = theta[:na]
    b = theta[na : na + nb * m].reshape(nb, m)
    c = np.zeros(nc)
    c[:nc_used] = theta[na + nb * m :]
    c = reflected(monic(c))[1:]
    return a, b, c


def observer_form(
    denominator: np.ndarray, numerators: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The observer-form realisation of the single-output transfer functions
    $N_j(q) / M(q)$ that share the denominator.

    **Arguments:**

    - `denominator`: `[1, m_1, ..., m_n]`, shape `(n + 1,)`.
    - `numerators`: shape `(n + 1, k)`, column `j` the coefficients of $N_j$ in
        powers of $q^{-1}$ (pad with zeros to `n + 1`).

    **Returns:**

    `(K (n, n), B (n, k), C (1, n), D (1, k))` with `K` holding $-m_i$ in its first
    column and ones above the diagonal, $B_i = N_{j,i} - m_i N_{j,0}$, `C = [1, 0,
    ..., 0]`, `D = N_0`: the state is $x^i_t = \\sum_{k \\ge i} (N_k w_{t+i-1-k} -
    m_k y_{t+i-1-k})$, so that $y_t = x^1_t + N_0 w_t$.
    """
    denominator = np.asarray(denominator, np.float64)
    numerators = np.asarray(numerators, np.float64)
    n = denominator.size - 1
    K = np.zeros((n, n))
    C = np.zeros((1, n))
    if n:
        K[:, 0] = -denominator[1:]
        K[np.arange(n - 1), np.arange(1, n)] = 1.0
        C[0, 0] = 1.0
    D = numerators[:1]
    B = numerators[1:] - denominator[1:, None] * D
    return K, B, C, D


def padded(coefficients, size: int) -> np.ndarray:
    """`coefficients` along the first axis, zeros appended up to `size` rows."""
    coefficients = np.asarray(coefficients, np.float64)
    out = np.zeros((size,) + coefficients.shape[1:])
    out[: coefficients.shape[0]] = coefficients
    return out


def innovation_system(
    K, B, C, D, L, variance: float, data: Experiments
) -> InnovationSystem:
    """The `InnovationSystem` of these host arrays, in the data's dtype, with its
    `dt` and operating point (`input_level`, `output_level` when the levels were
    removed)."""

    def cast(x):
        return None if x is None else jnp.asarray(x, dtype=data.dtype)

    has_inputs = data.num_inputs > 0
    return InnovationSystem(
        cast(K),
        cast(B) if has_inputs else None,
        cast(C),
        cast(D) if has_inputs else None,
        kalman_gain=cast(L),
        innovation_covariance=cast(np.array([[variance]])),
        dt=data.dt,
        input_level=cast(data.u_bar) if has_inputs else None,
        output_level=cast(data.y_bar),
    )


def warn_unconverged(call: str, steps: int) -> None:
    warnings.warn(
        f"{call}: the prediction-error minimisation stopped at its cap of {steps} "
        "steps before meeting its tolerance; the model is the last point reached.",
        RuntimeWarning,
        stacklevel=3,
    )
