"""The change-of-basis (gauge) directions of a linear model and Levenberg–Marquardt's
gauge-free steps: the tangents against a finite-difference similarity transform,
the Jacobian's null space by finite differences, the gauge-free step against the
step on all parameters, and fits against optimistix's Levenberg–Marquardt."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest
from jax.flatten_util import ravel_pytree

import dynsys
from dynsys._fitting.fit import _batch, _objective
from dynsys._fitting.gauge import complement_basis, similarity_tangents, step_basis
from dynsys._fitting.levenberg_marquardt import factorise


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _lightly_damped(n, seed, m=1, p=1):
    """Rotations with radii in [0.95, 0.99] in a random basis."""
    rng = np.random.default_rng(seed)
    K = np.zeros((n, n))
    for i in range(n // 2):
        radius, angle = rng.uniform(0.95, 0.99), rng.uniform(0.1, 1.2)
        K[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = radius * np.array(
            [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
        )
    S = np.eye(n) + rng.normal(size=(n, n)) / np.sqrt(n)
    return dynsys.LinearSystem(
        S @ K @ np.linalg.inv(S), rng.normal(size=(n, m)), rng.normal(size=(p, n))
    )


def _noisy_outputs(true, N, T, seed, noise=0.1):
    n, m = true.state_size, true.input_size
    k1, k2 = jax.random.split(jax.random.key(seed))
    clean = dynsys.simulate(
        true,
        jax.random.normal(k1, (N, n)),
        T,
        inputs=jax.random.normal(k2, (N, T, m)),
    )
    ys = np.asarray(clean.ys)
    ys = ys + noise * ys.std() * np.random.default_rng(seed).normal(size=ys.shape)
    return dynsys.Dataset(us=clean.us, ys=ys)


def _residual_function(model, data):
    """The output-error residuals `fit` minimises, as a function of the flat
    parameters, with the flat start and its pytree parts."""
    objective = _objective("simulation", data, model, False, None, None)
    batch = _batch(data, jnp.float64)
    params = (eqx.partition(model, eqx.is_inexact_array)[0], None)
    static = (eqx.partition(model, eqx.is_inexact_array)[1], None)
    flat, unravel = ravel_pytree(params)

    def residuals(theta):
        return objective.residuals(eqx.combine(unravel(theta), static), batch)

    return jax.jit(residuals), flat, params, static


def _perturbed(model, seed, size=0.05):
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda a: a + size * rng.normal(size=a.shape) if eqx.is_array(a) else a, model
    )


def test_tangents_are_the_derivative_of_a_similarity_transform():
    """Column `i n + j` is d/de of (T K T^-1, T B, C T^-1, D, T offset) at
    T = I + e E_ij, by central differences of the transform itself."""
    rng = np.random.default_rng(0)
    n, m, p = 3, 2, 2
    model = dynsys.LinearSystem(
        *(rng.normal(size=s) for s in [(n, n), (n, m), (p, n), (p, m), (n,)])
    )
    params = (eqx.partition(model, eqx.is_inexact_array)[0], None)
    static = (eqx.partition(model, eqx.is_inexact_array)[1], None)
    tangents = np.asarray(similarity_tangents(params, static))
    K, B, C, D, offset = (
        np.asarray(a) for a in (model.K, model.B, model.C, model.D, model.offset)
    )

    def flat_transform(T):
        Ti = np.linalg.inv(T)
        return np.concatenate(
            [
                (T @ K @ Ti).ravel(),
                (T @ B).ravel(),
                (C @ Ti).ravel(),
                D.ravel(),
                (T @ offset).ravel(),
            ]
        )

    # ravel_pytree orders the leaves as the module's fields: K, B, C, D, offset.
    h = 1e-6
    for i in range(n):
        for j in range(n):
            E = np.zeros((n, n))
            E[i, j] = 1.0
            expected = (
                flat_transform(np.eye(n) + h * E) - flat_transform(np.eye(n) - h * E)
            ) / (2 * h)
            np.testing.assert_allclose(tangents[:, i * n + j], expected, atol=1e-8)


def test_tangents_are_in_the_jacobians_null_space():
    """Finite differences of the output-error residuals along each gauge tangent
    are round-off compared with those along the parameters themselves."""
    true = _lightly_damped(4, seed=2, m=1, p=2)
    data = _noisy_outputs(true, N=2, T=60, seed=2)
    model = _perturbed(dynsys.fit_subspace(data, 4), seed=2)
    residuals, flat, params, static = _residual_function(model, data)
    tangents = np.asarray(similarity_tangents(params, static))
    assert tangents.shape == (flat.size, 16)

    def difference(direction, h=1e-6):
        direction = jnp.asarray(direction / np.linalg.norm(direction))
        return np.asarray(
            residuals(flat + h * direction) - residuals(flat - h * direction)
        ) / (2 * h)

    parameter_scale = np.median(
        [np.linalg.norm(difference(e)) for e in np.eye(flat.size)]
    )
    along_gauge = max(np.linalg.norm(difference(t)) for t in tangents.T)
    assert parameter_scale > 1e-2
    assert along_gauge < 1e-6 * parameter_scale, (along_gauge, parameter_scale)


def test_complement_basis_is_orthonormal_and_orthogonal_to_the_tangents():
    rng = np.random.default_rng(1)
    tangents = jnp.asarray(rng.normal(size=(12, 4)))
    basis = np.asarray(complement_basis(tangents))
    assert basis.shape == (12, 8)
    np.testing.assert_allclose(basis.T @ basis, np.eye(8), atol=1e-12)
    np.testing.assert_allclose(basis.T @ np.asarray(tangents), 0.0, atol=1e-12)


@pytest.mark.parametrize("damping", [1e-4, 1e-2, 1.0])
def test_gauge_free_step_has_the_full_steps_predicted_reduction(damping):
    """On an identifiable (minimal, observable) model away from the optimum, the
    step on the P - n^2 gauge-free directions equals the step on all P parameters
    (Jacobian by jacfwd), and so does its predicted reduction."""
    true = _lightly_damped(4, seed=3, m=2, p=2)
    data = _noisy_outputs(true, N=2, T=60, seed=3)
    model = _perturbed(dynsys.fit_subspace(data, 4), seed=3)
    residuals, flat, params, static = _residual_function(model, data)
    r = residuals(flat)
    full_jac = jax.jacfwd(residuals)(flat)
    basis = step_basis(params, static)
    assert basis.shape == (flat.size, flat.size - 16)
    reduced_jac = jax.vmap(lambda v: jax.jvp(residuals, (flat,), (v,))[1], out_axes=1)(
        basis.T
    )
    scale = jnp.zeros(flat.size)
    full, full_scale = factorise(full_jac, r, None, scale, True)
    free, free_scale = factorise(reduced_jac, r, basis, scale, True)
    np.testing.assert_allclose(free_scale, full_scale, rtol=1e-6)
    lam = jnp.asarray(damping)
    np.testing.assert_allclose(
        free.predicted_change(lam), full.predicted_change(lam), rtol=1e-6
    )
    np.testing.assert_allclose(free.step(lam), full.step(lam), rtol=1e-5, atol=1e-9)
    # Nothing along the tangents in the damping's metric diag(d): the family is
    # removed from the step, not just from the Jacobian.
    tangents = np.asarray(similarity_tangents(params, static))
    moved = np.asarray(free_scale) * np.asarray(free.step(lam))
    size = np.linalg.norm(tangents, axis=0) * np.linalg.norm(moved)
    np.testing.assert_array_less(np.abs(tangents.T @ moved), 1e-8 * size)
    assert float(free.predicted_change(lam)) < 0


def test_no_gauge_when_the_family_is_not_trainable():
    """State data (no closed-form initial states), or a frozen C: all directions."""
    model = _lightly_damped(2, seed=0)
    params = (eqx.partition(model, eqx.is_inexact_array)[0], None)
    static = (eqx.partition(model, eqx.is_inexact_array)[1], None)
    assert step_basis(params, static) is not None
    frozen_c = eqx.tree_at(lambda s: s[0].C, params, None, is_leaf=lambda x: x is None)
    assert step_basis(frozen_c, static) is None
    assert step_basis((params[0], jnp.zeros((1, 2))), static) is None


def _optimistix_loss(model, data, max_steps=200):
    """The loss optimistix's Levenberg–Marquardt (fit's solver before the scaled,
    gauge-free one) reaches from `model` in `max_steps` steps, and its steps."""
    residuals, flat, params, static = _residual_function(model, data)
    solution = optx.least_squares(
        lambda theta, _: residuals(theta),
        optx.LevenbergMarquardt(rtol=1e-8, atol=1e-10),
        flat,
        max_steps=max_steps,
        throw=False,
    )
    return float(jnp.sum(residuals(solution.value) ** 2)), int(
        solution.stats["num_steps"]
    )


@pytest.mark.slow
def test_lightly_damped_order_six_converges_sooner_and_as_low():
    """A lightly damped order-6 system, noisy outputs, from the subspace estimate:
    the default fit stops by its tolerance in at most 30 steps, at a loss no higher
    than optimistix's Levenberg–Marquardt reaches (which needs more than twice as
    many steps)."""
    true = _lightly_damped(6, seed=1)
    data = _noisy_outputs(true, N=2, T=200, seed=1)
    start = dynsys.fit_subspace(data, 6)
    result = dynsys.fit(start, data, progress=False)
    reference, reference_steps = _optimistix_loss(start, data)
    assert result.converged and result.stop_reason is None
    assert result.steps_run <= 30, result.steps_run
    assert 2 * result.steps_run < reference_steps
    assert float(np.min(result.losses)) <= reference * (1 + 1e-9)
