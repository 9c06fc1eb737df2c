"""Parameter covariance of fits and its propagation to poles, static gains and the
frequency response: checked against a Monte Carlo of repeated fits on simulated
data (200 noise realisations, fitted at once with `jax.vmap`), and for invariance
to a change of state basis."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._fitting import covariance as covariance_module
from dynsys._fitting.covariance import (
    fit_covariance,
    gauss_newton_covariance,
    ParameterCovariance,
)
from dynsys._fitting.losses import channel_weights, FitObjective


NUM_REPS = 200
T = 200
NOISE = 0.3
GAUSS_NEWTON_STEPS = 5
FREQUENCIES = jnp.array([0.1, 0.6, 1.5])


def _true_system():
    radius, angle = 0.85, 0.5
    K = radius * jnp.array(
        [[jnp.cos(angle), -jnp.sin(angle)], [jnp.sin(angle), jnp.cos(angle)]]
    )
    return dynsys.LinearSystem(
        K=K, B=jnp.array([[1.0], [0.3]]), C=jnp.array([[0.6, -0.4]])
    )


def _objective(ys):
    mask = jnp.ones(ys.shape[:2], bool)
    return FitObjective(
        "simulation",
        True,
        "closed_form",
        dynsys.Sequential(),
        None,
        channel_weights(ys, mask),
    )


@functools.cache
def _experiment():
    """Inputs, the noise-free output, and `NUM_REPS` noisy outputs `(R, 1, T, 1)`."""
    true = _true_system()
    us = jax.random.normal(jax.random.key(1), (1, T, 1))
    clean = dynsys.rollout(true, jnp.zeros((1, 2)), T, inputs=us).ys
    noise = NOISE * jax.random.normal(jax.random.key(2), (NUM_REPS, 1, T, 1))
    return us, clean, clean[None] + noise


def _batch(ys, us):
    return {"index": jnp.arange(1), "mask": jnp.ones((1, T), bool), "ys": ys, "us": us}


def _magnitude_and_gain(system):
    """|G| at FREQUENCIES and the static gain, `(F + 1,)`."""
    magnitude = jnp.abs(dynsys.frequency_response(system, FREQUENCIES))[:, 0, 0]
    gain = jnp.real(dynsys.frequency_response(system, jnp.zeros(1)))[0, 0]
    return jnp.concatenate([magnitude, gain])


@functools.cache
def _monte_carlo_fits():
    """Each realisation fitted by Gauss–Newton (minimum-norm steps, from the true
    model) on `fit`'s residuals. Returns the estimates `(R, P)`, the covariance of
    each `(R, P, P)`, |G| and static gain of each `(R, F + 1)` with their std by
    linearisation (here, inside the vmap), and the flat-to-model function."""
    us, _, noisy = _experiment()
    params, static = eqx.partition(_true_system(), eqx.is_inexact_array)
    flat, unravel = jax.flatten_util.ravel_pytree(params)

    def rebuild(vector):
        return eqx.combine(unravel(vector), static)

    def one(ys):
        objective = _objective(ys)
        batch = _batch(ys, us)

        def residuals(vector):
            return objective.residuals((rebuild(vector), None), batch)

        def gauss_newton(vector, _):
            step = jnp.linalg.lstsq(
                jax.jacfwd(residuals)(vector), residuals(vector), rcond=1e-10
            )[0]
            return vector - step, None

        estimate, _ = jax.lax.scan(gauss_newton, flat, None, length=GAUSS_NEWTON_STEPS)
        matrix, _, _ = gauss_newton_covariance(
            jax.jacfwd(residuals)(estimate), residuals(estimate), 1
        )
        gradient = jax.jacfwd(lambda v: _magnitude_and_gain(rebuild(v)))(estimate)
        std = jnp.sqrt(jnp.einsum("ip,pq,iq->i", gradient, matrix, gradient))
        return estimate, matrix, _magnitude_and_gain(rebuild(estimate)), std

    outputs = jax.jit(jax.vmap(one))(noisy)
    return (*(np.asarray(x) for x in outputs), rebuild)


def _covariance(matrix, model):
    mask = jax.tree.map(eqx.is_inexact_array, model)
    return ParameterCovariance(np.asarray(matrix), model, mask, np.ones(1), 4, T)


def _natural_frequency_and_damping(estimates, rebuild):
    """`(R,)` each: of the upper pole of each estimate (plain numpy)."""
    frequency, damping = [], []
    for estimate in estimates:
        K = np.asarray(rebuild(jnp.asarray(estimate)).K)
        pole = max(np.log(np.linalg.eigvals(K).astype(complex)), key=np.imag)
        frequency.append(abs(pole))
        damping.append(-pole.real / abs(pole))
    return np.array(frequency), np.array(damping)


# The public functions are checked on this many realisations (the predicted std
# changes little between them); the spread is over all of them.
NUM_CHECKED = 20


@functools.cache
def _propagated():
    """On the first NUM_CHECKED realisations, through the public functions: |G|
    std, static gain std, the upper pole's natural frequency and damping std."""
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    rows = []
    for estimate, matrix in zip(estimates[:NUM_CHECKED], matrices[:NUM_CHECKED]):
        model = rebuild(jnp.asarray(estimate))
        cov = _covariance(matrix, model)
        _, std = dynsys.frequency_response(model, FREQUENCIES, covariance=cov)
        poles = dynsys.pole_uncertainty(cov)
        _, gain_std = dynsys.static_gain_uncertainty(cov)
        upper = int(np.argmax(np.asarray(poles.eigenvalues).imag))
        rows.append(
            (
                np.concatenate([np.asarray(std)[:, 0, 0], np.ravel(gain_std)]),
                np.asarray(poles.natural_frequency_std)[upper],
                np.asarray(poles.damping_std)[upper],
            )
        )
    return [np.array(column) for column in zip(*rows)]


