"""Time per fit iteration with 1 and 2 processes joined by jax.distributed (CPU).

Each process has one CPU device and its own slice of the experiments
(`dynsys.global_dataset`); the processes meet on a free loopback port and reduce
the gradients with gloo. Two questions:

- same total data: N experiments split over P processes (does it get faster?);
- same data per process: N experiments per process, P * N in all (does the time
  stay flat as the data and the processes grow together?).

The time per iteration is the median interval between steps of `dynsys.train`
(the loop `fit` runs) with the full-batch simulation loss, after 3 warm-up steps
(compilation); the least of `--repeats` launches is reported. Run:

    python benchmarks/benchmark_distributed.py --trajectories 32 --length 200

The processes share the machine: with fewer cores than processes they compete.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def _worker(args: argparse.Namespace) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import dynsys

    if args.processes > 1:
        address = f"127.0.0.1:{args.port}"
        dynsys.initialize_distributed(
            address, args.processes, args.process_id, coordinator_bind_address=address
        )
    import jax.numpy as jnp
    import numpy as np
    import optax

    n, m, T = args.state, 2, args.length
    total = args.per_process * args.processes
    keys = jax.random.split(jax.random.key(0), 5)
    angles = jnp.linspace(0.05, 0.5, n // 2)
    blocks = [
        0.97 * jnp.array([[jnp.cos(a), -jnp.sin(a)], [jnp.sin(a), jnp.cos(a)]])
        for a in angles
    ]
    K = jax.scipy.linalg.block_diag(*blocks)
    B = jax.random.normal(keys[0], (n, m)) / np.sqrt(n)
    x0s = jax.random.normal(keys[1], (total, n))
    us = jax.random.normal(keys[2], (total, T, m))
    full = dynsys.simulate(
        dynsys.LinearSystem(K, B),
        x0s,
        T,
        inputs=us,
        measurement_noise=0.05,
        key=keys[3],
    )
    share = args.per_process
    mine = np.arange(share * args.process_id, share * (args.process_id + 1))
    data = dynsys.global_dataset(full[mine])
    batch = {"xs": data.xs, "us": data.us}

    def loss_fn(model, batch):
        traj = dynsys.rollout(model, batch["xs"][:, 0], T, inputs=batch["us"])
        return jnp.mean((traj.xs[:, 1:] - batch["xs"][:, 1:]) ** 2)

    stamps = []

    def callback(step, model, loss):
        stamps.append(time.perf_counter())

    start = dynsys.LinearSystem(0.9 * jnp.eye(n), jnp.zeros((n, m)))
    dynsys.train(
        loss_fn,
        start,
        data=batch,
        solver=optax.adam(1e-2),
        num_steps=args.steps,
        progress=False,
        callback=callback,
    )
    intervals = [b - a for a, b in zip(stamps[3:], stamps[4:])]
    if dynsys.is_main_process():
        print(
            "RESULT "
            + json.dumps(
                {
                    "processes": args.processes,
                    "trajectories": total,
                    "seconds_per_step": statistics.median(intervals),
                }
            ),
            flush=True,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(args: argparse.Namespace, processes: int, per_process: int) -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
        "JAX_PLATFORMS": "cpu",
    }
    port = str(_free_port())
    command = [
        sys.executable, __file__, "--worker",
        "--processes", str(processes), "--per-process", str(per_process),
        "--port", port, "--length", str(args.length), "--state", str(args.state),
        "--steps", str(args.steps),
    ]  # fmt: skip
    children = [
        subprocess.Popen(
            command + ["--process-id", str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in range(processes)
    ]
    try:
        outputs = [child.communicate(timeout=args.timeout)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for child, output in zip(children, outputs):
        if child.returncode != 0:
            raise RuntimeError(f"a worker failed:\n{output[-3000:]}")
    line = next(x for x in outputs[0].splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _best(args: argparse.Namespace, processes: int, per_process: int) -> dict:
    runs = [_launch(args, processes, per_process) for _ in range(args.repeats)]
    return min(runs, key=lambda r: r["seconds_per_step"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=32, help="N in all")
    parser.add_argument("--length", type=int, default=200, help="steps T")
    parser.add_argument("--state", type=int, default=8, help="n (even)")
    parser.add_argument("--steps", type=int, default=40, help="optimiser steps")
    parser.add_argument("--max-processes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="launches, best kept")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--per-process", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    N = args.trajectories
    print(
        f"fit iteration (full batch, simulation loss), n = {args.state}, m = 2, "
        f"T = {args.length}, float64, one CPU device per process, "
        f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the "
        f"start, best of {args.repeats} launches"
    )
    print()
    print("| processes | trajectories | per process | ms per iteration | speed-up |")
    print("| --- | --- | --- | --- | --- |")
    base = None
    for P in range(1, args.max_processes + 1):
        if N % P:
            continue
        r = _best(args, P, N // P)
        base = base or r["seconds_per_step"]
        print(
            f"| {P} | {N} | {N // P} | {1e3 * r['seconds_per_step']:.1f} | "
            f"{base / r['seconds_per_step']:.2f}x |",
            flush=True,
        )
    for P in range(2, args.max_processes + 1):
        r = _best(args, P, N)
        print(
            f"| {P} | {P * N} | {N} | {1e3 * r['seconds_per_step']:.1f} | "
            f"(same data per process) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
