"""`top_level_jit`: `equinox.filter_jit` with the XLA options that make dynsys's
largest programs compile faster.

On the CPU, XLA generates the code of each fused loop with its newer MLIR "fusion
emitters" by default. The fit's programs (a rollout and its forward-mode Jacobian
inside a scan of optimiser steps, the held-out predictions, the covariance's
Jacobian) compile in about 0.6x the time with the older emitters and run as fast
(measured in `docs/performance.md`, "Compile less").

The options are XLA debug options for the CPU backend (not checked on a GPU), part of
the persistent cache's key, and only these programs get them (not a user's). A user who
names an option in `XLA_FLAGS` keeps their own setting. They are used only with the
jaxlib versions they were measured on (`_MEASURED_JAXLIB`): XLA is retiring the older
emitters, and an option name it does not know fails the compilation (in
`XLA_FLAGS`, it aborts the process). The `dynsys` command owns its
process: `use_for_process` gives every program of it the options (through
`XLA_FLAGS`, before JAX starts), as a cold `dynsys fit` also compiles many smaller
programs.

JAX accepts compiler options only on a program that is not traced inside another
(`jax.jit` raises otherwise), so only functions that dynsys calls from its host
loops use `top_level_jit` (the training chunk, the fit's evaluations and
covariance); functions a user may call under their own `jax.jit` use
`eqx.filter_jit`.
"""

import functools
import os
import pathlib


_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# jaxlib `(major, minor)` versions whose XLA has `_OPTIONS` and was measured with them.
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


def compiler_options(xla_flags: str | None = None) -> dict:
    """The XLA options of `top_level_jit`'s programs: `_OPTIONS` less any the user
    set in `xla_flags` (default: the `XLA_FLAGS` environment variable); none with a
    jaxlib they were not measured on."""
    if _jaxlib_version() not in _MEASURED_JAXLIB:
        return {}
    if xla_flags is None:
        xla_flags = os.environ.get("XLA_FLAGS", "")
    return {name: value for name, value in _OPTIONS.items() if name not in xla_flags}


def as_flags(options: dict) -> list[str]:
    """`options` as `XLA_FLAGS` entries: `{"xla_x": False}` -> `["--xla_x=false"]`."""
    return [f"--{name}={str(value).lower()}" for name, value in options.items()]


def top_level_jit(fun=None, **kwargs):
    """`equinox.filter_jit(fun, compiler_options=compiler_options(), **kwargs)`;
    as a decorator, with or without arguments. Never call the result inside
    another trace (see the module's docstring)."""
    import equinox as eqx  # here: the `dynsys` command imports this module before JAX

    if fun is None:
        return functools.partial(top_level_jit, **kwargs)
    return eqx.filter_jit(fun, compiler_options=compiler_options(), **kwargs)


def use_for_process(environ=os.environ) -> None:
    """Give every program of this process `compiler_options()`, by adding them to
    `environ["XLA_FLAGS"]`; call before JAX starts (XLA reads the variable once).
    For a process dynsys owns (the `dynsys` command), not for a library call."""
    flags = environ.get("XLA_FLAGS", "")
    extra = as_flags(compiler_options(flags))
    if extra:
        environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