def _within(predicted, spread, tolerance=0.25):
    ratio = np.mean(predicted, axis=0) / spread
    assert np.all(np.abs(ratio - 1.0) < tolerance), ratio


def test_public_functions_give_the_vmapped_std():
    _, _, _, std, _ = _monte_carlo_fits()
    public, _, _ = _propagated()
    np.testing.assert_allclose(public, std[:NUM_CHECKED], rtol=1e-8)


def test_magnitude_and_gain_std_match_monte_carlo_spread():
    _, _, values, std, _ = _monte_carlo_fits()
    _within(std, np.std(values, axis=0, ddof=1))


def test_pole_std_matches_monte_carlo_spread():
    estimates, _, _, _, rebuild = _monte_carlo_fits()
    frequency, damping = _natural_frequency_and_damping(estimates, rebuild)
    _, frequency_std, damping_std = _propagated()
    _within(frequency_std, np.std(frequency, ddof=1))
    _within(damping_std, np.std(damping, ddof=1))


def _truth():
    return np.asarray(_magnitude_and_gain(_true_system()))


def test_95_percent_band_covers_the_truth():
    _, _, values, std, _ = _monte_carlo_fits()
    coverage = np.mean(np.abs(values - _truth()[None]) <= 1.96 * std, axis=0)
    assert np.all((coverage >= 0.90) & (coverage <= 0.99)), coverage


def test_pole_ellipse_matches_monte_carlo_spread():
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    eigenvalues, ellipses = [], []
    for index, estimate in enumerate(estimates):
        K = np.asarray(rebuild(jnp.asarray(estimate)).K)
        eigenvalues.append(max(np.linalg.eigvals(K), key=np.imag))
        if index < NUM_CHECKED:
            model = rebuild(jnp.asarray(estimate))
            poles = dynsys.pole_uncertainty(_covariance(matrices[index], model))
            upper = int(np.argmax(np.asarray(poles.eigenvalues).imag))
            ellipses.append(np.asarray(poles.eigenvalue_covariance)[upper])
    points = np.stack([np.real(eigenvalues), np.imag(eigenvalues)], axis=1)
    spread = np.diag(np.cov(points.T))
    predicted = np.diag(np.mean(ellipses, axis=0))
    # Variances: 25 % on a standard deviation is about 50 % on a variance.
    assert np.all(np.abs(np.sqrt(predicted / spread) - 1.0) < 0.25)


