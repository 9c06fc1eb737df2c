"""Fit a linear model to a zoo system's data, from a TOML config (default:
`examples/configs/fit_mass_spring_damper.toml`; `fit_noise_sweep.toml` sweeps the
measurement noise).

Writes a run folder `runs/<name>-<timestamp>/` (config.toml, metrics.json,
history.csv, model.dynsys, figures, summary.md); with `--figures DIR`, also copies
the figures there as `<name>_<figure>.png` (the docs gallery uses `docs/figures`).

Run: `python examples/fit_system.py [--config CONFIG] [--set fit.steps=100]
[--figures docs/figures]`
"""

import pathlib

from dynsys.cli import run_script


CONFIGS = pathlib.Path(__file__).resolve().parent / "configs"


def main(argv=None):
    return run_script(
        CONFIGS / "fit_mass_spring_damper.toml", argv, __doc__.splitlines()[0]
    )


if __name__ == "__main__":
    main()
