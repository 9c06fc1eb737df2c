"""`detrend`: remove the channels' levels (means) or linear trends from a dataset,
keeping them so they can be added back (the operating point of a model)."""

from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._type_checks import checks_own_arguments
from .dataset import Dataset
from .slicing import experiments


_FIELDS = {"inputs": "us", "outputs": "ys", "states": "xs"}


class Levels(eqx.Module):
    """What `detrend` removed: each channel's level, and for `kind="linear"` each
    experiment's trend line.

    **Fields:**

    - `inputs (m,)`, `outputs (p,)`, `states (n,)`: the channels' means over every
        experiment's samples (the operating point); `None` for a role the data do
        not have.
    - `kind`: `"mean"` or `"linear"`.
    - `trends`: for `"linear"`, per role (`"inputs"`, `"outputs"`, `"states"`) an
        array `(N, 2, k)`: each experiment's line, value at its sample 0 and slope
        per sample; `None` for `"mean"`.
    """

    inputs: Float[Array, " m"] | None
    outputs: Float[Array, " p"] | None
    states: Float[Array, " n"] | None
    kind: str = eqx.field(static=True)
    trends: dict[str, Float[Array, "N 2 k"]] | None = None

    def removed(self, data: Dataset) -> dict[str, list[np.ndarray] | None]:
        """The values removed from each experiment of `data` (a dataset of the same
        shape as the one detrended): per field (`us`, `ys`, `xs`) a list of arrays."""
        out = {}
        for role, field in _FIELDS.items():
            level = getattr(self, role)
            items = experiments(data)[field]
            if items is None or level is None:
                out[field] = None
                continue
            if self.trends is None:
                out[field] = [
                    np.broadcast_to(np.asarray(level), item.shape) for item in items
                ]
                continue
            lines = np.asarray(self.trends[role], dtype=np.float64)
            out[field] = [
                lines[i, 0] + lines[i, 1] * np.arange(item.shape[0])[:, None]
                for i, item in enumerate(items)
            ]
        return out

    def restore(self, data: Dataset) -> Dataset:
        """`data` with the removed levels (or trends) added back: the inverse of
        `detrend`, `levels.restore(detrend(d)[0])` equals `d` to round-off."""
        return _shifted(data, self.removed(data), +1.0)


def _shifted(data: Dataset, shifts: dict, sign: float) -> Dataset:
    parts = experiments(data)
    new = {}
    for field, items in parts.items():
        if items is None or shifts[field] is None:
            new[field] = items
        else:
            new[field] = [
                np.asarray(item, dtype=np.float64) + sign * shift
                for item, shift in zip(items, shifts[field])
            ]
    return Dataset(
        new["xs"],
        new["us"],
        data.ts,
        ys=new["ys"],
        state_names=data.state_names or None,
        input_names=data.input_names or None,
        output_names=data.output_names or None,
    )


def _line(item: np.ndarray) -> np.ndarray:
    """The least-squares line through one experiment's samples, `(2, k)`."""
    t = np.arange(item.shape[0], dtype=np.float64)
    design = np.stack([np.ones_like(t), t], axis=1)
    coefficients, *_ = np.linalg.lstsq(design, item, rcond=None)
    return coefficients


@checks_own_arguments
def detrend(
    data: Dataset, kind: Literal["mean", "linear"] = "mean"
) -> tuple[Dataset, Levels]:
    """Remove the levels or linear trends of the inputs, outputs and states.

    Measured signals sit at an operating point (a heater at 6 V and 130 °C); linear
    models describe the deviations from it. `kind="mean"` removes each channel's
    mean over all experiments' samples (padding excluded); `kind="linear"` removes
    from each experiment, channel by channel, its least-squares line in time.

    **Arguments:**

    - `data`: the dataset.
    - `kind`: `"mean"` or `"linear"`.

    **Returns:**

    `(detrended, levels)`: the dataset minus its levels (names, lengths and times
    kept), and the `Levels` removed; `levels.restore(detrended)` adds them back.

    **Raises:**

    `ValueError` for another `kind` or an argument that is not a `Dataset`.

    **Example:**

    ```python
    raw = dynsys.Dataset(us=5.0 + jnp.sin(jnp.arange(50.0))[:, None],
                         ys=100.0 + jnp.cos(jnp.arange(50.0))[:, None])
    centred, levels = dynsys.detrend(raw)
    levels.inputs, levels.outputs   # about [5.0], [100.0]
    ```
    """
    if not isinstance(data, Dataset):
        raise ValueError(
            f"detrend(data=...): expected a Dataset, got {type(data).__name__}."
        )
    if kind not in ("mean", "linear"):
        raise ValueError(
            f"detrend(kind=...): expected 'mean' or 'linear', got {kind!r}."
        )
    parts = experiments(data)
    levels, trends = {}, {}
    for role, field in _FIELDS.items():
        items = parts[field]
        if items is None:
            levels[role] = None
            continue
        stacked = np.concatenate(items).astype(np.float64)
        levels[role] = jnp.asarray(stacked.mean(axis=0))
        if kind == "linear":
            trends[role] = jnp.asarray(
                np.stack([_line(item.astype(np.float64)) for item in items])
            )
    result = Levels(
        levels["inputs"], levels["outputs"], levels["states"], kind,
        trends if kind == "linear" else None,
    )  # fmt: skip
    return _shifted(data, result.removed(data), -1.0), result