def test_fit_covariance_matches_the_monte_carlo_estimator():
    """`FitResult.covariance` on one realisation gives the same |G| std as the
    Gauss–Newton covariance of the Monte Carlo's own fit of it."""
    us, _, noisy = _experiment()
    data = dynsys.Dataset(us=us, ys=noisy[0])
    result = dynsys.fit(_true_system(), data, progress=False)
    assert result.covariance_reason is None
    _, std = dynsys.frequency_response(
        result.model, FREQUENCIES, covariance=result.covariance
    )
    _, _, _, predicted, _ = _monte_carlo_fits()
    np.testing.assert_allclose(np.asarray(std)[:, 0, 0], predicted[0, :-1], rtol=0.02)
    assert result.covariance.rank == 4  # 8 entries less the 2 x 2 basis freedom


def _transformed(model, T_matrix):
    inverse = jnp.linalg.inv(T_matrix)
    return dynsys.LinearSystem(
        K=T_matrix @ model.K @ inverse, B=T_matrix @ model.B, C=model.C @ inverse
    )


def test_covariance_invariant_to_change_of_basis():
    us, _, noisy = _experiment()
    ys = noisy[1]
    model = dynsys.fit(
        _true_system(), dynsys.Dataset(us=us, ys=ys), progress=False
    ).model
    other = _transformed(model, jnp.array([[2.0, 0.5], [-0.3, 0.7]]))
    results = []
    for system in (model, other):
        cov, reason = fit_covariance(
            _objective(ys), (system, None), _batch(ys, us), eqx.is_inexact_array, 1
        )
        assert reason is None
        _, std = dynsys.frequency_response(system, FREQUENCIES, covariance=cov)
        poles = dynsys.pole_uncertainty(cov)
        _, gain_std = dynsys.static_gain_uncertainty(cov)
        results.append(
            np.concatenate(
                [
                    np.ravel(std),
                    np.ravel(poles.natural_frequency_std),
                    np.ravel(poles.damping_std),
                    np.ravel(gain_std),
                ]
            )
        )
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
    # The raw entries' covariance is not invariant (a different basis).
    assert not np.allclose(results[0], 0.0)


def test_monte_carlo_agrees_with_linearisation(getkey):
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    model = rebuild(jnp.asarray(estimates[0]))
    cov = _covariance(matrices[0], model)

    def fn(system):
        return jnp.abs(dynsys.frequency_response(system, FREQUENCIES))

    samples = dynsys.monte_carlo(fn, cov, 4000, key=getkey())
    np.testing.assert_allclose(
        np.std(np.asarray(samples), axis=0), dynsys.propagate_std(fn, cov), rtol=0.1
    )


def test_step_response_band_is_the_running_sum_of_impulse_std():
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    model = rebuild(jnp.asarray(estimates[0]))
    cov = _covariance(matrices[0], model)
    response, std = dynsys.step_response_band(cov, 30)
    np.testing.assert_allclose(response, dynsys.step_response(model, 30))
    _, gain_std = dynsys.static_gain_uncertainty(cov)
    assert std.shape == (30, 1, 1) and float(std[0, 0, 0]) == 0.0  # D = 0 fixed
    # Far along, the step response settles to the static gain, and so does its std.
    np.testing.assert_allclose(std[-1], gain_std, rtol=0.05)


def test_sandwich_reduces_to_sigma_squared_inverse_hessian():
    key1, key2 = jax.random.split(jax.random.key(3))
    J = jax.random.normal(key1, (50, 4))
    r = jax.random.normal(key2, (50,))
    matrix, variance, rank = gauss_newton_covariance(J, r, 1)
    expected_variance = float(jnp.sum(r**2)) / (50 - 4)
    np.testing.assert_allclose(variance, [expected_variance], rtol=1e-12)
    np.testing.assert_allclose(
        matrix, expected_variance * np.linalg.inv(np.asarray(J.T @ J)), rtol=1e-9
    )
    assert int(rank) == 4


