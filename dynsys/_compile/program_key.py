"""A key that names a compiled program across processes, computed without tracing:
what `kept_programs` files a compiled program under.

JAX's own persistent cache keys a program by its lowered text, so a warm run still
traces and lowers every program (1.5 s of a warm `dynsys fit` on a 800-sample
record) before it can look one up. This key is made from what tracing depends on
instead:

- the function (module and name) and the code it can reach: every source file of
    dynsys (hashed), and the versions of JAX, jaxlib, NumPy and the equinox family;
- JAX's configuration, `XLA_FLAGS`, the compiler options and the backend's devices;
- the arguments: their tree structure, the shape, dtype and placement of every
    array, and the value of everything else (JAX's `static` part).

A value that cannot be named reliably across processes makes the call
*unkeyed* (`Unkeyed`), and it is compiled as usual: a class or function that is not
a module-level name of dynsys or of the libraries above (a user's own class, a
lambda, a closure), an object without a plain description, an array inside another
trace or on more than one device. A key therefore never names two different
programs; at worst a program is compiled again.
"""

import dataclasses
import enum
import functools
import hashlib
import os
import pathlib
import types

import numpy as np

from .. import _config


# Packages whose module-level names may appear in a key: dynsys (its source is
# hashed) and the libraries whose versions are in the key.
_LIBRARIES = (
    "jax",
    "jaxlib",
    "numpy",
    "ml_dtypes",
    "equinox",
    "lineax",
    "optimistix",
    "optax",
    "diffrax",
)
_NAMED_ROOTS = frozenset(("dynsys", "builtins", "functools", "operator", "math"))
_NAMED_ROOTS |= frozenset(_LIBRARIES)
# JAX settings that only say what to log or where to keep compiled programs.
_UNRELATED_SETTINGS = frozenset(
    (
        "jax_log_compiles",
        "jax_explain_cache_misses",
        "jax_logging_level",
        "jax_debug_log_modules",
        "jax_pprint_use_color",
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
        "jax_compilation_cache_max_size",
    )
)
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
# The dynsys package (above this folder), whose every source file is in the key.
PACKAGE = pathlib.Path(__file__).resolve().parents[1]


class Unkeyed(Exception):
    """A call whose program cannot be keyed (see the module docstring)."""


# Wrappers that change nothing a trace depends on: the test suite's run-time type
# checks (jaxtyping's import hook wraps every function of the package) and the
# entry points' one OpenBLAS thread (`_fitting/host_blas.py`).
_TRANSPARENT_WRAPPERS = (
    os.path.join("jaxtyping", "_decorator.py"),
    os.path.join("dynsys", "_fitting", "host_blas.py"),
)


def _unchecked(obj):
    """`obj` itself where a transparent wrapper wrapped it (each is a closure that
    names the function it wraps, `__wrapped__`), however many deep."""
    while True:
        code = getattr(obj, "__code__", None)
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is None or code is None:
            return obj
        if not any(path in code.co_filename for path in _TRANSPARENT_WRAPPERS):
            return obj
        obj = wrapped


def _name(obj) -> str:
    """`module:qualname` of a module-level class or function of `_NAMED_ROOTS`."""
    obj = _unchecked(obj)
    module = getattr(obj, "__module__", None) or ""
    qualname = getattr(obj, "__qualname__", None) or ""
    if module.split(".")[0] not in _NAMED_ROOTS or not qualname or "<" in qualname:
        raise Unkeyed(f"{obj!r} has no name that lasts across processes")
    if getattr(obj, "__closure__", None):
        raise Unkeyed(f"{obj!r} is a closure")
    return f"{module}:{qualname}"


