"""How a closed loop answers a set-point step: its cost, overshoot, settling time
and input peak, from the nominal trajectory (the plant at the operating point when
the first set point is given, the observer where the task starts it)."""

import numpy as np


# Settled: within this share of the step's size of the set point, to the end.
SETTLING_BAND = 0.02


def step_metrics(task, trajectory, cost: float, dt: float | None) -> dict:
    """`cost`, and per output / input channel: `overshoot_percent` (of the first
    step's size), `settling_time` (seconds with a sample time, else steps; `None`
    when it does not settle within the first set point's part of the horizon),
    `input_peak` (the largest |u - u_level|, the input's units)."""
    ys = np.asarray(trajectory.ys)[0]  # (T, p): the nominal trajectory
    us = np.asarray(trajectory.us)[0]
    targets = task.output_targets  # (T, p)
    first = _first_part(task.references)
    start = targets[0] - task.references[0]  # the output at rest before the step
    overshoot, settling = [], []
    for i in range(ys.shape[1]):
        size = targets[0, i] - start[i]
        error = (ys[:first, i] - targets[0, i]) * np.sign(size)
        overshoot.append(
            None if size == 0 else float(max(error.max(), 0.0) / abs(size) * 100)
        )
        settling.append(_settling(ys[:first, i] - targets[0, i], abs(size), dt))
    peak = np.abs(us - task.input_level).max(axis=0)
    return {
        "cost": cost,
        "overshoot_percent": overshoot,
        "settling_time": settling,
        "input_peak": [float(v) for v in peak],
    }


def _first_part(references: np.ndarray) -> int:
    """The number of steps the first set point is held."""
    changes = np.nonzero(np.any(references[1:] != references[:-1], axis=1))[0]
    return int(changes[0]) + 1 if changes.size else references.shape[0]


def _settling(error: np.ndarray, size: float, dt: float | None):
    """The time after which |error| stays within `SETTLING_BAND * size`."""
    if size == 0:
        return None
    outside = np.nonzero(np.abs(error) > SETTLING_BAND * size)[0]
    if outside.size and outside[-1] == error.shape[0] - 1:
        return None  # still outside at the end of the part
    steps = int(outside[-1]) + 1 if outside.size else 0
    return float(steps * dt) if dt is not None else steps