def test_covariance_none_with_reason(monkeypatch):
    us, _, noisy = _experiment()
    data = dynsys.Dataset(us=us, ys=noisy[0])
    result = dynsys.fit(_true_system(), data, progress=False, num_steps=2)
    monkeypatch.setattr(covariance_module, "COVARIANCE_PARAMETER_LIMIT", 3)
    assert result.covariance is None
    assert "8 trained parameters" in result.covariance_reason


def test_errors():
    with pytest.raises(TypeError, match="covariance=.*ParameterCovariance"):
        dynsys.frequency_response(_true_system(), FREQUENCIES, covariance=np.eye(8))
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    cov = _covariance(matrices[0], rebuild(jnp.asarray(estimates[0])))
    bigger = dynsys.LinearSystem(
        K=0.5 * jnp.eye(3), B=jnp.ones((3, 1)), C=jnp.ones((1, 3))
    )
    with pytest.raises(ValueError, match="15 trained parameters but the covariance"):
        dynsys.frequency_response(bigger, FREQUENCIES, covariance=cov)


def test_bode_draws_the_band_and_the_spectral_estimate():
    import matplotlib

    matplotlib.use("Agg")
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    model = rebuild(jnp.asarray(estimates[0]))
    cov = _covariance(matrices[0], model)
    us, _, noisy = _experiment()
    estimate = dynsys.spectral_estimate(dynsys.Dataset(us=us, ys=noisy[0]), nperseg=32)
    w = jnp.array([0.2, 0.6, 1.5])
    fig = dynsys.plot.bode(
        {"fitted": model},
        w,
        spectral=estimate,
        confidence={"fitted": cov},
        level=0.95,
    )
    magnitude = fig.get_axes()[0]
    labels = [c.get_label() for c in magnitude.collections]
    assert "fitted: 95 % confidence" in labels
    band = magnitude.collections[labels.index("fitted: 95 % confidence")]
    response, std = dynsys.frequency_response(model, w, covariance=cov)
    upper = 20 * np.log10(np.abs(response[:, 0, 0]) + 1.959964 * std[:, 0, 0])
    top = band.get_paths()[0].vertices[:, 1]
    np.testing.assert_allclose(np.max(top), np.max(upper), rtol=1e-5)
    dots = [
        ln
        for ln in magnitude.get_lines()
        if ln.get_label() == "data: spectral estimate"
    ][0]
    np.testing.assert_allclose(
        dots.get_ydata(), 20 * np.log10(np.abs(estimate.response[2:, 0, 0]))
    )
    with pytest.raises(ValueError, match="level=...\\): expected a level in"):
        dynsys.plot.bode({"fitted": model}, w, confidence={"fitted": cov}, level=99)


def test_step_and_eigenvalue_figures_draw_their_confidence():
    import matplotlib

    matplotlib.use("Agg")
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    model = dynsys.LinearSystem(
        rebuild(jnp.asarray(estimates[0])).K,
        rebuild(jnp.asarray(estimates[0])).B,
        rebuild(jnp.asarray(estimates[0])).C,
        dt=0.1,
    )
    cov = _covariance(matrices[0], model)
    fig = dynsys.plot.step_response({"fitted": model}, 30, confidence={"fitted": cov})
    band = [
        c
        for c in fig.get_axes()[0].collections
        if c.get_label() == "fitted: 99 % confidence"
    ]
    _, std = dynsys.step_response_band(cov, 30)
    top = band[0].get_paths()[0].vertices[:, 1]
    response = np.asarray(dynsys.step_response(model, 30))[:, 0, 0]
    expected = np.max(response + 2.5758293 * np.asarray(std)[:, 0, 0])
    np.testing.assert_allclose(np.max(top), expected, rtol=1e-5)

    fig = dynsys.plot.eigenvalues({"fitted": model}, confidence={"fitted": cov})
    disc = fig.get_axes()[0]
    ellipses = [p for p in disc.patches if p.get_label() == "fitted: 99 % confidence"]
    assert len(ellipses) == 1  # one legend entry; both poles drawn
    poles = dynsys.pole_uncertainty(cov)
    upper = int(np.argmax(np.asarray(poles.eigenvalues).imag))
    cov_upper = np.asarray(poles.eigenvalue_covariance)[upper]
    # The ellipse's widest extent in Re is sqrt(-2 ln 0.01 * var(Re)).
    x = ellipses[0].get_xy()[:, 0]
    half_width = 0.5 * (np.max(x) - np.min(x))
    np.testing.assert_allclose(
        half_width, np.sqrt(-2 * np.log(0.01) * cov_upper[0, 0]), rtol=1e-3
    )


