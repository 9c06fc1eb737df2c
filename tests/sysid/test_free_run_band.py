"""`simulation_band`'s kept program (`_sysid/free_run_band.py`) against the
linearised propagation it replaces (`propagate_std` through `compare`), with
more trained parameters than one block of directions."""

import jax
import numpy as np

import dynsys
from dynsys._fitting.covariance import (
    JACOBIAN_DIRECTIONS,
    ParameterCovariance,
    trained_mask,
)
from dynsys._sysid.propagate import propagate_std


def test_the_kept_band_equals_the_propagated_one():
    rng = np.random.default_rng(0)
    n, p, m, T, N = 5, 2, 2, 80, 3
    K = rng.standard_normal((n, n))
    K *= 0.9 / np.max(np.abs(np.linalg.eigvals(K)))
    model = dynsys.LinearSystem(
        K, rng.standard_normal((n, m)), rng.standard_normal((p, n)), np.eye(p, m)
    )
    trained = trained_mask(model, lambda leaf: True)
    count = sum(leaf.size for leaf in jax.tree.leaves(model))
    assert count > JACOBIAN_DIRECTIONS  # two blocks, the second padded
    root = rng.standard_normal((count, count)) * 0.01
    covariance = ParameterCovariance(
        matrix=root @ root.T,
        model=model,
        trained=trained,
        channel_variance=np.ones(p),
        rank=count,
        num_residuals=N * T * p,
    )
    data = dynsys.Dataset(
        us=rng.standard_normal((N, T, m)), ys=rng.standard_normal((N, T, p))
    )
    predicted, std = dynsys.simulation_band(covariance, data)
    expected = propagate_std(
        lambda system: dynsys.compare(system, data).predicted, covariance, model
    )
    assert std.shape == (N, T, p) and np.all(np.asarray(std) > 0)
    np.testing.assert_allclose(std, expected, rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(predicted, dynsys.compare(model, data).predicted)
