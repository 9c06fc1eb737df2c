"""The identification pipeline on input-output data (issue 10): a subspace start,
then `fit` with its defaults (output error, estimated initial states), scored on
held-out experiments against their noise-free outputs."""

import time

import jax
import numpy as np
import pytest

import dynsys


def _random_system(seed, n=5, m=2, p=2):
    """Stable, lightly to moderately damped modes (|eigenvalues| in [0.7, 0.95]) in
    a random basis."""
    rng = np.random.default_rng(seed)
    radii, angles = rng.uniform(0.7, 0.95, n), rng.uniform(0.1, 1.2, n)
    Kb = np.zeros((n, n))
    for i in range(0, n - 1, 2):
        c, s = np.cos(angles[i]), np.sin(angles[i])
        Kb[i : i + 2, i : i + 2] = radii[i] * np.array([[c, -s], [s, c]])
    if n % 2:
        Kb[-1, -1] = radii[-1]
    S = rng.normal(size=(n, n))
    K = S @ Kb @ np.linalg.inv(S)
    return dynsys.LinearSystem(K, rng.normal(size=(n, m)), rng.normal(size=(p, n)))


def _experiments(system, N, T, snr_db, seed):
    """`N` experiments with white Gaussian inputs and white output noise at
    `snr_db` (signal power over noise power, per channel); and the noise-free
    outputs."""
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x0s = jax.random.normal(k1, (N, system.state_size))
    us = jax.random.normal(k2, (N, T, system.input_size))
    clean = dynsys.simulate(system, x0s, T, inputs=us)
    ys = np.asarray(clean.ys)
    scale = np.sqrt(np.mean(ys**2, axis=(0, 1))) / 10 ** (snr_db / 20)
    noisy = ys + scale[None, None] * np.asarray(jax.random.normal(k3, ys.shape))
    return dynsys.Dataset(ys=noisy, us=us), np.asarray(clean.ys)


def _fit_percent(model, noisy, clean):
    """compare's free run (x0 estimated from the noisy measurements) scored against
    the noise-free outputs, averaged over channels."""
    predicted = np.asarray(dynsys.compare(model, noisy).predicted)
    p = clean.shape[-1]
    error = np.linalg.norm((clean - predicted).reshape(-1, p), axis=0)
    spread = np.linalg.norm((clean - clean.mean(axis=(0, 1))).reshape(-1, p), axis=0)
    return float(np.mean(100.0 * (1.0 - error / spread)))


@pytest.mark.slow
@pytest.mark.parametrize("snr_db, tolerance", [(20, 1.0), (10, 1.5)])
def test_subspace_then_output_error_fit(snr_db, tolerance):
    system = _random_system(0)
    train, _ = _experiments(system, 8, 400, snr_db, seed=1)
    held_out, clean = _experiments(system, 4, 400, snr_db, seed=2)
    # Ragged experiments are covered in test_fit_outputs.py (loss, gradient and fit
    # equal to the unpadded experiments written out).
    started = time.perf_counter()
    start = dynsys.fit_subspace(train, 5)
    subspace_seconds = time.perf_counter() - started
    result = dynsys.fit(start, train, progress=False)
    fit_seconds = time.perf_counter() - started - subspace_seconds
    assert result.optimizer.startswith("Levenberg") and result.converged
    assert result.stop_reason is None
    true, subspace, fitted = (
        _fit_percent(model, held_out, clean) for model in (system, start, result.model)
    )
    # Measured (seed 0): 20 dB: true 99.15, subspace 99.00, fitted 99.01;
    # 10 dB: true 97.32, subspace 96.83, fitted 96.87.
    print(  # the figures of the closing note: pytest -s -k subspace_then_output
        f"\n{snr_db} dB: held-out fit % vs noise-free outputs: true {true:.2f}, "
        f"subspace {subspace:.2f}, fitted {fitted:.2f}; fit_subspace "
        f"{subspace_seconds:.2f} s, fit {fit_seconds:.2f} s ({result.steps_run} "
        "steps; both including compilation)"
    )
    assert fitted > true - tolerance, (true, subspace, fitted)
    assert fitted > subspace, (true, subspace, fitted)
