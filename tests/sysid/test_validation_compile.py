"""How many programs the validation and response functions compile (issue 20,
"compile less"), counted by JAX's own compilation events, never by time:
`compare`, `residual_analysis`, `estimate_x0` and the frequency and step responses
compile a few whole programs per model structure and data shape, not one per
operation (a `dynsys fit` on a real record compiled ~220 of those), and a second
call with another model and data of the same shapes compiles nothing."""

import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..compile_count import compiled_programs


# These tests count or time compilations: a program read back from the test run's
# shared compilation cache would not be counted.
pytestmark = pytest.mark.usefixtures("no_persistent_cache")


def _model_and_data(seed: int):
    """A 3-state, 2-input, 3-output model with feedthrough and its noisy data (two
    experiments of 83 and 70 steps: shapes no other test uses)."""
    rng = np.random.default_rng(seed)
    K = np.diag([0.9, 0.6, -0.3]) + 0.05 * rng.normal(size=(3, 3))
    model = dynsys.LinearSystem(
        K=jnp.asarray(K),
        B=jnp.asarray(rng.normal(size=(3, 2))),
        C=jnp.asarray(rng.normal(size=(3, 3))),
        D=jnp.asarray(0.1 * rng.normal(size=(3, 2))),
    )
    us = rng.normal(size=(2, 83, 2))
    x0 = rng.normal(size=(2, 3))
    ys = np.asarray(dynsys.rollout(model, jnp.asarray(x0), 83, inputs=us).ys)
    ys = ys + 0.01 * rng.normal(size=ys.shape)
    return model, dynsys.Dataset(ys=ys, us=us, lengths=(83, 70))


def test_compare_and_residual_analysis_compile_a_few_programs_once():
    model, data = _model_and_data(0)
    other_model, other_data = _model_and_data(1)
    with compiled_programs(fresh=True) as first:
        comparison = dynsys.compare(model, data)
        ahead = dynsys.compare(model, data, horizon=3)
        residuals = dynsys.residual_analysis(model, data, max_lag=10)
    # Free run and k-step prediction (each: initial states and prediction in one
    # program, the fit % in another), the correlations: not one per operation.
    assert sum(first.values()) <= 6, first
    with compiled_programs(fresh=True) as second:
        dynsys.compare(other_model, other_data)
        dynsys.compare(other_model, other_data, horizon=3)
        dynsys.residual_analysis(other_model, other_data, max_lag=10)
    # The caches were cleared: what compiles again is exactly the first call's.
    assert second == first
    with compiled_programs(fresh=False) as third:
        repeat = dynsys.compare(other_model, other_data)
        dynsys.residual_analysis(other_model, other_data, max_lag=10)
    assert sum(third.values()) == 0, third
    # Sanity of what was computed: near-exact fits on the model's own data.
    assert np.all(np.asarray(comparison.fit_percent) > 95)
    assert np.all(np.asarray(ahead.fit_percent) > 95)
    assert np.all(np.asarray(repeat.fit_percent) > 95)
    assert residuals.autocorrelation.shape == (11, 3)


def test_responses_and_initial_states_compile_one_program_each():
    model, data = _model_and_data(2)
    other_model, other_data = _model_and_data(3)
    with compiled_programs(fresh=True) as first:
        dynsys.frequency_response(model, jnp.linspace(0.0, 3.0, 17))
        dynsys.step_response(model, 31)
        dynsys.impulse_response(model, 31)
        x0 = dynsys.estimate_x0(model, data)
    assert sum(first.values()) <= 5, first  # the linspace is one of them
    with compiled_programs(fresh=False) as second:
        response = dynsys.frequency_response(other_model, np.linspace(0.0, 3.0, 17))
        steps = dynsys.step_response(other_model, 31)
        dynsys.estimate_x0(other_model, other_data)
    assert sum(second.values()) == 0, second
    # What they computed, against plain numpy: H(e^{iw}) and the running sum of
    # D, CB, CKB, ...; x0 close to the simulated one.
    K, B, C, D = (np.asarray(getattr(other_model, k)) for k in "KBCD")
    w = np.linspace(0.0, 3.0, 17)
    expected = [C @ np.linalg.solve(np.exp(1j * f) * np.eye(3) - K, B) + D for f in w]
    np.testing.assert_allclose(np.asarray(response), np.stack(expected), atol=1e-10)
    markov = [D] + [C @ np.linalg.matrix_power(K, t) @ B for t in range(30)]
    np.testing.assert_allclose(np.asarray(steps), np.cumsum(markov, axis=0), atol=1e-10)
    assert np.asarray(x0).shape == (2, 3)


