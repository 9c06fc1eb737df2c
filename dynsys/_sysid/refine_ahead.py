"""The structure scan's refined candidates compiled ahead (`CandidatesAhead`).

Where the scan's candidates are not padded to one size (`padded.worth_padding`:
their Jacobian is too large for padding to pay, e.g. a 4,200-sample 3 x 3
record), each refined structure runs an optimiser chunk of its own, and a cold run
compiled them one after the other on one core (the evaporator record: three chunks
of 1.3-1.7 s each, most of its structure scan), while the other core stood idle.
A thread sets up the fits of the second and later candidates meanwhile, each
until its first chunk (`kept_programs.compiling_ahead`): the chunk is compiled (or
loaded) and held for the process, not run, and the candidate's own fit later runs
it. XLA compiles without Python's GIL, so the first candidate's fit goes on.

Only where the process keeps its programs (`kept_programs.keeps_programs`: the
`dynsys` command with a cache folder of its own), on one process, with two cores
or more. The thread's work is counted apart (`kept_programs.AHEAD_THREAD`);
whatever goes wrong in it is dropped, and the candidate compiles its own chunk as
it would have. Warnings its fits raise go where the candidates' own go (the scan
ignores them): the caller holds `warnings.catch_warnings` until `join`.
"""

import threading
from collections.abc import Callable, Sequence

from .._compile import kept_programs
from .._config import usable_cores as _cores


# The longest wait for the thread before a candidate compiles on its own.
WAIT_SECONDS = 120.0



class CandidatesAhead:
    """Compiles the chunks of the candidates `indices` on a thread, in that order,
    by calling `set_up(i)` for each within `kept_programs.compiling_ahead`."""

    def __init__(self, set_up: Callable[[int], object], indices: Sequence[int]):
        import jax

        # The run's precision is a context of its thread (`jax.enable_x64`).
        self._x64 = bool(jax.config.jax_enable_x64)
        self._set_up = set_up
        self._ready = {i: threading.Event() for i in indices}
        self._stopped = False
        self._thread: threading.Thread | None = None
        if indices and _worth_it():
            # Not a daemon: a process that ends meanwhile (an error, an interrupt)
            # waits for the compilation rather than ending inside XLA.
            self._thread = threading.Thread(
                target=self._compile, name=kept_programs.AHEAD_THREAD
            )
            self._thread.start()

    def _compile(self) -> None:
        import jax

        for i, ready in self._ready.items():
            if self._stopped:  # (the scan ended, e.g. by an error or an interrupt)
                ready.set()
                continue
            try:
                with jax.enable_x64(self._x64), kept_programs.compiling_ahead():
                    self._set_up(i)
            except Exception:  # noqa: BLE001 (CompiledAhead, or it compiles later)
                pass
            finally:
                ready.set()

    def wait(self, i: int) -> None:
        """Wait until candidate `i`'s chunk is ready (if it is one of the
        thread's), at most `WAIT_SECONDS`."""
        if self._thread is not None and i in self._ready:
            self._ready[i].wait(WAIT_SECONDS)

    def join(self) -> None:
        """Stop the thread after the candidate it is compiling, and wait for it
        (at most `WAIT_SECONDS`)."""
        self._stopped = True
        if self._thread is not None:
            self._thread.join(WAIT_SECONDS)


def _worth_it() -> bool:
    """A thread pays where programs are kept, on one process, with a spare core."""
    import jax

    return (
        kept_programs.keeps_programs() and jax.process_count() == 1 and _cores() > 1
    )
