"""Optax transforms compared by what they compute, so that `optax.adam(1e-3)` built
twice (in a sweep, in a notebook cell run again) reuses one compiled training chunk.

An optax transform is a named tuple of closures, which Python compares by identity.
`transform_key` describes a transform by value instead: each function by its code, its
closure cells, its defaults and the module globals its code reads (their values when
the key is made, as a trace reads them); tuples, lists, dicts, numbers and strings by
value; modules and classes by identity; anything else (an array, a user's
object) by identity, so that two transforms share a key only when they compute the
same thing.
"""

import functools
import types
from collections.abc import Hashable
from typing import Any


_MAX_DEPTH = 64


class _Identity:
    """An object compared by identity (kept alive, so its id is never reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


def _global_names(code: types.CodeType) -> set[str]:
    """The global names a code object and the functions defined inside it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def transform_key(
    obj: Any, _depth: int = 0, _seen: frozenset = frozenset()
) -> Hashable:
    """A hashable description of `obj`: equal for objects that compute the same."""
    if _depth > _MAX_DEPTH or id(obj) in _seen:
        return _Identity(obj)
    seen = _seen | {id(obj)}

    def key(value):
        return transform_key(value, _depth + 1, seen)

    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
        return (type(obj), obj)
    if isinstance(obj, types.ModuleType | type):
        return _Identity(obj)
    if isinstance(obj, tuple | list):  # named tuples too: optax's transforms
        return (type(obj), tuple(key(item) for item in obj))
    if isinstance(obj, dict):
        return (type(obj), tuple((key(k), key(v)) for k, v in obj.items()))
    if isinstance(obj, functools.partial):
        keywords = tuple(sorted((k, key(v)) for k, v in obj.keywords.items()))
        return ("partial", key(obj.func), key(obj.args), keywords)
    if isinstance(obj, types.FunctionType):
        cells = []
        for cell in obj.__closure__ or ():
            try:
                cells.append(key(cell.cell_contents))
            except ValueError:  # a cell not assigned yet
                cells.append(("empty",))
        globals_read = tuple(
            (name, key(obj.__globals__[name]))
            for name in sorted(_global_names(obj.__code__))
            if name in obj.__globals__
        )
        kwdefaults = tuple(sorted((obj.__kwdefaults__ or {}).items()))
        return (
            "function",
            obj.__code__,
            tuple(cells),
            key(obj.__defaults__),
            tuple((k, key(v)) for k, v in kwdefaults),
            globals_read,
        )
    return _Identity(obj)


class ByValue:
    """An optax transform with equality and hash by `transform_key`."""

    __slots__ = ("transform", "_key", "_hash")

    def __init__(self, transform):
        self.transform = transform
        self._key = transform_key(transform)
        self._hash = hash(self._key)

    def __eq__(self, other):
        return isinstance(other, ByValue) and (
            other.transform is self.transform or other._key == self._key
        )

    def __hash__(self):
        return self._hash


def by_value(transform) -> ByValue:
    """`transform` wrapped in `ByValue` (once)."""
    return transform if isinstance(transform, ByValue) else ByValue(transform)
