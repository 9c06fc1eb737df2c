"""Levenberg–Marquardt before and after, side by side in one run: steps to
convergence and loss on the real records (estimation = first two thirds, means
removed by hand), compile overhead (first fit minus a second fit of the same
shapes), and a long single record.

"Before" is another checkout of dynsys (e.g. `git archive main | tar -x -C DIR`),
run in a subprocess with `PYTHONPATH=DIR`; "after" is this tree.

    python benchmarks/benchmark_lm.py --before DIR [--records heating:3,dryer:4:D]
        [--long-samples 65000] [--loss prediction]

A record is `name:order`, or `name:order:D` for a model with feedthrough.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time


ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from compare_peers import ROLES  # noqa: E402  (the roles of data/real's columns)


def _estimation_data(name):
    import numpy as np

    import dynsys

    table = np.genfromtxt(
        ROOT / "data" / "real" / f"{name}.csv", delimiter=",", names=True
    )
    inputs, outputs = ROLES[name]
    u = np.stack([table[c] for c in inputs], axis=1)
    y = np.stack([table[c] for c in outputs], axis=1)
    T = len(u) * 2 // 3
    u, y = u[:T] - u[:T].mean(0), y[:T] - y[:T].mean(0)
    return dynsys.Dataset(us=u[None], ys=y[None])


def _timed_fit(start, data, loss="simulation"):
    import numpy as np

    import dynsys

    begin = time.perf_counter()
    # `--loss` names the loss: the object `fit` takes.
    objective = dynsys.Prediction() if loss == "prediction" else dynsys.Simulation()
    result = dynsys.fit(start, data, loss=objective, progress=False)
    seconds = time.perf_counter() - begin
    return result, seconds, float(np.min(result.losses))


def _measure_records(records, loss="simulation"):
    import warnings

    import dynsys

    rows = []
    for record in records:
        name, order, *feedthrough = record.split(":")
        data = _estimation_data(name)
        start = dynsys.fit_subspace(
            data,
            int(order),
            feedthrough=feedthrough == ["D"],
            noise_model=loss == "prediction",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, first, best = _timed_fit(start, data, loss)
            _, second, _ = _timed_fit(start, data, loss)
        rows.append(
            {
                "record": name,
                "order": int(order),
                "feedthrough": feedthrough == ["D"],
                "steps": result.steps_run,
                "converged": result.converged,
                "loss": best,
                "first_fit_s": round(first, 2),
                "second_fit_s": round(second, 2),
                "compile_overhead_s": round(first - second, 2),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _measure_long_record(samples):
    import jax
    import numpy as np

    import dynsys

    rng = np.random.default_rng(0)
    K = np.diag([0.98, 0.9, 0.7, 0.5]) + 0.05 * rng.normal(size=(4, 4))
    true = dynsys.LinearSystem(K, rng.normal(size=(4, 1)), rng.normal(size=(1, 4)))
    us = jax.random.normal(jax.random.key(0), (1, samples, 1))
    clean = dynsys.simulate(true, np.zeros((1, 4)), samples, inputs=us)
    ys = np.asarray(clean.ys)
    ys = ys + 0.1 * ys.std() * rng.normal(size=ys.shape)
    data = dynsys.Dataset(us=clean.us, ys=ys)
    start = dynsys.fit_subspace(data, 4)
    result, seconds, loss = _timed_fit(start, data)
    return {
        "samples": samples,
        "steps": result.steps_run,
        "converged": result.converged,
        "loss": loss,
        "fit_s": round(seconds, 2),
    }


def _child(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    out = {"records": _measure_records(args.records.split(","), args.loss)}
    if args.long_samples:
        out["long"] = _measure_long_record(args.long_samples)
    print(json.dumps(out))


def _run(pythonpath, args, long_samples):
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    command = [sys.executable, __file__, "--child", "--records", args.records]
    command += ["--loss", args.loss]
    if long_samples:
        command += ["--long-samples", str(long_samples)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=pathlib.Path, help="another dynsys checkout")
    parser.add_argument(
        "--records", default="heating:3,heating:4,dryer:3,cd_player_arm:3"
    )
    parser.add_argument("--long-samples", type=int, default=0)
    parser.add_argument(
        "--loss",
        choices=["simulation", "prediction"],
        default="simulation",
        help="prediction: the Kalman predictor's, from fit_subspace(noise_model=True)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    results = {"after": _run(ROOT, args, args.long_samples)}
    if args.before is not None:
        # The long record is not fitted before: it did not finish in 20 minutes.
        results["before"] = _run(args.before, args, 0)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
