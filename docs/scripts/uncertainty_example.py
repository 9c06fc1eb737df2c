"""The figure of docs/uncertainty.md: a fitted model's 99 % confidence band and the
data's spectral estimate on one Bode diagram.

A lightly damped two-state system is driven by white noise for 400 steps and its
output measured with white noise; `fit` starts from the subspace estimate. The
figure draws the true system, the fitted model with its band, and Welch's estimate
of the data (grey dots); the script prints the poles and static gain with their
standard deviations.

Run: `.venv/bin/python docs/scripts/uncertainty_example.py [--write | --out DIR]`
(by default into a new temporary folder; `--write` updates
docs/figures/uncertainty_bode.png).
"""

import argparse
import os
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np


matplotlib.use("Agg")

import dynsys  # noqa: E402
from dynsys import plot  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parents[2]
    if args.write:
        out = root / "docs" / "figures"
    else:
        out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="dynsys_uncertainty_"))
    out.mkdir(parents=True, exist_ok=True)

    jax.config.update("jax_enable_x64", True)
    angle, radius = 0.5, 0.9
    true = dynsys.LinearSystem(
        K=radius
        * jnp.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]),
        B=jnp.array([[1.0], [0.3]]),
        C=jnp.array([[0.6, -0.4]]),
    )
    key_u, key_e = jax.random.split(jax.random.key(0))
    us = jax.random.normal(key_u, (1, 400, 1))
    ys = dynsys.rollout(true, jnp.zeros((1, 2)), 400, inputs=us).ys
    data = dynsys.Dataset(us=us, ys=ys + 0.3 * jax.random.normal(key_e, ys.shape))

    result = dynsys.fit(dynsys.fit_subspace(data, 2), data, progress=False)
    poles = dynsys.pole_uncertainty(result.covariance)
    gain, gain_std = dynsys.static_gain_uncertainty(result.covariance)
    for f, fs, d, ds in zip(
        poles.natural_frequency,
        poles.natural_frequency_std,
        poles.damping_ratio,
        poles.damping_std,
    ):
        print(f"pole: natural frequency {f:.4f} ± {fs:.4f}, damping {d:.3f} ± {ds:.3f}")
    print(f"static gain {float(gain[0, 0]):.3f} ± {float(gain_std[0, 0]):.3f}")

    fig = plot.bode(
        {"fitted": result.model},
        truth=true,
        spectral=dynsys.spectral_estimate(data, nperseg=64),
        confidence={"fitted": result.covariance},
        title="Fitted model with its 99 % band, and the data's spectral estimate",
    )
    path = out / "uncertainty_bode.png"
    temporary = path.with_suffix(".tmp.png")
    fig.savefig(temporary, dpi=80)
    os.replace(temporary, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
