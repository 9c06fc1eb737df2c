"""The garbage collector while a run draws and writes its figures."""

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def earlier_objects_frozen() -> Iterator[None]:
    """Inside, the cyclic garbage collector skips every object made before
    (`gc.freeze`); after, they are collected as usual again (`gc.unfreeze`).

    A fit run holds some 350,000 objects by its figures (JAX's caches of traced and
    compiled programs, the data, the models), all alive to its end. Drawing makes
    matplotlib objects fast enough to start a full collection about once per
    figure stage, and each full collection walked all of them: 0.3 s, twice, of the
    heating record's figures. Objects made inside are collected as before; what
    was made before and becomes garbage inside is freed by reference counting, or
    by a later collection if it is in a cycle. Objects the caller froze stay
    frozen: then nothing is done.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
