"""What one `dynsys.fit` compiles: XLA compile, tracing and lowering seconds (JAX's
own monitoring events), the number of programs, and the wall time of the fit and of
the same fit again (nothing left to compile). The default optimiser (scaled,
gauge-free Levenberg–Marquardt) refines a subspace start of each order given, with
the last third of the record as validation data.

    python benchmarks/benchmark_compile.py                      # simulated record
    python benchmarks/benchmark_compile.py data.csv --inputs u --outputs y1,y2
    python benchmarks/benchmark_compile.py --orders 6,6,7 --length 2000

Run it with `DYNSYS_CACHE_DIR=off` (no persistent cache: every program compiles), and
with `XLA_FLAGS=--xla_backend_optimization_level=0` for the test suite's setting.
"""

import argparse
import collections
import time

import jax
import jax.monitoring
import numpy as np


jax.config.update("jax_enable_x64", True)

_seconds: collections.Counter = collections.Counter()
_programs: list[tuple[str, float]] = []
_started: dict[str, float] = {}


def _on_start(event, value, **kwargs):
    # XLA compiles in the calling thread: the process's CPU time over a compilation
    # is its cost, whatever else loads the machine.
    del value
    if event.endswith("backend_compile_duration"):
        _started[kwargs.get("fun_name", "?")] = time.process_time()


def _listener(event, duration, **kwargs):
    name = event.rsplit("/", 1)[-1]
    _seconds[name] += duration
    if name == "backend_compile_duration":
        fun_name = kwargs.get("fun_name", "?")
        _programs.append((fun_name, duration))
        start = _started.pop(fun_name, time.process_time())
        _seconds["compile_cpu"] += time.process_time() - start


jax.monitoring.register_scalar_listener(_on_start)
jax.monitoring.register_event_duration_secs_listener(_listener)

import dynsys  # noqa: E402


def simulated(length: int, seed: int = 0) -> "dynsys.Dataset":
    """A lightly damped 6-state system (two modes and a slow pole), 1 input, 2
    outputs, with feedthrough and output noise: `length` samples."""
    rng = np.random.default_rng(seed)
    poles = [0.97 * np.exp(0.2j), 0.9 * np.exp(0.9j)]
    blocks = [np.array([[p.real, p.imag], [-p.imag, p.real]]) for p in poles]
    K = np.zeros((6, 6))
    K[:2, :2], K[2:4, 2:4], K[4:, 4:] = blocks[0], blocks[1], np.diag([0.8, 0.5])
    B = rng.normal(size=(6, 1))
    C = rng.normal(size=(2, 6))
    D = np.array([[0.3], [0.0]])
    model = dynsys.LinearSystem(K, B, C, D)
    us = rng.normal(size=(1, length, 1))
    ys = np.asarray(dynsys.rollout(model, np.zeros((1, 6)), length, inputs=us).ys)
    return dynsys.Dataset(ys=ys + 0.02 * rng.normal(size=ys.shape), us=us)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", help="a CSV record (default: simulated)")
    parser.add_argument("--inputs", default="", help="input columns, comma-separated")
    parser.add_argument("--outputs", default="", help="output columns")
    parser.add_argument("--orders", default="6,6,7", help="orders to fit, in turn")
    parser.add_argument("--steps", type=int, default=30, help="LM step cap")
    parser.add_argument("--length", type=int, default=600, help="simulated samples")
    parser.add_argument("--top", type=int, default=4, help="slowest programs shown")
    args = parser.parse_args()
    if args.csv:
        data = dynsys.load_dataset(
            args.csv, inputs=args.inputs.split(","), outputs=args.outputs.split(",")
        )
    else:
        data = simulated(args.length)
    train, val = data.split_time(1 / 3, min_samples=4)
    print(f"train {train.num_steps} samples, validation {val.num_steps}")
    for order in [int(o) for o in args.orders.split(",")]:
        start = dynsys.fit_subspace(train, order, feedthrough=True)
        _seconds.clear()
        _programs.clear()
        begin, begin_cpu = time.perf_counter(), time.process_time()
        result = dynsys.fit(
            start, train, val_data=val, num_steps=args.steps, progress=False
        )
        wall, cpu = time.perf_counter() - begin, time.process_time() - begin_cpu
        begin = time.perf_counter()
        dynsys.fit(start, train, val_data=val, num_steps=args.steps, progress=False)
        again = time.perf_counter() - begin
        slowest = sorted(_programs, key=lambda p: -p[1])[: args.top]
        print(
            f"order {order}: fit {wall:.2f} s, {cpu:.2f} s CPU (again {again:.2f} s), "
            f"XLA compile {_seconds['backend_compile_duration']:.2f} s, "
            f"{_seconds['compile_cpu']:.2f} s CPU, in {len(_programs)} "
            f"programs, tracing {_seconds['jaxpr_trace_duration']:.2f} s, lowering "
            f"{_seconds['jaxpr_to_mlir_module_duration']:.2f} s; "
            f"{result.steps_run} steps, validation loss "
            f"{result.metrics['validation']['loss']:.6g}; slowest: "
            + ", ".join(f"{name} {s:.2f} s" for name, s in slowest),
            flush=True,
        )


if __name__ == "__main__":
    main()
