"""Stopping a loop that no longer improves: the loss "flat for N steps" rule, and
the held-out loss "not improved for N steps" rule."""

import numpy as np


# `fit`'s default: its default optimiser stops after this many steps of a flat loss.
FLAT_STEPS = 20
# `fit`'s default with validation data: its default optimiser stops once the
# held-out loss has not improved for this many steps (the best model is returned
# anyway; the steps after it only cost time). L-BFGS: evaluated every 10 steps.
HELD_OUT_PATIENCE = 50
# Levenberg–Marquardt: the held-out loss of every step (`chunk.HeldOutEachStep`),
# not improved by more than `HELD_OUT_RESOLUTION` (relative) for this many steps.
# On the six shared real records the held-out loss stayed above its start for up
# to 13 steps (heating), and 10 steps of patience lost the glass furnace's best
# model (step 55, after a stretch of 15 steps without a gain of 0.1 %); a loss 0.1 %
# lower moves a fit % by 0.05 % of the distance to 100 (0.01 points at 80 %).
HELD_OUT_STEPS = 20
HELD_OUT_RESOLUTION = 1e-3


def flat_resolution(dtype) -> float:
    """The relative change per step below which a loss of `dtype` counts as flat:
    `eps ** 0.75` (float64: 1.8e-12, float32: 6.4e-6), above the round-off of a sum
    of many squares and far below any change that improves a fit."""
    return float(np.finfo(dtype).eps) ** 0.75


def flat_steps_at_end(losses: list[float], resolution: float, most: int) -> int:
    """How many of the last steps (at most `most`) each changed the loss by at most
    `resolution` times its previous value: `|l[k] - l[k-1]| <= resolution |l[k-1]|`.
    """
    count = 0
    for k in range(len(losses) - 1, max(0, len(losses) - 1 - most), -1):
        previous, loss = losses[k - 1], losses[k]
        if not abs(loss - previous) <= resolution * abs(previous):
            break
        count += 1
    return count


def flat_stop_reason(steps: int, resolution: float) -> str:
    return (
        f"loss flat for {steps} steps (relative change at most {resolution:.1g} per "
        "step); kept the best model"
    )


def held_out_stop_reason(
    steps: int, best_step: int, resolution: float | None = None
) -> str:
    by = "" if resolution is None else f" by more than {resolution:.1%}"
    return (
        f"held-out loss not improved{by} for {steps} steps (best at step "
        f"{best_step}); kept the best model"
    )
