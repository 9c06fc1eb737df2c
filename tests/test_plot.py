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
