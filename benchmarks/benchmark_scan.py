"""Time the structure scan (`select_order`, orders 1..10, with and without D) on
each real record in data/real/, estimated on the first two thirds and validated on
the last third (the CLI's split): subspace candidates only, and with the best three
refined by the fit (30 steps), as `dynsys fit` does.

    python benchmarks/benchmark_scan.py [--files heating,dryer] [--refine 3] [--steps 30]
"""

import argparse
import pathlib
import sys
import time
import warnings


ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    from compare_peers import ROLES

    import dynsys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default=",".join(ROLES))
    parser.add_argument("--refine", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="fit steps per refine")
    parser.add_argument("--only-refined", action="store_true")
    parser.add_argument(
        "--all-orders", action="store_true", help="no early stop (the CLI stops)"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print("| record | candidates | seconds | chosen | mean held-out fit % |")
    print("|---|---:|---:|---|---:|")
    for name in args.files.split(","):
        inputs, outputs = ROLES[name]
        data = dynsys.load_dataset(
            ROOT / "data" / "real" / f"{name}.csv", inputs=inputs, outputs=outputs
        )
        train, val = data.split_time(1 / 3, min_samples=4)
        for refine in [args.refine] if args.only_refined else sorted({0, args.refine}):
            options = {}
            if refine:
                options = {"method": "fit", "refine": refine}
                options["fit_options"] = {"num_steps": args.steps}
            started = time.perf_counter()
            scan = dynsys.select_order(
                train,
                range(1, 11),
                val_data=val,
                stop_after=None if args.all_orders else 3,
                **options,
            )
            seconds = time.perf_counter() - started
            label = f"{len(scan.candidates)}" + (
                f", {refine} refined" if refine else ""
            )
            structure = f"{scan.order}{', D' if scan.feedthrough else ''}"
            print(
                f"| {name} | {label} | {seconds:.1f} | {structure} | "
                f"{scan.chosen.mean_fit:.1f} |"
            )


if __name__ == "__main__":
    main()
