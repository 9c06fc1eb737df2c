"""ARX models by linear least squares, converted to a state-space `LinearSystem`."""

import jax.numpy as jnp
import numpy as np

from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .._systems.system import LinearSystem
from .operating_point import data_levels, deviations
from .signals import Signals, signals


def _check_int(call: str, name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{call}({name}=...): expected an integer, got {type(value).__name__} "
            f"{value!r}."
        )
    if value < low:
        raise ValueError(f"{call}({name}=...): must be >= {low}, got {value}.")


def _lags(na: int, nb: int, nk: int) -> int:
    """`L`, the longest lag of the model: how many past steps one equation reads."""
    return max(na, nk + nb - 1 if nb > 0 else 0)


def _equations(lengths, na: int, nb: int, nk: int) -> int:
    return sum(max(0, T - _lags(na, nb, nk)) for T in lengths)


def _unknowns(na: int, nb: int, p: int, m: int, constant: bool) -> int:
    return na * p + nb * m + int(constant)


def _largest(lengths, p: int, m: int, constant: bool, size) -> int:
    """The largest value `k` for which `size(k)` gives as many equations as unknowns
    (`size(k) -> (equations, unknowns)`); -1 when even 0 does not."""
    largest = -1
    for k in range(0, max(lengths) + 1):
        equations, unknowns = size(k)
        if equations < unknowns:
            break
        largest = k
    return largest


def _check_orders(call: str, s: Signals, na, nb, nk, constant: bool) -> None:
    """One-line errors for orders that are negative, not integers or too large for
    the data (naming the largest possible value)."""
    for name, value in (("na", na), ("nb", nb), ("nk", nk)):
        _check_int(call, name, value, 0)
    p = s.ys.shape[-1]
    m = 0 if s.us is None else s.us.shape[-1]
    if nb > 0 and m == 0:
        raise ValueError(
            f"{call}(nb=...): the data has no inputs, so nb must be 0, got {nb}."
        )
    if _lags(na, nb, nk) == 0:
        raise ValueError(
            f"{call}(na=..., nb=...): the model needs na >= 1 or nb >= 1 with "
            f"nk + nb >= 2 (a state), got na={na}, nb={nb}, nk={nk}."
        )
    lengths = s.lengths

    def by_na(k):
        return _equations(lengths, k, nb, nk), _unknowns(k, nb, p, m, constant)

    def by_nb(k):
        return _equations(lengths, na, k, nk), _unknowns(na, k, p, m, constant)

    equations = _equations(lengths, na, nb, nk)
    if equations >= _unknowns(na, nb, p, m, constant):
        return
    if _unknowns(na, 0, p, m, constant) <= _equations(lengths, na, 0, nk) and nb > 0:
        largest = _largest(lengths, p, m, constant, by_nb)
        raise ValueError(
            f"{call}(nb=...): the data ({sum(lengths)} samples) give {equations} "
            f"equations for {_unknowns(na, nb, p, m, constant)} unknowns per output; "
            f"with na={na}, nk={nk} the largest nb possible is {largest}, got {nb}."
        )
    largest = _largest(lengths, p, m, constant, by_na)
    raise ValueError(
        f"{call}(na=...): the data ({sum(lengths)} samples) give {equations} "
        f"equations for {_unknowns(na, nb, p, m, constant)} unknowns per output; "
        f"with nb={nb}, nk={nk} the largest na possible is {largest}, got {na}."
    )


