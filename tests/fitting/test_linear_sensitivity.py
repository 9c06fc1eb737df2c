"""The host-side derivatives of a `LinearSystem`'s free run
(`_fitting/linear_sensitivity.py`) and the covariance built from them, against
the JAX programs they replace (`jax.jacfwd` of the rollout, of `compare`, of the
fit's residuals) on small random stable systems with levels, an offset, ragged
experiments and only part of the model trained."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
import dynsys.models as zoo
from dynsys._fitting import covariance as covariance_module
from dynsys._fitting.covariance import fit_covariance, ParameterCovariance, trained_mask
from dynsys._fitting.linear_sensitivity import (
    closed_form_run,
    linear_parameters,
    outputs,
    run_derivative,
    states,
)
from dynsys._fitting.losses import channel_weights, FitObjective
from dynsys._sysid import host_response


N, T, n, p, m = 2, 40, 3, 2, 2


def _system(seed=0, **levels):
    rng = np.random.default_rng(seed)
    K = rng.standard_normal((n, n))
    K *= 0.85 / np.max(np.abs(np.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K,
        rng.standard_normal((n, m)),
        rng.standard_normal((p, n)),
        rng.standard_normal((p, m)),
        **levels,
    )


def _levels(seed=1):
    rng = np.random.default_rng(seed)
    return dict(
        offset=rng.standard_normal(n),
        input_level=rng.standard_normal(m),
        output_level=rng.standard_normal(p),
    )


def _flat(model, trained):
    params, static = eqx.partition(model, trained)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    return flat, lambda v: eqx.combine(unravel(v), static)


# Everything trained; and only K, C and the output level (`D`, `B`, the offset and
# the input level fixed): the columns follow the trained leaves only.
SPECS = {
    "all": lambda model: trained_mask(model, eqx.is_inexact_array),
    "part": lambda model: trained_mask(
        model,
        eqx.tree_at(
            lambda s: (s.K, s.B, s.C, s.D, s.offset, s.input_level, s.output_level),
            jax.tree.map(lambda _: False, model),
            (True, False, True, False, False, False, True),
        ),
    ),
}


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_free_run_and_its_derivative_equal_the_rollouts_jacfwd(spec):
    model = _system(**_levels())
    trained = SPECS[spec](model)
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((N, n))
    us = rng.standard_normal((N, T, m))
    values, derivatives = linear_parameters(model, trained)
    xs = states(values, x0, us, T)
    flat, rebuild = _flat(model, trained)

    def run(vector):
        return dynsys.rollout(rebuild(vector), jnp.asarray(x0), T, inputs=us).ys

    np.testing.assert_allclose(outputs(values, xs, us), run(flat), rtol=1e-12)
    expected = np.asarray(jax.jacfwd(run)(flat))
    every = n * n + n * m + p * n + p * m + n + m + p
    assert derivatives.K.shape[-1] == flat.size == (
        every if spec == "all" else n * n + p * n + p
    )
    np.testing.assert_allclose(
        run_derivative(values, derivatives, xs, us), expected, rtol=1e-10, atol=1e-12
    )


def test_compare_free_run_derivative_equals_jacfwd_of_compare():
    """Least-squares initial states on ragged experiments (`compare`'s, by a
    pseudo-inverse): the derivative with the states' own, on the valid steps."""
    model = _system(**_levels())
    trained = SPECS["all"](model)
    rng = np.random.default_rng(3)
    lengths = [T, 27]
    us = rng.standard_normal((N, T, m))
    ys = rng.standard_normal((N, T, p))
    for i, length in enumerate(lengths):
        us[i, length:] = ys[i, length:] = 0.0
    data = dynsys.Dataset(us=us, ys=ys, lengths=lengths)
    mask = np.arange(T)[None] < np.array(lengths)[:, None]
    values, derivatives = linear_parameters(model, trained)
    run = closed_form_run(values, derivatives, ys, us, mask, np.ones(p), ridge=False)
    flat, rebuild = _flat(model, trained)
    expected = np.asarray(
        jax.jacfwd(lambda v: dynsys.compare(rebuild(v), data).predicted)(flat)
    )
    predicted = np.asarray(dynsys.compare(model, data).predicted)
    valid = mask[..., None]
    np.testing.assert_allclose(
        np.where(valid, run.predicted, 0.0), predicted, atol=1e-10
    )
    np.testing.assert_allclose(
        np.where(valid[..., None], run.derivative, 0.0), expected, rtol=1e-7, atol=1e-9
    )


