"""Input delays (dead times): estimated from the data by an ARX model's first
significant lag, checked by an ARX scan over the delay (as MATLAB's `delayest`), and
carried by an ordinary `LinearSystem` whose state holds a shift register per delayed
input."""

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._data.dataset import Dataset
from .._fitting.host_blas import on_one_blas_thread
from .._systems.system import LinearSystem
from .._type_checks import checks_own_arguments
from .arx import _check_int
from .operating_point import data_levels, deviations
from .signals import signals


def _regression(ys, us, lengths, na, lags, start):
    """`(Phi (E, na p + sum |lags_j| + 1), Y (E, p))` over the steps `t >= start` of
    every experiment: row `t` is `[-y_{t-1} .. -y_{t-na}, u_{j, t-l} for l in
    lags_j for each input j, 1]`."""
    rows, targets = [], []
    for i, T in enumerate(lengths):
        if T <= start:
            continue
        t = np.arange(start, T)
        blocks = [-ys[i, t - k] for k in range(1, na + 1)]
        for j, lags_j in enumerate(lags):
            blocks += [us[i, t - lag, j : j + 1] for lag in lags_j]
        blocks.append(np.ones((t.size, 1)))
        rows.append(np.concatenate(blocks, axis=1))
        targets.append(ys[i, t])
    return np.concatenate(rows), np.concatenate(targets)


def _residual_sums(Phi, Y):
    """The residual sum of squares per output of the least-squares fit, `(p,)`."""
    theta = np.linalg.lstsq(Phi, Y, rcond=None)[0]
    return np.sum((Y - Phi @ theta) ** 2, axis=0)


def _check_delays(call: str, delays, m: int) -> tuple[int, ...]:
    if isinstance(delays, (int, np.integer)) and not isinstance(delays, bool):
        delays = (int(delays),) * m
    delays = tuple(delays)
    if len(delays) != m:
        raise ValueError(
            f"{call}(delays=...): expected one delay per input (m = {m}), got "
            f"{len(delays)}."
        )
    for d in delays:
        _check_int(call, "delays", d, 0)
    return tuple(int(d) for d in delays)


@on_one_blas_thread
@checks_own_arguments
def estimate_delay(
    data,
    max_delay: int = 10,
    *,
    na: int = 2,
    nb: int = 2,
    significance: float = 0.01,
) -> tuple[int, ...]:
    """The input delay (dead time) of each input, in steps, estimated from the data
    as MATLAB's `delayest` does (an ARX scan over the delay), with a test so that
    no delay is invented.

    The delay $d_j$ of input $j$ is the dead time in front of a plant without
    feedthrough: the output first responds to $u_{j,t}$ at step $t + d_j + 1$
    (ARX $n_k = d_j + 1$). A sampled plant without dead time has $d_j = 0$, with or
    without a feedthrough. For each input in turn (the others at their current
    estimate, with $n_b$ terms; two passes when there are several):

    1. One ARX model is fitted by least squares with $n_a$ past outputs, a
        constant and the input's terms at every lag $0 \\dots$ `max_delay` $+ n_b$;
        for $k = 1, 2, \\dots$ the coefficients at lags $0 \\dots k-1$ are tested
        jointly zero on every output (F-test at level `significance` / p). The
        last $k$ before the first rejection gives $n_k = k$: the first lag at
        which the input acts, and the delay $d = \\max(n_k - 1, 0)$.
    2. A delay is kept only when the ARX model with it ($n_b$ terms from lag
        $n_k$) has a smaller residual sum of squares than the one without
        ($n_k = 0$), on the same steps: MATLAB's scan over $n_k$ as a check.

    Coloured equation noise makes the test reject more often, which gives a
    smaller delay: the estimate errs towards none. A plant whose response starts
    slowly (e.g. a fast-sampled cascade of lags) may show an apparent delay of a
    step or two; `with_input_delay` then represents it exactly as such.

    **Arguments:**

    - `data`: a `Dataset` with outputs `ys (N, T, p)` and inputs `us (N, T, m)`.
    - `max_delay`: the largest delay tried (`>= 0`).
    - `na`, `nb`: the ARX orders of the scan (`na >= 0`, `nb >= 1`; MATLAB's
        defaults are 2 and 2).
    - `significance`: the level of the test of step 1, in `(0, 1)`.

    **Returns:**

    A tuple of `m` integers, the delay of each input in steps.

    **Raises:**

    `ValueError` (one line) for data without inputs, a bad order, level or
    `max_delay`, or data too short for the scan.

    **Example:**

    ```python
    delays = dynsys.estimate_delay(data, max_delay=10)      # e.g. (3,)
    model = dynsys.fit_subspace(dynsys.delay_inputs(data, delays), order=2)
    model = dynsys.with_input_delay(model, delays)          # acts on `data` itself
    ```
    """
    call = "estimate_delay"
    s = signals(data, call)
    _check_scan_arguments(call, s, max_delay, na, nb, significance)
    scan = _scan_data(call, s, max_delay, na, nb)
    m = scan.us.shape[-1]
    nk = [0] * m
    delays = [0] * m
    for _ in range(2 if m > 1 else 1):
        for j in range(m):
            delays[j] = _delay_of_input(scan, nk, j, significance)
            nk[j] = delays[j] + 1 if delays[j] > 0 else 0
    return tuple(delays)


