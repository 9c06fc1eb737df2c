"""Many devices: shard batches of trajectories over devices with `jax.sharding`."""

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PyTree


def batch_sharding(
    devices: Sequence[jax.Device] | None = None, *, axis_name: str = "batch"
) -> NamedSharding:
    """The sharding that splits a leading batch axis over a 1-D mesh of `devices`.

    **Arguments:**

    - `devices`: the devices (default: `jax.devices()`, every device of every
        process when several hosts joined with `jax.distributed.initialize()`,
        ordered by process so that each process's rows are contiguous).
    - `axis_name`: the mesh axis name.

    **Returns:**

    A `jax.sharding.NamedSharding` with `PartitionSpec(axis_name)`.
    """
    if devices is None:
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    devices = list(devices)
    if not devices:
        raise ValueError("batch_sharding(devices=...): no devices given.")
    mesh = Mesh(np.asarray(devices), (axis_name,))
    return NamedSharding(mesh, PartitionSpec(axis_name))


def shard_batch(
    tree: PyTree,
    devices: Sequence[jax.Device] | None = None,
    *,
    axis_name: str = "batch",
) -> PyTree:
    """Place the leading (batch) axis of every array in `tree` over `devices`.

    Each device holds `N / len(devices)` trajectories. Pass the result to `rollout`
    (as `x0` and `inputs`), to `dynsys.train` / `fit` (as `data`), or to any
    jitted function: JAX runs the computation where the data is and the results
    are sharded the same way; they equal the single-device results. Models
    (systems, controllers) need nothing: they are replicated automatically.

    **Arguments:**

    - `tree`: a pytree of arrays (e.g. `x0` of shape `(N, n)`, or a dict of
        `xs (N, T+1, n)` and `us (N, T, m)`); every array needs a leading axis
        whose size is a multiple of the number of devices. Non-array leaves are
        returned unchanged.
    - `devices`: the devices (default `jax.devices()`: all local devices, or all
        devices of all hosts after `jax.distributed.initialize()`).
    - `axis_name`: the name of the mesh axis.

    **Returns:**

    The same pytree, its arrays placed with a `NamedSharding` over a 1-D `Mesh`.

    **Raises:**

    `ValueError` if an array has no leading axis or its size is not a multiple of
    the number of devices.

    **Example:**

    ```python
    x0 = dynsys.shard_batch(jnp.ones((8, 2)))
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    traj = dynsys.rollout(system, x0, 20)  # computed where x0 lives
    ```
    """
    sharding = batch_sharding(devices, axis_name=axis_name)
    count = sharding.mesh.size

    def place(path, leaf):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        if leaf.ndim == 0 or leaf.shape[0] % count:
            raise ValueError(
                f"shard_batch(tree=...): the array at {jax.tree_util.keystr(path)} "
                f"needs a leading batch axis whose size is a multiple of the number "
                f"of devices ({count}), got shape {tuple(leaf.shape)}."
            )
        return jax.device_put(leaf, sharding)

    return jax.tree_util.tree_map_with_path(place, tree)


def leading_axis_shardings(tree: PyTree) -> PyTree:
    """For each array leaf: its `NamedSharding` if it splits axis 0, else `None`.

    `train` uses this to keep the minibatches it gathers from sharded data sharded
    the same way (a gather would otherwise replicate them).
    """

    def sharding_of(leaf):
        sharding = getattr(leaf, "sharding", None)
        if (
            isinstance(sharding, NamedSharding)
            and getattr(leaf, "ndim", 0) > 0
            and len(sharding.spec) > 0
            and sharding.spec[0] is not None
        ):
            return sharding
        return None

    return jax.tree.map(sharding_of, tree)


def constrain_batch(batch: PyTree, shardings: PyTree) -> PyTree:
    """Inside `jit`: constrain each leaf of `batch` to its entry of `shardings`.

    Leaves whose sharding is `None`, or whose leading size the sharded axis does not
    divide, are left to the compiler.
    """

    def constrain(leaf, sharding):
        if sharding is None:
            return leaf
        axis = sharding.spec[0]
        names = axis if isinstance(axis, tuple) else (axis,)
        count = int(np.prod([sharding.mesh.shape[name] for name in names]))
        if leaf.shape[0] % count:
            return leaf
        return jax.lax.with_sharding_constraint(leaf, sharding)

    return jax.tree.map(constrain, batch, shardings, is_leaf=lambda x: x is None)


def to_host(array) -> np.ndarray:
    """`array` as one NumPy array on this host, whole.

    A global array that spans several processes (see `dynsys.global_dataset`)
    cannot be read by `np.asarray` directly: its other processes' shards are
    gathered first (every process must call this, as for any collective).
    """
    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        from jax.experimental import multihost_utils

        array = multihost_utils.process_allgather(array, tiled=True)
    return np.asarray(array)
