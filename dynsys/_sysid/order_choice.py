"""The rules of a structure scan's choice (`select_order`), on its `OrderCandidate`
rows alone: which row wins, when the scan stops, and which rows `method="fit"`
refines."""

import math

import numpy as np


def choose(
    rows, criterion: str, tolerance: float, stable: bool = False, margin=math.inf
) -> int:
    """The index of the chosen row: the lowest criterion; with `"validation"`, the
    fewest parameters among the rows within `tolerance` points of the best mean
    fit, or (with `tolerance > 0`, where the best row's held-out errors look like
    noise: `noise_dominated`) within `NOISE_TOLERANCE` points and not worse beyond
    that noise (`worse_than`) (a tie: the lower order).
    With `stable`, only the stable rows compete when there is one and (with
    `"validation"`) the best of them validates within `margin` points of the best
    row; where rows were refined, only refined rows count as stable ones (a
    refinement may leave the unit disc: a double integrator's refined models end
    at 1.0001, and an unrefined estimate at 0.99999 that validates 3 points worse
    is no more stable a plant)."""
    refined = [i for i, r in enumerate(rows) if r.refined]
    pool = refined or list(range(len(rows)))
    kept = [i for i in pool if rows[i].stable]
    if stable and kept and not all(r.stable for r in rows):
        best_stable = max(rows[i].mean_fit for i in kept)
        best = max(r.mean_fit for r in rows)
        if criterion != "validation" or best_stable >= best - margin:
            return kept[choose([rows[i] for i in kept], criterion, tolerance)]
    if criterion != "validation":
        values = [getattr(r, criterion) for r in rows]
        values = [v if np.isfinite(v) or v < 0 else np.inf for v in values]
        return int(np.argmin(values))
    best = max(r.mean_fit for r in rows)
    if not np.isfinite(best):
        return 0
    leader = rows[max(range(len(rows)), key=lambda i: rows[i].mean_fit)]
    within_noise = tolerance > 0 and noise_dominated(leader)
    near = [
        i
        for i, r in enumerate(rows)
        if r.mean_fit >= best - tolerance
        or (
            within_noise
            and r.mean_fit >= best - NOISE_TOLERANCE
            and not worse_than(r, leader)
        )
    ]
    return min(near, key=lambda i: (rows[i].parameters, rows[i].order))


# Points: a row that trails the best by more than the scan's `tolerance` but at
# most this much is as good as the best when the held-out data cannot tell them
# apart (`worse_than`): on noisy data a spurious higher order can lead by a few
# tenths of a point by chance.
NOISE_TOLERANCE = 0.5
# A row validates worse than the best when its held-out loss exceeds the best's by
# more than this many standard errors of their difference.
SIGNIFICANCE = 2.0
# The best row's held-out errors look like measurement noise when the lag-1
# autocorrelation of their squares is below this (white noise: about 0, within
# 1/sqrt(samples)).
NOISE_LIKE = 0.2


def noise_dominated(row) -> bool:
    """Whether `row`'s held-out errors look like measurement noise, which is when
    rows within a few tenths of a point differ by chance: the lag-1
    autocorrelation of its per-sample losses (`held_out_losses`, squared errors)
    below `NOISE_LIKE`. Where the errors are the model's own (a nonlinear plant's:
    0.94 on the cascaded tanks, against 0.02-0.03 on a linear plant under white
    noise), a row that trails by a few tenths on the held-out part can trail by
    several points on later data (the tanks' first 80 %: order 5 without `D`,
    0.44 points behind order 5 with `D`, scored 8.7 points lower on the last
    20 %), so the scan's own `tolerance` alone decides."""
    losses = row.held_out_losses
    if losses is None or losses.size < 8 or not np.all(np.isfinite(losses)):
        return False
    centred = losses - losses.mean()
    power = float(centred @ centred)
    return power > 0 and float(centred[1:] @ centred[:-1]) / power < NOISE_LIKE


def worse_than(row, best) -> bool:
    """Whether `row` validates worse than `best` beyond the held-out data's noise: the
    mean of their per-sample loss differences (`held_out_losses`) above
    `SIGNIFICANCE` standard errors, the errors' autocorrelation counted
    (Newey-West, Bartlett weights over `sqrt(samples)` lags). Rows without
    comparable losses count as worse."""
    a, b = row.held_out_losses, best.held_out_losses
    if a is None or b is None or a.shape != b.shape or a.size < 8:
        return True
    difference = a - b
    if not np.all(np.isfinite(difference)):
        return True
    count = difference.size
    mean = float(np.mean(difference))
    if mean <= 0.0:
        return False
    centred = difference - mean
    lags = int(math.sqrt(count))
    variance = float(centred @ centred) / count
    for lag in range(1, lags + 1):
        weight = 1.0 - lag / (lags + 1)
        variance += 2.0 * weight * float(centred[lag:] @ centred[:-lag]) / count
    if variance <= 0.0:
        return True
    return mean > SIGNIFICANCE * math.sqrt(variance / count)


def stalled(rows, criterion: str, tolerance: float, count: int) -> bool:
    """Whether the last `count` orders scanned all failed to beat the best score
    of the orders before them."""
    orders = sorted({r.order for r in rows})
    if len(orders) <= count:
        return False

    def score(order):  # higher is better
        values = [
            r.mean_fit if criterion == "validation" else -getattr(r, criterion)
            for r in rows
            if r.order == order
        ]
        return max(values)

    earlier = max(score(n) for n in orders[:-count])
    margin = tolerance if criterion == "validation" else 0.0
    return all(not score(n) > earlier + margin for n in orders[-count:])


def _ranking(rows, criterion: str) -> list[int]:
    """Row indices from best to worst by the criterion (higher fit, lower others)."""
    if criterion == "validation":
        return sorted(range(len(rows)), key=lambda i: -rows[i].mean_fit)
    return sorted(range(len(rows)), key=lambda i: getattr(rows[i], criterion))


def to_refine(rows, criterion, refine, margin, stable) -> list[int]:
    """The rows `method="fit"` refines: the best `refine` by the criterion; then up
    to `refine` more, simpler than all of those, among the rows within `margin`
    points of the best mean validation fit, fewest parameters first (the choice
    favours the simplest structure that validates as well, so a simple candidate
    the subspace method scores nearly as well as the best is the one whose
    refinement can change it); with `stable`, the best stable row when none of
    them is stable."""
    ranking = _ranking(rows, criterion)
    refined = ranking[: refine or len(rows)]
    if refine and margin > 0 and criterion == "validation":
        best = rows[ranking[0]].mean_fit
        simplest = min(rows[i].parameters for i in refined)
        near = [
            i
            for i in ranking[refine:]
            if np.isfinite(rows[i].mean_fit)
            and rows[i].mean_fit >= best - margin
            and rows[i].parameters < simplest
        ]
        near.sort(key=lambda i: (rows[i].parameters, rows[i].order))
        refined += near[:refine]
    if stable and not any(rows[i].stable for i in refined):
        # stable and unstable candidates are judged after the same refinement
        refined += [i for i in ranking if rows[i].stable][:1]
    return refined
