"""JAX's persistent cache entries, kept as dynsys's checked files (`entry_file`).

JAX's own file cache hands an entry to its deserialiser as it finds it on disk: a
flipped bit can crash the process or give another program, silently (issue 48).
Where dynsys chose the cache folder, `install` puts `CheckedEntries` in the place
of JAX's file cache, so that JAX reads and writes its entries through it:
`<folder>/jax/<key>.entry`, each with a SHA-256 digest of its key and content
checked before JAX sees a byte. A damaged, foreign or unreadable entry is a miss:
JAX compiles the program again and `put` writes it over (one line per process).

This uses JAX's internal module `jax._src.compilation_cache` (its `_cache`, the
object every lookup goes through, and `CacheInterface`); where a JAX has neither,
`install` returns `False` and `cache` leaves JAX's persistent cache off rather than
let it read entries unchecked.
"""

import pathlib
from collections.abc import Callable

from . import entry_file



def _internals():
    """JAX's compilation-cache module and its cache interface, or `None`."""
    try:
        from jax._src import compilation_cache as module
        from jax._src.compilation_cache_interface import CacheInterface
    except ImportError:
        return None
    if not hasattr(module, "_cache") or not hasattr(module, "_cache_initialized"):
        return None
    return module, CacheInterface


def install(
    folder: pathlib.Path,
    suffix: str,
    refused: Callable[[str], None],
    not_written: Callable[[str], None],
    written: Callable[[int], None],
) -> bool:
    """Make JAX read and write its persistent cache entries in `folder` through
    `CheckedEntries`, as `<key><suffix>` files; `refused(why)` is called for an
    entry that is not handed over, `not_written(why)` for one that could not be
    written, `written(size)` for one that was (`cache` says and counts them).

    **Returns:** whether it could (see the module docstring)."""
    found = _internals()
    if found is None:
        return False
    module, interface = found
    checked = _checked_class(interface)(folder, suffix, refused, not_written, written)
    with module._cache_initialized_mutex:
        module._cache = checked
        module._cache_initialized = True
    return True


def uninstall() -> None:
    """Take `CheckedEntries` out of JAX's place for its file cache, if it is there."""
    found = _internals()
    if found is None:
        return
    module, _ = found
    if type(module._cache).__name__ == "CheckedEntries":
        module.reset_cache()


def _checked_class(interface):
    class CheckedEntries(interface):
        """JAX's `CacheInterface` over dynsys's checked entry files in `_path`."""

        def __init__(self, folder, suffix, refused, not_written, written):
            self._path = folder
            self._suffix = suffix
            self._refused = refused
            self._not_written = not_written
            self._written = written

        def _file(self, key: str) -> pathlib.Path | None:
            if not key or "/" in key or "\\" in key or key.startswith("."):
                return None
            return self._path / (key + self._suffix)

        def get(self, key: str) -> bytes | None:
            path = self._file(key)
            if path is None:
                return None
            try:
                return entry_file.read(path, key)
            except entry_file.Refused as refused:
                self._refused(str(refused))
                return None

        def put(self, key: str, value: bytes) -> None:
            path = self._file(key)
            if path is None:
                return
            try:
                size = entry_file.write(path, key, value)
            except OSError as error:
                self._not_written(error.strerror or type(error).__name__)
                return
            self._written(size)

        def clear(self) -> None:
            pass  # dynsys's files are pruned by `cache.prune_folder`

    return CheckedEntries
