"""LLVM's optimisation level for Levenberg–Marquardt's chunk, by the size of its
Jacobian: for simulated records of several sizes, `dynsys.fit` as it compiles its
chunk (level 1) and with the level of each of `--levels` (default 3, 2 and 0) named
in `XLA_FLAGS` (a level a user names there wins over dynsys's: docs/performance.md,
"Compile less"), side by side in one run, one child process per level, without the
compilation cache. Per size: the Jacobian's entries (residuals times parameters),
and per level XLA's compile time of the chunk (JAX's `backend_compile_duration`
event for `run_chunk`; tracing and lowering are the same at every level) and the
time per step (the difference between a fit capped at `--steps` and one capped at
one step, both of compiled shapes, over the difference of the steps they ran: the
costs of a fit outside its steps cancel); for each level, the number of steps after
which `dynsys`'s chunk has paid for its longer compilation (`null` where it does not
compile longer or runs no faster). The other programs of a fit run once per fit and
are not timed; in a level's process they are compiled at that level too.

Every fit starts far from the truth (the true model's `K` halved, `B` and `C`
perturbed), and `LevenbergMarquardt(rtol=0.0, atol=0.0)` leaves only the stopping
tests that no tolerance sets (the loss flat, or changing below its round-off), so
that most fits run all `--steps` steps; the steps each ran are reported.

    python benchmarks/benchmark_chunk_level.py [--steps 60] [--levels 3,2,0]

The chunk is compiled at level 1 at every size: docs/benchmarks.md ("Time to the
first answer") has the measurements and the rules tried with them.
"""

import argparse
import json
import os
import subprocess
import sys
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
_LEVEL_FLAG = "--xla_backend_optimization_level"


def _problem(states, outputs, inputs, samples, seed=0):
    """A random stable system's response to white noise, with 10 % output noise,
    and a start far from it."""
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
    start = dynsys.LinearSystem(
        0.5 * a,
        b * (1 + 0.3 * rng.normal(size=b.shape)),
        c * (1 + 0.3 * rng.normal(size=c.shape)),
        input_level=np.zeros(inputs),  # levels, as a subspace start has them
        output_level=np.zeros(outputs),
    )
    return start, dynsys.Dataset(us=u[None], ys=y[None])


_chunk_compile_seconds: list[float] = []


def _on_compiled(event, duration, **kwargs):
    if event.endswith("backend_compile_duration") and "run_chunk" in kwargs.get(
        "fun_name", ""
    ):
        _chunk_compile_seconds.append(duration)


def _fit_seconds(start, data, steps):
    import dynsys

    solver = dynsys.LevenbergMarquardt(rtol=0.0, atol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        begin = time.perf_counter()
        result = dynsys.fit(
            start, data, solver=solver, progress=False, num_steps=steps
        )
    return time.perf_counter() - begin, result.steps_run


def _measure(size, steps) -> dict:
    """One size in this process: the chunk's compile time, and the time per step."""
    import jax

    states, outputs, inputs, samples = size
    start, data = _problem(*size)
    params = sum(leaf.size for leaf in jax.tree.leaves(start) if hasattr(leaf, "size"))
    _chunk_compile_seconds.clear()
    _fit_seconds(start, data, steps)  # compiles
    compile_s = sum(_chunk_compile_seconds)
    _fit_seconds(start, data, 1)  # (compiles what a one-step fit adds, if anything)
    long, ran = _fit_seconds(start, data, steps)
    short, ran_short = _fit_seconds(start, data, 1)
    per_step = (long - short) / (ran - ran_short) if ran > ran_short else None
    return {
        "size": f"{states} states, {outputs}x{inputs}, {samples} samples",
        "jacobian_entries": outputs * samples * params,
        "compile_s": round(compile_s, 2),
        "steps": ran,
        "ms_per_step": None if per_step is None else round(1e3 * per_step, 2),
    }


def child(steps: int) -> None:
    """Measure every size in this process (its `XLA_FLAGS` set by `main`), one JSON
    line each."""
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.monitoring.register_event_duration_secs_listener(_on_compiled)
    # The process's first compilation pays one-off costs (XLA's and LLVM's set-up):
    # a smaller record first, not reported, so that they are not counted as the
    # first program's.
    _measure((2, 1, 1, 100), steps)
    for size in SIZES:
        print(json.dumps(_measure(size, steps)), flush=True)


def _run_child(level: int | None, steps: int) -> list[dict]:
    """The rows of a child process at LLVM level `level` (`None`: dynsys's own)."""
    env = dict(os.environ, DYNSYS_CACHE_DIR="off")
    if level is not None:
        flags = [env.get("XLA_FLAGS", ""), f"{_LEVEL_FLAG}={level}"]
        env["XLA_FLAGS"] = " ".join(flags).strip()
    command = [sys.executable, __file__, "--child", "--steps", str(steps)]
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"level {level}: {out.stderr.strip().splitlines()[-1:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _break_even(ours: dict, other: dict) -> int | None:
    """Steps after which our chunk's longer compilation has paid for itself."""
    if ours["ms_per_step"] is None or other["ms_per_step"] is None:
        return None
    slower = other["ms_per_step"] - ours["ms_per_step"]
    saved = ours["compile_s"] - other["compile_s"]
    return round(1e3 * saved / slower) if slower > 0 and saved > 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="step cap per fit")
    parser.add_argument("--levels", default="3,2,0", help="LLVM levels to compile at")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps)
        return
    levels = [int(level) for level in args.levels.split(",")]
    if _LEVEL_FLAG in os.environ.get("XLA_FLAGS", ""):
        raise SystemExit(f"XLA_FLAGS names {_LEVEL_FLAG}: the benchmark sets it.")
    programs = {"dynsys": _run_child(None, args.steps)}
    for level in levels:
        programs[f"level {level}"] = _run_child(level, args.steps)
    for k, mine in enumerate(programs["dynsys"]):
        row = {"size": mine["size"], "jacobian_entries": mine["jacobian_entries"]}
        for name, rows in programs.items():
            keys = ("compile_s", "steps", "ms_per_step")
            row[name] = {key: rows[k][key] for key in keys}
        row["break_even_steps"] = {
            f"level {level}": _break_even(row["dynsys"], row[f"level {level}"])
            for level in levels
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
