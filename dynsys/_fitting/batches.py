"""The training data on the device and its minibatches: shuffled epochs, drawn
lazily, each batch of one shape (one compilation)."""

from collections.abc import Iterator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree


def _leading_size(data: PyTree) -> int:
    leaves = [leaf for leaf in jax.tree.leaves(data) if eqx.is_array(leaf)]
    if not leaves:
        raise ValueError("train(data=...): data has no arrays.")
    sizes = {leaf.shape[0] if getattr(leaf, "ndim", 0) else None for leaf in leaves}
    if len(sizes) != 1 or None in sizes:
        shapes = [tuple(getattr(leaf, "shape", ())) for leaf in leaves]
        raise ValueError(
            "train(data=...): every array in data must share its leading (batch) "
            f"axis, got shapes {shapes}."
        )
    (size,) = sizes
    if size == 0:
        raise ValueError("train(data=...): data is empty (leading axis of size 0).")
    return size


def _iter_batches(
    key: PRNGKeyArray, size: int, batch_size: int, num_steps: int
) -> Iterator[np.ndarray]:
    """Yield `num_steps` index arrays of shape `(batch_size,)`: shuffled epochs.

    Epoch `e` is the permutation drawn with `jax.random.fold_in(key, e)`, cut into
    `size // batch_size` batches; its last incomplete batch is dropped so that every
    batch has the same shape (one compilation). Epochs are drawn lazily, so memory does
    not grow with `num_steps`.
    """
    per_epoch = size // batch_size
    step, epoch = 0, 0
    while step < num_steps:
        order = np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), size))
        for b in range(min(per_epoch, num_steps - step)):
            yield order[b * batch_size : (b + 1) * batch_size]
        step += per_epoch
        epoch += 1


def _batch_indices(
    key: PRNGKeyArray, size: int, batch_size: int, num_steps: int
) -> np.ndarray:
    """All of `_iter_batches` at once, shape `(num_steps, batch_size)`."""
    return np.stack(list(_iter_batches(key, size, batch_size, num_steps)))


def on_device(data, batch_size, key, num_steps: int, caller: str):
    """`(data, batches)`: the data's arrays on the device (once, not at every
    step), and the minibatch index iterator (`None` without `batch_size`).
    Minibatches of data sharded over devices stay sharded (see `shard_batch`)."""
    if data is None:
        return None, None
    size = _leading_size(data)
    data = jax.tree.map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, data)
    if batch_size is None:
        return data, None
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= size
    ):
        raise ValueError(
            f"{caller}(batch_size=...): batch_size must be an integer in "
            f"[1, {size}] (the size of data), got {batch_size!r}."
        )
    return data, _iter_batches(key, size, batch_size, num_steps)


def chunk_indices(batches, count: int, chunk: int):
    """The minibatch rows of a chunk's `count` steps, padded to `chunk` (`None`
    without minibatches)."""
    if batches is None:
        return None
    rows = [next(batches) for _ in range(count)]
    rows += [rows[-1]] * (chunk - count)
    return jnp.asarray(np.stack(rows))