def _one_record(model, steps: int, seed: int):
    """One experiment of `steps` samples of `model`, with output noise."""
    rng = np.random.default_rng(seed)
    us = rng.normal(size=(1, steps, 2))
    ys = np.asarray(dynsys.rollout(model, jnp.zeros((1, 3)), steps, inputs=us).ys)
    return dynsys.Dataset(ys=ys + 0.05 * rng.normal(size=ys.shape), us=us)


def test_a_record_of_another_length_compiles_nothing_and_scores_the_same():
    # `compare`, `residual_analysis` and `fit_subspace` pad a record to the length
    # records of nearby lengths share (masked steps after its end): after a record
    # of 611 samples (padded to 640), one of 500 (its own bucket: 512) runs their
    # programs.
    model, _ = _model_and_data(4)
    first, second = _one_record(model, 611, 5), _one_record(model, 500, 6)
    for data in (first, second):
        with compiled_programs() as counted:
            comparison = dynsys.compare(model, data)
            residuals = dynsys.residual_analysis(model, data, max_lag=7)
            # (a given horizon: the default one depends on the length)
            found = dynsys.fit_subspace(data, 3, horizon=10)
        if data is first:
            assert sum(counted.values()) > 0
    assert sum(counted.values()) == 0, counted
    # The second record's numbers, against plain numpy: the free run from the
    # least-squares initial state, its fit %, the residuals' auto-correlation.
    K, B, C, D = (np.asarray(getattr(model, k)) for k in "KBCD")
    ys, us = np.asarray(second.ys)[0], np.asarray(second.us)[0]
    rows, forced, x = [], [], np.zeros(3)
    for t in range(500):
        rows.append(C @ np.linalg.matrix_power(K, t))
        forced.append(C @ x + D @ us[t])
        x = K @ x + B @ us[t]
    rows, forced = np.concatenate(rows), np.asarray(forced)
    x0 = np.linalg.lstsq(rows, (ys - forced).ravel(), rcond=None)[0]
    predicted = forced + (rows @ x0).reshape(500, 3)
    assert np.asarray(comparison.predicted).shape == (1, 500, 3)
    found_predicted = np.asarray(comparison.predicted)[0]
    np.testing.assert_allclose(found_predicted, predicted, atol=1e-9)
    error = np.linalg.norm(ys - predicted, axis=0)
    spread = np.linalg.norm(ys - ys.mean(axis=0), axis=0)
    np.testing.assert_allclose(comparison.fit_percent, 100 * (1 - error / spread))
    e = ys - predicted
    auto = [np.sum(e[lag:] * e[: 500 - lag], axis=0) for lag in range(8)]
    np.testing.assert_allclose(
        residuals.autocorrelation, np.asarray(auto) / np.sum(e**2, axis=0), atol=1e-9
    )
    assert np.asarray(residuals.residuals).shape == (1, 500, 3)
    # The subspace estimate of the padded record: the model's poles, near enough.
    poles = np.sort(np.abs(np.linalg.eigvals(np.asarray(found.K))))
    np.testing.assert_allclose(poles, np.sort(np.abs(np.linalg.eigvals(K))), atol=0.05)


def test_a_growing_model_scored_on_a_padded_record_stays_finite():
    # The kind of model padding could break: one that grows so fast that its run
    # overflows in the padded steps (3.49^500 < 1e308 < 3.49^640) but not on the
    # record. The padded steps enter neither the initial state's least squares nor
    # the scores, so those of the record itself stay finite, as without padding.
    model = dynsys.LinearSystem(
        K=jnp.array([[3.49]]), B=jnp.array([[1.0]]), C=jnp.array([[1.0]])
    )
    rng = np.random.default_rng(7)
    longer = dynsys.Dataset(ys=rng.normal(size=(1, 611, 1)), us=np.zeros((1, 611, 1)))
    dynsys.compare(model, longer)  # 611 samples: 640 becomes the shared length
    us = np.zeros((1, 500, 1))
    ys = np.asarray(dynsys.rollout(model, jnp.ones((1, 1)), 500, inputs=us).ys)
    comparison = dynsys.compare(model, dynsys.Dataset(ys=ys, us=us))
    assert np.all(np.isfinite(np.asarray(comparison.fit_percent)))
    assert np.all(np.isfinite(np.asarray(comparison.predicted)))
    assert np.asarray(comparison.predicted).shape == (1, 500, 1)
