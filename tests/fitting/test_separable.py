"""Separable least squares (`separable.py`): the eliminated `B`, `D` and output
level against a least-squares solve over explicitly simulated regressors (a plain
Python loop), its outputs against `closed_form` on the eliminated model, the
directions of its steps, Kaufman's Jacobian against the eliminated loss's gradient
by finite differences, and separable fits against the default one."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import dynsys
from dynsys._fitting import (
    levenberg_marquardt as lm_module,
    losses as losses_module,
)
from dynsys._fitting.gauge import similarity_tangents
from dynsys._fitting.initial_states import closed_form, FreeRun
from dynsys._fitting.separable import (
    eliminate,
    linear_directions,
    outputs,
    projected_jacobian,
    step_basis,
)


def _problem(feedthrough: bool, seed=0):
    """A 3-state, 2-input, 2-output model with an operating point, and 2
    experiments of 40 steps, the second padded after 30 (zeros there)."""
    rng = np.random.default_rng(seed)
    n, m, p, N, T = 3, 2, 2, 2, 40
    K = np.diag([0.9, 0.5, -0.3]) + 0.1 * rng.normal(size=(n, n))
    model = dynsys.LinearSystem(
        K=jnp.asarray(K),
        B=jnp.asarray(rng.normal(size=(n, m))),
        C=jnp.asarray(rng.normal(size=(p, n))),
        D=jnp.zeros((p, m)) if feedthrough else None,
        input_level=jnp.asarray([0.3, -0.2]),
        output_level=jnp.zeros(p),
    )
    mask = np.ones((N, T), bool)
    mask[1, 30:] = False
    us = np.where(mask[..., None], rng.normal(size=(N, T, m)), 0.0)
    ys = np.where(mask[..., None], rng.normal(size=(N, T, p)), 0.0)
    weights = jnp.asarray([2.0, 0.5])
    return model, jnp.asarray(ys), jnp.asarray(us), jnp.asarray(mask), weights


def _loop_outputs(model, B, D, level, x0s, us):
    """The model's outputs with `B`, `D`, `level` and initial states `x0s`, by a
    plain Python loop: `(N, T, p)`."""
    K, C = np.asarray(model.K), np.asarray(model.C)
    u_level = np.asarray(model.input_level)
    N, T, _ = us.shape
    out = np.zeros((N, T, C.shape[0]))
    for i in range(N):
        x = x0s[i]
        for t in range(T):
            du = np.asarray(us[i, t]) - u_level
            out[i, t] = C @ x + (0 if D is None else D @ du) + level
            x = K @ x + B @ du
    return out


@pytest.mark.parametrize("feedthrough", [False, True])
def test_eliminated_parts_are_the_least_squares_solution(feedthrough):
    model, ys, us, mask, weights = _problem(feedthrough)
    n, (p, m), N = 3, model.D.shape if feedthrough else (2, 2), ys.shape[0]
    sizes = [n * m, p * m if feedthrough else 0, p, N * n]

    def unpack(theta):
        B, D, level, x0s = np.split(theta, np.cumsum(sizes)[:-1])
        D = D.reshape(p, m) if feedthrough else None
        return B.reshape(n, m), D, level, x0s.reshape(N, n)

    # The outputs are linear in (B, D, level, x0s): simulate each unit vector.
    unit = np.eye(sum(sizes))
    columns = np.stack(
        [_loop_outputs(model, *unpack(e), us).reshape(-1) for e in unit], axis=1
    )
    rows = np.sqrt(np.asarray(weights))[None, None] * np.asarray(mask)[..., None]
    rows = rows.reshape(-1)
    theta = np.linalg.lstsq(
        columns * rows[:, None], np.asarray(ys).reshape(-1) * rows, rcond=None
    )[0]
    B, D, level, x0s = unpack(theta)

    solved = eliminate(model, ys, us, mask, weights)
    np.testing.assert_allclose(solved.B, B, atol=1e-10)
    np.testing.assert_allclose(solved.output_level, level, atol=1e-10)
    if feedthrough:
        np.testing.assert_allclose(solved.D, D, atol=1e-10)
    np.testing.assert_array_equal(solved.K, model.K)
    np.testing.assert_array_equal(solved.C, model.C)

    predicted, initial = outputs(model, ys, us, mask, weights)
    np.testing.assert_allclose(initial, x0s, atol=1e-9)
    expected = _loop_outputs(model, B, D, level, x0s, us)
    valid = np.asarray(mask)[..., None]
    np.testing.assert_allclose(
        np.where(valid, predicted, 0), np.where(valid, expected, 0), atol=1e-9
    )
    assert np.all(np.asarray(predicted)[~np.asarray(mask)] == 0)


def test_outputs_are_closed_form_of_the_eliminated_model():
    model, ys, us, mask, weights = _problem(True, seed=1)

    def simulate(model, x0, num_steps, inputs):
        return dynsys.rollout(model, x0, num_steps, inputs=inputs).ys

    solved = eliminate(model, ys, us, mask, weights)
    expected, x0s = closed_form(FreeRun(simulate), solved, ys, us, mask, weights)
    predicted, initial = outputs(model, ys, us, mask, weights)
    valid = np.asarray(mask)[..., None]
    np.testing.assert_allclose(
        np.where(valid, predicted, 0), np.where(valid, expected, 0), atol=1e-10
    )
    np.testing.assert_allclose(initial, x0s, atol=1e-9)


def test_steps_move_K_and_C_off_the_change_of_basis_family():
    model = _problem(True)[0]
    params, static = eqx.partition((model, None), eqx.is_inexact_array)
    basis = np.asarray(step_basis(params, static))
    n, p = 3, 2
    assert basis.shape == (sum(x.size for x in jax.tree.leaves(params)), n * p)
    np.testing.assert_allclose(basis.T @ basis, np.eye(n * p), atol=1e-12)
    # Zero on everything but K and C, and orthogonal there to the tangents.
    unravel = ravel_pytree(params)[1]
    for column in basis.T:
        moved = unravel(jnp.asarray(column))[0]
        for name in ("B", "D", "input_level", "output_level"):
            assert np.all(np.asarray(getattr(moved, name)) == 0)
    tangents = np.asarray(similarity_tangents(params, static))
    k_and_c = np.zeros(basis.shape[0], bool)
    k_and_c[: n * n] = True  # K's entries come first in the raveled model
    leaves = jax.tree.leaves(params)
    offset = sum(leaf.size for leaf in leaves[:2])  # K, B
    k_and_c[offset : offset + p * n] = True  # then C
    np.testing.assert_allclose(basis.T @ (tangents * k_and_c[:, None]), 0, atol=1e-12)


def test_linear_directions_are_the_unit_vectors_of_B_D_and_the_output_level():
    model = _problem(True)[0]
    params = eqx.partition((model, None), eqx.is_inexact_array)[0]
    directions = np.asarray(linear_directions(params))
    unravel = ravel_pytree(params)[1]
    moved = [unravel(jnp.asarray(column))[0] for column in directions.T]
    assert len(moved) == 3 * 2 + 2 * 2 + 2  # B, D, output level
    for name in ("B", "D", "output_level"):
        hits = np.sum([np.asarray(getattr(x, name)) for x in moved], axis=0)
        np.testing.assert_array_equal(hits, 1)  # each entry once
    for name in ("K", "C", "input_level"):
        assert all(np.all(np.asarray(getattr(x, name)) == 0) for x in moved)


def test_kaufman_jacobian_gives_the_eliminated_losss_gradient():
    """Kaufman's Jacobian is the full residuals' derivatives along `K` and `C`
    less their least-squares fit (numpy's) by those along `B`, `D` and the level;
    at a model whose linear parts are the least-squares ones, it times the
    residuals is the gradient of the eliminated loss (Kaufman 1975): checked
    against central differences of `outputs`, which eliminates at every
    `(K, C)`."""
    model, ys, us, mask, weights = _problem(True, seed=2)
    model = eliminate(model, ys, us, mask, weights)
    root = np.sqrt(np.asarray(weights))[None, None, :]
    valid = np.asarray(mask)[..., None]

    def simulate(model, x0, num_steps, inputs):
        return dynsys.rollout(model, x0, num_steps, inputs=inputs).ys

    def full_residuals(model):
        predicted = closed_form(FreeRun(simulate), model, ys, us, mask, weights)[0]
        return (jnp.where(valid, predicted - ys, 0.0) * root).reshape(-1)

    def eliminated_loss(model):
        predicted = outputs(model, ys, us, mask, weights)[0]
        return np.sum((np.where(valid, predicted - ys, 0.0) * root) ** 2)

    params = (model, None)
    flat, unravel = ravel_pytree(params)
    size = flat.size
    k_and_c = list(range(9)) + list(range(15, 21))  # raveled: K, B, C, ...
    linear = np.nonzero(np.asarray(linear_directions(params)).any(axis=1))[0]

    def derivatives(columns):
        def along(direction):
            point = lambda t: full_residuals(unravel(flat + t * direction)[0])  # noqa: E731
            return jax.jvp(point, (0.0,), (1.0,))[1]

        return jnp.stack([along(jnp.eye(size)[i]) for i in columns], axis=1)

    nonlinear_part, linear_part = derivatives(k_and_c), derivatives(linear)
    jac = projected_jacobian(nonlinear_part, linear_part)
    explained = linear_part @ np.linalg.lstsq(linear_part, nonlinear_part)[0]
    np.testing.assert_allclose(jac, nonlinear_part - explained, atol=1e-9)
    residual = full_residuals(model)
    gradient = 2 * np.asarray(jac.T @ residual)

    h = 1e-6
    expected = []
    for i in k_and_c:
        step = np.eye(size)[i] * h
        up = eliminated_loss(unravel(flat + step)[0])
        down = eliminated_loss(unravel(flat - step)[0])
        expected.append((up - down) / (2 * h))
    np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-7)


def _lightly_damped_fit_data():
    """Noisy data of a lightly damped 4-state, 2-input, 2-output system with
    feedthrough, and the subspace start."""
    key = jax.random.key(3)
    angle = 0.3
    rotation = jnp.array(
        [[jnp.cos(angle), -jnp.sin(angle)], [jnp.sin(angle), jnp.cos(angle)]]
    )
    K = jax.scipy.linalg.block_diag(
        0.97 * rotation, jnp.array([[0.8, 0.1], [0.0, 0.5]])
    )
    true = dynsys.LinearSystem(
        K=K,
        B=jax.random.normal(jax.random.fold_in(key, 1), (4, 2)),
        C=jax.random.normal(jax.random.fold_in(key, 2), (2, 4)),
        D=jnp.array([[0.5, 0.0], [0.0, -0.2]]),
    )
    us = jax.random.normal(jax.random.fold_in(key, 3), (2, 300, 2))
    noisy = dynsys.simulate(
        true,
        jnp.zeros((2, 4)),
        300,
        inputs=us,
        measurement_noise=0.05,
        key=jax.random.fold_in(key, 4),
    )
    data = dynsys.Dataset(us=noisy.us, ys=noisy.ys)
    return data, dynsys.fit_subspace(data, 4, feedthrough=True)


@pytest.mark.usefixtures("no_persistent_cache")  # the spy sees only a traced fit
@pytest.mark.parametrize("mode", ["exact", "kaufman"])
def test_separable_fit_reaches_the_default_fits_minimum(monkeypatch, mode):
    """On noisy data of a lightly damped 4-state system, the fit with `B`, `D` and
    the output level eliminated (with the eliminated problem's derivative, or
    Kaufman's) ends at the default fit's loss, with a model whose linear parts are
    the least-squares ones at its `K` and `C`."""
    data, start = _lightly_damped_fit_data()
    default = dynsys.fit(start, data, progress=False)
    traced = []

    def spy(function):
        def spied(*args):
            traced.append(True)
            return function(*args)

        return spied

    # What each mode uses that the other does not.
    if mode == "exact":
        monkeypatch.setattr(losses_module, "separable_outputs", spy(outputs))
    else:
        monkeypatch.setattr(lm_module, "projected_jacobian", spy(projected_jacobian))
    solver = dynsys.LevenbergMarquardt(separable=mode)
    separable = dynsys.fit(start, data, solver=solver, progress=False)
    assert traced

    assert separable.converged and default.converged
    np.testing.assert_allclose(
        np.min(separable.losses), np.min(default.losses), rtol=1e-7
    )
    ys, us_, mask = data.ys, data.us, jnp.ones(data.ys.shape[:2], bool)
    weights = 1 / jnp.var(data.ys, axis=(0, 1))
    solved = eliminate(separable.model, ys, us_, mask, weights)
    np.testing.assert_allclose(solved.B, separable.model.B, atol=1e-9)
    np.testing.assert_allclose(solved.D, separable.model.D, atol=1e-9)


def test_an_unknown_separable_mode_is_refused():
    with pytest.raises(
        ValueError, match=r"LevenbergMarquardt\(separable=...\): expected None, 'exact'"
    ):
        dynsys.LevenbergMarquardt(separable=True)
