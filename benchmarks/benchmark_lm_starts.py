"""What each candidate cause of the gap to MINPACK's minimum buys (issue 44, item
4): the default fit (`dynsys.fit(fit_subspace(data, order), data)`) against the
same fit with tighter tolerances, restarted from its own end point, without the
secant model, with other initial dampings, with the separable (variable
projection) step, and from the subspace estimates of other horizons; each row's
final loss, steps (of which rejected), stop and wall time (compilation included).

    python benchmarks/benchmark_lm_starts.py [--records dryer:9,cd_player_arm:3:D]

Estimation data and start as `benchmark_lm_alternatives.py`'s. MINPACK's losses
on the same records: that script.
"""

import argparse
import sys
import time
import warnings

import jax


jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from benchmark_lm import _estimation_data  # noqa: E402

import dynsys  # noqa: E402


DEFAULT_RECORDS = "dryer:9,cd_player_arm:3:D,heating:7:D,cd_player_arm:10:D"
HORIZONS = (10, 12, 15, 20, 25, 30, 40)


class FirstDamping(dynsys.LevenbergMarquardt):
    """The default solver with another first damping than its `1e-3`."""

    first_damping: float = eqx.field(static=True, default=1e-3)

    def init(self, params):
        carry = super().init(params)
        return (jnp.array(self.first_damping, carry[0].dtype), *carry[1:])


def fitted(label, start, data, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        begin = time.perf_counter()
        result = dynsys.fit(start, data, progress=False, **options)
        seconds = time.perf_counter() - begin
    losses = np.asarray(result.losses)
    rejected = int(np.sum(losses[1:] == losses[:-1]))
    stop = "converged" if result.converged else "cap"
    if result.stop_reason is not None:
        stop = result.stop_reason.split(" (")[0]
    print(
        f"| {label} | {losses.min():.8g} | {result.steps_run} ({rejected}) | {stop} "
        f"| {seconds:.1f} s |",
        flush=True,
    )
    return result


def measure(record):
    name, order, *feedthrough = record.split(":")
    n, feedthrough = int(order), feedthrough == ["D"]
    data = _estimation_data(name)
    data = dynsys.Dataset(us=jnp.asarray(data.us), ys=jnp.asarray(data.ys))

    def subspace(horizon=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dynsys.fit_subspace(
                data, n, feedthrough=feedthrough, horizon=horizon
            )

    print(f"\n{record}\n\n| set-up | final loss | steps (rejected) | stop | wall |")
    print("|---|---|---|---|---|")
    start = subspace()
    result = fitted("default", start, data)
    fitted("restarted from its end point", result.model, data)
    fitted("rtol 1e-12, atol 1e-14", start, data, rtol=1e-12, atol=1e-14)
    solver = dynsys.LevenbergMarquardt(secant=False)
    fitted("no secant model", start, data, solver=solver)
    for damping in (1e-6, 1e-1, 10.0):
        solver = FirstDamping(first_damping=damping)
        fitted(f"first damping {damping:g}", start, data, solver=solver)
    for separable in ("exact", "kaufman"):
        solver = dynsys.LevenbergMarquardt(separable=separable)
        fitted(f"separable, {separable}", start, data, solver=solver)
    for horizon in HORIZONS:
        try:
            other = subspace(horizon)
        except ValueError as error:
            print(f"| from horizon {horizon} | — ({str(error)[:60]}...) | | | |")
            continue
        fitted(f"from horizon {horizon}", other, data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=DEFAULT_RECORDS)
    args = parser.parse_args()
    for record in args.records.split(","):
        measure(record)


if __name__ == "__main__":
    sys.exit(main())
