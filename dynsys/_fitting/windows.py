"""Sub-windows of records and the truncated-simulation loss: each window's initial
state from an encoder reading the samples before it, then `horizon` simulated steps
compared with the measured outputs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._rollout.rollout import rollout


def window_starts(
    lengths, past: int, horizon: int, stride: int = 1
) -> Int[np.ndarray, "W 2"]:
    """`(experiment, start)` of every window: samples `start - past .. start - 1`
    feed the encoder, `start .. start + horizon - 1` are simulated; windows never
    cross an experiment's end. Shape `(W, 2)`.

    **Raises:**

    `ValueError` (one line) when no experiment is long enough for `past + horizon`
    samples.
    """
    rows = []
    for i, length in enumerate(lengths):
        starts = np.arange(past, length - horizon + 1, stride)
        rows.append(np.stack([np.full_like(starts, i), starts], axis=1))
    rows = np.concatenate(rows) if rows else np.zeros((0, 2), int)
    if len(rows) == 0:
        raise ValueError(
            f"windows(horizon=..., past=...): each window needs past + horizon = "
            f"{past} + {horizon} = {past + horizon} samples, but the longest record "
            f"has {max(lengths, default=0)}; use a shorter horizon or past."
        )
    return rows


def windows(
    ys: Float[Array, "N T p"],
    us: Float[Array, "N T m"] | None,
    lengths,
    *,
    past: int,
    horizon: int,
    stride: int = 1,
) -> dict[str, Array]:
    """The windows of records as arrays with the windows on the leading axis (ready
    for minibatches and `shard_batch`).

    **Arguments:**

    - `ys (N, T, p)`, `us (N, T, m)` or `None`: the records, zero-padded past
        each one's `lengths[i]`.
    - `past`: samples before each window that the encoder reads; `horizon`: the
        simulated steps; `stride`: samples between window starts.

    **Returns:**

    `{"past_ys": (W, past, p), "ys": (W, horizon, p), "mask": (W, horizon)}` plus
    `"past_us": (W, past, m)`, `"us": (W, horizon, m)` with inputs.
    """
    rows = window_starts(lengths, past, horizon, stride)
    i, s = rows[:, 0], rows[:, 1]
    before = s[:, None] + np.arange(-past, 0)[None, :]
    after = s[:, None] + np.arange(horizon)[None, :]
    out = {
        "past_ys": jnp.asarray(ys)[i[:, None], before],
        "ys": jnp.asarray(ys)[i[:, None], after],
        "mask": jnp.ones(after.shape, bool),
    }
    if us is not None:
        out["past_us"] = jnp.asarray(us)[i[:, None], before]
        out["us"] = jnp.asarray(us)[i[:, None], after]
    return out


def free_run_windows(
    ys: Float[Array, "N T p"], us: Float[Array, "N T m"] | None, lengths, past: int
) -> dict[str, Array]:
    """One window per experiment: the first `past` samples start the model, the
    rest (to each experiment's end, `mask`) is the free run. Same keys as
    `windows`, horizon `T - past`."""
    T = ys.shape[1]
    if past >= min(lengths):
        raise ValueError(
            f"free_run_windows(past=...): the encoder reads past = {past} samples, "
            f"but the shortest record has {min(lengths)}; use a shorter past."
        )
    mask = np.arange(past, T)[None, :] < np.asarray(lengths)[:, None]
    out = {"past_ys": ys[:, :past], "ys": ys[:, past:], "mask": jnp.asarray(mask)}
    if us is not None:
        out["past_us"], out["us"] = us[:, :past], us[:, past:]
    return out


def encode(encoder, batch: dict) -> Float[Array, "W n"]:
    """Each window's initial state from its past samples, shape `(W, n)`."""
    past_us = batch.get("past_us")
    if past_us is None:
        return jax.vmap(lambda y: encoder(None, y))(batch["past_ys"])
    return jax.vmap(encoder)(past_us, batch["past_ys"])


def window_predictions(model, encoder, batch: dict) -> Float[Array, "W H p"]:
    """The simulated outputs of each window from its encoded initial state."""
    x0 = encode(encoder, batch)
    horizon = batch["ys"].shape[1]
    return rollout(model, x0, horizon, inputs=batch.get("us")).ys


def truncated_simulation_loss(
    params: tuple, batch: dict, output_scale: Float[Array, " p"]
) -> Float[Array, ""]:
    """The mean over windows, steps (where `mask`) and channels of the squared
    simulation error divided by `output_scale ** 2`; `params = (model, encoder)`."""
    model, encoder = params
    predicted = window_predictions(model, encoder, batch)
    scale = jax.lax.stop_gradient(output_scale)[None, None, :]
    error = (predicted - batch["ys"]) / scale
    weight = batch["mask"].astype(error.dtype)[..., None]
    count = jnp.sum(weight) * error.shape[-1]
    return jnp.sum(weight * error**2) / count


class WindowLoss(eqx.Module):
    """`truncated_simulation_loss` with a fixed `output_scale` (a tuple of floats),
    as `train`'s `loss_fn(params, batch)`: hashable, so that equal losses reuse the
    compiled step."""

    output_scale: tuple[float, ...] = eqx.field(static=True)

    def __call__(self, params, batch):
        dtype = batch["ys"].dtype
        scale = jnp.asarray(self.output_scale, dtype)
        return truncated_simulation_loss(params, batch, scale)
