"""`dynsys.plot`: every figure renders to a valid PNG, headless, into its own axes."""

import struct

import dynsys.models as zoo
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

import dynsys
from dynsys import plot


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND"
    return width, height


def _save(fig, tmp_path, name) -> tuple[int, int]:
    path = tmp_path / name
    fig.savefig(path, dpi=60)
    # An empty 60-dpi figure compresses to a few hundred bytes; drawn ones do not.
    assert path.stat().st_size > 4000, f"{name} looks empty"
    return _png_size(path)


def _assert_directions(quiver, expected):
    arrows = np.stack([quiver.U, quiver.V], axis=1)
    norms = np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(arrows, expected / norms, atol=1e-12)


@pytest.fixture(autouse=True)
def _agg():
    matplotlib.use("Agg")


@pytest.fixture
def rotation():
    return dynsys.LinearSystem(
        K=jnp.array([[0.95, 0.2], [-0.2, 0.95]]), B=jnp.array([[0.0], [0.5]])
    )


def test_trajectory_batch_with_outputs(tmp_path, rotation, getkey):
    x0 = jax.random.normal(getkey(), (12, 2))
    inputs = jax.random.normal(getkey(), (12, 20, 1))
    traj = dynsys.rollout(rotation, x0, 20, inputs=inputs)
    fig = plot.trajectory(
        traj,
        outputs=True,
        state_names=["p (m)", "v (m/s)"],
        input_names=["F (N)"],
        reference=[0.0, 0.0],
        input_bound=2.0,
        title="batch",
    )
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    # Different units never share an axis: p, v, F, then the outputs y0, y1
    # (no unit stated, so one axis each).
    assert [a.get_ylabel() for a in axes] == ["p (m)", "v (m/s)", "F (N)", "y0", "y1"]
    # 12 trajectories: one thin line each (no band), plus the dashed target.
    drawn = [line for line in axes[0].get_lines() if len(line.get_xdata())]
    assert len(drawn) == 12 + 1 and not axes[0].collections
    np.testing.assert_allclose(drawn[3].get_ydata(), np.asarray(traj.xs[3, :, 0]))
    bounds = sorted(line.get_ydata()[0] for line in axes[2].get_lines()[12:])
    assert bounds == [-2.0, 2.0]
    assert axes[-1].get_xlabel() == "t (steps)"
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["target", "input bound", "one thin line per trajectory (12)"]
    width, height = _save(fig, tmp_path, "trajectory.png")
    assert width > 300 and height > 300


def test_trajectory_band_and_shared_units(rotation, getkey):
    x0 = jax.random.normal(getkey(), (30, 2))
    traj = dynsys.rollout(dynsys.LinearSystem(rotation.K), x0, 15)
    fig = plot.trajectory(traj, state_names=["p1 (m)", "p2 (m)"], max_lines=20)
    (ax,) = fig.get_axes()  # the same unit: one axis, two channels
    assert ax.get_ylabel() == "p1, p2 (m)"
    medians = [line for line in ax.get_lines() if len(line.get_xdata())]
    assert len(medians) == 2 and len(ax.collections) == 2
    np.testing.assert_allclose(
        medians[1].get_ydata(), np.median(np.asarray(traj.xs[..., 1]), 0)
    )
    # Told apart by line style as well as colour (greyscale).
    assert medians[0].get_linestyle() != medians[1].get_linestyle()
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "median (line) and 10%–90% range (band) of 30 trajectories" in texts[-1]
    # A chosen subset of channels.
    fig = plot.trajectory(traj, channels=[1])
    assert [a.get_ylabel() for a in fig.get_axes()] == ["x1"]
    with pytest.raises(ValueError, match=r"trajectory\(channels=...\): expected"):
        plot.trajectory(traj, channels=[2])
    with pytest.raises(ValueError, match=r"trajectory\(summary=...\)"):
        plot.trajectory(traj, summary="mean")


