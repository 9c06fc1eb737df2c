"""Compiled programs kept across runs: `KeptProgram`, what `top_level_jit` and
`kept_jit` make.

JAX's persistent compilation cache spares a warm run the compiling, but not the
tracing and lowering that its key needs (1.5 s of a warm `dynsys fit` on a
800-sample record, most of it the optimiser's chunk and the covariance). A
`KeptProgram` files its compiled program (JAX's serialised executable) under a key
that needs no tracing (`program_key`), in the `programs` subfolder of the folder
dynsys chose for JAX's cache (`cache`), and a later run with the same key
loads and runs it directly.

Anything else runs as `equinox.filter_jit` would: no cache folder (or the user's own
JAX folder), `jax.disable_jit`, a call that cannot be keyed, a program that calls
back into Python or that JAX cannot serialise. Each program is an `entry_file`: its
SHA-256 digest (of the key and content) is checked before it is unpickled, and the
unpickler builds only classes of dynsys and the libraries in the key (and numpy's
array helpers), never `os.system` or `eval`. An entry that is damaged, foreign, not
a regular file, or cannot be loaded or run (written by another jaxlib) is compiled
again and written over, with one line per process for a damaged or foreign one; a
program that cannot be written is said once, and counted in the cache's status
(`CacheStatus.not_kept`, which the run's summary shows); the run goes on.
"""

import contextlib
import contextvars
import io
import math
import pathlib
import pickle
import threading
import time

from . import cache, entry_file, program_key as _program_key, read_ahead
from .program_key import program_key, Unkeyed


# A `jax.monitoring` duration event per program read from its file (the stages'
# clock, `_experiments/compile_clock.py`, counts them).
LOAD_EVENT = "/dynsys/kept_program_load_duration"
# The name of a thread that compiles programs ahead of the stage that runs them
# (`compiling_ahead`); the run's clock counts its work apart.
AHEAD_THREAD = "dynsys-compile-ahead"
# Within `compiling_ahead`: a repeated program (the optimiser's chunk) is compiled
# or loaded, not run.
_AHEAD: contextvars.ContextVar = contextvars.ContextVar("dynsys_ahead", default=False)
_FORMAT = 1
_said: set[str] = set()


def _folder() -> pathlib.Path | None:
    """Where programs are kept: in the folder dynsys chose for JAX's cache."""
    status = cache.current_status()
    if status is None or status.folder is None or status.source == "jax":
        return None
    return pathlib.Path(status.folder) / cache.KEPT_SUBFOLDER


class _Program:
    """A compiled program of the flattened arguments' arrays, and how its outputs
    are rebuilt: the output tree, its static leaves, which leaves are arrays."""

    def __init__(self, compiled, out_tree, out_static, out_dynamic, keepable=True):
        self.keepable = keepable  # may be written to a file (`_without_host_callbacks`)
        self.compiled = compiled
        self.out_tree = out_tree
        self.out_static = out_static
        self.out_dynamic = out_dynamic

    def __call__(self, arrays):
        outputs = iter(self.compiled(*arrays))
        leaves = [
            next(outputs) if is_array else static
            for static, is_array in zip(self.out_static, self.out_dynamic)
        ]
        return self.out_tree.unflatten(leaves)

    def entry(self, key: str) -> bytes:
        """The program as a file's content (`load` reads it). The output tree goes
        as its skeleton (`_Hole` for each array), not as the `PyTreeDef`: a pickled
        tree definition does not keep equinox's sentinels."""
        from jax.experimental.serialize_executable import serialize

        executable = serialize(self.compiled)[0]
        holes = [
            _Hole() if is_array else static
            for static, is_array in zip(self.out_static, self.out_dynamic)
        ]
        return pickle.dumps(
            {
                "format": _FORMAT,
                "key": key,
                "executable": executable,
                "inputs": len(self.compiled.args_info[0]),
                "outputs": self.out_tree.unflatten(holes),
            }
        )


class _Hole:
    """Where an output array goes in a kept program's output skeleton."""


# What a kept program's pickle may name: anything of dynsys and of the libraries a
# key may name (`program_key._NAMED_ROOTS`), less the standard modules among them,
# and these builtin types (no function of `builtins`, `os` or another module: a
# crafted pickle names one to run it).
_STANDARD = frozenset(("builtins", "functools", "operator", "math"))
_BUILTIN_TYPES = frozenset(
    ("bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int")
    + ("list", "range", "set", "slice", "str", "tuple")
)


