"""Issue 44 item 5: a fit run's advice names its options, not a line of Python:
the library's warning on unstable models (fit the Kalman predictor) becomes
`--loss prediction`, and coloured residuals of a state-space model of one output
hint at `--structure armax or bj`."""

import warnings

import jax.numpy as jnp
import numpy as np
import scipy.signal

import dynsys
from dynsys import cli
from dynsys._experiments.fit import checks, uncertainty
from dynsys._fitting.prediction_fit import warn_after_fit


def test_the_unstable_model_warning_names_the_option():
    marginal = dynsys.LinearSystem(jnp.array([[1.0]]), jnp.array([[1.0]]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_after_fit(marginal, marginal, "simulation", outputs=True)
    library = str(caught[0].message)
    assert "fit(fit_subspace(data, noise_model=True), data, loss=Prediction())" in (
        library
    )
    found: list[str] = []
    checks.add(found, library)
    assert "fit(" not in found[0]
    assert "config key 'fit.loss' prediction" in found[0]
    assert "--loss prediction" in cli._option_names(found[0])
    assert "--structure armax or bj" in cli._option_names(found[0])


def _coloured_record(T: int = 1500):
    """A first-order plant whose output noise is AR(1) with pole 0.9."""
    rng = np.random.default_rng(0)
    u, e = rng.normal(size=T), 0.3 * rng.normal(size=T)
    y = scipy.signal.lfilter([0.0, 0.5], [1.0, -0.8], u)
    y += scipy.signal.lfilter([1.0], [1.0, -0.9], e)
    return dynsys.Dataset(us=u[None, :, None], ys=y[None, :, None])


def test_coloured_residuals_of_one_output_hint_at_a_noise_model():
    data = _coloured_record()
    plant = dynsys.LinearSystem(
        jnp.array([[0.8]]), jnp.array([[1.0]]), jnp.array([[0.5]])
    )
    residuals = dynsys.residual_analysis(plant, data)
    hint = uncertainty.noise_model_hint(residuals, plant)
    assert hint is not None and "config key 'fit.structure' armax or bj" in hint
    # A model with the right noise model: white innovations, no hint.
    bj = dynsys.fit_box_jenkins(data, nb=1, nc=0, nd=1, nf=1, nk=1)
    innovations = dynsys.residual_analysis(bj, data)
    assert uncertainty.noise_model_hint(innovations, bj) is None
    # White residuals of a state-space model: no hint either.
    u = np.asarray(data.us[0, :, 0])
    y = scipy.signal.lfilter([0.0, 0.5], [1.0, -0.8], u)
    y += 0.3 * np.random.default_rng(1).normal(size=y.size)
    white = dynsys.Dataset(us=data.us, ys=y[None, :, None])
    residuals = dynsys.residual_analysis(plant, white)
    assert uncertainty.noise_model_hint(residuals, plant) is None
