"""The refit's program compiled while the structure scan runs (`RefitAhead`).

The refit on all the estimation data (`estimate.refit_on_estimation_data`) is a
fit of its own shapes (the whole record's length, no held-out data): on a cold
`dynsys fit` of the heating record, compiling its optimiser chunk took 2.5 s of a
12 s run, after the scan, while one of the machine's two cores stood idle (the
scan computes on one). Once the scan knows the size its candidates are padded to
(`_sysid.order.padded_size_known`), which the refit's padded model shares
(`order.final_size`), a thread runs the refit's set-up with a model of that size
until its first chunk (`kept_programs.compiling_ahead`): the chunk is compiled
(or loaded) and held for the process, not run, and the refit later runs it. XLA
compiles without Python's GIL, so the scan goes on.

Only where the process keeps its programs (`kept_programs.keeps_programs`: the
`dynsys` command with a cache folder of its own), on one process, and only when a
refit will follow (the held-out part carved from the estimation data). The
thread's work is counted apart (`compile_clock.AHEAD_THREAD`); whatever goes
wrong in it is dropped, and the refit compiles as it would have. A refit of
another size (a structure more than `MOST_EXTRA_STATES` below the scan's size)
compiles its own.
"""

import threading

from ..._compile import kept_programs
from ..runtime.compile_clock import AHEAD_THREAD


# The longest wait for the thread before the refit compiles on its own.
WAIT_SECONDS = 120.0


class RefitAhead:
    """Compiles the refit's program on a thread, once told the scan's size
    (`start`, a `padded_size_known` listener)."""

    def __init__(self, config: dict, estimation):
        import jax

        # The run's precision is a context of its thread (`jax.enable_x64`).
        self._x64 = bool(jax.config.jax_enable_x64)
        self._config = config
        self._estimation = estimation  # the data of the refit (all the estimation data)
        self._thread: threading.Thread | None = None

    def start(self, size: tuple[int, bool], model) -> None:
        """Start the thread for a refit padded to `size`, set up with `model` (a
        start of the scan's refined structures); once per run."""
        import jax

        if self._thread is not None or not kept_programs.keeps_programs():
            return
        if jax.process_count() > 1:  # (each process's refit is its slice's)
            return
        # Not a daemon: a process that ends meanwhile (an error, an interrupt)
        # waits for the compilation rather than ending inside XLA.
        self._thread = threading.Thread(
            target=self._compile, args=(size, model), name=AHEAD_THREAD
        )
        self._thread.start()

    def _compile(self, size, model) -> None:
        import jax

        from .estimate import fit_model, refit_config

        try:
            with jax.enable_x64(self._x64), kept_programs.compiling_ahead():
                fit_model(
                    refit_config(self._config),
                    model,
                    self._estimation,
                    None,
                    False,
                    size,
                )
        except Exception:  # noqa: BLE001 (CompiledAhead, or the refit compiles)
            return

    def wait(self) -> None:
        """Wait for the thread (if started), at most `WAIT_SECONDS`."""
        if self._thread is not None:
            self._thread.join(WAIT_SECONDS)
