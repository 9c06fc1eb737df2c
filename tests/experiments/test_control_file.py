"""Issue 47: a `train_controller` config whose plant is a model file (`system.file`),
a controller of the observer's estimate and the set point trained through the loop,
scored against LQG on the same cost; the one-line refusals and warnings."""

import pathlib
import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import assert_gradient_matches_differences, toml_text


# A lightly damped plant near a double integrator (sample time 0.1 s), with an
# operating point far from zero: level 5 at input 2.
K = np.array([[1.0, 0.1], [0.0, 0.995]])
B = np.array([[0.0], [0.1]])
C = np.array([[1.0, 0.0]])
LEVELS = {"dt": 0.1, "input_level": [2.0], "output_level": [5.0]}


def _linear(**changes):
    return dynsys.LinearSystem(K, B, C, **(LEVELS | changes))


def _innovation():
    return dynsys.InnovationSystem(
        K, B, C, kalman_gain=np.array([[0.6], [0.9]]), **LEVELS
    )


def _config(file: str, **sections) -> dict:
    config = {
        "kind": "train_controller",
        "name": "on_file",
        "system": {"file": file},
        "controller": {"type": "linear"},
        "cost": {"set_point": [6.0], "Q": 1.0, "R": 1e-4},
        "train": {"horizon": 120, "initial_states": 4, "test_states": 4,
                  "spread": 0.2, "steps": 300, "optimizer": "lbfgs"},
    }  # fmt: skip
    for section, keys in sections.items():
        config[section] = {**config.get(section, {}), **keys}
    return config


def _run(config, tmp_path, echo=None):
    return dynsys.run_experiment(
        config, out_root=tmp_path / "runs", progress=False, echo=echo
    )


