"""The output-error loss of a model with an unstable mode: a free run over windows.

A free run of a linear model whose spectral radius $\\rho$ exceeds 1 grows like
$\\rho^t$. Over a record of $T$ steps, the initial state solved by least squares
must cancel a mode $\\rho^T$ times its start, and once $\\rho^T$ passes about
$10^8$ (the square root of float64's resolution: the normal equations square it)
the loss is rounding noise: 1.04 over 1,000 steps is $10^{17}$. Fits from one start
then end at different points when nothing but the order of a sum changes (a model
padded to share a program, another list of orders in a scan), and their held-out
scores spread by points. A plant that is unstable in open loop and recorded
under feedback gives such models, and only such models validate.

Windows of `window` steps, each from its own least-squares initial state
(`MultipleShooting`), keep the unstable mode's growth within `GROWTH` over each:
the loss is well posed again. A model that is stable, marginal, or whose growth
over the whole record stays within `GROWTH`, keeps the plain free run.
"""

import math
from collections.abc import Sequence

import numpy as np

from .._data.dataset import Dataset
from .losses import MultipleShooting


# The most an unstable mode may grow over one window of the output-error loss.
GROWTH = 100.0
# ... and over one window of a held-out score (`scoring_window`): a free run
# is scored, not differentiated, so it may grow further.
SCORING_GROWTH = 1e4


def unstable_window(model, lengths: Sequence[int], shortest: int) -> int | None:
    """The window (steps) of the output-error loss of `model` on records of
    `lengths` steps: `None` (the plain free run) unless its unstable mode grows
    by more than `GROWTH` over the longest record; else the steps over which it
    grows by `GROWTH`, at least `2 (n + 1)` (a window must determine the state)
    and at most `shortest` (every record, the held-out ones included, must hold a
    window). `model`: anything with a `K` `(n, n)` or a `to_linear()`."""
    linear = model.to_linear() if hasattr(model, "to_linear") else model
    K = getattr(linear, "K", None)
    if K is None or not lengths:
        return None
    K = np.asarray(K, np.float64)
    radius = float(np.max(np.abs(np.linalg.eigvals(K)))) if K.size else 0.0
    if not math.isfinite(radius) or radius <= 1.0:
        return None
    if max(lengths) * math.log(radius) <= math.log(GROWTH):
        return None
    steps = math.ceil(math.log(GROWTH) / math.log(radius))
    return max(1, min(max(steps, 2 * (K.shape[0] + 1)), shortest))


def windowed_loss(model, data, val_data=None) -> MultipleShooting | None:
    """`MultipleShooting(unstable_window(...))` for `model` on `data` (and
    `val_data`, whose records must hold a window too), or `None` where the plain
    free run is well posed."""
    lengths = list(data.lengths)
    held_out = [] if val_data is None else list(val_data.lengths)
    window = unstable_window(model, lengths, min(lengths + held_out))
    return None if window is None else MultipleShooting(window)



def scoring_window(radii: Sequence[float], shortest: int, largest_order: int) -> int:
    """The window (steps) over which every candidate of a structure scan is
    scored when most of them cannot be scored by a free run of the held-out data
    (`radii`: the spectral radii of those, all above 1): the steps over which
    their median mode grows `SCORING_GROWTH`-fold, at least `2 (n + 1)` for the
    scan's largest order `n` and at most `shortest` held-out record."""
    radius = float(np.median(radii))
    steps = math.ceil(math.log(SCORING_GROWTH) / math.log(radius))
    return max(1, min(max(steps, 2 * (largest_order + 1)), shortest))


def in_windows(data: Dataset, window: int | None) -> Dataset:
    """`data` (inputs and outputs) cut into consecutive windows of `window` steps,
    each an experiment of its own (the shorter last piece of each record
    dropped); `data` itself for `None`."""
    if window is None:
        return data
    us, ys = [], []
    for i, length in enumerate(data.lengths):
        for start in range(0, length - window + 1, window):
            part = slice(start, start + window)
            ys.append(np.asarray(data.ys[i, part]))
            if data.us is not None:
                us.append(np.asarray(data.us[i, part]))
    ts = None if data.dt is None else data.dt * np.arange(window)
    return Dataset(
        us=us or None,
        ts=ts,
        ys=ys,
        input_names=data.input_names,
        output_names=data.output_names,
    )