def test_trajectory_single_and_given_axes(rotation):
    system = zoo.Pendulum()
    names = zoo.names("pendulum")
    traj = dynsys.rollout(system, jnp.array([1.0, 0.0]), 30, inputs=jnp.zeros((30, 1)))
    fig = plot.trajectory(traj, names=names)
    axes = fig.get_axes()
    assert [a.get_ylabel() for a in axes] == ["θ (rad)", "ω (rad/s)", "torque (N m)"]
    assert not axes[0].collections and axes[-1].get_xlabel() == "t (s)"
    target = Figure()
    given = target.subplots(3, 1)
    assert plot.trajectory(traj, ax=given) is target
    with pytest.raises(ValueError, match=r"trajectory\(ax=...\): expected 3 axes"):
        plot.trajectory(traj, ax=[given[0]])
    with pytest.raises(ValueError, match=r"trajectory\(state_names=...\): expected 2"):
        plot.trajectory(traj, state_names=["a"])
    with pytest.raises(ValueError, match=r"reference=...\): expected shape \(n,\)"):
        plot.trajectory(traj, reference=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"quantiles=...\): expected 0 <= low"):
        plot.trajectory(traj, quantiles=(0.9, 0.1))
    with pytest.raises(ValueError, match=r"input_bound=...\): expected a number"):
        plot.trajectory(traj, input_bound=[1.0, 2.0, 3.0])


def test_comparison(tmp_path):
    ts = np.arange(31) * 0.1
    truth = np.stack([np.sin(ts), np.cos(ts)], axis=1)
    noisy = truth + 0.05 * np.random.default_rng(0).normal(size=truth.shape)
    fig = plot.comparison(
        ts, noisy, {"true": truth, "fitted": 0.98 * truth}, time_label="t (s)"
    )
    axes = fig.get_axes()
    assert len(axes) == 2 and all(len(a.get_lines()) == 3 for a in axes)
    _save(fig, tmp_path, "comparison.png")
    target = Figure()
    given = target.subplots(2, 1)
    assert plot.comparison(ts, noisy, {"true": truth}, ax=list(given)) is target
    with pytest.raises(ValueError, match=r"comparison\(measured=...\): expected"):
        plot.comparison(ts[:-1], noisy, {})
    with pytest.raises(ValueError, match=r"'fitted' has shape \(31, 1\)"):
        plot.comparison(ts, noisy, {"fitted": truth[:, :1]})
    with pytest.raises(ValueError, match=r"comparison\(ax=...\): expected 2 axes"):
        plot.comparison(ts, noisy, {}, ax=[given[0]])


def test_phase_portrait_vector_field(tmp_path, rotation):
    autonomous = dynsys.LinearSystem(rotation.K)
    x0 = jnp.array([[1.0, 0.0], [0.0, -1.5], [0.5, 0.5]])
    traj = dynsys.rollout(autonomous, x0, 40)
    fig = plot.phase_portrait(traj, system=autonomous, grid=7, state_names=["a", "b"])
    ax, colorbar = fig.get_axes()
    assert colorbar.get_ylabel().startswith("log10 speed")
    (quiver,) = [c for c in ax.collections if type(c).__name__ == "Quiver"]
    # The arrows point along the steps x_{t+1} - x_t = (K - I) x at the grid points.
    points = np.stack([quiver.X, quiver.Y], axis=1)
    expected = points @ (np.asarray(rotation.K) - np.eye(2)).T
    _assert_directions(quiver, expected)
    assert points.shape == (49, 2)
    # One line and one start marker per trajectory (the legend's entry has no data).
    drawn = [line for line in ax.get_lines() if len(line.get_xdata())]
    assert len(drawn) == 2 * 3
    assert ax.get_xlabel() == "a" and ax.get_ylabel() == "b"
    _save(fig, tmp_path, "phase.png")


