"""Experiments: run folders, reproducibility, sweeps, config errors, the scripts."""

import copy
import importlib.util
import json
import pathlib
import tomllib

import dynsys.models as zoo
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


ROOT = pathlib.Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"

FIT = {
    "kind": "fit",
    "name": "tiny_fit",
    "seed": 3,
    "data": {"trajectories": 4, "length": 15, "measurement_noise": 0.05},
    "fit": {"steps": 8, "lr": 1e-2},
}
TRAIN = {
    "kind": "train_controller",
    "name": "tiny_train",
    "system": {"model": "pendulum", "state_names": ["θ (rad)", "ω (rad/s)"]},
    "controller": {"type": "mlp", "width": 4, "depth": 1, "bound": 5.0},
    "cost": {"target": [3.0, 0.0], "Q": [1.0, 0.1], "R": 0.01},
    "train": {
        "horizon": 10,
        "initial_states": 6,
        "test_states": 3,
        "batch_size": 3,
        "steps": 6,
        "spread": [0.3, 0.5],
    },
}


def _run(config, tmp_path, **kwargs):
    return dynsys.run_experiment(
        config, out_root=tmp_path / "runs", progress=False, echo=None, **kwargs
    )


def _without_timing(metrics):
    metrics = copy.deepcopy(metrics)
    metrics.pop("timing")
    return metrics


@pytest.mark.parametrize("config", [FIT, TRAIN], ids=["fit", "train_controller"])
def test_same_config_and_seed_same_metrics(config, tmp_path):
    first = _run(config, tmp_path)
    second = _run(config, tmp_path)
    assert first.path != second.path  # two timestamped folders, never one reused
    assert first.path.name.startswith(config["name"] + "-")
    a = json.loads((first.path / "metrics.json").read_text())
    b = json.loads((second.path / "metrics.json").read_text())
    assert "timing" in a and a == first.metrics
    assert _without_timing(a) == _without_timing(b)
    if config["kind"] == "fit":  # another seed gives other data, other metrics
        other = _run({**config, "seed": 11}, tmp_path)
        assert _without_timing(other.metrics)["summary"] != a["summary"]
    # The written config.toml is the resolved config and reruns the experiment.
    written = tomllib.loads((first.path / "config.toml").read_text())
    assert dynsys.resolve_config(written) == dynsys.resolve_config(config)


def test_fit_run_folder(tmp_path):
    result = _run(FIT, tmp_path)
    names = {p.name for p in result.path.iterdir()}
    assert names == {
        ".dynsys-run",
        "config.toml",
        "metrics.json",
        "history.csv",
        "model.dynsys",
        "summary.md",
        "data.npz",
        "trajectories.png",
        "eigenvalues.png",
        "loss.png",
    }
    assert [p.name for p in result.figures] == [
        "trajectories.png",
        "eigenvalues.png",
        "loss.png",
    ]
    assert all(p.read_bytes()[:8] == PNG for p in result.figures)
    lines = (result.path / "history.csv").read_text().splitlines()
    # One row per step run (at most the 8 asked for: the default optimiser may
    # converge sooner) and the returned model's row.
    steps_run = result.metrics["steps_run"]
    assert lines[0] == "step,train_loss,validation_loss" and 1 <= steps_run <= 8
    assert len(lines) == 1 + steps_run + 1
    summary = (result.path / "summary.md").read_text()
    assert summary.startswith("# tiny_fit") and "![loss](loss.png)" in summary
    # The reported held-out fit % agrees with one recomputed from the saved files.
    model = dynsys.load(result.path / "model.dynsys")
    data = dynsys.load_dataset(result.path / "data.npz")
    held = data[np.arange(3, 4)]
    xs = dynsys.rollout(model, held.xs[:, 0], held.num_steps, inputs=held.us).xs
    expected = float(dynsys.fit_percent(held.xs[:, 1:], xs[:, 1:]))
    row = result.metrics["fit_percent"]["held-out fit % vs measurements"]
    assert row["fitted"] == pytest.approx(expected, rel=1e-9)
    key = "held-out fit % vs noise-free truth, fitted"
    assert result.metrics["summary"][key] > -100