def describe(value):
    """A description of a static value, equal across processes exactly when the
    value is (as far as tracing can tell); `Unkeyed` for any other value."""
    if type(value) in _SCALARS:  # not a subclass: its own methods may matter
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list)):
        kind = type(value).__name__ if type(value) in (tuple, list) else None
        return (kind or _name(type(value)), tuple(describe(v) for v in value))
    if isinstance(value, dict) and type(value) is dict:
        items = sorted((repr(describe(k)), describe(v)) for k, v in value.items())
        return ("dict", tuple(items))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted(repr(describe(v)) for v in value)))
    if isinstance(value, np.dtype):
        return ("dtype", str(value))
    if isinstance(value, np.ndarray) and value.dtype != object:
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return ("ndarray", str(value.dtype), value.shape, digest)
    if isinstance(value, np.generic):
        return ("scalar", str(value.dtype), repr(value.item()))
    if isinstance(value, enum.Enum):
        return (_name(type(value)), value.name)
    if isinstance(value, functools.partial):
        return (
            "partial",
            describe(value.func),
            describe(value.args),
            describe(value.keywords),
        )
    if isinstance(value, types.MethodType):
        return ("method", describe(value.__self__), _name(value.__func__))
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        return ("named", _name(value))
    if dataclasses.is_dataclass(value):
        fields = dataclasses.fields(value)
        return (
            _name(type(value)),
            tuple((f.name, describe(getattr(value, f.name))) for f in fields),
        )
    if _is_plain_marker(value):
        return ("marker", _name(type(value)))
    if callable(value) and hasattr(value, "__wrapped__"):
        # A module-level function wrapped by a library (`jax.custom_jvp`, `jax.jit`).
        return ("wrapped", _name(value), describe(value.__wrapped__))
    raise Unkeyed(f"no description of {type(value).__name__} values")


def _is_plain_marker(value) -> bool:
    """An instance without state that compares by identity (a sentinel, such as
    equinox's `Missing`), of a class of `_NAMED_ROOTS`."""
    kind = type(value)
    return (
        kind.__eq__ is object.__eq__
        and not getattr(value, "__dict__", None)
        and not getattr(kind, "__slots__", ())
        and kind.__module__.split(".")[0] in _NAMED_ROOTS
    )


def describe_tree(treedef):
    """The tree structure `treedef`, its node types and their static data."""
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return "*"
    node_type, data = treedef.node_data()
    children = tuple(describe_tree(child) for child in treedef.children())
    return (_name(node_type), describe(data), children)


def describe_array(x):
    """The shape, dtype and placement of an array argument (`Unkeyed` for a tracer,
    or an array on several devices)."""
    import jax

    if isinstance(x, jax.core.Tracer):
        raise Unkeyed("called inside another trace")
    if isinstance(x, jax.Array):
        if len(x.sharding.device_set) != 1:
            raise Unkeyed("an array on several devices")
        return ("array", x.shape, str(x.dtype), x.weak_type, str(x.sharding))
    return ("host", np.shape(x), str(np.asarray(x).dtype))


@functools.cache
def _source_digest() -> str:
    """sha256 of every source file of the dynsys package (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _versions() -> tuple:
    """The installed versions of `_LIBRARIES` (from their metadata: the same
    whichever of them this process has imported so far)."""
    import importlib.metadata

    versions = []
    for name in _LIBRARIES:
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((name, None))
    return tuple(versions)


def environment() -> tuple:
    """What every key shares in this process: dynsys's source, the libraries'
    versions, JAX's settings, `XLA_FLAGS` and the devices."""
    import jax

    settings = tuple(
        (name, repr(value))
        for name, value in sorted(jax.config.values.items())
        if name not in _UNRELATED_SETTINGS
    )
    devices = tuple(
        (d.platform, d.device_kind, d.id, d.process_index) for d in jax.devices()
    )
    return (
        _source_digest(),
        _versions(),
        settings,
        _config.read(_config.XLA_FLAGS) or "",
        jax.process_count(),
        devices,
    )


def program_key(fun, options: dict, treedef, leaves, dynamic) -> str:
    """The key of `fun`'s program (compiler `options`) for arguments flattened to
    `treedef` and `leaves`, `dynamic[i]` telling an array argument (traced) from a
    static one; `Unkeyed` when it cannot be named."""
    described = tuple(
        describe_array(leaf) if is_array else describe(leaf)
        for leaf, is_array in zip(leaves, dynamic)
    )
    parts = (
        "dynsys-program-1",
        _name(fun),
        describe(options),
        describe_tree(treedef),
        described,
        environment(),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()
