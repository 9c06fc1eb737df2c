"""`top_level_jit`: `equinox.filter_jit` with the XLA options that make dynsys's
programs compile faster.

Two kinds of option, both for the CPU backend:

- **The older fusion emitters** (`_OPTIONS`). On the CPU, XLA generates the code of
    each fused loop with its newer MLIR "fusion emitters" by default. The fit's
    programs (a rollout and its forward-mode Jacobian inside a scan of optimiser
    steps, the held-out predictions, the covariance's Jacobian) compile in about 0.6x
    the time with the older emitters and run as fast (measured in
    `docs/performance.md`, "Compile less").
- **LLVM's optimisation level by how often a program runs** (`_RUN_ONCE`,
    `_REPEATED`). Most of a fit's programs run once or once per chunk (the
    predictions, the covariance's Jacobian, the subspace and validation views), and
    LLVM's optimisation (XLA's default, level 3) was most of their compilation; they
    are compiled at level 0. The optimiser's chunk runs its step hundreds of times,
    and at level 0 it ran up to 2x slower; at level 1 it compiles faster than at
    XLA's default level 3 and runs as fast (`benchmarks/benchmark_chunk_level.py`): it is
    compiled at level 1 (`repeated=True`).

The options are XLA debug options, part of the persistent cache's key, and only these
programs get them (not a user's). A user who names an option in `XLA_FLAGS` keeps their
own setting. They are used only with the jaxlib versions they were measured on
(`_MEASURED_JAXLIB`): XLA is retiring the older emitters, and an option name it does
not know fails the compilation (in `XLA_FLAGS`, it aborts the process). The levels
are given only where no accelerator plugin or `libtpu` is installed (or
`JAX_PLATFORMS` is `cpu`): they would reach an accelerator's code generation too,
where they were not measured. The `dynsys` command owns its process:
`use_for_process` gives every program of it the options and level 0 (through
`XLA_FLAGS`, before JAX starts), as a cold `dynsys fit` also compiles many smaller
programs; the chunk's `repeated=True` overrides it.

Both `top_level_jit` and `kept_jit` (the same without options, for functions a user
may call inside their own `jax.jit`) keep their compiled programs across runs
(`kept_programs`) where the persistent cache is on, so that a warm run neither
traces nor lowers them; which of the two paths a call takes is the rule in this
folder's `__init__.py`.

JAX accepts compiler options only on a program that is not traced inside another
(`jax.jit` raises otherwise), so only functions that dynsys calls from its host
loops use `top_level_jit` (the training chunk, the fit's evaluations and
covariance); functions a user may call under their own `jax.jit` use
`eqx.filter_jit`.
"""

import functools
import os
import pathlib

from .. import _config


_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
_LEVEL = "xla_backend_optimization_level"
# XLA's own settings of these options (for comparisons: `benchmarks/benchmark_startup.py`).
XLA_DEFAULTS = {"xla_cpu_use_fusion_emitters": True, _LEVEL: 3}
_RUN_ONCE = {_LEVEL: 0}
# Stated over the command's process-wide level 0: the optimiser's chunk compiles faster
# at 1 than at XLA's default 3, and runs as fast (docs/benchmarks.md).
_REPEATED = {_LEVEL: 1}
# The entries `use_for_process` added to `XLA_FLAGS` (inherited by child processes),
# so that they are not taken for the user's own settings.
_ADDED = _config.XLA_FLAGS_ADDED
# jaxlib `(major, minor)` versions whose XLA has these options and was measured with
# them, and with which compiled programs are kept across runs (`_keeps_programs`).
_MEASURED_JAXLIB = ((0, 10),)