class _Unpickler(pickle.Unpickler):
    """`pickle.Unpickler` that finds only the names a kept program may hold (see
    `_STANDARD`)."""

    def find_class(self, module: str, name: str):
        root = module.partition(".")[0]
        ours = root in _program_key._NAMED_ROOTS and root not in _STANDARD
        builtin = module == "builtins" and name in _BUILTIN_TYPES
        if ours or builtin or (module, name) == ("functools", "partial"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def _unpickle(content: bytes):
    return _Unpickler(io.BytesIO(content)).load()


def _refused(why: str) -> None:
    cache.say_refused(why)


def load(path: pathlib.Path, key: str, clocked: bool = True) -> _Program | None:
    """The program kept at `path` under `key`, or `None` (no entry, or one that
    cannot be loaded here). `clocked`: record its loading time as a `LOAD_EVENT`
    (not for one read ahead on another thread: its caller records its wait)."""
    started = time.perf_counter()
    try:
        content = entry_file.read(path, key)
    except entry_file.Refused as refused:
        _refused(str(refused))
        return None
    if content is None:
        return None
    import jax
    from jax.experimental.serialize_executable import deserialize_and_load

    try:
        entry = _unpickle(content)
    except pickle.UnpicklingError as error:
        _refused(f"{path}: {error}")
        return None
    except Exception:  # another dynsys's entry
        return None
    try:
        _initialise_kernels()
        if entry["format"] != _FORMAT or entry["key"] != key:
            return None
        in_tree = jax.tree.structure((tuple(range(entry["inputs"])), {}))
        out_leaves, out_tree = jax.tree.flatten(entry["outputs"])
        out_dynamic = [isinstance(leaf, _Hole) for leaf in out_leaves]
        out_static = [
            None if hole else leaf for leaf, hole in zip(out_leaves, out_dynamic)
        ]
        flat_out = jax.tree.structure(tuple(range(sum(out_dynamic))))
        compiled = deserialize_and_load(entry["executable"], in_tree, flat_out)
    except Exception:  # another jaxlib's or a cut-short entry: compiled again
        return None
    if clocked:
        seconds = time.perf_counter() - started
        jax.monitoring.record_event_duration_secs(LOAD_EVENT, seconds)
    return _Program(compiled, out_tree, out_static, out_dynamic)


def _read_ahead_or_load(folder: pathlib.Path, path: pathlib.Path, key: str):
    """`load(path, key)`, or the program read ahead for `key` (`read_ahead`; the
    wait for it is its loading time)."""
    started = time.perf_counter()
    _initialise_kernels()  # here, before a loading thread needs them
    program = read_ahead.taken(folder, key, cache.KEPT_SUFFIX, _load_ahead)
    if program is None:
        return load(path, key)
    import jax

    seconds = time.perf_counter() - started
    jax.monitoring.record_event_duration_secs(LOAD_EVENT, seconds)
    return program


def _load_ahead(path: pathlib.Path, key: str) -> _Program | None:
    return load(path, key, clocked=False)


def _without_host_callbacks(lowered) -> bool:
    """Whether a lowered program calls back into Python (`jax.pure_callback`,
    `equinox.error_if`): such a program holds the address of a Python object of
    this process, and in another it would call whatever lies there. JAX's own
    cache does not keep them either. Unknown (another JAX's internals): `False`."""
    arguments = getattr(getattr(lowered, "_lowering", None), "compile_args", None)
    callbacks = None if arguments is None else arguments.get("host_callbacks")
    return callbacks is not None and len(callbacks) == 0


def _initialise_kernels() -> None:
    """Point jaxlib's LAPACK kernels (the CPU's linear-algebra custom calls) at
    their LAPACK functions. JAX does it when it lowers a program that uses them; a
    loaded program is not lowered, and without it crashes the process (jaxlib
    0.10)."""
    from jax._src.lax import linalg

    linalg.initialize_lapack()


@contextlib.contextmanager
def _outside_jax_cache():
    """Compile without writing to JAX's persistent cache: an executable that JAX
    reads back from its cache serialises without its kernels (jaxlib 0.10 on the
    CPU: "Function ..._kernel not found" when the kept program runs), and the kept
    program stands in for JAX's entry anyway."""
    import jax

    name = "jax_persistent_cache_min_compile_time_secs"
    with _outside_lock:  # JAX's setting is the process's: set by the first of
        # the threads compiling (`compiling_ahead`), restored by the last
        if not _outside["depth"]:
            _outside["before"] = getattr(jax.config, name)
            jax.config.update(name, math.inf)
        _outside["depth"] += 1
    try:
        yield
    finally:
        with _outside_lock:
            _outside["depth"] -= 1
            if not _outside["depth"]:
                jax.config.update(name, _outside["before"])


_outside_lock = threading.Lock()
_outside: dict = {"depth": 0, "before": None}


def _keep(program: _Program, path: pathlib.Path, key: str) -> None:
    """Write `program` to `path`; a program JAX cannot serialise (or should not:
    `keepable`) is not kept, and a folder that cannot be written is said once."""
    if not program.keepable:
        return
    try:
        content = program.entry(key)
    except Exception:  # host callbacks, constants: JAX cannot serialise it
        return
    try:
        size = entry_file.write(path, key, content)
    except OSError as error:
        why = error.strerror or type(error).__name__
        cache.note_not_kept(why)
        message = (
            f"dynsys: compiled programs are not kept in {path.parent} ({why}); "
            "compiling as usual."
        )
        cache.say(message, _said)
        return
    cache.note_written(path.parent, size)


class CompiledAhead(Exception):
    """Raised by a repeated program called within `compiling_ahead`, once it is
    compiled (or loaded) and held for this process, instead of running it."""


@contextlib.contextmanager
def compiling_ahead():
    """Within it (in this thread), the first repeated program a computation calls
    (`top_level_jit(repeated=True)`: the optimiser's chunk) is made ready for this
    process's later calls and raises `CompiledAhead` instead of running: a
    computation run here on another thread compiles the programs a later one
    will run (`_experiments/fit/ahead.py`). Other programs run as usual."""
    token = _AHEAD.set(True)
    try:
        yield
    finally:
        _AHEAD.reset(token)


def is_compiling_ahead() -> bool:
    """Whether this thread is inside `compiling_ahead`."""
    return _AHEAD.get()


def keeps_programs() -> bool:
    """Whether this process keeps its programs now (a cache folder of dynsys's):
    only then does a program compiled ahead reach the later call."""
    return _folder() is not None


class KeptProgram:
    """`equinox.filter_jit(fun, compiler_options=options)` whose compiled programs
    are kept across runs (see the module docstring). Arguments are split as
    `filter_jit` splits them: arrays are traced, everything else is static.
    `repeated`: the program runs many times per call of dynsys (`compiling_ahead`
    stops at it)."""

    def __init__(self, fun, options: dict, repeated: bool = False):
        import equinox as eqx

        self.repeated = repeated
        self.fun = fun
        self.options = options
        self.jitted = eqx.filter_jit(fun, compiler_options=options or None)
        self.programs: dict[str, _Program] = {}  # loaded in this process, by key
        self.__wrapped__ = fun
        self.__name__ = fun.__name__
        self.__qualname__ = fun.__qualname__
        self.__module__ = fun.__module__
        self.__doc__ = fun.__doc__

    def __call__(self, *args, **kwargs):
        import equinox as eqx
        import jax

        folder = _folder()
        debugging = jax.config.jax_debug_nans or jax.config.jax_debug_infs
        ahead = self.repeated and _AHEAD.get()
        if folder is None or jax.config.jax_disable_jit or debugging:
            if ahead:  # (nothing would hold a program for the later call)
                raise CompiledAhead
            return self.jitted(*args, **kwargs)
        leaves, treedef = jax.tree.flatten((args, kwargs))
        dynamic = [eqx.is_array(leaf) for leaf in leaves]
        try:
            key = program_key(self.fun, self.options, treedef, leaves, dynamic)
        except Unkeyed:
            if ahead:
                raise CompiledAhead from None
            return self.jitted(*args, **kwargs)
        arrays = [leaf for leaf, is_array in zip(leaves, dynamic) if is_array]
        if ahead:
            self._ready(folder, key, treedef, leaves, dynamic)
            raise CompiledAhead
        program = self.programs.get(key)
        if program is None:
            path = folder / (key + cache.KEPT_SUFFIX)
            program = _read_ahead_or_load(folder, path, key)
            if program is not None:
                try:
                    outputs = program(arrays)
                except jax.errors.JaxRuntimeError:
                    program = None  # an entry that loads but cannot run here
                else:
                    self.programs[key] = program
                    return outputs
            program = self._compile(treedef, leaves, dynamic)
            _keep(program, path, key)
            self.programs[key] = program
        return program(arrays)

    def _ready(self, folder, key: str, treedef, leaves, dynamic) -> None:
        """Hold the program of `key` for this process: loaded from its file
        (not through `read_ahead`, whose list follows this run's own calls), or
        compiled and kept."""
        if key in self.programs:
            return
        path = folder / (key + cache.KEPT_SUFFIX)
        program = load(path, key)
        if program is None:
            program = self._compile(treedef, leaves, dynamic)
            _keep(program, path, key)
        self.programs[key] = program

    def _compile(self, treedef, leaves, dynamic) -> _Program:
        """Trace, lower and compile `fun` as a function of the arrays alone."""
        import equinox as eqx
        import jax

        outputs = {}

        def of_arrays(*arrays):
            given = iter(arrays)
            full = [
                next(given) if is_array else leaf
                for leaf, is_array in zip(leaves, dynamic)
            ]
            args, kwargs = treedef.unflatten(full)
            out_leaves, outputs["tree"] = jax.tree.flatten(self.fun(*args, **kwargs))
            outputs["dynamic"] = [eqx.is_array(leaf) for leaf in out_leaves]
            outputs["static"] = [
                None if is_array else leaf
                for leaf, is_array in zip(out_leaves, outputs["dynamic"])
            ]
            return tuple(leaf for leaf in out_leaves if eqx.is_array(leaf))

        arrays = [leaf for leaf, is_array in zip(leaves, dynamic) if is_array]
        jitted = jax.jit(of_arrays, compiler_options=self.options or None)
        with _outside_jax_cache():
            lowered = jitted.lower(*arrays)
            compiled = lowered.compile()
        return _Program(
            compiled,
            outputs["tree"],
            outputs["static"],
            outputs["dynamic"],
            keepable=_without_host_callbacks(lowered),
        )
