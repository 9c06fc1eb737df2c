"""Issue 45, item 2: the uncertainty stage of a `fit` run (`assess_uncertainty`:
the covariance of a fitted `LinearSystem`, its poles and static gains, the
free-run band) compiles no program: its derivatives are closed forms on the host
(`_fitting/linear_sensitivity.py`). Counted by JAX's compilation events."""

import dataclasses

import jax.numpy as jnp
import numpy as np

import dynsys
from dynsys._experiments.fit.uncertainty import assess_uncertainty
from tests.compile_count import compiled_programs


@dataclasses.dataclass
class _Estimate:  # what `assess_uncertainty` reads of the fit stage's `Estimate`
    result: object


def _data(T: int = 300) -> dynsys.Dataset:
    """A second-order plant with an output level, white inputs, noisy outputs
    (a plain loop)."""
    rng = np.random.default_rng(0)
    u = rng.normal(size=T)
    x, y = np.zeros(2), np.empty(T)
    K = np.array([[1.5, -0.7], [1.0, 0.0]])
    for t in range(T):
        y[t] = x[0] + 0.3 * u[t] + 2.0 + 0.05 * rng.normal()
        x = K @ x + np.array([1.0, 0.0]) * u[t]
    return dynsys.Dataset(
        us=jnp.asarray(u[None, :, None]), ys=jnp.asarray(y[None, :, None])
    )


def test_the_uncertainty_stage_compiles_no_program():
    data = _data()
    start = dynsys.fit_subspace(data, 2, feedthrough=True)
    result = dynsys.fit(start, data, num_steps=10, progress=False)
    dynsys.compare(result.model, data)  # as the run's validation stage has
    with compiled_programs() as compiled:
        uncertainty = assess_uncertainty(data, _Estimate(result))
    assert sum(compiled.values()) == 0, dict(compiled)
    body = uncertainty.metrics["uncertainty"]
    assert len(body["poles"]) == 2, body
    assert all(np.isfinite(p["natural_frequency_std"]) for p in body["poles"])
    assert body["static_gain_std"][0][0] > 0
    band = uncertainty.references["comparison.png"]["bands"]["fitted"]
    assert band.shape == (300, 1) and np.all(band > 0)