@functools.cache  # asked once per `top_level_jit` program at import
def _jaxlib_version() -> tuple[int, ...] | None:
    """The installed jaxlib's `(major, minor)`, read from its `version.py` without
    importing it (nor `importlib.metadata`, which costs a refusal of the `dynsys`
    command 0.1 s)."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("jaxlib")
        folder = pathlib.Path(spec.submodule_search_locations[0])
        text = (folder / "version.py").read_text()
    except (AttributeError, ImportError, IndexError, OSError, TypeError):
        return None
    found = re.search(r'^_version\b[^=]*=\s*"(\d+)\.(\d+)', text, re.M)
    return (int(found[1]), int(found[2])) if found else None


@functools.cache
def _cpu_only() -> bool:
    """Whether JAX can only use the CPU here: `JAX_PLATFORMS` is `cpu`, or no
    accelerator runtime is installed (a `jax_plugins` package, as CUDA and ROCm
    installs bring, or TPUs' `libtpu`). Looked up without importing JAX."""
    import importlib.util

    platforms = (_config.read(_config.JAX_PLATFORMS) or "").strip().lower()
    if platforms:
        return platforms == "cpu"
    try:
        return all(
            importlib.util.find_spec(name) is None for name in ("jax_plugins", "libtpu")
        )
    except (ImportError, ValueError):
        return False


def users_flags(environ=os.environ) -> str:
    """`environ["XLA_FLAGS"]` less the entries `use_for_process` added to it."""
    added = set((_config.read(_ADDED, environ) or "").split())
    flags = (_config.read(_config.XLA_FLAGS, environ) or "").split()
    return " ".join(f for f in flags if f not in added)


def compiler_options(xla_flags: str | None = None, repeated: bool = False) -> dict:
    """The XLA options of `top_level_jit`'s programs: `_OPTIONS`, and LLVM's
    optimisation level (`_REPEATED` for a program that runs many times, such as the
    optimiser's chunk, else `_RUN_ONCE`) where JAX can only use the CPU; less any
    option the user set in `xla_flags` (default: `users_flags()`); none with a
    jaxlib they were not measured on."""
    if _jaxlib_version() not in _MEASURED_JAXLIB:
        return {}
    if xla_flags is None:
        xla_flags = users_flags()
    options = dict(_OPTIONS)
    if _cpu_only():
        options.update(_REPEATED if repeated else _RUN_ONCE)
    return {name: value for name, value in options.items() if name not in xla_flags}


def as_flags(options: dict) -> list[str]:
    """`options` as `XLA_FLAGS` entries: `{"xla_x": False}` -> `["--xla_x=false"]`,
    `{"xla_y": 0}` -> `["--xla_y=0"]`."""
    return [f"--{name}={str(value).lower()}" for name, value in options.items()]


def top_level_jit(fun=None, *, repeated: bool = False, **kwargs):
    """`equinox.filter_jit(fun, compiler_options=compiler_options(repeated=...),
    **kwargs)`; as a decorator, with or without arguments. `repeated`: the program
    runs many times per call of dynsys (the optimiser's chunk), so it is compiled
    for speed. Never call the result inside another trace (see the module's
    docstring)."""
    if fun is None:
        return functools.partial(top_level_jit, repeated=repeated, **kwargs)
    options = compiler_options(repeated=repeated)
    return _jitted(fun, options, repeated, **kwargs)


def _jitted(fun, options: dict, repeated: bool = False, **kwargs):
    """`fun` compiled with `options`: a `KeptProgram` where programs are kept
    (`_keeps_programs`) and no other `filter_jit` argument is given, else
    `equinox.filter_jit`."""
    if not kwargs and _keeps_programs():
        # Here: the `dynsys` command imports this module before JAX.
        from .kept_programs import KeptProgram

        return KeptProgram(fun, options, repeated)
    import equinox as eqx

    return eqx.filter_jit(fun, compiler_options=options or None, **kwargs)


def _keeps_programs() -> bool:
    """Whether compiled programs are kept across runs (`kept_programs`): only with
    the jaxlib versions it was tested on, and where JAX can only use the CPU (a
    loaded program skips the lowering that sets up some backends' kernels)."""
    return _jaxlib_version() in _MEASURED_JAXLIB and _cpu_only()


def kept_jit(fun):
    """`equinox.filter_jit(fun)` whose compiled programs are kept across runs
    (`kept_programs`: a later run loads them without tracing). Inside another
    trace it is `filter_jit` itself, so a function a user may call under their own
    `jax.jit` may use it; no compiler options are given (see the module's
    docstring)."""
    return _jitted(fun, {})


def use_for_process(environ=os.environ) -> None:
    """Give every program of this process `compiler_options()` (the options of a
    program that runs once), by adding them to `environ["XLA_FLAGS"]`; call before
    JAX starts (XLA reads the variable once). For a process dynsys owns (the
    `dynsys` command), not for a library call. The added entries are listed in
    `environ["DYNSYS_XLA_FLAGS_ADDED"]`, so that this process's `top_level_jit`
    programs (and child processes) still tell the user's settings from them."""
    flags = (_config.read(_config.XLA_FLAGS, environ) or "").split()
    extra = [
        f for f in as_flags(compiler_options(users_flags(environ))) if f not in flags
    ]
    if extra:
        added = (_config.read(_ADDED, environ) or "").split()
        environ[_config.XLA_FLAGS] = " ".join([*flags, *extra])
        environ[_ADDED] = " ".join([*added, *extra])


def device_array(a, dtype=None):
    """`jnp.asarray(a, dtype)` without compiling: outside `jit`, `jnp.asarray` of a
    host array compiles a small program per shape and dtype (JAX 0.10; some 40 of
    them in a cold `dynsys fit`). Host data (numpy arrays, scalars, lists) are
    converted by numpy and moved by `jax.device_put`, which compiles nothing and
    gives JAX's dtype (float32 without `jax_enable_x64`); JAX arrays and tracers go
    through `jnp.asarray`."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if isinstance(a, jax.Array):
        return jnp.asarray(a, dtype)
    return jax.device_put(np.asarray(a, dtype))


def host_key(seed: int):
    """`jax.random.key(seed)` without compiling (it compiles two small programs per
    process). For JAX's default key, threefry2x32, a seed in `[0, 2**31)` has the
    key data `[0, seed]`; any other seed or key implementation goes through
    `jax.random.key`."""
    import jax
    import numpy as np

    if jax.config.jax_default_prng_impl != "threefry2x32" or not 0 <= seed < 2**31:
        return jax.random.key(seed)
    data = jax.device_put(np.array([0, seed], np.uint32))
    return jax.random.wrap_key_data(data, impl="threefry2x32")
