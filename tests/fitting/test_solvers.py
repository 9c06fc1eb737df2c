"""Solvers and losses as objects: `fit(solver=...)` with `LevenbergMarquardt`,
`LBFGS`, `OptaxSolver` or a plain optax transform, the same word in `train`, the
separable variant as a field of the solver, and the loss objects."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys


K_TRUE = np.array([[0.9, 0.2], [-0.2, 0.9]])


def _state_data():
    true = dynsys.LinearSystem(K_TRUE, np.array([[0.0], [1.0]]))
    k1, k2 = jax.random.split(jax.random.key(0))
    us = jax.random.normal(k2, (4, 20, 1))
    return dynsys.simulate(true, jax.random.normal(k1, (4, 2)), 20, inputs=us)


def _start():
    return dynsys.LinearSystem(0.5 * jnp.eye(2), jnp.zeros((2, 1)))


def _output_data(T=120, seed=3):
    """One record of a 2-state plant with an innovation noise model."""
    rng = np.random.default_rng(seed)
    K = np.array([[0.8, 0.2], [-0.1, 0.7]])
    B, C, L = np.array([[1.0], [0.5]]), np.array([[1.0, 0.0]]), np.array([[0.3], [0.1]])
    us, e = rng.standard_normal((T, 1)), 0.3 * rng.standard_normal((T, 1))
    x, ys = np.zeros(2), []
    for t in range(T):
        ys.append(C @ x + e[t])
        x = K @ x + B @ us[t] + L @ e[t]
    start = dynsys.InnovationSystem(0.9 * K, B, C, kalman_gain=0.5 * L)
    return dynsys.Dataset(ys=np.array(ys)[None], us=us[None]), start


def _same(a, b):
    assert a.steps_run == b.steps_run and a.optimizer == b.optimizer
    np.testing.assert_array_equal(a.losses, b.losses)
    np.testing.assert_array_equal(a.model.K, b.model.K)


def test_solver_objects_are_abstract_solvers():
    for solver in (
        dynsys.LevenbergMarquardt(),
        dynsys.LBFGS(),
        dynsys.OptaxSolver(optax.adam(1e-3)),
    ):
        assert isinstance(solver, dynsys.AbstractSolver)
    with pytest.raises(TypeError):
        dynsys.AbstractSolver()


def test_levenberg_marquardt_equals_the_default():
    data = _state_data()
    default = dynsys.fit(_start(), data, progress=False)
    explicit = dynsys.fit(
        _start(), data, solver=dynsys.LevenbergMarquardt(), progress=False
    )
    assert default.optimizer.startswith("Levenberg–Marquardt")
    _same(default, explicit)


def test_levenberg_marquardt_tolerances_equal_fits():
    data = _state_data()
    default = dynsys.fit(_start(), data, rtol=1e-4, atol=1e-6, progress=False)
    explicit = dynsys.fit(
        _start(),
        data,
        solver=dynsys.LevenbergMarquardt(rtol=1e-4, atol=1e-6),
        progress=False,
    )
    _same(default, explicit)


def test_lbfgs_equals_the_default_with_linear_adjoint():
    data = _state_data()
    adjoint = dynsys.LinearAdjoint()
    default = dynsys.fit(_start(), data, adjoint=adjoint, progress=False)
    explicit = dynsys.fit(
        _start(), data, solver=dynsys.LBFGS(), adjoint=adjoint, progress=False
    )
    assert default.optimizer.startswith("L-BFGS")
    _same(default, explicit)


def test_optax_transform_and_optax_solver_are_equal():
    data = _state_data()
    plain = dynsys.fit(
        _start(), data, solver=optax.adam(1e-2), num_steps=20, progress=False
    )
    wrapped = dynsys.fit(
        _start(),
        data,
        solver=dynsys.OptaxSolver(optax.adam(1e-2)),
        num_steps=20,
        progress=False,
    )
    _same(plain, wrapped)
    assert plain.steps_run == 20


def test_train_takes_a_solver():
    def loss(m):
        return jnp.sum((m - 3.0) ** 2)

    plain = dynsys.train(
        loss, jnp.zeros(2), solver=optax.adam(0.1), num_steps=50, progress=False
    )
    wrapped = dynsys.train(
        loss,
        jnp.zeros(2),
        solver=dynsys.OptaxSolver(optax.adam(0.1)),
        num_steps=50,
        progress=False,
    )
    np.testing.assert_array_equal(plain.losses, wrapped.losses)
    lbfgs = dynsys.train(
        loss, jnp.zeros(2), solver=dynsys.LBFGS(), num_steps=100, progress=False
    )
    np.testing.assert_allclose(lbfgs.model, 3.0, rtol=1e-5)
    assert lbfgs.converged


def test_bad_solvers_are_refused_in_one_line():
    data = _state_data()
    with pytest.raises(TypeError, match=r"^fit\(solver=...\): expected None, a solver"):
        dynsys.fit(_start(), data, solver="lm", progress=False)
    with pytest.raises(TypeError, match=r"^train\(solver=LevenbergMarquardt"):
        dynsys.train(
            lambda m: jnp.sum(m**2),
            jnp.ones(2),
            solver=dynsys.LevenbergMarquardt(),
            num_steps=1,
            progress=False,
        )
    with pytest.raises(ValueError, match=r"^fit\(batch_size=2\): LevenbergMarquardt"):
        dynsys.fit(
            _start(),
            data,
            solver=dynsys.LevenbergMarquardt(),
            batch_size=2,
            progress=False,
        )
    with pytest.raises(ValueError, match=r"^fit\(rtol=..., atol=...\): tolerances"):
        dynsys.fit(
            _start(),
            data,
            solver=dynsys.LevenbergMarquardt(),
            rtol=1e-3,
            progress=False,
        )
    with pytest.raises(
        ValueError, match=r"^fit\(solver=LevenbergMarquardt\(...\)\): .*LinearAdjoint"
    ):
        dynsys.fit(
            _start(),
            data,
            solver=dynsys.LevenbergMarquardt(),
            adjoint=dynsys.LinearAdjoint(),
            progress=False,
        )
    with pytest.raises(TypeError, match=r"^OptaxSolver\(transform=...\): expected"):
        dynsys.OptaxSolver("adam")


def test_separable_must_be_a_known_variant():
    with pytest.raises(
        ValueError,
        match=r"^LevenbergMarquardt\(separable=...\): expected None, 'exact' or "
        r"'kaufman', got 'bad'\.$",
    ):
        dynsys.LevenbergMarquardt(separable="bad")
    with pytest.raises(ValueError, match=r"got True"):
        dynsys.LevenbergMarquardt(separable=True)


def test_separable_changes_nothing_where_it_does_not_apply():
    """On state data the separable variant does not apply: the fit is the
    default's."""
    data = _state_data()
    default = dynsys.fit(_start(), data, progress=False)
    separable = dynsys.fit(
        _start(),
        data,
        solver=dynsys.LevenbergMarquardt(separable="exact"),
        progress=False,
    )
    _same(default, separable)