class _Scan(NamedTuple):
    """The regression data of `estimate_delay`'s scan: the outputs `ys (N, T, p)`
    (levels removed, each scaled to unit RMS) and inputs `us (N, T, m)` (levels
    removed) in float64, the experiments' `lengths`, the orders `na`, `nb`, the
    largest delay `max_delay`, and `start`, the first step every lag reaches."""

    ys: np.ndarray
    us: np.ndarray
    lengths: tuple[int, ...]
    na: int
    nb: int
    max_delay: int
    start: int


def _check_scan_arguments(call: str, s, max_delay, na, nb, significance) -> None:
    """One-line errors for data `s` without inputs, a bad `max_delay`, `na`, `nb`,
    or a `significance` outside `(0, 1)`."""
    if s.us is None or s.us.shape[-1] == 0:
        raise ValueError(f"{call}(data=...): the data has no inputs to delay.")
    _check_int(call, "max_delay", max_delay, 0)
    _check_int(call, "na", na, 0)
    _check_int(call, "nb", nb, 1)
    if isinstance(significance, bool) or not (
        isinstance(significance, (int, float)) and 0 < significance < 1
    ):
        raise ValueError(
            f"{call}(significance=...): expected a level in (0, 1), got "
            f"{significance!r}."
        )


def _scan_data(call: str, s, max_delay, na, nb) -> _Scan:
    """The scan's data of the signals `s`: levels removed, outputs scaled to unit
    RMS; a one-line error when they give no more equations than the model with
    every lag up to `max_delay + nb` has unknowns."""
    u_bar, y_bar = data_levels(s)
    s = deviations(s, u_bar, y_bar)
    ys = np.asarray(s.ys, dtype=np.float64)
    us = np.asarray(s.us, dtype=np.float64)
    valid = np.asarray(s.mask)
    scale = np.sqrt(np.mean(ys[valid] ** 2, axis=0))
    ys = ys / np.where(scale > 0, scale, 1.0)
    p, m = ys.shape[-1], us.shape[-1]
    start = max(na, max_delay + 1 + nb - 1)
    unknowns = na * p + m * (max_delay + 1 + nb) + 1
    equations = sum(max(0, T - start) for T in s.lengths)
    if equations <= unknowns:
        raise ValueError(
            f"{call}(data=...): the data ({sum(s.lengths)} samples) are too short "
            f"for the scan (max_delay={max_delay}, na={na}, nb={nb}): {equations} "
            f"equations for {unknowns} unknowns."
        )
    return _Scan(ys, us, s.lengths, na, nb, max_delay, start)


def _lags(nk: list[int], nb, j: int, lags_j: list[int]) -> list[list[int]]:
    """The lags of each input in a model: `lags_j` for input `j`, `nb` lags from
    its current `nk` for every other input."""
    return [
        lags_j if i == j else list(range(nk[i], nk[i] + nb)) for i in range(len(nk))
    ]


def _regression_of(scan: _Scan, nk: list[int], j: int, lags_j: list[int]):
    """`(Phi, Y)` of the ARX model with input `j` at the lags `lags_j` and the
    other inputs at their current `nk`."""
    lags = _lags(nk, scan.nb, j, lags_j)
    return _regression(scan.ys, scan.us, scan.lengths, scan.na, lags, scan.start)


