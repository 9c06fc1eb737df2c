"""Many hosts: start JAX's multi-controller runtime and build global datasets.

One process per host (or per GPU) runs the same program; `jax.distributed`
connects them, `jax.devices()` then lists every process's devices, and a global
`jax.Array` holds each process's slice of the experiments. `rollout`, `fit` and
`train` need nothing else: XLA's collectives reduce the gradients, and every
process ends with the same model.
"""

import copy
import errno
import inspect
import socket

import equinox as eqx
import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from . import _config
from ._data.dataset import Dataset
from ._rollout.sharding import batch_sharding
from ._type_checks import checks_own_arguments


ENVIRONMENT = (_config.COORDINATOR, _config.NUM_PROCESSES, _config.PROCESS_ID)
BIND_ENVIRONMENT = _config.COORDINATOR_BIND
# The bounded waits (seconds): for every process to join, and for a silent process
# to count as lost.
TIMEOUT_ENVIRONMENT = _config.DISTRIBUTED_TIMEOUT
HEARTBEAT_ENVIRONMENT = _config.HEARTBEAT_TIMEOUT
DEFAULT_TIMEOUT = 300
DEFAULT_HEARTBEAT_TIMEOUT = 100


class DistributedError(RuntimeError):
    """A run of several processes that cannot start or lost one of its processes.

    Its message is one line: which process, what happened, and what to check.
    """


# The fields of a `Dataset` that hold one row per experiment (leading axis `N`).
_PER_EXPERIMENT = ("xs", "us", "ys")


def _seconds(argument: str, name: str, value, default: int) -> int:
    """A wait in whole seconds: the argument, else the environment variable `name`,
    else `default`; a positive integer."""
    if value is None:
        text = _config.read(name) or ""
        if text == "":
            return default
        try:
            value = int(text)
        except ValueError:
            value = text
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"initialize_distributed({argument}=...): expected a positive number of "
            f"seconds (argument or {name}), got {value!r}."
        )
    return value


def _from_environment(name: str, value, convert):
    if value is not None:
        return value
    text = _config.read(name)
    if text is None or text == "":
        return None
    try:
        return convert(text)
    except ValueError:
        raise ValueError(
            f"initialize_distributed: the environment variable {name} must be "
            f"{'an integer' if convert is int else 'host:port'}, got {text!r}."
        ) from None


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    coordinator_bind_address: str | None = None,
    local_device_ids: int | list[int] | None = None,
    initialization_timeout: int | None = None,
    heartbeat_timeout: int | None = None,
) -> None:
    """Join this process to a multi-process JAX run (`jax.distributed.initialize`).

    Call it once per process, before any other JAX computation. The three
    arguments come, in this order, from the call, from the environment variables
    `DYNSYS_COORDINATOR` (`host:port` of process 0), `DYNSYS_NUM_PROCESSES` and
    `DYNSYS_PROCESS_ID`, or, when none of them is set, from the launcher:
    `jax.distributed.initialize()` detects Slurm (`srun`), Open MPI (`mpirun`)
    and Cloud TPU by itself. `DYNSYS_COORDINATOR_BIND` (e.g.
    `127.0.0.1:12345`) sets the address process 0's coordinator listens on
    (default: every interface, on the coordinator's port).

    On CPU, the processes' collectives (the gradient reductions) use gloo over
    TCP; this is switched on here unless `jax_cpu_collectives_implementation` was
    already set. GPUs use NCCL by themselves.

    Calling it again after a successful call does nothing.

    **Arguments:**

    - `coordinator_address`: `host:port` of process 0 (all processes agree).
    - `num_processes`: the number of processes.
    - `process_id`: this process's number, `0 ... num_processes - 1`.
    - `coordinator_bind_address`: where process 0's coordinator listens.
    - `local_device_ids`: restrict this process to these local devices.
    - `initialization_timeout`: seconds to wait for every process to join (default
        from `DYNSYS_DISTRIBUTED_TIMEOUT`, else 300).
    - `heartbeat_timeout`: seconds after which a process that stopped answering
        counts as lost and the run ends (default from `DYNSYS_HEARTBEAT_TIMEOUT`,
        else 100).

    **Raises:**

    `ValueError` if only some of the three are given (by argument or environment),
    if none is given and no launcher is found, or an environment variable is
    malformed. `DistributedError` (one line naming this process) if process 0's
    coordinator port is in use, or the processes cannot connect. When a process is
    missing after `initialization_timeout` (a wrong process count, two processes
    with the same id, an unreachable coordinator), JAX's runtime ends the process
    (`dynsys run --distributed` reports it in one line, exit status 2).

    **Example:**

    ```python
    # DYNSYS_COORDINATOR=10.0.0.1:4321 DYNSYS_NUM_PROCESSES=2 DYNSYS_PROCESS_ID=0 \
    #     python fit_everything.py
    dynsys.initialize_distributed()
    print(jax.process_index(), jax.process_count(), len(jax.devices()))
    ```
    """
    if jax.distributed.is_initialized():
        return
    coordinator_address, num_processes, process_id, coordinator_bind_address = (
        _resolved_arguments(
            coordinator_address, num_processes, process_id, coordinator_bind_address
        )
    )
    _check_process_numbers(coordinator_address, num_processes, process_id)
    initialization_timeout = _seconds(
        "initialization_timeout",
        TIMEOUT_ENVIRONMENT,
        initialization_timeout,
        DEFAULT_TIMEOUT,
    )
    heartbeat_timeout = _seconds(
        "heartbeat_timeout",
        HEARTBEAT_ENVIRONMENT,
        heartbeat_timeout,
        DEFAULT_HEARTBEAT_TIMEOUT,
    )
    if process_id == 0:
        _check_port_free(coordinator_bind_address or coordinator_address)
    _start_runtime(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=initialization_timeout,
        coordinator_bind_address=coordinator_bind_address,
        heartbeat_timeout=heartbeat_timeout,
    )