@pytest.mark.parametrize("make", [_linear, _innovation], ids=["linear", "innovation"])
def test_a_model_file_from_another_folder_is_the_plant_and_lqg_the_baseline(
    make, tmp_path, monkeypatch
):
    """The config in configs/ names ../models/model.dynsys; run from a third
    folder. Unbounded quadratic cost: the trained output-feedback controller's
    held-out cost is within 1 % of LQG's (issue 47's first target; measured
    2.5236 against 2.5240 for the LinearSystem file, 0.017 % below)."""
    jax.config.update("jax_enable_x64", True)
    (tmp_path / "models").mkdir()
    (tmp_path / "configs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    dynsys.save(tmp_path / "models" / "model.dynsys", make())
    path = tmp_path / "configs" / "control.toml"
    path.write_text(toml_text(_config("../models/model.dynsys")))
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = _run(path, tmp_path)
    scores = result.metrics["controllers"]
    assert set(scores) == {"trained", "LQG"}
    trained, lqg = scores["trained"]["held_out_cost"], scores["LQG"]["held_out_cost"]
    assert abs(trained - lqg) / lqg < 0.01
    assert result.metrics["cost_before"] > 10 * trained
    assert [p.name for p in result.figures] == ["closed_loop.png", "loss.png"]
    summary = (result.path / "summary.md").read_text()
    assert "| LQG |" in summary and "| trained |" in summary
    # The run's config.toml names the model file by its absolute path: it reruns.
    written = tomllib.loads((result.path / "config.toml").read_text())
    expected = (tmp_path / "models" / "model.dynsys").resolve()
    assert pathlib.Path(written["system"]["file"]) == expected
    observer = result.metrics["observer"]
    assert ("own Kalman" in observer) == (make is _innovation)


def test_with_an_input_bound_the_trained_controller_beats_clipped_lqg(tmp_path):
    """Issue 47's second target: |u - u_level| <= 0.5 on a step of 1 (the level
    from 5 to 6). LQG, clipped, overshoots by 65 %; the trained controller (linear,
    saturated) does not: measured 11.49 against 19.38 (41 % lower)."""
    jax.config.update("jax_enable_x64", True)
    dynsys.save(tmp_path / "model.dynsys", _linear())
    config = _config(str(tmp_path / "model.dynsys"), controller={"bound": 0.5})
    result = _run(config, tmp_path)
    scores = result.metrics["controllers"]
    trained = scores["trained"]["held_out_cost"]
    clipped = scores["LQG, clipped"]["held_out_cost"]
    assert trained < 0.7 * clipped
    assert max(scores["trained"]["input_peak"]) <= 0.5
    assert max(scores["LQG, clipped"]["input_peak"]) == pytest.approx(0.5)
    assert scores["LQG, clipped"]["overshoot_percent"][0] > 30
    assert scores["trained"]["overshoot_percent"][0] < 10


def _task(model, tmp_path, **sections):
    from dynsys._experiments.control.plant_file import load_plant
    from dynsys._experiments.control.task import set_point_task
    from dynsys._experiments.paths import resolve_data_file

    dynsys.save(tmp_path / "model.dynsys", model)
    config = dynsys.resolve_config(_config(str(tmp_path / "model.dynsys"), **sections))
    config = resolve_data_file(config)
    return set_point_task(config, load_plant(config))


def test_the_lqg_loop_matches_a_numpy_loop_with_python_control_gains(tmp_path):
    """The baseline inside the rollout is LQG: python-control's `dlqr` and `dlqe`
    gains, the steady state from a linear solve, a plain NumPy loop."""
    control = pytest.importorskip("control")
    from dynsys._control.set_point import lqg_set_point_controller

    jax.config.update("jax_enable_x64", True)
    model = _linear()
    task = _task(model, tmp_path, observer={"process_noise": 0.5})
    controller = lqg_set_point_controller(model, **task.weights.arguments())
    x0 = np.array([0.3, -0.2])
    trajectory = task.rollout(controller, jnp.asarray([np.r_[x0, 0.0, 0.0]]))
    G, _, _ = control.dlqr(K, B, C.T @ C, 1e-4 * np.eye(1))
    # dlqe's gain is the predictor's: x_{t+1} = K x_t + B u_t + L (y_t - C x_t).
    L, _, _ = control.dlqe(K, np.eye(2), C, 0.5 * np.eye(2), np.eye(1))
    steady = np.linalg.solve(np.block([[K - np.eye(2), B], [C, np.zeros((1, 1))]]),
                             np.r_[0.0, 0.0, 1.0])  # fmt: skip
    x_ss, u_ss = steady[:2], steady[2:]
    x, estimate, ys, us = x0, np.zeros(2), [], []
    for _ in range(120):
        u = u_ss - G @ (estimate - x_ss)
        y = C @ x
        ys.append(y + 5.0)
        us.append(u + 2.0)
        x, estimate = K @ x + B @ u, K @ estimate + B @ u + L @ (y - C @ estimate)
    np.testing.assert_allclose(np.asarray(trajectory.ys[0]), ys, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(trajectory.us[0]), us, rtol=1e-9, atol=1e-12)


def test_the_config_cost_differentiates_exactly_through_the_observer(tmp_path):
    """The gradient of the run's cost with respect to the controller's weights,
    through the observer (the plant starts away from it), against central finite
    differences."""
    jax.config.update("jax_enable_x64", True)
    task = _task(_innovation(), tmp_path, train={"horizon": 30})
    controller = dynsys.MLPController(
        3, 1, 4, 0, use_time=False, bound=0.8, key=jax.random.key(0)
    )
    z0s = jnp.array([[0.2, -0.1, 0.0, 0.0], [-0.1, 0.3, 0.0, 0.0]])
    layer = controller.mlp.layers[0]

    def cost(weight):
        changed = jax.tree.map(lambda a: a, controller)
        changed = eqx_set(changed, weight)
        return task.cost(changed, z0s)

    def eqx_set(c, weight):
        import equinox as eqx

        return eqx.tree_at(lambda c: c.mlp.layers[0].weight, c, weight)

    assert_gradient_matches_differences(cost, np.asarray(layer.weight))


def _neural(tmp_path, encoder: bool) -> str:
    """A neural model file (and, if asked, an encoder file beside it)."""
    folder = tmp_path / ("with" if encoder else "without")
    folder.mkdir()
    neural = dynsys.NeuralStateSpace(_linear(), width_size=4, key=jax.random.key(0))
    dynsys.save(folder / "neural_model.dynsys", neural)
    if encoder:
        (folder / "neural_encoder.dynsys").write_bytes(b"")  # only its presence
    return str(folder / "neural_model.dynsys")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"cost": {"set_point": [6.0, 1.0]}},
         r"^config key 'cost.set_point': expected 1 finite numbers per set point"),
        ({"cost": {"set_point": None}},
         r"^config key 'cost.set_point': a model-file plant tracks output set points"),
        ({"cost": {"Q": [1.0, 2.0]}},
         r"^config key 'cost.Q': expected a number or a list of 1 numbers"),
        ({"cost": {"R": [1.0, 2.0]}},
         r"^config key 'cost.R': expected a number or a list of 1 numbers"),
        ({"system": {"output_names": ["a", "b"]}},
         r"^config key 'system.output_names': the model in model.dynsys has 1 outputs"),
        ({"cost": {"target": [1.0, 0.0]}},
         r"^config key 'cost.target': only for a plant without system.file"),
        ({"system": {"file": "nowhere.dynsys"}},
         r"^config key 'system.file': no such file"),
        ({"system": {"file": "neural_without"}},
         r"^config key 'system.encoder': neural_model.dynsys is a neural model.*no "
         r"neural_encoder.dynsys beside it"),
        ({"system": {"file": None, "model": "pendulum"}},
         r"^config key 'cost.set_point': only for a plant with system.file"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_in_one_line_before_training(change, message, tmp_path):
    jax.config.update("jax_enable_x64", True)
    dynsys.save(tmp_path / "model.dynsys", _linear())
    config = _config(str(tmp_path / "model.dynsys"), **change)
    for section, keys in change.items():  # None: the key left out
        config[section] = {k: v for k, v in config[section].items() if v is not None}
    file = config["system"].get("file", "")
    if file.startswith("neural_"):
        config["system"]["file"] = _neural(tmp_path, encoder=file == "neural_with")
    if file == "nowhere.dynsys":
        config["system"]["file"] = str(tmp_path / file)
    config["train"]["steps"] = 10**8  # refused before any of them runs
    with pytest.raises(dynsys.ConfigError, match=message) as refused:
        _run(config, tmp_path)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_unstable_model_and_a_set_point_outside_the_data_are_warned_of(tmp_path):
    """Both warnings come before training, one line each, and the run goes on;
    the data's range and channel names come from the fit's config.toml beside the
    model file."""
    jax.config.update("jax_enable_x64", True)
    unstable = dynsys.LinearSystem(np.array([[1.02, 0.1], [0.0, 0.9]]), B, C, **LEVELS)
    dynsys.save(tmp_path / "model.dynsys", unstable)
    levels = np.linspace(4.5, 5.5, 50)
    (tmp_path / "data.csv").write_text(
        "time,pump,level\n"
        + "".join(f"{0.1 * k:.1f},2.0,{float(v)!r}\n" for k, v in enumerate(levels))
    )
    (tmp_path / "config.toml").write_text(
        'kind = "fit"\n[data]\nfile = "' + str(tmp_path / "data.csv") + '"\n'
        'inputs = ["pump"]\noutputs = ["level"]\n'
    )
    lines = []
    config = _config(str(tmp_path / "model.dynsys"), train={"steps": 3})
    result = _run(config, tmp_path, echo=lines.append)
    warnings = [line for line in lines if "warning:" in line]
    assert len(warnings) == 2
    assert "not stable (largest |eigenvalue| 1.02 >= 1); the controller is trained" in (
        warnings[0]
    )
    assert "level 6 not in [4.5, 5.5]" in warnings[1]
    assert all("\n" not in line for line in warnings)
    training = next(k for k, line in enumerate(lines) if "L-BFGS steps" in line)
    assert max(lines.index(w) for w in warnings) < training
    assert result.metrics["warnings"] == [w.split("warning: ", 1)[1] for w in warnings]
    assert result.figures[0].name == "closed_loop.png"


def test_the_typed_configs_map_one_to_one_onto_the_calls_they_drive():
    """Issue 49 item 3 for `train_controller`: each typed config's fields are the
    arguments of the call it feeds, named as the argument."""
    import dataclasses
    import inspect

    from dynsys._experiments.control.typed_config import (
        ControllerConfig,
        ObserverConfig,
        TrainConfig,
        WeightsConfig,
    )

    config = dynsys.resolve_config({
        "kind": "train_controller",
        "controller": {"type": "mlp", "bound": 2.0, "width": 8, "depth": 2},
        "train": {"clip": 1.0, "batch_size": 4, "steps": 7},
        "observer": {"process_noise": 0.3},
        "cost": {"Q": [1.0, 2.0], "R": 0.5},
    })  # fmt: skip

    def taken(call):
        return set(inspect.signature(call).parameters)

    controller = ControllerConfig.from_section(config["controller"])
    assert set(controller.arguments()) <= taken(dynsys.MLPController)
    stacked = ControllerConfig.from_section({**config["controller"], "type": "stacked"})
    assert set(stacked.arguments()) <= taken(dynsys.StackedController.mlp)
    assert controller.width_size == 8 and controller.bound == 2.0
    built = controller.build(3, 1, jax.random.key(0))
    direct = dynsys.MLPController(3, 1, 8, 2, use_time=False, bound=2.0,
                                  key=jax.random.key(0))  # fmt: skip
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.all(a == b)), built, direct))
    train = TrainConfig.from_section(config["train"])
    assert set(train.arguments()) <= taken(dynsys.train)
    assert (train.num_steps, train.batch_size) == (7, 4)
    lbfgs = TrainConfig.from_section({**config["train"], "optimizer": "lbfgs"})
    assert isinstance(lbfgs.solver, dynsys.LBFGS)
    observer = ObserverConfig.from_section(config["observer"])
    assert set(observer.arguments()) <= taken(dynsys.kalman_gain)
    assert observer.process_noise == 0.3 and observer.measurement_noise == 1.0
    weights = WeightsConfig.from_section(config["cost"], 2, 1)
    assert set(weights.arguments()) <= taken(dynsys.lqr_gain)
    np.testing.assert_array_equal(weights.output_weight, np.diag([1.0, 2.0]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        controller.depth = 3  # type: ignore[misc]


def test_a_controller_trained_on_an_identified_zoo_model_is_checked_on_the_truth(
    tmp_path,
):
    """Issue 47 item 5: the mass-spring-damper identified by least squares from
    noisy simulated data (its run folder's config.toml names the zoo model); the
    controller trained on that model is run on the true system too. Its cost there
    is within 5 % of the cost of the controller trained on the true model itself
    (measured: 65.942 against 65.932, 0.015 % above; 0.8 % above its own cost on
    the identified model)."""
    import dynsys.models as zoo

    jax.config.update("jax_enable_x64", True)
    truth = zoo.get("mass_spring_damper")
    key_x0, key_u, key_noise = jax.random.split(jax.random.key(0), 3)
    data = dynsys.simulate(
        truth, jax.random.normal(key_x0, (8, 4)), 100,
        inputs=jax.random.normal(key_u, (8, 100, 1)), measurement_noise=0.02,
        key=key_noise,
    )  # fmt: skip
    identified = dynsys.fit_least_squares(data)
    for folder, model in (("identified", identified), ("true", truth)):
        (tmp_path / folder).mkdir()
        dynsys.save(tmp_path / folder / "model.dynsys", model)
    (tmp_path / "identified" / "config.toml").write_text(
        'kind = "fit"\n[system]\nmodel = "mass_spring_damper"\n'
    )
    runs = {}
    for folder in ("identified", "true"):
        config = _config(
            str(tmp_path / folder / "model.dynsys"),
            cost={"set_point": [1.0, 2.0, 0.0, 0.0], "R": 0.01},
            train={"horizon": 200, "spread": 0.0},
        )
        runs[folder] = _run(config, tmp_path).metrics
    on_truth = runs["identified"]["on_the_true_system"]
    assert on_truth["system"] == "mass_spring_damper"
    assert "on_the_true_system" not in runs["true"]
    best = runs["true"]["controllers"]["trained"]["cost"]
    assert np.isfinite(on_truth["trained"]["cost"])
    assert on_truth["trained"]["cost"] < 1.05 * best
    on_model = runs["identified"]["controllers"]["trained"]["cost"]
    ratio = on_truth["trained"]["ratio_to_model"]
    assert ratio == pytest.approx(on_truth["trained"]["cost"] / on_model)


def test_the_command_refuses_a_mismatched_set_point_in_one_line(tmp_path, capsys):
    """`dynsys run`: the model file's sizes against the config, one line, status 2,
    nothing written."""
    from dynsys import cli

    dynsys.save(tmp_path / "model.dynsys", _linear())
    path = tmp_path / "control.toml"
    path.write_text(toml_text(_config("model.dynsys")))
    code = cli.main(["run", str(path), "--set", "cost.set_point=[6.0, 1.0]",
                     "--out-root", str(tmp_path / "runs"), "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        "dynsys run: config key 'cost.set_point': expected 1 finite numbers per set "
        "point (one per output of the model), got [6.0, 1.0]."
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
