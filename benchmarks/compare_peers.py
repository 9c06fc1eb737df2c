"""Validation fit % of peer identification tools on the measured files of
`data/real/`, scored the way `dynsys fit` scores its models, for the comparison
tables of docs/system-identification.md.

Each file: estimation = the first two thirds, validation = the last third; the
estimation means are removed from both (the operating point); each model is run
free on the validation record from an initial state fitted by least squares to it
(as `dynsys.compare` does); fit % per output channel =
100 (1 - |y - y_hat| / |y - mean(y)|).

Peers (optional; each row is skipped with a reason when its package is missing):
SIPPY's N4SID (package `sippy_unipi`) with its default order rule and with its AIC
order scan over 1..10, and nfoursid's N4SID at each order of `--orders` (it has no
order rule of its own: with `--orders 1,2,...,10` the best row is nfoursid "at its
best order", chosen on the validation part, hence optimistic). The formula, the
samples and the initial-state rule are `dynsys fit`'s; the operating point is not
quite: a model of `dynsys fit` keeps the levels its output-error fit refined, where
the peers' models here use the estimation means (docs/benchmarks.md, "dynsys's
default against the peers", says by how much that moves a fit %). dynsys itself is
not imported here, so that this script runs in a separate environment that has the
peers installed:

    python -m venv /tmp/peers && /tmp/peers/bin/pip install sippy_unipi nfoursid
    /tmp/peers/bin/python benchmarks/compare_peers.py [--orders 2,4] [--files heating]
        [--methods sippy,sippy-aic,nfoursid]
"""

import argparse
import pathlib
import time
from functools import partial

import numpy as np


ROOT = pathlib.Path(__file__).resolve().parent.parent
ROLES = {
    "heating": (["drive_V"], ["temp_C"]),
    "dryer": (
        ["fuel_flow", "fan_speed", "material_flow"],
        ["dry_bulb_temp", "wet_bulb_temp", "moisture"],
    ),
    "cd_player_arm": (["u1", "u2"], ["y1", "y2"]),
    "evaporator": (
        ["feed_flow", "vapour_flow", "cooling_water_flow"],
        ["dry_matter", "product_flow", "product_temp"],
    ),
    "ph_neutralisation": (["acid_flow", "base_flow"], ["pH"]),
    "glass_furnace": (["u1", "u2", "u3"], ["y1", "y2", "y3", "y4", "y5", "y6"]),
    "cascaded_tanks_estimation": (["pump_V"], ["level_V"]),
}


METHODS = ("sippy", "sippy-aic", "nfoursid")


def split_record(name):
    """`(u_est, y_est, u_val, y_val)`, each `(T, channels)`, estimation means
    removed; the split as `dynsys fit`'s default (last third, rounded)."""
    table = np.genfromtxt(
        ROOT / "data" / "real" / f"{name}.csv", delimiter=",", names=True
    )
    inputs, outputs = ROLES[name]
    u = np.stack([table[c] for c in inputs], axis=1)
    y = np.stack([table[c] for c in outputs], axis=1)
    k = len(y) - int(np.floor(len(y) / 3 + 0.5))
    u_mean, y_mean = u[:k].mean(0), y[:k].mean(0)
    return u[:k] - u_mean, y[:k] - y_mean, u[k:] - u_mean, y[k:] - y_mean


def free_run_fit(A, B, C, D, u, y):
    """Fit % per channel `(p,)` of the free run of `(A, B, C, D)` on `(u, y)` from
    the least-squares initial state."""
    T, n = len(y), A.shape[0]
    forced = np.zeros_like(y)
    x = np.zeros(n)
    observability = np.zeros((T, y.shape[1], n))
    power = np.eye(n)
    for t in range(T):
        forced[t] = C @ x + D @ u[t]
        observability[t] = C @ power
        x = A @ x + B @ u[t]
        power = A @ power
    x0, *_ = np.linalg.lstsq(
        observability.reshape(-1, n), (y - forced).ravel(), rcond=None
    )
    y_hat = forced + observability @ x0
    error = np.linalg.norm(y - y_hat, axis=0)
    spread = np.linalg.norm(y - y.mean(0), axis=0)
    return 100 * (1 - error / spread)


def sippy_n4sid(u, y, aic):
    """SIPPY's N4SID `(A, B, C, D, order)`: its threshold rule, or its AIC scan."""
    from sippy_unipi import system_identification

    options = {"SS_orders": [1, 10], "IC": "AIC"} if aic else {}
    model = system_identification(y.T, u.T, "N4SID", SS_D_required=False, **options)
    return model.A, model.B, model.C, model.D, model.A.shape[0]


def nfoursid_n4sid(u, y, order):
    """nfoursid's N4SID at `order`: `(A, B, C, D, order)`."""
    import pandas as pd
    from nfoursid.nfoursid import NFourSID

    inputs = [f"u{i}" for i in range(u.shape[1])]
    outputs = [f"y{i}" for i in range(y.shape[1])]
    frame = pd.DataFrame(np.hstack([u, y]), columns=inputs + outputs)
    n4 = NFourSID(
        frame, output_columns=outputs, input_columns=inputs, num_block_rows=20
    )
    n4.subspace_identification()
    model, _ = n4.system_identification(rank=order)
    return model.a, model.b, model.c, model.d, order


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default=",".join(ROLES))
    parser.add_argument("--orders", default="2,4", help="nfoursid's fixed orders")
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"which peers to run, of {','.join(METHODS)}",
    )
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods: expected some of {','.join(METHODS)}, got {unknown}")
    print("| file | method | order | validation fit % per output | seconds |")
    print("|---|---|---:|---|---:|")
    for name in args.files.split(","):
        u, y, u_val, y_val = split_record(name)
        orders = map(int, args.orders.split(","))
        candidates = [
            ("sippy", "SIPPY N4SID (its rule)", partial(sippy_n4sid, u, y, False)),
            ("sippy-aic", "SIPPY N4SID (AIC, 1..10)", partial(sippy_n4sid, u, y, True)),
            *(
                ("nfoursid", "nfoursid N4SID", partial(nfoursid_n4sid, u, y, o))
                for o in orders
            ),
        ]
        runs = [(label, run) for key, label, run in candidates if key in methods]
        for label, run in runs:
            begin = time.perf_counter()
            try:
                A, B, C, D, order = run()
            except ImportError as error:
                print(f"| {name} | {label} | | skipped: {error} | |")
                continue
            seconds = time.perf_counter() - begin
            A, B, C, D = (np.atleast_2d(np.asarray(m, float)) for m in (A, B, C, D))
            fits = free_run_fit(A, B, C, D, u_val, y_val)
            shown = " / ".join(f"{f:.1f}" if f > -1000 else "diverges" for f in fits)
            print(
                f"| {name} | {label} | {order} | {shown} | {seconds:.1f} |", flush=True
            )


if __name__ == "__main__":
    main()