def test_simulation_band_against_finite_differences():
    """The free run's std by linearisation equals sqrt(diag(G S G^T)) with G from
    central finite differences of `compare`'s predictions."""
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    model = rebuild(jnp.asarray(estimates[0]))
    cov = _covariance(matrices[0], model)
    us, _, noisy = _experiment()
    data = dynsys.Dataset(us=us[:, :60], ys=noisy[0][:, :60])
    predicted, std = dynsys.simulation_band(cov, data)
    flat = np.asarray(estimates[0])
    step = 1e-6
    columns = []
    for k in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[k] += step
        down[k] -= step
        plus = dynsys.compare(rebuild(jnp.asarray(up)), data).predicted
        minus = dynsys.compare(rebuild(jnp.asarray(down)), data).predicted
        columns.append(np.ravel(plus - minus) / (2 * step))
    G = np.stack(columns, axis=1)
    expected = np.sqrt(np.einsum("ip,pq,iq->i", G, matrices[0], G))
    np.testing.assert_allclose(np.ravel(std), expected, rtol=1e-4, atol=1e-10)
    np.testing.assert_allclose(predicted, dynsys.compare(model, data).predicted)


def test_comparison_draws_the_free_run_band():
    import matplotlib

    matplotlib.use("Agg")
    estimates, matrices, _, _, rebuild = _monte_carlo_fits()
    model = rebuild(jnp.asarray(estimates[0]))
    cov = _covariance(matrices[0], model)
    us, _, noisy = _experiment()
    data = dynsys.Dataset(us=us[:, :60], ys=noisy[0][:, :60])
    predicted, std = dynsys.simulation_band(cov, data)
    fig = dynsys.plot.comparison(
        {"fitted": dynsys.compare(model, data)}, bands={"fitted": std[0]}
    )
    band = [
        c
        for c in fig.get_axes()[0].collections
        if c.get_label() == "fitted: 99 % confidence"
    ]
    top = band[0].get_paths()[0].vertices[:, 1]
    expected = np.max(np.asarray(predicted)[0, :, 0] + 2.5758293 * std[0, :, 0])
    np.testing.assert_allclose(np.max(top), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="bands=...\\): 'other' is not one of"):
        dynsys.plot.comparison(
            {"fitted": dynsys.compare(model, data)}, bands={"other": std[0]}
        )


def test_jacobian_in_groups_equals_jacfwd():
    """Built a few directions at a time (more parameters than a group), the
    Jacobian equals jax.jacfwd's, for an output of several axes."""
    from dynsys._fitting.covariance import JACOBIAN_DIRECTIONS, jacobian_in_groups

    size = 2 * JACOBIAN_DIRECTIONS + 5
    flat = jnp.linspace(-1.0, 1.0, size)

    def fn(v):
        return jnp.outer(jnp.sin(v[:7]), jnp.cumsum(v**2)[:3]) * jnp.sum(v)

    np.testing.assert_allclose(
        jacobian_in_groups(fn, flat), jax.jacfwd(fn)(flat), rtol=1e-12, atol=1e-12
    )
