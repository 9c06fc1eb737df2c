"""A non-parametric impulse response from the data: a regularised FIR estimate."""

import dataclasses

import numpy as np

from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .signals import signals


@dataclasses.dataclass(frozen=True)
class ImpulseEstimate:
    """What `impulse_estimate` returns (float64 numpy arrays).

    **Fields:**

    - `response`: `(L, p, m)`, the estimated impulse response $\\hat h_0 \\dots
        \\hat h_{L-1}$ (as `impulse_response` gives a model's).
    - `std`: `(L, p, m)`, its standard deviation (least squares, white noise).
    - `step`: `(L, p, m)`, the step response it implies (its running sum).
    - `ridge`: the regularisation used.
    """

    response: np.ndarray
    std: np.ndarray
    step: np.ndarray
    ridge: float


def _regressors(us: np.ndarray, ys: np.ndarray, lengths, num_steps: int):
    """`(Phi (R, L m + E), Y (R, p), E)`: for every step `t >= L - 1` of each of
    the `E` experiments used, the inputs $u_t, u_{t-1}, \\dots, u_{t-L+1}$, then a
    constant per experiment (its level, not regularised), and the output $y_t$."""
    used = [i for i, length in enumerate(lengths) if length >= num_steps]
    rows, targets = [], []
    for e, i in enumerate(used):
        t = np.arange(num_steps - 1, lengths[i])
        lagged = us[i][t[:, None] - np.arange(num_steps)[None]]  # (R_i, L, m)
        level = np.zeros((len(t), len(used)))
        level[:, e] = 1.0
        rows.append(np.concatenate([lagged.reshape(len(t), -1), level], axis=1))
        targets.append(ys[i][t])
    return np.concatenate(rows), np.concatenate(targets), len(used)


@on_one_blas_thread
@checks_own_arguments
def impulse_estimate(data, num_steps: int = 50, *, ridge: float | None = None):
    """The impulse response of the data, estimated without a model by regularised
    least squares on a finite impulse response (FIR) of `num_steps` taps,
    $y_t = \\sum_{k < L} h_k u_{t-k} + c + e_t$ (a level $c$ per experiment, not
    regularised): $\\hat h = (\\Phi^T \\Phi + \\lambda I)^{-1} \\Phi^T Y$.

    Exact (to round-off, with `ridge=0`) for noise-free data of a system whose
    impulse response ends within `num_steps`; for a longer one the truncated tail
    acts as noise.

    **Arguments:**

    - `data`: a `Dataset` with inputs and outputs (or states); experiments shorter
        than `num_steps` are left out.
    - `num_steps`: the number of taps `L`.
    - `ridge`: $\\lambda$ (default $10^{-3}$ times the mean diagonal of
        $\\Phi^T\\Phi$: a light regularisation).

    **Returns:**

    An `ImpulseEstimate` (`response`, `std`, `step`, each `(L, p, m)`).

    **Raises:**

    `ValueError` for data without inputs, a bad `num_steps` or `ridge`, or too
    few samples.
    """
    call = "impulse_estimate"
    sig = signals(data, call)
    if sig.us is None:
        raise ValueError(f"{call}(data=...): the data have no inputs.")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(
            f"{call}(num_steps=...): expected a positive int, got {num_steps!r}."
        )
    if ridge is not None and not ridge >= 0:
        raise ValueError(f"{call}(ridge=...): expected a number >= 0, got {ridge!r}.")
    m = sig.us.shape[-1]
    if sum(max(0, n - num_steps + 1) for n in sig.lengths) <= num_steps * m:
        raise ValueError(
            f"{call}(num_steps={num_steps}): the data have too few samples for "
            f"{num_steps * m} FIR coefficients; use fewer steps."
        )
    us, ys = np.asarray(sig.us, np.float64), np.asarray(sig.ys, np.float64)
    Phi, Y, num_levels = _regressors(us, ys, sig.lengths, num_steps)
    gram = Phi.T @ Phi
    taps = num_steps * m
    if ridge is None:
        ridge = 1e-3 * float(np.trace(gram[:taps, :taps])) / taps
    penalty = np.diag(np.r_[np.full(taps, ridge), np.zeros(num_levels)])
    inverse = np.linalg.inv(gram + penalty)
    coefficients = (inverse @ (Phi.T @ Y))[:taps]  # (L m, p)
    residual = Y - Phi @ (inverse @ (Phi.T @ Y))
    dof = max(Phi.shape[0] - Phi.shape[1], 1)
    variance = np.sum(residual**2, axis=0) / dof  # (p,)
    spread = np.diag(inverse @ gram @ inverse)[:taps]  # (L m,)
    p = Y.shape[1]
    response = coefficients.reshape(num_steps, m, p).transpose(0, 2, 1)
    std = np.sqrt(spread[:, None] * variance[None]).reshape(num_steps, m, p)
    return ImpulseEstimate(
        response, std.transpose(0, 2, 1), np.cumsum(response, axis=0), float(ridge)
    )
