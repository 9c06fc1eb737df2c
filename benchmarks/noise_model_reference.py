"""Measure fit_subspace (with and without a noise model) and the prediction-error fit
on an integrating plant with coloured noise against an N4SID reference (the
`nfoursid` package, installed by hand: it is not a dependency of dynsys).

    python benchmarks/noise_model_reference.py [--samples 1000] [--seeds 5]

Prints, per seed, the validation fit % (free run and one-step prediction) at order 2,
and the relative error of the frequency response (of the deterministic part, from u
to y) against the true plant's.
"""

import argparse

import jax
import numpy as np


jax.config.update("jax_enable_x64", True)

import dynsys  # noqa: E402


# ball-and-beam-like: an integrator behind a lag, output noise coloured by the plant
K = np.array([[1.0, 0.05], [0.0, 0.9]])
B = np.array([[0.0], [0.1]])
C = np.array([[1.0, 0.0]])
L = np.array([[0.6], [0.8]])  # gain of the innovations (K - L C is stable)
NOISE = 0.005  # innovation standard deviation
FREQUENCIES = np.linspace(0.05, 3.0, 40)  # rad per sample


def data(T: int, seed: int) -> dynsys.Dataset:
    rng = np.random.default_rng(seed)
    us = np.sign(rng.standard_normal((T, 1))) + 0.3 * rng.standard_normal((T, 1))
    e = NOISE * rng.standard_normal((T, 1))
    x, ys = np.zeros(2), []
    for t in range(T):
        ys.append(C @ x + e[t])
        x = K @ x + B @ us[t] + L @ e[t]
    return dynsys.Dataset(ys=np.array(ys)[None] + 3.0, us=us[None])


def n4sid_reference(estimation: dynsys.Dataset, order: int) -> dynsys.LinearSystem:
    import pandas as pd
    from nfoursid.nfoursid import NFourSID

    y_bar = float(np.mean(estimation.ys))
    u_bar = float(np.mean(estimation.us))
    frame = pd.DataFrame(
        {"y": estimation.ys[0, :, 0] - y_bar, "u": estimation.us[0, :, 0] - u_bar}
    )
    n4sid = NFourSID(
        frame, output_columns=["y"], input_columns=["u"], num_block_rows=10
    )
    n4sid.subspace_identification()
    ss, _ = n4sid.system_identification(rank=order)
    return dynsys.LinearSystem(
        ss.a, ss.b, ss.c, ss.d, input_level=[u_bar], output_level=[y_bar]
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for seed in range(args.seeds):
        estimation = data(args.samples, 2 * seed)
        validation = data(args.samples, 2 * seed + 1)
        models = {
            "n4sid (nfoursid)": n4sid_reference(estimation, 2),
            "fit_subspace": dynsys.fit_subspace(estimation, 2),
        }
        noise = dynsys.fit_subspace(estimation, 2, noise_model=True)
        models["fit_subspace(noise_model=True)"] = noise
        models["fit(loss='prediction')"] = dynsys.fit(
            noise, estimation, loss=dynsys.Prediction(), progress=False
        ).model
        row = {}
        truth = dynsys.frequency_response(dynsys.LinearSystem(K, B, C), FREQUENCIES)
        for name, model in models.items():
            free = float(dynsys.compare(model, validation).fit_percent[0])
            ahead = float(dynsys.compare(model, validation, horizon=1).fit_percent[0])
            ours = dynsys.frequency_response(model, FREQUENCIES)
            error = float(np.linalg.norm(ours - truth) / np.linalg.norm(truth))
            row[name] = (free, ahead, error)
            print(
                f"seed {seed}  {name:32s} free run {free:6.2f} %  one-step "
                f"{ahead:6.2f} %  frequency-response error {error:.4f}"
            )
        rows.append(row)
    print("mean over seeds:")
    for name in rows[0]:
        free, ahead, error = (np.mean([row[name][i] for row in rows]) for i in range(3))
        print(
            f"  {name:32s} free run {free:6.2f} %  one-step {ahead:6.2f} %  "
            f"frequency-response error {error:.4f}"
        )


if __name__ == "__main__":
    main()
