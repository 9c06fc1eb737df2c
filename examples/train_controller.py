"""Train a controller on a zoo system, from a TOML config (default:
`examples/configs/train_pendulum.toml`: a layered neural controller holds the pendulum
upright, from angles `pi +- 0.5` rad and speeds `+- 1` rad/s, torque limited to 15 N m).

Writes a run folder `runs/<name>-<timestamp>/` with the closed-loop trajectories
before and after training, the loss history and the closed-loop phase portrait as
PNGs, metrics.json and summary.md; with `--figures DIR`, also copies the figures
there as `<name>_<figure>.png`.

Run: `python examples/train_controller.py [--config CONFIG] [--set train.steps=100]
[--figures docs/figures]`
"""

import pathlib

from dynsys.cli import run_script


CONFIGS = pathlib.Path(__file__).resolve().parent / "configs"


def main(argv=None):
    return run_script(CONFIGS / "train_pendulum.toml", argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
