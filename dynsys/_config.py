"""Process-wide switches: every environment variable dynsys reads, named and read
here, and nowhere else.

A library is a guest in its user's process: a plain call of dynsys changes no
setting of JAX's, no environment variable and no global state of NumPy's. What a
user, a launcher or the `dynsys` command sets for the whole process reaches dynsys
through the variables below, read by `read`. Each is read when asked, not once at
import: `dynsys run --distributed` sets `DYNSYS_SUPERVISED` for its child, and the
tests set variables after dynsys is imported.

dynsys's own variables:

- `DYNSYS_CACHE_DIR`: the folder of the persistent compilation cache, when one is
    turned on (`dynsys.use_compile_cache`, `_compile/cache.py`); empty or `off`:
    no cache.
- `DYNSYS_COORDINATOR`, `DYNSYS_NUM_PROCESSES`, `DYNSYS_PROCESS_ID`,
    `DYNSYS_COORDINATOR_BIND`: a run of several processes
    (`dynsys.initialize_distributed`, `_distributed.py`).
- `DYNSYS_DISTRIBUTED_TIMEOUT`, `DYNSYS_HEARTBEAT_TIMEOUT`: its two waits, in
    seconds.
- `DYNSYS_SUPERVISED`: set by `dynsys run --distributed` in the child process it
    watches (`_experiments/supervise.py`).
- `DYNSYS_XLA_FLAGS_ADDED`: the `XLA_FLAGS` entries the `dynsys` command added
    for its process (`_compile/jit.py`, `use_for_process`), so that they are not
    taken for the user's own.

Other programs' variables that dynsys reads:

- `XLA_FLAGS`: a user's XLA options, which dynsys's compiler options never
    override; part of a kept program's key (`_compile/program_key.py`).
- `JAX_PLATFORMS`: whether JAX can only use the CPU (`_compile/jit.py`).
- `XDG_CACHE_HOME`: where the default cache folder goes (`_compile/cache.py`).
- A launcher's process rank and count (`LAUNCHER_RANKS`, `LAUNCHER_SIZES`), which
    name a process in the one-line errors of a distributed run.

What the `dynsys` command (`cli.py`), which owns its process, turns on for it
before its run, and a library call never does: `use_for_process` (compiler
options in `XLA_FLAGS`), the compilation cache (`use_compile_cache`), kept
programs read ahead on a thread (`_compile/read_ahead.py`), figures drawn by a
helper process (`_experiments/figure_helper.py`) and Python's garbage-collection
thresholds. `run_experiment` turns the compilation cache on too.
"""

import os
from collections.abc import Mapping


CACHE_DIR = "DYNSYS_CACHE_DIR"
COORDINATOR = "DYNSYS_COORDINATOR"
NUM_PROCESSES = "DYNSYS_NUM_PROCESSES"
PROCESS_ID = "DYNSYS_PROCESS_ID"
COORDINATOR_BIND = "DYNSYS_COORDINATOR_BIND"
DISTRIBUTED_TIMEOUT = "DYNSYS_DISTRIBUTED_TIMEOUT"
HEARTBEAT_TIMEOUT = "DYNSYS_HEARTBEAT_TIMEOUT"
SUPERVISED = "DYNSYS_SUPERVISED"
XLA_FLAGS_ADDED = "DYNSYS_XLA_FLAGS_ADDED"

XLA_FLAGS = "XLA_FLAGS"
JAX_PLATFORMS = "JAX_PLATFORMS"
XDG_CACHE_HOME = "XDG_CACHE_HOME"
# Slurm's, Open MPI's and PMI's (MPICH, Intel MPI) names for a process's rank and
# the number of processes.
LAUNCHER_RANKS = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
LAUNCHER_SIZES = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system has
    one): whether a helper process or thread has a core of its own."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def read(name: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The environment variable `name` now, `None` when it is not set. `environ`:
    another mapping to read instead of this process's environment (for a child
    process's environment, or a test's)."""
    return environ.get(name)


def first_set(*names: str) -> str | None:
    """The value of the first of `names` that is set and not empty, else `None`."""
    for name in names:
        value = read(name)
        if value:
            return value
    return None
