"""How far a nonlinear model's free run leaves the measured outputs' range when its
inputs are held at random levels inside the measured inputs' range: a probe for a
model that runs away on inputs of the kind it was trained on, in an order it was
not (`dynsys fit --model neural` checks its final model with it)."""

import numpy as np

from .._data.dataset import Dataset
from .validation import compare


def held_levels(
    length: int, low: np.ndarray, high: np.ndarray, holds: tuple[int, int], rng
) -> np.ndarray:
    """Inputs `(length, m)`: each channel at levels drawn uniformly in `[low[j],
    high[j]]`, each level held for a number of samples drawn in `holds`
    (inclusive), the channels' switching times independent."""
    columns = []
    for lo, hi in zip(low, high):
        column, k = np.empty(length), 0
        while k < length:
            hold = int(rng.integers(holds[0], holds[1] + 1))
            column[k : k + hold] = rng.uniform(lo, hi)
            k += hold
        columns.append(column)
    return np.stack(columns, axis=1)


def held_input_excursion(
    model,
    encoder,
    us: np.ndarray,
    ys: np.ndarray,
    *,
    holds: tuple[int, int],
    records: int = 8,
    seed: int = 0,
) -> float:
    """The largest distance by which a nonlinear `model`'s free run leaves the
    range of the measured outputs, in widths of that range, when its inputs are
    held at random levels inside the measured inputs' range: a probe for a model
    that runs away on inputs of the kind it was trained on, in an order it was
    not (`dynsys fit --model neural` checks its final model with it).

    **Arguments:**

    - `model`, `encoder`: a model (e.g. `NeuralFit.model`) and the
        `StateEncoder` that starts its free run.
    - `us (T, m)`, `ys (T, p)`: a measured record (e.g. the estimation data).
    - `holds`: `(shortest, longest)` number of samples each level is held.
    - `records`: how many probe records of `T` samples are run; `seed`: their
        levels' random seed.

    **Returns:**

    The largest excursion over the probe records, samples and channels, in
    widths of each channel's measured range (0 when the run stays inside it,
    `inf` when it overflows). Each probe record starts with the measured first
    `encoder.past` samples (the encoder reads them); after them every input
    channel is held at levels drawn uniformly in its measured range.

    **Raises:**

    `ValueError` naming the argument when `us` and `ys` are not 2-D arrays of
    the same length, longer than `encoder.past`, or `holds` is not two positive
    ints in order.

    **Example:**

    ```python
    result = dynsys.fit_neural(train, val)
    u, y = np.asarray(train.us[0]), np.asarray(train.ys[0])
    dynsys.held_input_excursion(result.model, result.encoder, u, y, holds=(16, 64))
    ```
    """
    us, ys = np.asarray(us), np.asarray(ys)
    _check(us, ys, holds, encoder)
    past = encoder.past
    low, high = us.min(axis=0), us.max(axis=0)
    y_low, y_high = ys.min(axis=0), ys.max(axis=0)
    width = np.where(y_high > y_low, y_high - y_low, 1.0)
    rng = np.random.default_rng(seed)
    probes = [
        np.concatenate([us[:past], held_levels(len(us) - past, low, high, holds, rng)])
        for _ in range(records)
    ]
    outputs = np.broadcast_to(ys[None], (records, *ys.shape))
    data = Dataset(us=np.stack(probes), ys=np.array(outputs))
    predicted = np.asarray(compare(model, data, encoder=encoder).predicted)
    if not np.all(np.isfinite(predicted)):
        return float("inf")
    beyond = np.maximum(predicted - y_high, y_low - predicted) / width
    return float(max(0.0, beyond.max()))


def _check(us, ys, holds, encoder) -> None:
    if us.ndim != 2 or ys.ndim != 2 or len(us) != len(ys):
        raise ValueError(
            "held_input_excursion(us=..., ys=...): expected arrays (T, m) and (T, "
            f"p) of one record, got shapes {us.shape} and {ys.shape}."
        )
    past = getattr(encoder, "past", 0)
    if len(us) <= past:
        raise ValueError(
            f"held_input_excursion(us=...): the record has {len(us)} samples, not "
            f"more than the encoder's past = {past}."
        )
    ok = len(holds) == 2 and all(isinstance(h, int) and h >= 1 for h in holds)
    if not (ok and holds[0] <= holds[1]):
        raise ValueError(
            "held_input_excursion(holds=...): expected (shortest, longest) positive "
            f"ints in order, got {holds!r}."
        )
