"""`FitObjective.num_residuals` counts the residual vector without tracing it:
Levenberg–Marquardt sizes its state by the count, so the count must equal the length
of the traced residuals for every loss, data kind and initial-state mode."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._fitting.fit import _batch, _initial_x0s, _objective
from dynsys._fitting.levenberg_marquardt import _residual_struct


T, n, m, p = 12, 2, 1, 2


def _linear():
    K = jnp.array([[0.8, 0.1], [-0.2, 0.7]])
    return dynsys.LinearSystem(K, B=jnp.ones((n, m)), C=jnp.eye(p, n))


def _innovation():
    linear = _linear()
    return dynsys.InnovationSystem(
        linear.K, linear.B, linear.C, kalman_gain=0.1 * jnp.ones((n, p))
    )


def _neural():
    return dynsys.NeuralStateSpace(
        _linear(), width_size=4, depth=2, key=jax.random.key(0)
    )


def _output_data(lengths):
    rng = np.random.default_rng(0)
    ys = [rng.standard_normal((k, p)) for k in lengths]
    us = [rng.standard_normal((k, m)) for k in lengths]
    return dynsys.Dataset(us=us, ys=ys)


def _state_data(lengths):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((k + 1, n)) for k in lengths]
    us = [rng.standard_normal((k, m)) for k in lengths]
    return dynsys.Dataset(xs, us)


CASES = {
    "outputs, closed-form x0": (_linear, _output_data, "simulation", False),
    "outputs, shooting windows": (
        _linear,
        _output_data,
        dynsys.MultipleShooting(horizon=4, stride=3),
        False,
    ),
    "outputs, prediction error": (
        _innovation,
        _output_data,
        dynsys._fitting.losses.PredictionError(horizon=2),
        False,
    ),
    "outputs, trained x0": (_neural, _output_data, "simulation", False),
    "outputs, trained x0 per window": (
        _neural,
        _output_data,
        dynsys.MultipleShooting(horizon=5),
        False,
    ),
    "states, measured x0": (_linear, _state_data, "simulation", False),
    "states, fitted x0": (_linear, _state_data, "simulation", True),
    "states, one step": (_linear, _state_data, "one_step", False),
    "states, fitted x0 per window": (
        _linear,
        _state_data,
        dynsys.MultipleShooting(horizon=4),
        True,
    ),
}


@pytest.mark.parametrize("lengths", [(T, T), (T, T - 3)], ids=["equal", "ragged"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_counted_residuals_are_the_traced_ones(case, lengths):
    make_model, make_data, loss, fit_x0 = CASES[case]
    model, data = make_model(), make_data(lengths)
    objective = _objective(loss, data, model, fit_x0, dynsys.Sequential(), None)
    params = (model, _initial_x0s(objective, loss, data, model))
    batch = _batch(data, jnp.result_type(float))
    traced = jax.eval_shape(objective.residuals, params, batch)
    counted = _residual_struct(objective, params, None, batch)
    assert counted.shape == traced.shape
    assert counted.dtype == traced.dtype