def f_survival(F, numerator_dof: int, denominator_dof: int):
    """$P(X > F)$ for $X$ F-distributed with (`numerator_dof`, `denominator_dof`)
    degrees of freedom, as `scipy.stats.f.sf`, by its closed form in the
    regularised incomplete beta function, $I_{d_2/(d_2 + d_1 F)}(d_2/2, d_1/2)$
    (`incomplete_beta`): importing `scipy.stats` costs a command about 0.8 s,
    `scipy.special` 0.07-0.2 s, for a few values per test."""
    F = np.maximum(np.asarray(F, np.float64), 0.0)
    d1, d2 = numerator_dof, denominator_dof
    x = d2 / (d2 + d1 * F)
    values = [incomplete_beta(d2 / 2, d1 / 2, float(v)) for v in np.ravel(x)]
    return np.reshape(values, x.shape)


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function $I_x(a, b)$ (`scipy.special.betainc`)
    for `a, b > 0`: $x^a (1-x)^b / (a B(a, b))$ times its continued fraction,
    evaluated by Lentz's method on the side where it converges fast ($x$ below
    $(a+1)/(a+b+2)$; above, $1 - I_{1-x}(b, a)$). The prefactor in logarithms, so
    that survival values far below 1e-300 relative to it keep their digits."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - incomplete_beta(b, a, 1.0 - x)
    log_front = (
        math.lgamma(a + b)
        - math.lgamma(a)
        - math.lgamma(b)
        + a * math.log(x)
        + b * math.log1p(-x)
    )
    # 1 / (1 + c_1 / (1 + c_2 / (1 + ...))) by Lentz's method, with
    # c_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),
    # c_{2m} = m(b-m) x / ((a+2m-1)(a+2m)).
    tiny = 1e-300

    def guarded(value: float) -> float:
        return value if abs(value) > tiny else tiny

    c, d = 1.0, 1.0 / guarded(1.0 - (a + b) * x / (a + 1.0))
    fraction = d
    for m in range(1, 20000):
        even = m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0))
        for coefficient in (even, odd):
            d = 1.0 / guarded(1.0 + coefficient * d)
            c = guarded(1.0 + coefficient / c)
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def _first_significant_lag(scan: _Scan, nk: list[int], j: int, significance) -> int:
    """The last `k` before the first rejection: lags `0 .. k-1` of input `j` tested
    jointly zero (F-test at `significance / p`) in a model with every lag up to
    `max_delay + nb`, for `k = 1, 2, ...`; 0 when lag 0 already matters."""
    Phi, Y = _regression_of(scan, nk, j, list(range(scan.max_delay + 1 + scan.nb)))
    full = _residual_sums(Phi, Y)
    dof = Phi.shape[0] - Phi.shape[1]
    p = scan.ys.shape[-1]
    first = scan.na * p + scan.nb * j
    silent = 0
    for k in range(1, scan.max_delay + 2):
        kept = np.r_[0:first, first + k : Phi.shape[1]]
        restricted = _residual_sums(Phi[:, kept], Y)
        F = (restricted - full) / k / np.maximum(full / dof, 1e-300)
        if np.any(f_survival(F, k, dof) <= significance / p):
            break
        silent = k
    return silent


def _arx_loss(scan: _Scan, nk: list[int], j: int, nk_j: int) -> float:
    """The residual sum of squares (all outputs) of the ARX model with `nb` terms
    of input `j` from lag `nk_j`, on the scan's steps."""
    Phi, Y = _regression_of(scan, nk, j, list(range(nk_j, nk_j + scan.nb)))
    return np.sum(_residual_sums(Phi, Y))


def _delay_of_input(scan: _Scan, nk: list[int], j: int, significance) -> int:
    """The delay of input `j`, the others at their current `nk`: one less than its
    first significant lag, kept only when the ARX model with it also explains the
    data better than the one without (nk = 0), on the same steps."""
    delay = max(_first_significant_lag(scan, nk, j, significance) - 1, 0)
    if delay > 0 and _arx_loss(scan, nk, j, delay + 1) >= _arx_loss(scan, nk, j, 0):
        delay = 0
    return delay


