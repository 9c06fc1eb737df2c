"""LLVM's optimisation level for Levenberg–Marquardt's chunk, by the size of its
Jacobian: for simulated records of several sizes, the chunk as `dynsys` compiles it
(`run_chunk`, level 1) and the same function compiled at each of `--levels`
(default 3, 2 and 0), side by side in one process without the compilation cache.
Per size: the Jacobian's entries (residuals times parameters), and per program XLA's
compile time (JAX's `backend_compile_duration` event for the chunk; tracing and
lowering are the same at every level) and the time per step of a second fit of the
same shapes; for each level, the number of steps after which `dynsys`'s chunk has paid
for its longer compilation (`null` where it does not compile longer or runs no
faster). A level equal to the one `dynsys` uses compiles nothing: the program is
the same, and JAX reuses it.
Every fit runs all `--steps` steps: the benchmark turns the optimiser's stopping
tests off (they would end these well-posed fits after a few steps, too few to time).

    python benchmarks/benchmark_chunk_level.py [--steps 60] [--levels 3,2,0]

The chunk is compiled at level 1 at every size: docs/benchmarks.md ("Time to the
first answer") has the measurements and the rules tried with them.
"""

import argparse
import json
import os
import time
import warnings


# (states, outputs, inputs, samples) of the simulated records.
SIZES = [
    (4, 1, 1, 1000),
    (7, 1, 1, 1000),
    (10, 1, 1, 1000),
    (6, 2, 2, 1400),
    (8, 3, 3, 1000),
]


def _record(states, outputs, inputs, samples, seed=0):
    """A random stable system's response to white noise, with 10 % output noise."""
    import numpy as np

    import dynsys

    rng = np.random.default_rng(seed)
    a = rng.normal(size=(states, states))
    a *= 0.95 / np.max(np.abs(np.linalg.eigvals(a)))
    b = rng.normal(size=(states, inputs))
    c = rng.normal(size=(outputs, states))
    u = rng.normal(size=(samples, inputs))
    true = dynsys.LinearSystem(a, b, c)
    y = np.array(
        dynsys.simulate(true, np.zeros((1, states)), samples, inputs=u[None]).ys[0]
    )
    y += 0.1 * y.std(0) * rng.normal(size=y.shape)
    return dynsys.Dataset(us=u[None], ys=y[None])


_chunk_compile_seconds: list[float] = []


def _on_compiled(event, duration, **kwargs):
    if event.endswith("backend_compile_duration") and "run_chunk" in kwargs.get(
        "fun_name", ""
    ):
        _chunk_compile_seconds.append(duration)


def _fit_seconds(start, data, steps):
    import dynsys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        begin = time.perf_counter()
        result = dynsys.fit(start, data, progress=False, num_steps=steps)
    return time.perf_counter() - begin, result.steps_run


def _never_stop():
    import jax.numpy as jnp

    from dynsys._fitting import fit, levenberg_marquardt

    strategy = levenberg_marquardt.LevenbergMarquardt
    strategy._settled = lambda self, state, residual: jnp.array(False)
    strategy._small_step = lambda self, *args: jnp.array(False)
    fit.FLAT_STEPS = 10**9


def _measure(size, steps, levels):
    import equinox as eqx
    import jax

    import dynsys
    from dynsys._fitting import chunk, train
    from dynsys._compile.jit import _LEVEL, compiler_options
    from dynsys._sysid.stabilise import stabilised_start

    states, outputs, inputs, samples = size
    data = _record(*size)
    # The subspace estimate can be unstable at high orders; reflected as `dynsys fit`
    # does, so that every step of the fit is finite.
    start = stabilised_start(dynsys.fit_subspace(data, states), data)
    params = sum(
        leaf.size for leaf in jax.tree.leaves(start) if isinstance(leaf, jax.Array)
    )
    row = {
        "size": f"{states} states, {outputs}x{inputs}, {samples} samples",
        "jacobian_entries": outputs * samples * params,
    }
    programs = {"dynsys": chunk.run_chunk}
    for level in levels:
        options = {**compiler_options(), _LEVEL: level}
        programs[f"level {level}"] = eqx.filter_jit(
            chunk.run_chunk.__wrapped__, compiler_options=options
        )
    for name, program in programs.items():
        train.run_chunk = program
        _chunk_compile_seconds.clear()
        _fit_seconds(start, data, steps)
        second, ran = _fit_seconds(start, data, steps)
        row[name] = {
            "compile_s": round(sum(_chunk_compile_seconds), 2),
            "steps": ran,
            "ms_per_step": round(1e3 * second / max(ran, 1), 2),
        }
    ours = row["dynsys"]
    row["break_even_steps"] = {}
    for level in levels:
        other = row[f"level {level}"]
        slower = other["ms_per_step"] - ours["ms_per_step"]
        saved = ours["compile_s"] - other["compile_s"]
        even = round(1e3 * saved / slower) if slower > 0 and saved > 0 else None
        row["break_even_steps"][f"level {level}"] = even
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="step cap per fit")
    parser.add_argument("--levels", default="3,2,0", help="LLVM levels to compile at")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    os.environ["DYNSYS_CACHE_DIR"] = "off"
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.monitoring.register_event_duration_secs_listener(_on_compiled)
    _never_stop()
    # The process's first compilation pays one-off costs (XLA's and LLVM's set-up):
    # a smaller record first, not reported, so that they are not counted as the
    # first program's.
    _measure((2, 1, 1, 100), args.steps, [])
    for size in SIZES:
        print(json.dumps(_measure(size, args.steps, levels)), flush=True)


if __name__ == "__main__":
    main()
