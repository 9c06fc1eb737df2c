"""Train a controller on a zoo system, from a TOML config (default:
`scripts/configs/train_pendulum.toml`: a layered neural controller holds the pendulum
upright, from angles `pi +- 0.5` rad and speeds `+- 1` rad/s, torque limited to 15 N m).

Writes a run folder `runs/<name>-<timestamp>/` with the closed-loop trajectories
before and after training, the loss history and the closed-loop phase portrait as
PNGs, metrics.json and summary.md; with `--figures DIR`, also copies the figures
there as `<name>_<figure>.png`.

Run: `python scripts/train_controller.py [--config CONFIG] [--set train.steps=100]
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
    parser.add_argument("--config", default=CONFIGS / "train_pendulum.toml")
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