def test_phase_portrait_ode_controller_and_errors(tmp_path):
    ode = zoo.VanDerPol(1.0)
    sampled = zoo.van_der_pol()
    traj = dynsys.rollout(
        sampled, jnp.array([[0.5, 0.0]]), 40, inputs=jnp.zeros((40, 1))
    )
    fig = plot.phase_portrait(traj, system=ode, grid=5)
    quiver = [c for c in fig.get_axes()[0].collections if type(c).__name__ == "Quiver"]
    x = np.stack([quiver[0].X, quiver[0].Y], axis=1)
    velocity = np.stack([x[:, 1], (1 - x[:, 0] ** 2) * x[:, 1] - x[:, 0]], axis=1)
    _assert_directions(quiver[0], velocity)
    # Closed loop: the field uses the controller's input.
    pendulum = zoo.Pendulum()
    gain = dynsys.LinearFeedback(jnp.array([[2.0, 1.0]]))
    traj = dynsys.rollout(pendulum, jnp.array([0.5, 0.0]), 20, controller=gain)
    fig = plot.phase_portrait(traj, system=pendulum, controller=gain, grid=4)
    quiver = [c for c in fig.get_axes()[0].collections if type(c).__name__ == "Quiver"]
    x = jnp.stack([quiver[0].X, quiver[0].Y], axis=1)
    expected = jax.vmap(lambda x: pendulum.step(0.0, x, gain(0.0, x)) - x)(x)
    _assert_directions(quiver[0], np.asarray(expected))
    _save(fig, tmp_path, "closed_loop_phase.png")
    # Without a system: trajectories only, into a given Axes.
    target = Figure()
    ax = target.subplots()
    assert plot.phase_portrait(traj, ax=ax) is target
    assert not ax.collections
    with pytest.raises(ValueError, match=r"phase_portrait\(dims=...\): expected two"):
        plot.phase_portrait(traj, dims=(0, 0))
    with pytest.raises(ValueError, match=r"phase_portrait\(u=..., controller=...\)"):
        plot.phase_portrait(traj, system=pendulum, u=jnp.zeros(1), controller=gain)
    with pytest.raises(ValueError, match=r"phase_portrait\(u=...\): expected shape"):
        plot.phase_portrait(traj, system=pendulum, u=jnp.zeros(2))
    with pytest.raises(ValueError, match=r"phase_portrait\(state_names=...\)"):
        plot.phase_portrait(traj, state_names=["a"])
    msd = zoo.mass_spring_damper()
    big = dynsys.rollout(msd, jnp.ones(4), 5, inputs=jnp.zeros((5, 1)))
    with pytest.raises(ValueError, match=r"system=...\): the vector field needs"):
        plot.phase_portrait(big, system=msd)


def test_eigenvalues(tmp_path, rotation):
    fig = plot.eigenvalues({"true": rotation, "fitted": 0.99 * rotation.K})
    whole, close = fig.get_axes()
    # One marker line (no connecting line) per system in each panel.
    for ax in (whole, close):
        markers = [line for line in ax.get_lines() if line.get_linestyle() == "None"]
        assert [line.get_label() for line in markers] == ["true", "fitted"]
    true = markers[0].get_xdata() + 1j * markers[0].get_ydata()
    np.testing.assert_allclose(
        np.sort_complex(true),
        np.sort_complex(np.linalg.eigvals(np.asarray(rotation.K))),
    )
    _save(fig, tmp_path, "eigenvalues.png")
    target = Figure()
    ax = target.subplots()
    assert plot.eigenvalues({"K": rotation}, ax=ax) is target