def _resolved_arguments(
    coordinator_address, num_processes, process_id, coordinator_bind_address
):
    """The four addresses and numbers, each from the call or else its environment
    variable (`None` where neither gives it)."""
    coordinator_address = _from_environment(
        _config.COORDINATOR, coordinator_address, str
    )
    num_processes = _from_environment(_config.NUM_PROCESSES, num_processes, int)
    process_id = _from_environment(_config.PROCESS_ID, process_id, int)
    coordinator_bind_address = _from_environment(
        BIND_ENVIRONMENT, coordinator_bind_address, str
    )
    return coordinator_address, num_processes, process_id, coordinator_bind_address


def _check_process_numbers(coordinator_address, num_processes, process_id) -> None:
    """All three given or none, and `0 <= process_id < num_processes`."""
    given = {
        "coordinator_address (DYNSYS_COORDINATOR)": coordinator_address,
        "num_processes (DYNSYS_NUM_PROCESSES)": num_processes,
        "process_id (DYNSYS_PROCESS_ID)": process_id,
    }
    missing = [name for name, value in given.items() if value is None]
    if 0 < len(missing) < len(given):
        raise ValueError(
            "initialize_distributed: give all three of coordinator_address, "
            "num_processes and process_id (or none, to let the launcher set them); "
            f"missing {', '.join(missing)}."
        )
    if num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(
            f"initialize_distributed(process_id=...): expected 0 <= process_id < "
            f"num_processes = {num_processes}, got {process_id}."
        )


def _check_port_free(address: str) -> None:
    """Process 0's coordinator listens on `address` (`host:port`): refuse, naming
    the port, when another program already listens there (the other processes
    would otherwise connect to that program and wait)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        return  # JAX names a malformed address itself
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host if host not in ("", "*") else "", number))
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            return  # an address of another host, or no IPv6: JAX decides
        raise DistributedError(
            f"initialize_distributed: process 0 cannot listen on port {number} "
            f"({address}): another program already uses it; choose a free port in "
            "DYNSYS_COORDINATOR (the same in every process) or stop that program."
        ) from None


def _start_runtime(*, num_processes, heartbeat_timeout, **arguments) -> None:
    """`jax.distributed.initialize`, with gloo for CPU collectives unless they were
    set; without the three numbers and a launcher, one `ValueError` that says so;
    JAX's other errors as one-line `DistributedError`s."""
    collectives = jax.config.jax_cpu_collectives_implementation
    if collectives in (None, "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if (
        "heartbeat_timeout_seconds"
        in inspect.signature(jax.distributed.initialize).parameters
    ):  # JAX >= 0.4.36
        arguments["heartbeat_timeout_seconds"] = heartbeat_timeout
    try:
        jax.distributed.initialize(num_processes=num_processes, **arguments)
    except RuntimeError as error:  # JaxRuntimeError: the runtime could not start
        jax.config.update("jax_cpu_collectives_implementation", collectives)
        where = arguments.get("coordinator_address") or "the launcher's coordinator"
        first = " ".join(str(error).split())[:200]
        raise DistributedError(
            f"initialize_distributed: process {arguments.get('process_id')} could "
            f"not join the coordinator at {where} ({first}); check that process 0 "
            "runs and that this address is its own."
        ) from None
    except ValueError as error:
        jax.config.update("jax_cpu_collectives_implementation", collectives)
        if num_processes is not None:
            raise
        raise ValueError(
            "initialize_distributed: no launcher found (Slurm srun, Open MPI mpirun, "
            "Cloud TPU) and DYNSYS_COORDINATOR, DYNSYS_NUM_PROCESSES and "
            "DYNSYS_PROCESS_ID are not set; start every process under a launcher or "
            f"set the three variables (JAX: {error})"
        ) from None


