"""Issue 50, items 4 and 5: what a fit run assumed or found is said in one line each
(no sample time, the operating point the fit refined, a flat held-out output, a
neural model worse than the linear one, a neural fit stopped by its step cap)."""

import types

import jax.numpy as jnp
import numpy as np

import dynsys
from dynsys._experiments.fit import assumptions
from dynsys._experiments.fit.neural import _stop_reason


def test_no_dt_is_said():
    assert assumptions.no_dt_line(2.0) == []
    (line,) = assumptions.no_dt_line(None)
    assert "time axes are in steps" in line and "rad/sample" in line


def test_refined_levels_print_the_model_levels_not_the_data_means():
    K, B, C = jnp.array([[0.5]]), jnp.array([[1.0]]), jnp.array([[1.0]])
    start = dynsys.LinearSystem(
        K, B, C, input_level=jnp.array([6.558]), output_level=jnp.array([97.33])
    )
    fitted = dynsys.LinearSystem(
        K, B, C, input_level=jnp.array([6.558]), output_level=jnp.array([97.13])
    )
    (line,) = assumptions.refined_levels_line(start, fitted, ["drive_V"], ["temp_C"])
    assert "output level temp_C 97.13 (data mean 97.33)" in line
    assert "input level" not in line  # unchanged: not said
    assert assumptions.refined_levels_line(start, start, ["drive_V"], ["temp_C"]) == []


def test_refined_levels_name_the_data_mean_apart_from_the_start_offset():
    """A subspace start that fitted a constant offset starts away from the data's
    mean: the line names both, not the start's level as the mean."""
    K, B, C = jnp.array([[0.5]]), jnp.array([[1.0]]), jnp.array([[1.0]])
    start = dynsys.LinearSystem(K, B, C, output_level=jnp.array([142.3]))
    fitted = dynsys.LinearSystem(K, B, C, output_level=jnp.array([143.6]))
    means = (None, np.array([143.58]))
    (line,) = assumptions.refined_levels_line(start, fitted, [], ["temp_C"], means)
    assert "temp_C 143.6 (subspace start 142.3, data mean 143.6)" in line
    at_mean = dynsys.LinearSystem(K, B, C, output_level=jnp.array([143.58]))
    (line,) = assumptions.refined_levels_line(at_mean, fitted, [], ["temp_C"], means)
    assert "(data mean 143.6)" in line and "subspace start" not in line


def test_flat_held_out_output_explains_a_very_negative_fit_percent():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(1, 400, 1))
    y = 5.0 + 0.01 * rng.normal(size=(1, 400, 1))  # nearly flat
    data = dynsys.Dataset(us=jnp.asarray(u), ys=jnp.asarray(y), output_names=["pH"])
    model = dynsys.LinearSystem(
        jnp.array([[0.5]]), jnp.array([[0.2]]), jnp.array([[1.0]]),
        output_level=jnp.array([5.0]),
    )  # fmt: skip
    comparison = dynsys.compare(model, data)
    (line,) = assumptions.flat_output_lines(comparison, "held-out")
    e = np.asarray(comparison.measured - comparison.predicted)[0, :, 0]
    spread = np.std(y[0, :, 0])
    rms = np.sqrt(np.mean(e**2))
    fit = float(np.asarray(comparison.fit_percent)[0])
    assert fit < assumptions.FLAT_FIT
    np.testing.assert_allclose(fit, 100 * (1 - rms / spread), rtol=1e-6)
    assert f"RMS error of {rms:.4g}" in line and f"(RMS {spread:.4g} about" in line
    assert f"held-out fit % of pH is {fit:.1f}" in line


def test_a_neural_model_worse_than_the_linear_one_is_said():
    linear, neural = ([-220.5], [0.667]), ([-257.7], [0.744])
    (line,) = assumptions.worse_neural_lines(["pH"], linear, neural)
    assert "worse than the linear one (pH RMS 0.744 against 0.667)" in line
    assert assumptions.worse_neural_lines(["pH"], neural, linear) == []


def test_a_neural_fit_at_its_step_cap_has_a_stop_reason():
    at_cap = types.SimpleNamespace(stop_reason=None, steps_run=200)
    assert _stop_reason(at_cap, {"num_steps": 200}).startswith("maximum steps reached")
    early = types.SimpleNamespace(stop_reason=None, steps_run=120)
    assert _stop_reason(early, {"num_steps": 200}) is None
    stopped = types.SimpleNamespace(stop_reason="held-out loss flat", steps_run=120)
    assert _stop_reason(stopped, {"num_steps": 200}) == "held-out loss flat"


def test_distinct_digits_tell_two_close_levels_apart():
    assert assumptions.distinct_digits(143.56, 143.58) == ("143.56", "143.58")
    assert assumptions.distinct_digits(6.558, 6.558) == ("6.558", "6.558")
    assert assumptions.distinct_digits(142.3, 143.6) == ("142.3", "143.6")