def test_loss_history(tmp_path):
    losses = np.exp(-np.arange(50) / 10.0)
    fig = plot.loss_history(losses, [(0, 1.2), (25, 0.2), (49, 0.02)], title="fit")
    (ax,) = fig.get_axes()
    assert ax.get_yscale() == "log" and len(ax.get_lines()) == 2
    _save(fig, tmp_path, "loss.png")
    result = dynsys.train(
        lambda m, batch: jnp.mean((m[0] - batch[:, 0]) ** 2),
        jnp.zeros(1),
        data=jnp.arange(8.0)[:, None],
        batch_size=2,
        num_steps=12,
        progress=False,
    )
    fig = plot.loss_history(result)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [
        "training (minibatch)",
        "all training data",
        f"returned model (step {result.best_step})",
    ]
    target = Figure()
    ax = target.subplots()
    assert plot.loss_history(losses, ax=ax) is target


def test_sweep(tmp_path):
    fig = plot.sweep(
        "data.measurement_noise",
        [0.01, 0.1, 1.0],
        {"least squares": [99.0, 90.0, 40.0], "fitted": [99.5, 97.0, 85.0]},
        ylabel="fit (%)",
    )
    (ax,) = fig.get_axes()
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == 2
    assert ax.get_xlabel() == "data.measurement_noise"
    _save(fig, tmp_path, "sweep.png")
    fig = plot.sweep("fit.loss", ["one_step", "simulation"], {"fit %": [80.0, 95.0]})
    assert [t.get_text() for t in fig.get_axes()[0].get_xticklabels()] == [
        "one_step",
        "simulation",
    ]
    # Roles by the label as drawn; the shared part of the labels goes above.
    fig = plot.sweep(
        "k",
        [1.0, 2.0],
        {"fit %, least squares": [[1.0, 2.0], [1.5, 2.5]], "fit %, fitted": [3.0, 4.0]},
        roles={"least squares": "estimate", "fitted": "fit"},
    )
    (ax,) = fig.get_axes()
    assert ax.get_title(loc="left") == "fit %"
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert styles["fitted"] == "--"
    (errorbar,) = ax.containers
    assert errorbar.get_label() == "least squares (mean ± 1 std, 2 seeds)"
    assert errorbar.lines[0].get_linestyle() == "-."
    np.testing.assert_allclose(errorbar.lines[0].get_ydata(), [1.25, 2.25])
    with pytest.raises(ValueError, match=r"sweep\(metrics=...\): 'a' has shape \(1,\)"):
        plot.sweep("k", [1, 2], {"a": [1.0]})