def is_main_process() -> bool:
    """Whether this is process 0 (always, in a run of one process).

    In a run of several processes every process computes, and by convention
    process 0 alone prints, shows progress bars and writes files.

    **Returns:**

    `jax.process_index() == 0`.

    **Example:**

    ```python
    result = dynsys.fit(model, data, progress=dynsys.is_main_process())
    if dynsys.is_main_process():
        dynsys.save("fitted.dynsys", result.model)
    ```
    """
    return jax.process_index() == 0


def _layout(data: Dataset) -> np.ndarray:
    """The sizes every process must agree on, as integers: `N, T, n, m, p`."""
    sizes = [data.num_trajectories, data.num_steps, data.state_size, data.input_size]
    sizes.append(getattr(data, "output_size", 0))
    return np.asarray(sizes, np.int64)


@checks_own_arguments
def global_dataset(
    local_data: Dataset, *, sharding: NamedSharding | None = None
) -> Dataset:
    """One `Dataset` of every process's experiments, sharded over all devices.

    Each process passes the experiments it loaded (the same number in each, the
    same lengths and columns); the result is a `Dataset` whose `xs`, `us` (and
    `ys`) are global `jax.Array`s of `N = process_count * N_local` experiments:
    process `p`'s experiments are rows `p * N_local ... (p + 1) * N_local - 1`, and
    stay in that process's memory. Pass it to `fit`, `rollout` or `train` as
    usual, in every process: the gradients are reduced across processes by XLA
    collectives and every process gets the same model. `ts` and the names are
    the same in every process and replicated.

    In a run of one process this is `shard_batch` for a dataset: its experiments
    are split over the local devices.

    **Arguments:**

    - `local_data`: this process's experiments, a `Dataset` of `N_local`
        experiments; `N_local` must be a multiple of the number of this process's
        devices in `sharding`.
    - `sharding`: a `NamedSharding` splitting the leading axis (default
        `dynsys.batch_sharding()`: every device of every process, in process order).

    **Returns:**

    A `Dataset` with global arrays, sharded along the experiments.

    **Raises:**

    `ValueError` naming the process, if the processes' datasets differ in size,
    length or columns, or `N_local` is not a multiple of the local device count.
    Every process raises it.

    **Example:**

    ```python
    dynsys.initialize_distributed()
    mine = dynsys.load_dataset(f"experiments-{jax.process_index()}.npz")
    data = dynsys.global_dataset(mine)
    result = dynsys.fit(model, data, solver=optax.adam(1e-2), num_steps=500,
                        progress=dynsys.is_main_process())
    ```
    """
    sharding = _checked_sharding(local_data, sharding)
    count = jax.process_count()
    _check_same_layout(local_data, count)
    N_local = _check_local_rows(local_data, sharding)
    replacements = _global_rows(local_data, sharding, count * N_local)
    ts = _replicated_ts(local_data, sharding, count)
    if ts is not None:
        replacements["ts"] = ts
    names = list(replacements)
    result = eqx.tree_at(
        lambda d: [getattr(d, name) for name in names],
        local_data,
        [replacements[name] for name in names],
    )
    return _with_global_lengths(result, local_data, sharding, count)


