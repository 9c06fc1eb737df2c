"""Fit a linear model to a zoo system's data, from a TOML config (default:
`scripts/configs/fit_mass_spring_damper.toml`; `fit_noise_sweep.toml` sweeps the
measurement noise).

Writes a run folder `runs/<name>-<timestamp>/` (config.toml, metrics.json,
history.csv, model.dynsys, figures, summary.md); with `--figures DIR`, also copies
the figures there as `<name>_<figure>.png` (the docs gallery uses `docs/figures`).

Run: `python scripts/fit_system.py [--config CONFIG] [--set fit.steps=100]
[--figures docs/figures]`
"""

import argparse
import pathlib

import jax


jax.config.update("jax_enable_x64", True)

import dynsys  # noqa: E402


CONFIGS = pathlib.Path(__file__).resolve().parent / "configs"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIGS / "fit_mass_spring_damper.toml")
    parser.add_argument("--out-root", default="runs", help="where run folders go")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--figures", type=pathlib.Path, help="copy the figures here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    result = dynsys.run_experiment(
        args.config,
        out_root=args.out_root,
        overrides=args.set,
        progress=not args.no_progress,
    )
    print(f"wrote {result.path}/")
    if args.figures is not None:
        for path in result.copy_figures(args.figures):
            print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