# ----- losses as objects ------------------------------------------------------


@pytest.mark.parametrize(
    "horizon, steps, loss, fit_percent",
    # What `fit(start, data, loss="prediction", horizon=h)` gave before the loss
    # objects (commit 7b7a3d1).
    [(1, 16, 0.028372707089039134, 83.15580008161886),
     (2, 23, 0.029365866554384654, 82.8635282060791)],
)  # fmt: skip
def test_prediction_equals_the_former_string_loss(horizon, steps, loss, fit_percent):
    data, start = _output_data()
    result = dynsys.fit(
        start, data, loss=dynsys.Prediction(horizon=horizon), progress=False
    )
    assert result.steps_run == steps
    np.testing.assert_allclose(result.losses[-1], loss, rtol=1e-9)
    np.testing.assert_allclose(
        result.metrics["train"]["prediction_fit_percent"], fit_percent, rtol=1e-9
    )


def test_loss_objects_are_abstract_losses():
    for loss in (
        dynsys.Simulation(),
        dynsys.OneStep(),
        dynsys.Prediction(),
        dynsys.Prediction(horizon=3),
        dynsys.MultipleShooting(horizon=5),
    ):
        assert isinstance(loss, dynsys.AbstractLoss)
    assert dynsys.Prediction() == dynsys.Prediction(horizon=1)
    with pytest.raises(TypeError):
        dynsys.AbstractLoss()


def test_simulation_is_the_default_loss():
    data = _state_data()
    default = dynsys.fit(_start(), data, progress=False)
    explicit = dynsys.fit(_start(), data, loss=dynsys.Simulation(), progress=False)
    _same(default, explicit)


def test_a_string_loss_is_refused_in_one_line():
    with pytest.raises(
        ValueError,
        match=r"^fit\(loss='simulation'\): pass a loss object such as "
        r"dynsys\.Simulation\(\)\.$",
    ):
        dynsys.fit(_start(), _state_data(), loss="simulation", progress=False)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'horizon'"):
        dynsys.fit(_start(), _state_data(), horizon=2, progress=False)
    with pytest.raises(ValueError, match=r"^Prediction\(horizon=...\): expected"):
        dynsys.Prediction(horizon=0)
