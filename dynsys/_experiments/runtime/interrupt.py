"""Stopping a run on a signal: SIGTERM (sent by `timeout`, Slurm, Kubernetes) is
handled like SIGINT (Ctrl-C), and the runner can ask afterwards whether either came.

Inside `catch_interrupts()` both signals raise `KeyboardInterrupt` (which `train`
catches, keeping the best model) and are recorded, so that an experiment runner can
mark the run interrupted, stop a sweep, and exit non-zero.
"""

import contextlib
import signal
import threading
from collections.abc import Iterator

from ... import _interrupt_flag


class Interrupts:
    """The signals received inside `catch_interrupts()` (first one first)."""

    def __init__(self):
        self.received: list[int] = []
        self.deferring = False

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block, a signal is recorded but does not raise: what is being
        written (a finished run's folder, a sweep's table) is written whole."""
        before, self.deferring = self.deferring, True
        try:
            yield
        finally:
            self.deferring = before

    @property
    def interrupted(self) -> bool:
        return bool(self.received)

    @property
    def name(self) -> str | None:
        """`"SIGINT"` / `"SIGTERM"`: the first signal received, or `None`."""
        return signal.Signals(self.received[0]).name if self.received else None

    @property
    def exit_status(self) -> int:
        """The shell's status for a process stopped by the first signal (128 + n)."""
        return 128 + self.received[0] if self.received else 0


@contextlib.contextmanager
def catch_interrupts() -> Iterator[Interrupts]:
    """Within the block, SIGINT and SIGTERM raise `KeyboardInterrupt` and are
    recorded in the `Interrupts` yielded. The previous handlers come back on exit.

    Outside the main thread (where Python cannot set handlers) only a Ctrl-C that
    reaches Python as `KeyboardInterrupt` is seen, and is not recorded.
    """
    state = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame):
        state.received.append(signum)
        if not state.deferring:
            _interrupt_flag.set_pending()  # in case the exception is lost
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(signum)
        if signum == signal.SIGINT and current is signal.SIG_IGN:
            continue  # a background job that should ignore Ctrl-C keeps doing so
        previous[signum] = current
        signal.signal(signum, handler)
    try:
        yield state
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_DFL if old is None else old)
        _interrupt_flag.clear()