def _fit_problem(model):
    rng = np.random.default_rng(4)
    ys = jnp.asarray(rng.standard_normal((N, T, p)))
    us = jnp.asarray(rng.standard_normal((N, T, m)))
    mask = jnp.asarray(np.arange(T)[None] < np.array([T, 31])[:, None])
    objective = FitObjective(
        "simulation",
        True,
        "closed_form",
        dynsys.Sequential(),
        None,
        channel_weights(ys, mask),
    )
    batch = {"index": jnp.arange(N), "mask": mask, "ys": ys, "us": us}
    return objective, batch


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_host_covariance_equals_the_compiled_one(spec, monkeypatch):
    """`fit_covariance` of an output-error fit: the host Jacobian (float64 NumPy)
    against the program of `jax.jacfwd` of the fit's residuals it replaces."""
    model = _system(**_levels())
    objective, batch = _fit_problem(model)
    trained = SPECS[spec](model)
    host_jacobian, host_residuals = covariance_module._host_residual_jacobian(
        objective, (model, None), batch, trained
    )
    mask = (trained, trained_mask(None, True))
    jacobian, residuals, _ = covariance_module._residual_jacobian(
        objective, (model, None), batch, mask
    )
    np.testing.assert_allclose(host_residuals, residuals, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(host_jacobian, jacobian, rtol=1e-9, atol=1e-12)

    host, _ = fit_covariance(objective, (model, None), batch, trained, p)
    monkeypatch.setattr(covariance_module, "_host_residual_jacobian", lambda *a: None)
    compiled, _ = fit_covariance(objective, (model, None), batch, trained, p)
    assert host.rank == compiled.rank < host.num_parameters  # the basis freedom
    assert host.num_residuals == compiled.num_residuals == (T + 31) * p
    np.testing.assert_allclose(
        host.channel_variance, compiled.channel_variance, rtol=1e-12
    )
    scale = np.max(np.abs(compiled.matrix))
    np.testing.assert_allclose(host.matrix, compiled.matrix, atol=1e-9 * scale)


def test_other_objectives_take_the_compiled_path():
    model = _system()
    objective, batch = _fit_problem(model)
    fitted_x0 = FitObjective(
        "simulation", True, "trained", dynsys.Sequential(), None, objective.weights
    )
    x0s = jnp.zeros((N, n))
    own = trained_mask(model, eqx.is_inexact_array)
    assert (
        covariance_module._host_residual_jacobian(fitted_x0, (model, x0s), batch, own)
        is None
    )
    assert linear_parameters(zoo.Pendulum(), None) is None


def test_a_stable_model_covariance_and_band_equal_the_compiled_ones(monkeypatch):
    """A `StableLinearSystem` (`K` a function of its parameters): the derivatives
    of its matrices from one kept program, the runs' on the host."""
    model = dynsys.StableLinearSystem.from_linear(_system(**_levels()))
    objective, batch = _fit_problem(model)
    trained = trained_mask(model, eqx.is_inexact_array)
    host, _ = fit_covariance(objective, (model, None), batch, trained, p)
    monkeypatch.setattr(covariance_module, "_host_residual_jacobian", lambda *a: None)
    compiled, _ = fit_covariance(objective, (model, None), batch, trained, p)
    assert host.rank == compiled.rank
    scale = np.max(np.abs(compiled.matrix))
    np.testing.assert_allclose(host.matrix, compiled.matrix, atol=1e-8 * scale)

    from dynsys._sysid.propagate import propagate_std

    data = dynsys.Dataset(us=np.asarray(batch["us"]), ys=np.asarray(batch["ys"]))
    _, std = dynsys.simulation_band(compiled, data)
    expected = propagate_std(
        lambda system: dynsys.compare(system, data).predicted, compiled, model
    )
    np.testing.assert_allclose(std, expected, rtol=1e-7, atol=1e-12)


def test_matrix_sensitivity_equals_jacfwd():
    model = _system(**_levels())
    trained = SPECS["part"](model)
    count = sum(x.size for x in jax.tree.leaves(eqx.filter(model, trained)))
    covariance = ParameterCovariance(
        matrix=np.eye(count),
        model=model,
        trained=trained,
        channel_variance=np.ones(p),
        rank=count,
        num_residuals=100,
    )
    host = host_response.matrix_sensitivity(covariance)
    flat, rebuild = _flat(model, trained)

    def matrices(vector):
        system = rebuild(vector)
        return system.K, system.B, system.C, system.D

    for got, jacobian in zip(host.derivatives, jax.jacfwd(matrices)(flat)):
        np.testing.assert_array_equal(got, jacobian)
    for got, value in zip(host.matrices, matrices(flat)):
        np.testing.assert_array_equal(got, np.asarray(value, np.float64))


def test_simulation_band_on_state_data_equals_the_propagated_one():
    """Data with states (no outputs): `compare` predicts the states, which the
    host path does not model; the band is the propagated one all the same."""
    from dynsys._sysid.propagate import propagate_std

    rng = np.random.default_rng(5)
    model = dynsys.LinearSystem(
        np.array([[0.8, 0.1], [0.0, 0.7]]), rng.standard_normal((2, 1))
    )
    trained = trained_mask(model, eqx.is_inexact_array)
    root = rng.standard_normal((6, 6)) * 0.01
    covariance = ParameterCovariance(
        matrix=root @ root.T,
        model=model,
        trained=trained,
        channel_variance=np.ones(2),
        rank=6,
        num_residuals=60,
    )
    us = rng.standard_normal((1, 30, 1))
    xs = dynsys.rollout(model, jnp.ones((1, 2)), 30, inputs=us).xs
    data = dynsys.Dataset(xs, us)
    _, std = dynsys.simulation_band(covariance, data)
    expected = propagate_std(
        lambda system: dynsys.compare(system, data).predicted, covariance, model
    )
    assert np.all(np.asarray(std)[:, 1:] > 0)
    np.testing.assert_allclose(std, expected, rtol=1e-10, atol=1e-14)


def test_a_diverging_model_gives_the_compiled_paths_reason(monkeypatch):
    """A free run that overflows: no covariance, with the reason the compiled
    path gives, and no warning."""
    model = _system()
    model = dynsys.LinearSystem(1e9 * model.K, model.B, model.C, model.D)
    objective, batch = _fit_problem(model)
    trained = SPECS["all"](model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        host = fit_covariance(objective, (model, None), batch, trained, p)
    monkeypatch.setattr(covariance_module, "_host_residual_jacobian", lambda *a: None)
    compiled = fit_covariance(objective, (model, None), batch, trained, p)
    assert host == compiled == (None, compiled[1]) and "not finite" in compiled[1]