def arx_regression(
    ys: np.ndarray,
    us: np.ndarray | None,
    lengths,
    na: int,
    nb: int,
    nk: int,
    constant: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The stacked regression `(Phi (E, na p + nb m [+ 1]), Y (E, p))` of every
    experiment's steps `t >= L` (windows never cross experiments).

    Row `t` of `Phi` is `[-y_{t-1}, ..., -y_{t-na}, u_{t-nk}, ..., u_{t-nk-nb+1}]`
    (then `1` with `constant`), and of `Y` is `y_t`: so that
    $y_t = \\Theta \\phi_t$ with
    $\\Theta = [A_1 \\dots A_{na}, B_0 \\dots B_{nb-1}, c]$.
    """
    L = _lags(na, nb, nk)
    rows, targets = [], []
    for i, T in enumerate(lengths):
        if T <= L:
            continue
        t = np.arange(L, T)
        blocks = [-ys[i, t - k] for k in range(1, na + 1)]
        blocks += [us[i, t - nk - j] for j in range(nb)]
        if constant:
            blocks.append(np.ones((t.size, 1)))
        rows.append(np.concatenate(blocks, axis=1))
        targets.append(ys[i, t])
    return np.concatenate(rows), np.concatenate(targets)


def arx_to_state_space(A, Bs, nk: int):
    """The observer-form realisation of the MIMO ARX model
    $y_t + \\sum_{i=1}^{na} A_i y_{t-i} = \\sum_{j=0}^{nb-1} B_j u_{t-nk-j}$.

    **Arguments:**

    - `A`: shape `(na, p, p)`; `Bs`: shape `(nb, p, m)` (or `None` without inputs).
    - `nk`: the input delay.

    **Returns:**

    `(K (pL, pL), B (pL, m) | None, C (p, pL), D (p, m) | None)` with
    `L = max(na, nk + nb - 1)`; `D` only when `nk = 0`. The state's blocks are
    $x^i_t = \\sum_{k \\ge i} (-A_k y_{t+i-1-k} + \\tilde B_k u_{t+i-1-k})$, with
    $\\tilde B_k = B_{k - nk}$, so that $y_t = x^1_t + D u_t$.
    """
    A = np.asarray(A, dtype=np.float64)
    na, p = A.shape[0], A.shape[-1]
    nb = 0 if Bs is None else Bs.shape[0]
    L = _lags(na, nb, nk)
    A_full = np.zeros((L + 1, p, p))
    A_full[1 : na + 1] = A
    K = np.zeros((p * L, p * L))
    for i in range(L):
        K[i * p : (i + 1) * p, :p] = -A_full[i + 1]
        if i + 1 < L:
            K[i * p : (i + 1) * p, (i + 1) * p : (i + 2) * p] = np.eye(p)
    C = np.zeros((p, p * L))
    C[:, :p] = np.eye(p)
    if Bs is None:
        return K, None, C, None
    m = Bs.shape[-1]
    B_full = np.zeros((L + 1, p, m))  # B̃_k multiplies u_{t-k}
    B_full[nk : nk + nb] = Bs
    D = B_full[0]
    B = np.concatenate([B_full[i] - A_full[i] @ D for i in range(1, L + 1)], axis=0)
    return K, B, C, (D if nk == 0 else None)


@on_one_blas_thread
@checks_own_arguments
def fit_arx(
    data, na: int, nb: int, nk: int = 1, *, offset: bool = True
) -> LinearSystem:
    """An ARX model fitted by linear least squares over every experiment, returned
    as a state-space `LinearSystem`.

    The model (one set of orders for every channel, multi-input multi-output) is
    $y_t + A_1 y_{t-1} + \\dots + A_{na} y_{t-na} = B_0 u_{t-nk} + \\dots +
    B_{nb-1} u_{t-nk-nb+1} + e_t$ with $A_i$ `(p, p)`, $B_j$ `(p, m)`; the
    coefficients minimise the sum of squared equation errors $e_t$ over the steps
    $t \\ge L$ of each experiment ($L = \\max(na, nk + nb - 1)$; windows never
    cross experiments), a closed form. ARX is fast and makes a good start for `fit`
    or a quick look at the order, but its estimate is biased when the noise is not
    white in this equation-error sense; `fit` (output error) removes the bias.

    The state-space form is the observer form of order $pL$: `C = [I 0 ... 0]`,
    `K` with the blocks $-A_i$ in its first block column and identities above the
    diagonal (`arx_to_state_space`). With `offset` (the default) the operating point
    is handled as `fit_subspace(offset=True)` does: the means $\\bar u$, $\\bar y$
    are removed, a constant term is estimated with the coefficients, and the model
    keeps `input_level` $= \\bar u$ and `output_level` $= \\bar y$ plus the
    constant's steady-state effect.

    **Arguments:**

    - `data`: a `Dataset` with outputs `ys (N, T, p)` (or states when it has none)
        and inputs `us (N, T, m)` (or none: then `nb = 0`, an AR model).
    - `na`: the number of past outputs (`>= 0`).
    - `nb`: the number of input terms (`>= 0`).
    - `nk`: the input delay in steps (`>= 0`; 0 gives a feedthrough `D`).
    - `offset`: estimate the operating point (above); `False` fits the raw data.

    **Returns:**

    A `LinearSystem(K (pL, pL), B (pL, m) | None, C (p, pL), D (p, m) | None)`, with
    levels as above and `dt` from the data.

    **Raises:**

    `ValueError` (one line) when an order is negative, `nb > 0` without inputs, or
    the data give fewer equations than unknowns (naming the largest `na` or `nb`
    possible); `TypeError` for a non-integer order.

    **Example:**

    ```python
    model = dynsys.fit_arx(data, na=2, nb=2, nk=1)   # data: a Dataset with ys, us
    dynsys.compare(model, val_data).fit_percent
    ```
    """
    call = "fit_arx"
    s = signals(data, call)
    if not isinstance(offset, bool):
        raise ValueError(f"{call}(offset=...): expected True or False, got {offset!r}.")
    constant = offset and not s.from_states
    _check_orders(call, s, na, nb, nk, constant)
    u_bar = y_bar = None
    if constant:
        u_bar, y_bar = data_levels(s)
        s = deviations(s, u_bar, y_bar)
    ys = np.asarray(s.ys, dtype=np.float64)
    us = None if s.us is None else np.asarray(s.us, dtype=np.float64)
    Phi, Y = arx_regression(ys, us, s.lengths, na, nb, nk, constant)
    theta = np.linalg.lstsq(Phi, Y, rcond=None)[0].T  # (p, unknowns)
    p = ys.shape[-1]
    m = 0 if us is None else us.shape[-1]
    A = theta[:, : na * p].reshape(p, na, p).transpose(1, 0, 2)
    Bs = None
    if m > 0:
        Bs = theta[:, na * p : na * p + nb * m].reshape(p, nb, m).transpose(1, 0, 2)
    K, B, C, D = arx_to_state_space(A, Bs, nk)
    output_level = None
    if constant:
        # The constant c shifts the output's steady state by (I + sum A_i)^{-1} c.
        shift = np.linalg.solve(np.eye(p) + A.sum(axis=0), theta[:, -1])
        output_level = np.asarray(y_bar, dtype=np.float64) + shift
    dtype = s.ys.dtype

    def cast(a):
        return None if a is None else jnp.asarray(a, dtype=dtype)

    return LinearSystem(
        cast(K),
        cast(B),
        cast(C),
        cast(D),
        dt=s.dt,
        input_level=cast(u_bar) if B is not None else None,
        output_level=cast(output_level),
    )