def test_train_controller_run_folder(tmp_path):
    result = _run(TRAIN, tmp_path)
    assert [p.name for p in result.figures] == [
        "closed_loop_before.png",
        "closed_loop_after.png",
        "loss.png",
        "phase_portrait.png",
    ]
    assert all(p.read_bytes()[:8] == PNG for p in result.figures)
    metrics = result.metrics
    assert metrics["steps_run"] == 6 and metrics["controller"] == "mlp"
    # The saved controller reproduces the reported cost after training.
    like = dynsys.MLPController(2, 1, 4, 1, use_time=False, bound=5.0, key=_key())
    controller = dynsys.load(result.path / "model.dynsys", like=like)
    x0 = jnp.array([[3.2, 0.1], [2.8, -0.4]])
    traj = dynsys.rollout(zoo.Pendulum(), x0, 10, controller=controller)
    assert np.all(np.abs(np.asarray(traj.us)) < 5.0)
    lines = (result.path / "history.csv").read_text().splitlines()
    assert lines[0] == "step,train_loss,full_loss" and len(lines) >= 1 + 6


def _key():
    import jax

    return jax.random.key(0)


def test_sweep_writes_one_run_per_value_and_a_summary(tmp_path):
    config = {**FIT, "sweep": {"key": "data.measurement_noise", "values": [0.0, 0.2]}}
    result = _run(config, tmp_path)
    assert [r.path.name for r in result.runs] == [
        "measurement_noise=0.0",
        "measurement_noise=0.2",
    ]
    assert all(r.path.parent == result.path for r in result.runs)
    assert (result.path / "sweep.png").read_bytes()[:8] == PNG
    assert result.figures == (result.path / "sweep.png",)
    metrics = json.loads((result.path / "metrics.json").read_text())
    assert metrics["sweep"] == {"key": "data.measurement_noise", "values": [0.0, 0.2]}
    # Each sub-run is the run of the config with that one value.
    single = _run({**FIT, "data": {**FIT["data"], "measurement_noise": 0.2}}, tmp_path)
    assert metrics["runs"][1]["summary"] == single.metrics["summary"]
    assert result.runs[1].config["data"]["measurement_noise"] == 0.2
    summary = (result.path / "summary.md").read_text()
    assert "| data.measurement_noise |" in summary
    assert summary.count("](measurement_noise=") == 2
    assert "[sweep]" in (result.path / "config.toml").read_text()


def test_sweep_over_seeds_runs_each_value_per_seed(tmp_path):
    sweep = {"key": "data.measurement_noise", "values": [0.0, 0.2], "seeds": [5, 6]}
    result = _run({**FIT, "sweep": sweep}, tmp_path)
    assert [r.path.name for r in result.runs] == [
        "measurement_noise=0.0_seed=5",
        "measurement_noise=0.0_seed=6",
        "measurement_noise=0.2_seed=5",
        "measurement_noise=0.2_seed=6",
    ]
    metrics = json.loads((result.path / "metrics.json").read_text())
    assert metrics["sweep"]["seeds"] == [5, 6]
    assert [(r["value"], r["seed"]) for r in metrics["runs"]] == [
        (0.0, 5),
        (0.0, 6),
        (0.2, 5),
        (0.2, 6),
    ]
    # Each sub-run is the single run with that value and that seed.
    single = _run(
        {**FIT, "seed": 6, "data": {**FIT["data"], "measurement_noise": 0.2}},
        tmp_path,
    )
    assert metrics["runs"][3]["summary"] == single.metrics["summary"]
    assert metrics["runs"][2]["summary"] != single.metrics["summary"]  # seed 5
    summary = (result.path / "summary.md").read_text()
    assert "seeds 5, 6" in summary and "| 0.2 | 6 |" in summary
    assert (result.path / "sweep.png").read_bytes()[:8] == PNG


