"""Counting the programs XLA compiles, by JAX's own compilation events (never by
time), for the tests of issue 20's "compile less"."""

import collections
import contextlib

import equinox as eqx
import jax
import jax.monitoring


_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_recording: list[collections.Counter] = []


def _listener(event, duration, **kwargs):
    del duration
    if event == _BACKEND_COMPILE:
        for counter in _recording:
            counter.update([kwargs.get("fun_name", "?")])


jax.monitoring.register_event_duration_secs_listener(_listener)


@contextlib.contextmanager
def compiled_programs(*, fresh: bool = False):
    """The names of the programs XLA compiles inside the block, with counts; with
    `fresh`, from empty in-memory caches."""
    if fresh:
        jax.clear_caches()
        eqx.clear_caches()
    counter = collections.Counter()
    _recording.append(counter)
    try:
        yield counter
    finally:
        _recording.remove(counter)