@checks_own_arguments
def with_input_delay(model: LinearSystem, delays: int | Sequence[int]) -> LinearSystem:
    """`model` with its inputs delayed: input $j$ reaches the plant $d_j$ steps
    later, as an ordinary `LinearSystem` (so rollout, `compare`, save/load and
    python-control need nothing new).

    The state is $[x; r_1; \\dots]$, with a shift register $r_j$ of $d_j$ states per
    delayed input: $r_{j,t+1} = [u_{j,t} - \\bar u_j, r_{j,t}[0 .. d_j-2]]$, and
    the plant reads $r_{j,t}[d_j - 1] = u_{j,t-d_j} - \\bar u_j$ where it read
    $u_{j,t} - \\bar u_j$ (through `B` and, for a feedthrough, `D`, which moves
    into `C`). The register's initial contents are the inputs before the record
    (estimated with the state by `compare`).

    **Arguments:**

    - `model`: a `LinearSystem` with inputs, `K (n, n)`, `B (n, m)`.
    - `delays`: one integer per input (`>= 0`), or one for every input.

    **Returns:**

    A `LinearSystem` of order `n + sum(delays)` (`model` itself when every delay
    is 0), with the same levels and `dt`.

    **Raises:**

    `TypeError` for a model that is not a `LinearSystem`; `ValueError` for one
    without inputs or delays of the wrong number or sign.

    **Example:**

    ```python
    delayed = dynsys.with_input_delay(model, (3,))   # u reaches the plant 3 steps later
    ```
    """
    call = "with_input_delay"
    if not isinstance(model, LinearSystem):
        raise TypeError(
            f"{call}(model=...): expected a LinearSystem, got {type(model).__name__}."
        )
    if model.B is None:
        raise ValueError(f"{call}(model=...): the model has no inputs to delay.")
    K = np.asarray(model.K, dtype=np.float64)
    B = np.asarray(model.B, dtype=np.float64)
    n, m = B.shape
    delays = _check_delays(call, delays, m)
    if sum(delays) == 0:
        return model
    C = np.eye(n) if model.C is None else np.asarray(model.C, dtype=np.float64)
    p = C.shape[0]
    D = None if model.D is None else np.asarray(model.D, dtype=np.float64)
    size = n + sum(delays)
    K_aug = np.zeros((size, size))
    K_aug[:n, :n] = K
    B_aug = np.zeros((size, m))
    C_aug = np.zeros((p, size))
    C_aug[:, :n] = C
    D_aug = None if D is None else D.copy()
    first = n
    for j, d in enumerate(delays):
        if d == 0:
            B_aug[:n, j] = B[:, j]
            continue
        last = first + d - 1
        B_aug[first, j] = 1.0
        for i in range(first + 1, last + 1):
            K_aug[i, i - 1] = 1.0
        K_aug[:n, last] = B[:, j]
        if D_aug is not None:
            C_aug[:, last] = D[:, j]
            D_aug[:, j] = 0.0
        first = last + 1
    if D_aug is not None and not np.any(D_aug):
        D_aug = None
    offset = None
    if model.offset is not None:
        offset = np.zeros(size)
        offset[:n] = np.asarray(model.offset, dtype=np.float64)
    dtype = model.K.dtype

    def cast(a):
        return None if a is None else jnp.asarray(a, dtype=dtype)

    return LinearSystem(
        cast(K_aug),
        cast(B_aug),
        cast(C_aug),
        cast(D_aug),
        cast(offset),
        dt=model.dt,
        input_level=model.input_level,
        output_level=model.output_level,
    )


@checks_own_arguments
def delay_inputs(data: Dataset, delays: int | Sequence[int]) -> Dataset:
    """The data as a plant behind the delays sees them: input $j$ shifted by $d_j$
    steps, `us'[t] = us[t + D - d_j]`, `ys'[t] = ys[t + D]` with `D = max(delays)`
    (the first `D` steps of each experiment dropped: nothing is invented). A model
    fitted on it, passed to `with_input_delay(model, delays)`, acts on `data`.

    **Arguments:**

    - `data`: a `Dataset` with inputs `us (N, T, m)` and outputs `ys (N, T, p)`
        (or states).
    - `delays`: one integer per input (`>= 0`), or one for every input.

    **Returns:**

    A `Dataset` with experiments `D` steps shorter, the same names and `dt`.

    **Raises:**

    `ValueError` for data without inputs, delays of the wrong number or sign, or
    an experiment not longer than `D`.

    **Example:**

    ```python
    model = dynsys.with_input_delay(
        dynsys.fit_subspace(dynsys.delay_inputs(data, (3,)), order=2), (3,))
    ```
    """
    call = "delay_inputs"
    if data.us is None:
        raise ValueError(f"{call}(data=...): the data has no inputs to delay.")
    us = np.asarray(data.us)
    delays = _check_delays(call, delays, us.shape[-1])
    D = max(delays)
    if D == 0:
        return data
    lengths = data.lengths
    if min(lengths) <= D:
        raise ValueError(
            f"{call}(delays=...): every experiment must be longer than the largest "
            f"delay {D}, got lengths {min(lengths)}."
        )

    def cut(a, extra=0):
        if a is None:
            return None
        a = np.asarray(a)
        return [a[i, D : T + extra] for i, T in enumerate(lengths)]

    shifted = [
        np.stack([us[i, D - d : T - d, j] for j, d in enumerate(delays)], axis=-1)
        for i, T in enumerate(lengths)
    ]
    ts = None if data.ts is None else np.asarray(data.ts)[D:]
    return Dataset(
        cut(data.xs, 1),
        shifted,
        ts,
        ys=cut(data.ys),
        state_names=data.state_names or None,
        input_names=data.input_names or None,
        output_names=data.output_names or None,
    )
