"""How dynsys compiles its programs, and keeps them across runs: one layer of the
import contract, below everything that computes.

- `jit.py`: `top_level_jit` and `kept_jit`, what dynsys's own functions are compiled
    with, the XLA options they get, and `device_array`/`host_key` (host data to the
    device without compiling).
- `cache.py`: JAX's persistent compilation cache, `use_compile_cache` (public as
    `dynsys.use_compile_cache`), and the pruning of its folder.
- `kept_programs.py`: compiled programs kept across runs as serialised
    executables (`KeptProgram`).
- `program_key.py`: the key a kept program is filed under, made without tracing.
- `read_ahead.py`: kept programs loaded on a thread while the `dynsys` command
    computes.

Which path a call of a `top_level_jit` or `kept_jit` function takes (the one rule;
`docs/performance.md`, "Which compiled path runs"):

1. At import, the function becomes a `KeptProgram` when the installed jaxlib is one
    dynsys was measured with (`jit._MEASURED_JAXLIB`, read from jaxlib's
    `version.py`) and JAX can only use the CPU (`JAX_PLATFORMS=cpu`, or no
    `jax_plugins` package and no `libtpu` installed); otherwise it is
    `equinox.filter_jit` and stays so.
2. At each call, a `KeptProgram` loads or keeps a serialised executable only when
    `use_compile_cache` chose a folder of dynsys's in this process (not the user's
    own JAX folder, not `"off"`), and not under `jax.disable_jit`,
    `jax_debug_nans` or `jax_debug_infs`, and only for arguments it can key; in
    every other case it calls its `equinox.filter_jit`. A plain library call,
    which turns no cache on, therefore always runs `equinox.filter_jit`: kept
    programs are used only where the persistent cache is on (the `dynsys`
    command, `run_experiment`, or a user's own `dynsys.use_compile_cache()`).

Both paths compile the same function with the same XLA options and give the same
results (`tests/compile/test_kept_programs.py` checks it to the bit).
"""