def test_sweep_seeds_must_be_distinct_seeds():
    for seeds in ([], [1, 1], [-1], "0"):
        sweep = {"key": "data.measurement_noise", "values": [0.1], "seeds": seeds}
        with pytest.raises(dynsys.ConfigError, match="sweep.seeds"):
            dynsys.resolve_config({**FIT, "sweep": sweep})


def test_a_fit_of_a_data_file_does_not_build_the_zoo_model_it_never_simulates():
    # The abstract build refuses num_masses = 0 where the model is simulated; a fit
    # of a data file still checks the parameters' names and types, not the build.
    bad = {"system": {"params": {"num_masses": 0}}}
    with pytest.raises(dynsys.ConfigError, match="cannot be built"):
        dynsys.resolve_config({**FIT, **bad})
    from_file = {**FIT, **bad, "data": {"file": "measured.csv"}}
    assert dynsys.resolve_config(from_file)["system"]["params"] == {"num_masses": 0}
    with pytest.raises(dynsys.ConfigError, match="expected a number"):
        dynsys.resolve_config({**from_file, "system": {"params": {"mass": "1"}}})


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"kind": "fitt"},
            r"config key 'kind': expected one of 'fit', 'train_controller', got 'fitt'",
        ),
        ({"kind": None}, r"config key 'kind': expected one of .* got nothing"),
        (
            {"system": {"model": "pendulm"}},
            r"config key 'system.model': expected one of .*'mass_spring_damper', 'pendulum'",
        ),
        (
            {"system": {"params": {"mas": 1.0}}},
            r"config key 'system.params': unknown parameter 'mas' of model 'mass_spring_damper'; allowed: damping, dt, mass, num_masses, stiffness",
        ),
        (
            {"system": {"params": {"mass": "1"}}},
            r"config key 'system.params.mass': expected a number, got str '1'",
        ),
        (
            {"fit": {"steps": 2.5}},
            r"config key 'fit.steps': expected int, got float 2.5",
        ),
        (
            {"fit": {"model": "nonlinear"}},
            r"config key 'fit.model': expected one of 'linear', 'stable', 'neural', got 'nonlinear'",
        ),
        (
            {"fit": {"epochs": 3}},
            r"unknown config key 'fit.epochs'; allowed keys in \[fit\]: batch_size, feedthrough, horizon, input_delay, loss, lr, model, neural_batch_size, neural_depth, neural_horizon, neural_lr, neural_past, neural_steps, neural_width, offset, optimizer, order, orders, ridge, stabilise, steps, structure, subspace_horizon",
        ),
        (
            {"controller": {}},
            r"unknown config section '\[controller\]'; allowed sections: data, fit, sweep, system",
        ),
        ({"name": "a/b"}, r"config key 'name': expected letters, digits"),
        (
            {"data": {"x0_mean": [1.0]}},
            r"config key 'data.x0_mean': expected a number or a list of 4 numbers \(one per state\), got a list of 1",
        ),
    ],
)
def test_invalid_fit_configs(change, message, tmp_path):
    config = {**FIT, **change}
    if change.get("kind", "") is None:
        del config["kind"]
    with pytest.raises(dynsys.ConfigError, match=message):
        _run(config, tmp_path)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


