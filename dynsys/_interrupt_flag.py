"""A signal that a run's handler turned into `KeyboardInterrupt`, until code acts
on it. The exception is raised wherever the main thread is when the signal
arrives, and can be lost there (inside a callback that compiled code makes, whose
caller reports and drops it); a loop that runs long (`train`'s chunks) checks the
flag between iterations, so the run still stops. Set by
`_experiments/runtime/interrupt.py`'s handler, cleared when that handler is
removed or when the interrupt is acted on."""

_pending = False


def set_pending() -> None:
    global _pending
    _pending = True


def clear() -> None:
    global _pending
    _pending = False


def pending() -> bool:
    """Whether a signal raised `KeyboardInterrupt` that nothing has acted on."""
    return _pending
