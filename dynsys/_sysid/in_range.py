"""The part of each validation record whose inputs stay in the training inputs'
range: what `fit_neural`'s early stopping scores.

A free run past inputs the training never saw measures how the neural corrections
extrapolate, and that changes from one seed to the next (on the cascaded tanks'
last third, from "never better than the linear start" to a 0.2 V gain;
docs/nonlinear-models.md). Scored there, the early stopping picks a step count
by luck; scored where the inputs stay in range, it picks the step that predicts
best on data like the training's. The final model is trained on all the
estimation data, the out-of-range part included, so nothing is lost for it."""

import numpy as np

from .signals import Signals


# How far outside the training range (as a fraction of its width, per input
# channel and side) an input may go before the validation record is cut there:
# enough that a broadband input's extremes (a held-out part's maximum a little
# above the training part's) cut nothing.
RANGE_MARGIN = 0.05


def input_range(s: Signals) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel minimum and maximum of the inputs over the valid samples of
    `s`, each of shape `(m,)`."""
    us = np.asarray(s.us)[np.asarray(s.mask, bool)]
    return us.min(axis=0), us.max(axis=0)


def in_range_lengths(
    train: Signals, val: Signals, margin: float = RANGE_MARGIN
) -> tuple[int, ...]:
    """Each validation record's number of samples before the first whose input
    leaves the training inputs' range widened by `margin` of its width on each
    side (its whole length when none does); one int per record of `val`."""
    low, high = input_range(train)
    widen = margin * (high - low)
    us = np.asarray(val.us)
    outside = np.any((us < low - widen) | (us > high + widen), axis=-1)  # (N, T)
    lengths = []
    for record, length in enumerate(val.lengths):
        leaves = np.flatnonzero(outside[record, :length])
        lengths.append(int(leaves[0]) if leaves.size else int(length))
    return tuple(lengths)


def in_range_part(
    train: Signals, val: Signals, past: int, horizon: int
) -> tuple[Signals, tuple]:
    """`val` cut to its records' in-range parts (`in_range_lengths`), with the
    samples each keeps (0 for a record that leaves the range before scoring a
    sample after its first `past`, which is dropped). `val` itself, and its
    lengths, when it has no inputs, when nothing leaves the range, or when the
    in-range parts score fewer samples in all than one training window
    (`horizon`): a choice on fewer is left to chance (on simulated tanks, 15 and
    50 scored samples chose worse step counts than the whole records did;
    docs/nonlinear-models.md)."""
    if val.us is None or train.us is None:
        return val, tuple(val.lengths)
    cut = in_range_lengths(train, val)
    kept = [i for i, length in enumerate(cut) if length > past]
    scored = sum(cut[i] - past for i in kept)
    if tuple(cut) == tuple(val.lengths) or scored < horizon:
        return val, tuple(val.lengths)
    lengths = tuple(cut[i] for i in kept)
    steps = max(lengths)
    rows = np.asarray(kept)
    part = val._replace(
        ys=val.ys[rows, :steps],
        us=val.us[rows, :steps],
        mask=np.arange(steps)[None, :] < np.asarray(lengths)[:, None],
        lengths=lengths,
        xs=None if val.xs is None else val.xs[rows, : steps + 1],
    )
    return part, tuple(length if length > past else 0 for length in cut)
