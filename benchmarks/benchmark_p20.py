"""P20 alone (20 states, 3 inputs, 48 of 64 x 500-step trajectories, state data,
noise 0.05; `benchmarks/benchmark_fit.py`'s problem): the default optimiser from the
least-squares start, its steps to 1.1x the true model's loss and its wall time
(compilation included). The full comparison with Adam is `benchmarks/benchmark.py
--fit-only`.

    python benchmarks/benchmark_p20.py [--steps 40]
"""

import argparse
import pathlib
import sys

import jax


jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from benchmark_fit import _timed_fit, first_hit, loss_of, make_data, Problem  # noqa: E402

import dynsys  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="the most steps")
    args = parser.parse_args()
    system, data = make_data(Problem("P20", 20, 3, 64, 500))
    data, _ = data.split(0.25)
    start = dynsys.fit_least_squares(data)
    true_loss = loss_of(system, data)
    target = 1.1 * true_loss
    result, seconds = _timed_fit(start, data, num_steps=args.steps)
    losses = np.asarray(result.losses)
    print(f"optimiser: {result.optimizer}")
    print(f"true loss {true_loss:.6g}, target {target:.6g}, start {losses[0]:.6g}")
    print(f"steps run {result.steps_run} ({result.stop_reason or 'converged'})")
    reached = first_hit(losses, target)
    print(f"target reached after {reached} steps; best {losses.min():.6g}")
    print(f"wall time {seconds:.1f} s (compilation included)")


if __name__ == "__main__":
    main()
