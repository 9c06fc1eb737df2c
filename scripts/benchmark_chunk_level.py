"""LLVM's optimisation level for Levenberg–Marquardt's chunk, by the size of its
Jacobian: for simulated records of several sizes, the chunk as `dynsys` compiles it
(`run_chunk`, level 3) and compiled at level 0 (the same function through
`top_level_jit` without `repeated`), side by side in one process without the
compilation cache. Per size: the Jacobian's entries
(residuals times parameters), the compile time each program adds to a first fit
(first fit minus a second one of the same shapes), the time per step of each, and
the number of steps after which level 3 has paid for its longer compilation.
Every fit runs all `--steps` steps: the benchmark turns the optimiser's stopping
tests off (they would end these well-posed fits after a few steps, too few to time).

    python scripts/benchmark_chunk_level.py [--steps 60]

The chunk keeps level 3 at every size: docs/benchmarks.md ("Time to the first
answer") has the measurement and the rules tried with it.
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

    strategy = levenberg_marquardt.LevenbergMarquardtStrategy
    strategy._settled = lambda self, state, residual: jnp.array(False)
    strategy._small_step = lambda self, *args: jnp.array(False)
    fit.FLAT_STEPS = 10**9


def _measure(size, steps):
    import jax

    import dynsys
    from dynsys._fitting import chunk, train
    from dynsys._jit import top_level_jit
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
    level_0 = top_level_jit(chunk.run_chunk.__wrapped__)
    for name, program in (("level 3", chunk.run_chunk), ("level 0", level_0)):
        train.run_chunk = program
        first, ran = _fit_seconds(start, data, steps)
        second, _ = _fit_seconds(start, data, steps)
        row[name] = {
            "compile_s": round(first - second, 2),
            "steps": ran,
            "ms_per_step": round(1e3 * second / max(ran, 1), 2),
        }
    slower = row["level 0"]["ms_per_step"] - row["level 3"]["ms_per_step"]
    saved = row["level 3"]["compile_s"] - row["level 0"]["compile_s"]
    row["break_even_steps"] = round(1e3 * saved / slower) if slower > 0 else None
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="step cap per fit")
    args = parser.parse_args()
    os.environ["DYNSYS_CACHE_DIR"] = "off"
    import jax

    jax.config.update("jax_enable_x64", True)
    _never_stop()
    for size in SIZES:
        print(json.dumps(_measure(size, args.steps)), flush=True)


if __name__ == "__main__":
    main()
