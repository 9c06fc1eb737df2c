"""Levenberg–Marquardt for large models: J^T J and J^T r accumulated over groups of
experiments equal the full Jacobian's (to round-off), the fit through groups takes
the same steps as the fit through the whole Jacobian, and the default optimiser
picks groups only where the whole Jacobian would be too large."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import dynsys
import dynsys._fitting.solvers as solvers
from dynsys._fitting.fit import _batch, _objective
from dynsys._fitting.levenberg_marquardt import LevenbergMarquardt


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _data(N=8, T=60, n=3, m=2, p=2, seed=0):
    rng = np.random.default_rng(seed)
    true = dynsys.LinearSystem(
        np.diag([0.9, 0.7, -0.5]), rng.normal(size=(n, m)), rng.normal(size=(p, n))
    )
    us = rng.normal(size=(N, T, m))
    clean = dynsys.simulate(true, rng.normal(size=(N, n)), T, inputs=us)
    ys = np.asarray(clean.ys) + 0.05 * rng.normal(size=(N, T, p))
    return true, dynsys.Dataset(us=us, ys=ys)


def test_grouped_normal_equations_equal_the_whole_jacobians():
    true, data = _data()
    # A generic (observable, controllable) start away from the optimum.
    rng = np.random.default_rng(5)
    start = dynsys.LinearSystem(
        np.diag([0.8, 0.5, -0.3]) + 0.05 * rng.normal(size=(3, 3)),
        rng.normal(size=(3, 2)),
        rng.normal(size=(2, 3)),
    )
    objective = _objective("simulation", data, start, False, None, None)
    batch = _batch(data, jnp.float64)
    params, static = eqx.partition((start, None), eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)

    def residuals(point):
        return objective.residuals(eqx.combine(unravel(point), static), batch)

    jac = jax.jacfwd(residuals)(flat)  # (R, P), the reference
    residual = residuals(flat)
    state = type("State", (), {"scale": jnp.zeros(flat.size)})()
    # (QR of the whole Jacobian: `_factorise` takes a resolved solver's choice.)
    whole = LevenbergMarquardt(1e-8, 1e-10, normal_equations=False)
    grouped = LevenbergMarquardt(1e-8, 1e-10, blocks=4)
    reference, _ = whole._factorise(residuals, flat, residual, None, state)
    blocked, _ = grouped._factorise_blocks(
        objective, unravel, static, flat, None, state, batch
    )
    # The factorisations' products (not their eigenvector signs) must agree, to
    # round-off times the condition of the damped normal equations (1e-6: ~1e5).
    for damping in map(jnp.asarray, (1e-6, 1e-2, 1.0)):
        np.testing.assert_allclose(
            blocked.step(damping), reference.step(damping), rtol=1e-7, atol=1e-10
        )
        np.testing.assert_allclose(
            blocked.predicted_change(damping),
            reference.predicted_change(damping),
            rtol=1e-9,
        )
    # And the step is the damped least-squares solution of the explicit Jacobian.
    damping = 1e-2
    scale = jnp.sum(jac**2, axis=0)
    step = -np.linalg.solve(jac.T @ jac + damping * np.diag(scale), jac.T @ residual)
    # (a solve of the normal equations: its accuracy is their condition times eps)
    np.testing.assert_allclose(
        blocked.step(jnp.asarray(damping)), step, rtol=1e-7, atol=1e-10
    )


def test_fit_through_groups_takes_the_same_steps(monkeypatch):
    true, data = _data(seed=1)
    start = dynsys.fit_subspace(data, order=3)
    whole = dynsys.fit(start, data, progress=False)
    # Force the grouped path: no model counts as small, and one experiment's
    # Jacobian is the most a group may hold.
    monkeypatch.setattr(solvers, "PARAMETER_LIMIT", 0)
    monkeypatch.setattr(solvers, "JACOBIAN_LIMIT", 60 * 2 * 40)
    grouped = dynsys.fit(start, data, progress=False)
    assert grouped.steps_run == whole.steps_run
    np.testing.assert_allclose(grouped.losses, whole.losses, rtol=1e-7)
    np.testing.assert_allclose(grouped.model.K, whole.model.K, rtol=1e-6, atol=1e-9)


def test_default_optimiser_groups_experiments_only_when_needed():
    f64 = jnp.float64
    strategy, kind = solvers.default_strategy(10_000, 100, f64, num_experiments=10)
    assert kind == "lm" and strategy.blocks == 1
    # 460 parameters (a 20-state, 3-input model on states), 48 experiments of 500
    # steps of 20 states: the whole Jacobian has 2.2e8 entries.
    R, P = 48 * 500 * 20, 460
    strategy, kind = solvers.default_strategy(R, P, f64, num_experiments=48)
    assert kind == "lm" and strategy.blocks > 1
    assert (R // strategy.blocks) * P <= solvers.JACOBIAN_LIMIT
    assert (R // (strategy.blocks - 1)) * P > solvers.JACOBIAN_LIMIT or (
        48 % (strategy.blocks - 1) != 0
    )
    # float32 keeps the QR (no normal equations): L-BFGS past the limits.
    _, kind = solvers.default_strategy(R, P, jnp.float32, num_experiments=48)
    assert kind == "lbfgs"
    # One experiment too long for a group of one: L-BFGS.
    _, kind = solvers.default_strategy(R, P, f64, num_experiments=1)
    assert kind == "lbfgs"
