"""Levenberg–Marquardt's second model (NL2SOL's): the Dennis–Gay–Welsch secant
update against its defining equations, the factorisation of an indefinite model
against numpy's solve of the damped normal equations, and fits with and without the
switching against scipy's least-squares optimum on a real record whose residuals
stay large at the optimum."""

import functools
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax.flatten_util import ravel_pytree

import dynsys
import dynsys._fitting.solvers as solvers
from dynsys._fitting.fit import _batch, _objective
from dynsys._fitting.levenberg_marquardt import (
    factorise_model,
    factorise_normal,
    LevenbergMarquardt,
)
from dynsys._fitting.secant import update_secant


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _symmetric(rng, n):
    a = rng.normal(size=(n, n))
    return (a + a.T) / 2


def test_secant_update_meets_the_secant_equation_with_a_rank_two_change():
    rng = np.random.default_rng(0)
    P = 6
    S = _symmetric(rng, P)
    s = rng.normal(size=P)
    jtj = rng.normal(size=(P, P))
    jtj = jtj @ jtj.T
    y = jtj @ s + 0.3 * rng.normal(size=P)
    assert y @ s > 0
    new = np.asarray(update_secant(*map(jnp.asarray, (S, s, y, jtj @ s))))
    target = y - jtj @ s
    np.testing.assert_allclose(new, new.T, atol=1e-12)
    np.testing.assert_allclose(new @ s, target, rtol=1e-10, atol=1e-12)
    # The change from the sized estimate is symmetric of rank two, in the span of
    # y and the sized estimate's error along s.
    sizing = min(1.0, abs(s @ target) / abs(s @ S @ s))
    change = new - sizing * S
    assert np.linalg.matrix_rank(change, tol=1e-9 * np.abs(change).max()) == 2
    span = np.column_stack([y, target - sizing * S @ s])
    projector = span @ np.linalg.pinv(span)
    np.testing.assert_allclose(projector @ change @ projector, change, atol=1e-10)


def test_secant_update_only_sizes_without_curvature_along_the_step():
    rng = np.random.default_rng(1)
    P = 4
    S = _symmetric(rng, P)
    s = rng.normal(size=P)
    y = -s  # y^T s < 0: no curvature information
    jtj_s = 0.1 * rng.normal(size=P)
    new = np.asarray(update_secant(*map(jnp.asarray, (S, s, y, jtj_s))))
    sizing = min(1.0, abs(s @ (y - jtj_s)) / abs(s @ S @ s))
    np.testing.assert_allclose(new, sizing * S, rtol=1e-12)


@pytest.mark.parametrize("with_basis", [False, True])
@pytest.mark.parametrize("damping", [0.05, 1.0])
def test_model_factorisation_solves_the_damped_equations(with_basis, damping):
    """For an indefinite Hessian `H` along an orthonormal basis `B` and damping
    scales `d`, the step is `-(B H B^T + lambda diag(d))^{-1} B g` (where that
    matrix is positive definite) and its predicted change `2 g^T B^T step + step^T B
    H B^T step`."""
    rng = np.random.default_rng(2)
    P, Q = 7, 5 if with_basis else 7
    H = _symmetric(rng, Q) + 2.0 * np.eye(Q)
    g = rng.normal(size=Q)
    basis = np.linalg.qr(rng.normal(size=(P, Q)))[0] if with_basis else None
    d = rng.uniform(0.5, 3.0, size=P)
    factorisation = factorise_model(
        jnp.asarray(H),
        jnp.asarray(g),
        None if basis is None else jnp.asarray(basis),
        jnp.asarray(d),
    )
    B = np.eye(P) if basis is None else basis
    lam = damping - min(0.0, float(np.min(factorisation.curvatures)))
    matrix = B @ H @ B.T + lam * np.diag(d)
    assert np.min(np.linalg.eigvalsh(matrix)) > 0
    expected = -np.linalg.solve(matrix, B @ g)
    step = np.asarray(factorisation.step(jnp.asarray(lam)))
    np.testing.assert_allclose(step, expected, rtol=1e-9, atol=1e-12)
    reduced = B.T @ step
    predicted = 2 * g @ reduced + reduced @ H @ reduced
    np.testing.assert_allclose(
        factorisation.predicted_change(jnp.asarray(lam)), predicted, rtol=1e-9
    )


def test_model_factorisation_of_j_t_j_is_gauss_newtons():
    rng = np.random.default_rng(3)
    R, P = 40, 6
    J = rng.normal(size=(R, P)) * np.array([1e-2, 1.0, 5.0, 0.3, 1.0, 2.0])
    r = rng.normal(size=R)
    gauss_newton, scale = factorise_normal(
        jnp.asarray(J.T @ J), jnp.asarray(J.T @ r), None, jnp.zeros(P)
    )
    model = factorise_model(jnp.asarray(J.T @ J), jnp.asarray(J.T @ r), None, scale)
    for lam in map(jnp.asarray, (1e-4, 1e-1)):
        np.testing.assert_allclose(
            model.step(lam), gauss_newton.step(lam), rtol=1e-8, atol=1e-12
        )
        np.testing.assert_allclose(
            model.predicted_change(lam), gauss_newton.predicted_change(lam), rtol=1e-9
        )


def _dryer_estimation_data():
    """The first two thirds of the dryer record, means removed: at order 3 its
    residuals stay large at the optimum (a real plant, undermodelled and noisy)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "data/real/dryer.csv"
    data = dynsys.load_dataset(
        path,
        inputs=["fuel_flow", "fan_speed", "material_flow"],
        outputs=["dry_bulb_temp", "wet_bulb_temp", "moisture"],
    )
    data, _ = dynsys.detrend(data)
    us, ys = np.asarray(data.us), np.asarray(data.ys)
    T = 2 * us.shape[1] // 3
    return dynsys.Dataset(us=us[:, :T], ys=ys[:, :T])


def test_switching_reaches_scipys_optimum_in_fewer_steps(monkeypatch):
    data = _dryer_estimation_data()
    start = dynsys.fit_subspace(data, order=3)
    switching = dynsys.fit(start, data, progress=False)
    monkeypatch.setattr(
        solvers,
        "LevenbergMarquardt",
        functools.partial(LevenbergMarquardt, secant=False),
    )
    gauss_newton = dynsys.fit(start, data, progress=False)
    assert switching.converged and gauss_newton.converged

    # The independent reference: scipy's trust-region least squares on the same
    # residuals (the loss of `fit` is their sum of squares), from the same start.
    objective = _objective("simulation", data, start, False, None, None)
    batch = _batch(data, jnp.float64)
    params, static = eqx.partition((start, None), eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)

    def residuals(point):
        return objective.residuals(eqx.combine(unravel(point), static), batch)

    reference = scipy.optimize.least_squares(
        jax.jit(residuals),
        np.asarray(flat),
        jac=jax.jit(jax.jacfwd(residuals)),
        method="trf",
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
        max_nfev=2000,
    )
    optimum = float(np.sum(reference.fun**2))
    for result in (switching, gauss_newton):
        assert float(np.min(result.losses)) == pytest.approx(optimum, rel=1e-9)
    # 26 steps against 52 when written.
    assert switching.steps_run < 0.75 * gauss_newton.steps_run