def test_headless_without_pyplot(tmp_path):
    """No pyplot, so no display is needed whatever the configured backend."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, jax.numpy as jnp, dynsys\n"
        "from dynsys import plot\n"
        "s = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))\n"
        "traj = dynsys.rollout(s, jnp.ones((3, 2)), 10)\n"
        "figures = [plot.trajectory(traj), plot.phase_portrait(traj, system=s),\n"
        "           plot.eigenvalues({'K': s}), plot.loss_history([1.0, 0.5]),\n"
        "           plot.sweep('k', [1, 2], {'m': [1.0, 2.0]})]\n"
        "for k, fig in enumerate(figures):\n"
        f"    fig.savefig(r'{tmp_path}' + f'/{{k}}.png')\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    env = {**os.environ, "MPLBACKEND": "TkAgg", "DISPLAY": ""}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{k}.png" for k in range(5)]


def _drawn(ax, label):
    (line,) = [line for line in ax.get_lines() if line.get_label() == label]
    return line


def test_bode_against_the_closed_form(tmp_path):
    """x_{t+1} = a x_t + u_t, y = x: H(z) = 1 / (z - a) at z = exp(i w dt)."""
    a, dt = 0.5, 0.1
    system = dynsys.LinearSystem(K=jnp.array([[a]]), B=jnp.array([[1.0]]), dt=dt)
    fig = plot.bode({"fitted": system}, hz=True, num=40)
    mag_ax, phase_ax = fig.get_axes()
    mag, phase = _drawn(mag_ax, "fitted"), _drawn(phase_ax, "fitted")
    hz = mag.get_xdata()
    z = np.exp(1j * 2 * np.pi * hz * dt)
    np.testing.assert_allclose(mag.get_ydata(), 20 * np.log10(np.abs(1 / (z - a))))
    np.testing.assert_allclose(phase.get_ydata(), np.degrees(np.angle(1 / (z - a))))
    assert hz.max() == pytest.approx(0.5 / dt)  # up to Nyquist, in Hz
    assert phase_ax.get_xlabel() == "frequency (Hz)"
    # A precomputed response needs its frequencies; with them it is drawn as given.
    w = np.linspace(0.1, 3.0, 5)
    response = np.asarray(dynsys.frequency_response(system, w / dt))
    fig = plot.bode({"given": response}, w / dt, dt=dt)
    drawn = _drawn(fig.get_axes()[0], "given").get_ydata()
    np.testing.assert_allclose(drawn, 20 * np.log10(np.abs(response[:, 0, 0])))
    with pytest.raises(ValueError, match=r"bode\(frequencies=...\): 'given' is"):
        plot.bode({"given": response})
    with pytest.raises(ValueError, match=r"bode\(hz=True\): Hz needs"):
        plot.bode(
            dynsys.LinearSystem(K=jnp.array([[a]]), B=jnp.array([[1.0]])), hz=True
        )
    _save(fig, tmp_path, "bode.png")


def test_step_response_against_a_loop_and_for_nonlinear_systems():
    a = 0.5
    system = dynsys.LinearSystem(K=jnp.array([[a]]), B=jnp.array([[1.0]]))
    fig = plot.step_response({"fitted": system}, 6)
    (ax,) = fig.get_axes()
    expected = [sum(a**k for k in range(t)) for t in range(6)]  # s_t
    np.testing.assert_allclose(_drawn(ax, "fitted").get_ydata(), expected)
    assert ax.get_xlabel() == "t (steps)"
    # Any system with inputs: by rollout from rest under a unit step.
    pendulum = zoo.Pendulum()
    fig = plot.step_response({"pendulum": pendulum}, 5, output_names=["θ (rad)",
                             "ω (rad/s)"])  # fmt: skip
    reference = dynsys.rollout(pendulum, jnp.zeros(2), 5, inputs=jnp.ones((5, 1))).ys
    theta = _drawn(fig.get_axes()[0], "pendulum").get_ydata()
    np.testing.assert_allclose(theta, np.asarray(reference[:, 0]))
    with pytest.raises(ValueError, match=r"step_response\(systems=...\): 'x' has no"):
        plot.step_response({"x": dynsys.LinearSystem(K=jnp.eye(2))}, 3)


def test_eigenvalue_modes_recover_natural_frequency_and_damping():
    ode = dynsys.LinearODE(jnp.array([[0.0, 1.0], [-4.0, -0.8]]))  # wn 2, zeta 0.2
    system = dynsys.discretize(ode, 0.1)
    fig = plot.eigenvalues({"fitted": system}, roles={"fitted": "fit"})
    disc, close, modes = fig.get_axes()
    point = _drawn(modes, "fitted")
    np.testing.assert_allclose(point.get_xdata(), [2.0], rtol=1e-6)
    np.testing.assert_allclose(point.get_ydata(), [0.2], rtol=1e-6)
    assert modes.get_xlabel() == "natural frequency (rad/s)"
    # No dt: no modes panel; truth gets the hollow circle and nothing else does.
    fig = plot.eigenvalues({"a": np.diag([0.5, 0.9])}, truth=np.diag([0.4, 0.8]))
    disc, close = fig.get_axes()
    assert _drawn(disc, "true system").get_marker() == "o"
    assert _drawn(disc, "a").get_marker() != "o"
    with pytest.raises(ValueError, match=r"roles=...\): 'a' cannot take the role"):
        plot.eigenvalues({"a": np.eye(2)}, roles={"a": "truth"})


def test_singular_values_and_the_chosen_order():
    values = np.array([4.0, 2.0, 1.0, 1e-4, 5e-5])
    fig = plot.singular_values(values, order=3)
    (ax,) = fig.get_axes()
    np.testing.assert_allclose(_drawn(ax, "singular values").get_ydata(), values / 4)
    assert _drawn(ax, "chosen order n = 3").get_xdata()[0] == 3.5
    with pytest.raises(ValueError, match=r"singular_values\(order=...\): expected"):
        plot.singular_values(values, order=6)


def test_residuals_from_residual_analysis(getkey):
    system = dynsys.LinearSystem(
        K=jnp.array([[0.8, 0.1], [0.0, 0.7]]), B=jnp.array([[1.0], [0.5]]),
        C=jnp.array([[1.0, 0.0]]),
    )  # fmt: skip
    inputs = jax.random.normal(getkey(), (2, 200, 1))
    data = dynsys.simulate(system, jnp.zeros((2, 2)), 200, inputs=inputs,
                           measurement_noise=0.1, key=getkey())  # fmt: skip
    result = dynsys.residual_analysis(system, data, max_lag=10)
    fig = plot.residuals(result)
    auto, cross = fig.get_axes()
    markers = [line for line in auto.get_lines() if line.get_label() == "correlation"]
    np.testing.assert_allclose(markers[0].get_ydata(), result.autocorrelation[:, 0])
    np.testing.assert_allclose(markers[0].get_xdata(), np.arange(11))
    bounds = [line.get_ydata()[0] for line in cross.get_lines()
              if line.get_label().startswith("99 % confidence bound")]  # fmt: skip
    np.testing.assert_allclose(sorted(bounds), [-result.bound, result.bound])
    assert cross.get_xlim()[0] < -9  # lags -L..L
    with pytest.raises(ValueError, match=r"residuals\(result=...\): give"):
        plot.residuals()


def test_comparison_from_compare_shows_each_channels_fit(getkey):
    system = dynsys.LinearSystem(
        K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]), B=jnp.array([[0.0], [1.0]]),
        C=jnp.eye(2), dt=0.1,
    )  # fmt: skip
    inputs = jax.random.normal(getkey(), (2, 50, 1))
    data = dynsys.simulate(system, jnp.zeros((2, 2)), 50, inputs=inputs,
                           measurement_noise=0.05, key=getkey())  # fmt: skip
    result = dynsys.compare(system, data)
    fig = plot.comparison({"model": result}, experiment=1, dt=0.1, names=["a (m)",
                          "b (m/s)"])  # fmt: skip
    first, second = fig.get_axes()
    fits = np.asarray(result.fit_percent_per_experiment[1])
    assert first.get_title(loc="left") == f"fit: model {fits[0]:.1f} %"
    assert second.get_title(loc="left") == f"fit: model {fits[1]:.1f} %"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["measured", f"model (mean fit {fits.mean():.1f} %)"]
    np.testing.assert_allclose(_drawn(first, "measured").get_ydata(),
                               np.asarray(data.ys[1, :, 0]))  # fmt: skip
    assert second.get_xlabel() == "t (s)"
    # One channel: its fit in the legend.
    fig = plot.comparison(result, channels=[1])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert (
        legend[1]
        == f"model (fit {float(result.fit_percent_per_experiment[0, 1]):.1f} %)"
    )


def test_loss_history_marks_the_returned_step_and_clips_a_divergence():
    losses = np.r_[np.exp(-np.arange(20) / 5.0), 1e30, np.inf]
    fig = plot.loss_history(losses, best_step=19, stop_reason="diverged at step 21")
    (ax,) = fig.get_axes()
    star = _drawn(ax, "returned model (step 19)")
    assert star.get_xdata()[0] == 19 and star.get_ydata()[0] == losses[19]
    assert ax.get_ylim()[1] == pytest.approx(1e6 * losses[0])
    assert "stopped: diverged at step 21" in ax.get_title(loc="left")
    assert "above the axis" in ax.get_title(loc="left")
    with pytest.raises(ValueError, match=r"loss_history\(best_step=...\)"):
        plot.loss_history(losses, best_step=99)


def test_error_messages_name_the_call_and_argument(getkey):
    ts = np.arange(5.0)
    y = np.ones((5, 2))
    system = dynsys.LinearSystem(K=jnp.eye(2) * 0.5, B=jnp.ones((2, 1)), C=jnp.eye(2))
    data = dynsys.simulate(system, jnp.zeros((1, 2)), 5, inputs=jnp.ones((1, 5, 1)))
    result = dynsys.compare(system, data)
    cases = [
        (lambda: plot.comparison(result, y), r"comparison\(measured=..., predictions"),
        (lambda: plot.comparison(result, experiment=3), r"comparison\(experiment"),
        (lambda: plot.comparison(ts), r"comparison\(measured=...\): the measured"),
        (lambda: plot.comparison(ts, y, {"a": y}, fit_percent={"a": [1.0]}),
         r"comparison\(fit_percent=...\): 'a' has shape \(1,\), expected \(2,\)"),
        (lambda: plot.comparison(ts, y, {"a": y}, roles={"a": "best"}),
         r"comparison\(roles=...\): 'a' has role 'best'"),
        (lambda: plot.comparison(ts, y, {}, truth=y[:, :1]),
         r"comparison\(truth=...\): 'truth' has shape \(5, 1\)"),
        (lambda: plot.comparison(ts, y, {}, channels=[5]),
         r"comparison\(channels=...\): expected indices in \[0, 1\]"),
        (lambda: plot.singular_values(np.ones((2, 2))),
         r"singular_values\(values=...\): 'singular values' must be a non-empty"),
        (lambda: plot.residuals(autocorrelation=np.ones((3, 2, 1)), bound=0.1),
         r"residuals\(autocorrelation=...\): expected shape \(L\+1, p\)"),
        (lambda: plot.residuals(autocorrelation=np.ones((3, 2)),
                                cross_correlation=np.ones((3, 2, 1)), bound=0.1),
         r"residuals\(cross_correlation=...\): expected shape \(2L\+1, p, m\) = "
         r"\(5, 2, m\)"),
        (lambda: plot.step_response({"a": np.ones((4, 2))}, 5),
         r"step_response\(systems=...\): 'a' must have shape \(5, p, m\)"),
        (lambda: plot.bode({"a": zoo.Pendulum()}),
         r"bode\(systems=...\): 'a' must be a linear system with inputs"),
        (lambda: plot.eigenvalues({"a": np.ones(3)}),
         r"eigenvalues\(systems=...\): 'a' must be a linear system"),
        (lambda: plot.eigenvalues({}), r"eigenvalues\(systems=...\): nothing"),
    ]  # fmt: skip
    for make, message in cases:
        with pytest.raises(ValueError, match=message):
            make()


def test_save_png_writes_what_savefig_writes(tmp_path, rotation):
    """`plot._save.save_png` draws a constrained-layout figure once; the file has
    the pixels `savefig` writes (of the same figure drawn anew), and the figure
    keeps its canvas and dpi."""
    from matplotlib.image import imread

    from dynsys.plot._save import save_png

    figures = {
        "bode": lambda: plot.bode({"fitted": rotation}, title="a title"),
        "step": lambda: plot.step_response({"a": rotation}, 30, input_names=["u (N)"]),
    }
    for name, make in figures.items():
        fig = make()
        canvas, dpi = fig.canvas, fig.dpi
        save_png(fig, tmp_path / f"{name}_once.png", dpi=60)
        assert fig.canvas is canvas and fig.dpi == dpi
        make().savefig(tmp_path / f"{name}_savefig.png", dpi=60)
        once = imread(tmp_path / f"{name}_once.png")
        twice = imread(tmp_path / f"{name}_savefig.png")
        assert once.shape == twice.shape
        np.testing.assert_array_equal(once, twice)
