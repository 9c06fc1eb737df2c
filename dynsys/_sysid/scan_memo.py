"""The subspace candidates of a structure scan, kept by content for the length of
one identification (`remembered_scans`): the `fit` experiment's delay check scores
the unrefined scan on the delayed data, and the structure scan that follows asks
for the same candidates of the same data again (0.3 s of a warm heating run).
Outside `remembered_scans`, and for a scan of other data, orders, feedthroughs,
horizon, offset or stopping rule, `select_order` computes its own."""

import collections
import contextlib
import hashlib
from collections.abc import Callable, Iterator

import jax
import numpy as np


_KEPT = 2  # scans remembered: the delay check's two
_state: dict = {"recent": None}  # an OrderedDict within `remembered_scans`


@contextlib.contextmanager
def remembered_scans() -> Iterator[None]:
    """Within this context, `select_order` reuses the subspace candidates of an
    earlier scan of equal data and options; they are forgotten on leaving."""
    previous, _state["recent"] = _state["recent"], collections.OrderedDict()
    try:
        yield
    finally:
        _state["recent"] = previous


def _digest(*parts) -> bytes:
    """A digest of `parts`: datasets (their arrays' values, shapes and dtypes, and
    their static fields) and plain values (by `repr`)."""
    h = hashlib.blake2b(digest_size=20)
    for part in parts:
        leaves, treedef = jax.tree.flatten(part)
        h.update(repr(treedef).encode())
        for leaf in leaves:
            array = np.asarray(leaf)
            h.update(f"{array.dtype}{array.shape}".encode())
            h.update(np.ascontiguousarray(array).tobytes())
    return h.digest()


def recalled(compute: Callable[[], tuple[list, list]], *key) -> tuple[list, list]:
    """`compute()`'s `(rows, models)`; within `remembered_scans`, a copy of the
    lists it gave for an equal `key` (the data, the held-out data and every option
    the scan depends on) when there was one."""
    recent = _state["recent"]
    if recent is None:
        return compute()
    digest = _digest(*key)
    if digest not in recent:
        recent[digest] = tuple(map(tuple, compute()))
        while len(recent) > _KEPT:
            recent.popitem(last=False)
    recent.move_to_end(digest)
    rows, models = recent[digest]
    return list(rows), list(models)
