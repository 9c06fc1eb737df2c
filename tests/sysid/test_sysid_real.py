"""Identification about an operating point: levels in the model, the subspace
start on data far from zero, the stabilised start, and a real record as received."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
import dynsys.plot
from dynsys._sysid.stabilise import reflected, stabilised_start


REAL = pathlib.Path(__file__).parents[2] / "data" / "real"


def _four_state(dtype=jnp.float64):
    K = jnp.array(
        [
            [0.9, 0.2, 0.0, 0.0],
            [-0.2, 0.9, 0.0, 0.0],
            [0.0, 0.0, 0.7, 0.1],
            [0.0, 0.0, 0.0, 0.5],
        ],
        dtype,
    )
    B = jnp.array([[0.0], [1.0], [0.5], [1.0]], dtype)
    C = jnp.array([[1.0, 0.0, 1.0, 0.5]], dtype)
    return dynsys.LinearSystem(K, B, C)


def _loop(K, B, C, D, a, u_bar, y_bar, x0, us):
    """y_t = C x_t + D (u_t - ū) + ȳ, x_{t+1} = K x_t + B (u_t - ū) + a, in numpy."""
    x, ys = np.asarray(x0, float), []
    for u in np.asarray(us):
        du = u - u_bar
        ys.append(C @ x + D @ du + y_bar)
        x = K @ x + B @ du + a
    return np.array(ys)


@pytest.mark.parametrize("num_steps", [10, 201, 1000])
@pytest.mark.parametrize(
    "method", [dynsys.Sequential(), dynsys.Parallel(), dynsys.Chunked(16)]
)
def test_levels_rollout_equals_python_loop(num_steps, method, getkey):
    K = np.array([[0.9, 0.2], [-0.1, 0.8]])
    B, C, D = np.array([[1.0], [0.5]]), np.array([[1.0, 0.3]]), np.array([[0.2]])
    a, u_bar, y_bar = np.array([0.1, -0.2]), np.array([5.0]), np.array([100.0])
    system = dynsys.LinearSystem(
        K, B, C, D, offset=a, input_level=u_bar, output_level=y_bar
    )
    us = 5.0 + jax.random.normal(getkey(), (2, num_steps, 1))
    x0 = jnp.array([[1.0, 2.0], [0.0, -1.0]])
    traj = dynsys.rollout(system, x0, num_steps, inputs=us, method=method)
    for i in range(2):
        expected = _loop(K, B, C, D, a, u_bar, y_bar, x0[i], us[i])
        np.testing.assert_allclose(traj.ys[i], expected, rtol=1e-10, atol=1e-9)


def test_offset_alone_rolls_out_past_one_chunk():
    # The case: a constant term without inputs failed in the chunked solver.
    system = dynsys.LinearSystem(0.5 * jnp.eye(3), offset=jnp.ones(3))
    xs = dynsys.rollout(system, jnp.zeros((1, 3)), 201).xs
    x, expected = np.zeros(3), [np.zeros(3)]
    for _ in range(201):
        x = 0.5 * x + 1.0
        expected.append(x)
    np.testing.assert_allclose(xs[0], np.array(expected), rtol=1e-12)


def test_level_shapes_are_checked():
    with pytest.raises(
        ValueError, match=r"input_level must have shape \(m,\) = \(1,\)"
    ):
        dynsys.LinearSystem(jnp.eye(2), jnp.ones((2, 1)), input_level=jnp.ones(2))
    with pytest.raises(ValueError, match="input_level needs an input matrix B"):
        dynsys.LinearSystem(jnp.eye(2), input_level=jnp.ones(1))
    with pytest.raises(ValueError, match=r"output_level must have shape \(p,\)"):
        dynsys.LinearSystem(jnp.eye(2), C=jnp.ones((1, 2)), output_level=jnp.ones(2))


def test_levels_survive_save_load_and_stable_form(tmp_path):
    system = _four_state()
    system = dynsys.LinearSystem(
        system.K, system.B, system.C, input_level=[5.0], output_level=[100.0], dt=2.0
    )
    dynsys.save(tmp_path / "m.dynsys", system)
    loaded = dynsys.load(tmp_path / "m.dynsys")
    np.testing.assert_array_equal(loaded.output_level, [100.0])
    stable = dynsys.StableLinearSystem.from_linear(system)
    us = 5.0 + jnp.sin(jnp.arange(50.0))[:, None]
    x0 = jnp.ones(4)
    np.testing.assert_allclose(
        dynsys.rollout(stable, x0, 50, inputs=us).ys,
        dynsys.rollout(system, x0, 50, inputs=us).ys,
        atol=1e-8,
    )


def _record(system, key, T, u_level, y_level, noise):
    """One record of `system` about the operating point (u_level, y_level)."""
    k1, k2 = jax.random.split(key)
    deviation = jax.random.normal(k1, (1, T, 1))
    ys = dynsys.rollout(system, jnp.zeros((1, 4)), T, inputs=deviation).ys + y_level
    ys = ys + noise * jax.random.normal(k2, ys.shape)
    return np.asarray(deviation + u_level), np.asarray(ys)


def test_large_levels_default_within_one_point_of_levels_removed_by_hand(getkey):
    us, ys = _record(_four_state(), getkey(), 600, 5.0, 100.0, noise=0.05)
    k = 400
    estimation = dynsys.Dataset(us=us[:, :k], ys=ys[:, :k])
    validation = dynsys.Dataset(us=us[:, k:], ys=ys[:, k:])
    default = dynsys.fit_subspace(estimation, order=4)
    fit_default = np.asarray(dynsys.compare(default, validation).fit_percent)

    u_bar, y_bar = us[:, :k].mean((0, 1)), ys[:, :k].mean((0, 1))
    by_hand = dynsys.fit_subspace(
        dynsys.Dataset(us=us[:, :k] - u_bar, ys=ys[:, :k] - y_bar),
        order=4,
        offset=False,
    )
    centred = dynsys.Dataset(us=us[:, k:] - u_bar, ys=ys[:, k:] - y_bar)
    fit_by_hand = np.asarray(dynsys.compare(by_hand, centred).fit_percent)
    assert fit_by_hand[0] > 90  # the reference is a good model
    assert abs(fit_default[0] - fit_by_hand[0]) <= 1.0
    # Without levels the same data give a worse start (the level is a mode).
    raw = dynsys.fit_subspace(estimation, order=4, offset=False)
    assert np.asarray(dynsys.compare(raw, validation).fit_percent)[0] < fit_default[0]


def test_levels_exact_on_noise_free_step_from_rest():
    # A record that does not sit at its mean: a step from rest, levels 5 V, 100 C.
    system = _four_state()
    T = 300
    u = np.where(np.arange(T) < 40, 0.0, 1.0) + 0.3 * np.sin(0.37 * np.arange(T))
    us = (u[:, None] + 5.0)[None]
    ys = dynsys.rollout(system, jnp.zeros((1, 4)), T, inputs=us - 5.0).ys + 100.0
    model = dynsys.fit_subspace(dynsys.Dataset(us=us, ys=ys), order=4)
    fit = dynsys.compare(model, dynsys.Dataset(us=us, ys=ys)).fit_percent
    assert float(fit[0]) > 99.999


def test_reflected_eigenvalues_against_numpy():
    V = np.array([[1.0, 0.5], [0.2, 1.0]])
    K = V @ np.diag([2.0, 0.5]) @ np.linalg.inv(V)
    values = np.sort(np.linalg.eigvals(reflected(K)).real)
    np.testing.assert_allclose(values, [0.999 / 2.0, 0.5], rtol=1e-10)


def test_stabilised_start_re_estimates_B_and_level(getkey):
    # Given the true (stable) K and C, the least squares recover the input-output
    # map and the level.
    system = _four_state()
    us, ys = _record(system, getkey(), 300, 2.0, 50.0, noise=0.0)
    data = dynsys.Dataset(us=us, ys=ys)
    start = dynsys.LinearSystem(
        system.K,
        jnp.zeros((4, 1)),
        system.C,
        input_level=jnp.array([2.0]),
        output_level=jnp.array([0.0]),
    )
    model = stabilised_start(start, data)

    def markov(m):  # C K^k B: B up to directions the output does not see
        K, B, C = (np.asarray(a) for a in (m.K, m.B, m.C))
        return [C @ np.linalg.matrix_power(K, k) @ B for k in range(12)]

    np.testing.assert_allclose(markov(model), markov(system), atol=1e-8)
    np.testing.assert_allclose(model.output_level, [50.0], atol=1e-8)


def test_heating_record_as_received():
    """data/real/heating.csv as received: the subspace start about the data's
    means, scored on the last third of the raw record; the fit % equals a numpy
    simulation of the model from the same initial state."""
    table = np.genfromtxt(REAL / "heating.csv", delimiter=",", names=True)
    u, y = table["drive_V"][:, None], table["temp_C"][:, None]
    k = 2 * len(u) // 3
    model = dynsys.fit_subspace(dynsys.Dataset(us=u[None, :k], ys=y[None, :k]))
    assert float(model.output_level[0]) > 100  # in °C: the level is kept
    validation = dynsys.Dataset(us=u[None, k:], ys=y[None, k:])
    result = dynsys.compare(model, validation)
    K, B, C = (np.asarray(a) for a in (model.K, model.B, model.C))
    D = np.zeros((1, 1))
    predicted = _loop(
        K,
        B,
        C,
        D,
        np.zeros(len(K)),
        np.asarray(model.input_level),
        np.asarray(model.output_level),
        result.x0[0],
        u[k:],
    )
    expected = 100 * (
        1 - np.linalg.norm(predicted - y[k:]) / np.linalg.norm(y[k:] - y[k:].mean())
    )
    np.testing.assert_allclose(float(result.fit_percent[0]), expected, rtol=1e-8)
    assert expected > 50


def test_comparison_of_models_with_data_and_its_time_axis():
    import matplotlib

    matplotlib.use("Agg")
    system = _four_state()
    us = 5.0 + np.sin(0.3 * np.arange(3000.0))[None, :, None]
    ys = np.asarray(dynsys.rollout(system, jnp.zeros((1, 4)), 3000, inputs=us).ys)
    data = dynsys.Dataset(us=us, ys=ys, ts=np.arange(3000.0))  # dt = 1 s
    result = dynsys.compare(system, data)
    assert result.dt == 1.0
    fig = dynsys.plot.comparison({"fitted": system}, data)
    axes = fig.axes[0]
    assert axes.get_xlabel() == "t (s)"
    # A long record shows its last 2000 samples, and says so; the fit % is the
    # whole record's, as compare gives it.
    assert len(axes.lines[0].get_xdata()) == 2000
    assert "last 2000 of 3000 samples shown" in fig._suptitle.get_text()
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert f"fit {float(result.fit_percent[0]):.1f} %" in legend
    with pytest.raises(ValueError, match="pass the data"):
        dynsys.plot.comparison({"fitted": system}, ys[0])