@pytest.mark.parametrize(
    "section, change, message",
    [
        (
            "cost",
            {"target": [1.0]},
            r"config key 'cost.target': expected a number or a list of 2 numbers \(one per state\), got a list of 1",
        ),
        (
            "cost",
            {"R": [0.1, 0.1]},
            r"config key 'cost.R': .* list of 1 numbers \(one per input\)",
        ),
        (
            "controller",
            {"type": "stacked", "depth": 1},
            r"config key 'controller.depth': a stacked controller needs depth >= 2",
        ),
        (
            "controller",
            {"type": "pid"},
            r"config key 'controller.type': expected one of 'linear', 'mlp', 'stacked'",
        ),
        (
            "system",
            {"model": "lotka_volterra"},
            r"config key 'system.model': 'lotka_volterra' takes no input",
        ),
        (
            "system",
            {"state_names": ["θ"]},
            r"config key 'system.state_names': expected 2 names, got 1",
        ),
        (
            "train",
            {"schedule": "step"},
            r"config key 'train.schedule': expected one of 'constant', 'cosine'",
        ),
    ],
)
def test_invalid_train_configs(section, change, message, tmp_path):
    config = copy.deepcopy(TRAIN)
    config[section].update(change)
    with pytest.raises(dynsys.ConfigError, match=message):
        _run(config, tmp_path)
    leftovers = (
        list((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else []
    )
    assert leftovers == []  # a failed run leaves no folder, not even a partial one


def test_unreadable_data_file_and_config_file(tmp_path):
    bad = tmp_path / "d.csv"
    bad.write_text("trajectory,time,x0\n0,0,1\n0,1,oops\n")
    with pytest.raises(dynsys.ConfigError, match=r"config key 'data.file': .*line 3"):
        _run({**FIT, "data": {"file": str(bad)}}, tmp_path)
    with pytest.raises(dynsys.ConfigError, match=r"config file .* does not exist"):
        _run(tmp_path / "nope.toml", tmp_path)
    (tmp_path / "broken.toml").write_text("kind = \n")
    with pytest.raises(dynsys.ConfigError, match=r"is not valid TOML"):
        _run(tmp_path / "broken.toml", tmp_path)
    with pytest.raises(
        TypeError, match=r"resolve_config\(config=...\): expected a path"
    ):
        dynsys.resolve_config(3)


def test_fit_a_data_file_without_a_true_system(tmp_path):
    K = np.array([[0.9, 0.2], [-0.2, 0.9]])
    data = dynsys.simulate(dynsys.LinearSystem(K), np.eye(2) + 0.5, 12)
    data.save(tmp_path / "d.npz")
    config = {
        "kind": "fit",
        "data": {"file": str(tmp_path / "d.npz"), "validation": 0.0},
        "fit": {"steps": 3, "loss": "shooting", "horizon": 4, "model": "stable"},
    }
    result = _run(config, tmp_path, out=tmp_path / "exact")
    assert result.path == tmp_path / "exact"
    assert "data.npz" not in {p.name for p in result.path.iterdir()}
    assert list(result.metrics["eigenvalues"]) == ["least squares", "fitted"]
    np.testing.assert_allclose(  # noise-free data: least squares is exact
        sorted(np.hypot(*np.array(result.metrics["eigenvalues"]["least squares"]).T)),
        sorted(np.abs(np.linalg.eigvals(K))),
    )
    assert isinstance(
        dynsys.load(result.path / "model.dynsys"), dynsys.StableLinearSystem
    )


def test_every_shipped_config_is_valid():
    configs = sorted((ROOT / "examples" / "configs").glob("*.toml"))
    assert {p.name for p in configs} >= {
        "fit_mass_spring_damper.toml",
        "fit_noise_sweep.toml",
        "train_pendulum.toml",
    }
    for path in configs:
        config = dynsys.resolve_config(path)
        assert config["name"] == path.stem


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "script, overrides",
    [
        ("fit_system", ["data.trajectories=3", "data.length=10", "fit.steps=2"]),
        (
            "train_controller",
            ["train.steps=2", "train.horizon=5", "train.initial_states=4",
             "train.batch_size=2", "controller.depth=2", "controller.width=4"],
        ),
    ],
)  # fmt: skip
def test_scripts_run_their_configs_and_copy_figures(script, overrides, tmp_path):
    args = ["--out-root", str(tmp_path / "runs"), "--figures", str(tmp_path / "fig")]
    for override in overrides:
        args += ["--set", override]
    result = _script(script).main([*args, "--no-progress"])
    copied = sorted(p.name for p in (tmp_path / "fig").iterdir())
    prefix = result.config["name"]
    assert copied == sorted(f"{prefix}_{p.name}" for p in result.figures)
    for p in result.figures:
        assert (tmp_path / "fig" / f"{prefix}_{p.name}").read_bytes() == p.read_bytes()


def test_folder_names_are_reserved_and_safe(tmp_path):
    from dynsys._experiments.run_folder import reserve_folder as _reserve_folder
    from dynsys._experiments.sweep import _folder_label

    first = _reserve_folder(tmp_path, "x")
    second = _reserve_folder(tmp_path, "x")
    assert first != second and first.is_dir() and second.is_dir()
    taken: set[str] = set()
    assert _folder_label("Q=[1.0, 0.1]", taken) == "Q=_1.0__0.1_"
    assert _folder_label("Q=[1.0, 0.1]", taken) == "Q=_1.0__0.1_-2"
    assert _folder_label("loss=one_step", taken) == "loss=one_step"


@pytest.mark.slow
def test_the_precision_is_the_configs_not_the_sessions(tmp_path):
    """`dynsys run` and `dynsys.run_experiment` from a float32 session give the same
    metrics: the run computes in the config's precision, and records it."""
    import jax

    with jax.enable_x64(False):
        in_float32_session = _run(FIT, tmp_path / "a")
    in_float64_session = _run(FIT, tmp_path / "b")
    assert _without_timing(in_float32_session.metrics) == _without_timing(
        in_float64_session.metrics
    )
    assert in_float32_session.metrics["precision"] == "float64"
    assert dynsys.load(in_float32_session.path / "model.dynsys").K.dtype == np.float64
    single = _run({**FIT, "precision": "float32"}, tmp_path / "c")
    assert dynsys.load(single.path / "model.dynsys").K.dtype == np.float32
    written = tomllib.loads((single.path / "config.toml").read_text())
    assert written["precision"] == "float32"


def test_a_data_file_run_records_only_what_it_used_and_reruns_from_its_folder(
    tmp_path, monkeypatch
):
    import hashlib

    K = np.array([[0.9, 0.2], [-0.2, 0.9]])
    data = dynsys.simulate(dynsys.LinearSystem(K), np.eye(2) + 0.5, 12)
    monkeypatch.chdir(tmp_path)
    data.save("d.npz")
    config = {"kind": "fit", "data": {"file": "d.npz"}, "fit": {"steps": 3}}
    result = _run(config, tmp_path, out="run")
    written = tomllib.loads((result.path / "config.toml").read_text())
    assert written["data"]["file"] == str(tmp_path / "d.npz")  # resolved
    for key in ("trajectories", "length", "measurement_noise", "x0_scale"):
        assert key not in written["data"]  # simulated-data keys were not used
    assert "model" not in written["system"]
    digest = hashlib.sha256((tmp_path / "d.npz").read_bytes()).hexdigest()
    assert result.metrics["data_file"]["sha256"] == digest
    summary = (result.path / "summary.md").read_text()
    assert "2 states (x0, x1), no inputs" in summary and digest in summary
    monkeypatch.chdir(result.path)  # rerun from inside the run folder
    rerun = _run("config.toml", tmp_path, out=tmp_path / "rerun")
    assert _without_timing(rerun.metrics) == _without_timing(result.metrics)


def test_a_shooting_horizon_longer_than_the_data_is_refused(tmp_path):
    config = {**FIT, "fit": {"steps": 3, "loss": "shooting", "horizon": 50}}
    with pytest.raises(dynsys.ConfigError, match=r"'fit.horizon'.*longer than"):
        _run(config, tmp_path)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