def _checked_sharding(local_data, sharding) -> NamedSharding:
    """The sharding (default `batch_sharding()`), after checking both types."""
    if not isinstance(local_data, Dataset):
        raise TypeError(
            "global_dataset(local_data=...): expected a dynsys.Dataset, got "
            f"{type(local_data)}."
        )
    sharding = batch_sharding() if sharding is None else sharding
    if not isinstance(sharding, NamedSharding):
        raise TypeError(
            "global_dataset(sharding=...): expected a jax.sharding.NamedSharding, "
            f"got {type(sharding)}."
        )
    return sharding


def _check_same_layout(local_data: Dataset, count: int) -> None:
    """Every process's `N, T, n, m, p` equal process 0's (a collective)."""
    layout = _layout(local_data)
    layouts = np.asarray(multihost_utils.process_allgather(layout)).reshape(count, -1)
    for p in range(count):
        if not np.array_equal(layouts[p], layouts[0]):
            raise ValueError(
                "global_dataset(local_data=...): every process must hold the same "
                "number of experiments of the same length and columns (N, T, n, m, "
                f"p); process 0 has {tuple(int(v) for v in layouts[0])}, process "
                f"{p} has {tuple(int(v) for v in layouts[p])}."
            )


def _check_local_rows(local_data: Dataset, sharding: NamedSharding) -> int:
    """`N_local`, after checking it is a multiple of this process's devices."""
    local_devices = sum(
        d.process_index == jax.process_index() for d in sharding.mesh.devices.flat
    )
    N_local = local_data.num_trajectories
    if local_devices == 0 or N_local % local_devices:
        raise ValueError(
            f"global_dataset(local_data=...): process {jax.process_index()} has "
            f"N_local = {N_local} experiments, which must be a multiple of its "
            f"{local_devices} device(s) in the sharding."
        )
    return N_local


def _global_rows(local_data: Dataset, sharding: NamedSharding, N: int) -> dict:
    """`xs`, `us` (and `ys`) as global arrays of `N` rows, this process's slice
    from `local_data`."""
    replacements = {}
    for name in _PER_EXPERIMENT:
        value = getattr(local_data, name, None)
        if value is not None:
            local = np.asarray(value)
            shape = (N,) + local.shape[1:]
            replacements[name] = jax.make_array_from_process_local_data(
                sharding, local, shape
            )
    return replacements


def _replicated_ts(local_data: Dataset, sharding: NamedSharding, count: int):
    """The sample times replicated on every device, after checking that every
    process has the same (a collective); `None` without them."""
    ts = getattr(local_data, "ts", None)
    if ts is None:
        return None
    every = np.asarray(multihost_utils.process_allgather(np.asarray(ts)))
    for p in range(count):
        if not np.array_equal(every.reshape(count, -1)[p], np.asarray(ts)):
            raise ValueError(
                "global_dataset(local_data=...): every process must have the "
                f"same sample times ts; process {jax.process_index()} and "
                f"process {p} differ."
            )
    replicated = NamedSharding(sharding.mesh, PartitionSpec())
    return jax.make_array_from_process_local_data(replicated, np.asarray(ts))


def _with_global_lengths(result, local_data, sharding, count: int):
    """`result` with every process's experiment `lengths` (a static field), in the
    order of the rows (a collective); unchanged without lengths."""
    lengths = getattr(local_data, "lengths", None)
    if lengths is None:
        return result
    every = np.asarray(
        multihost_utils.process_allgather(np.asarray(lengths, np.int64))
    ).reshape(count, -1)
    result = copy.copy(result)
    object.__setattr__(
        result,
        "lengths",
        tuple(int(v) for p in _process_order(sharding) for v in every[p]),
    )
    return result


def _process_order(sharding: NamedSharding) -> list[int]:
    """The processes in the order their rows appear along the sharded axis."""
    first: dict[int, int] = {}
    for position, device in enumerate(sharding.mesh.devices.flat):
        first.setdefault(device.process_index, position)
    return sorted(first, key=first.__getitem__)


def share_between_processes(data: Dataset) -> Dataset:
    """`data`, which every process holds whole, as a global dataset in which each
    process keeps only its own slice of the experiments (`dynsys run
    --distributed`: every process simulates or loads the same data).

    Unchanged in a run of one process, and when the number of experiments is not a
    multiple of the number of devices (every process then fits all of them).
    """
    count = jax.process_count()
    if count == 1 or data.num_trajectories % len(jax.devices()):
        return data
    share = data.num_trajectories // count
    mine = np.arange(share * jax.process_index(), share * (jax.process_index() + 1))
    return global_dataset(data[mine])
