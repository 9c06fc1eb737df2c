"""From measured data to a controller: a neural model file (`NeuralStateSpace`,
with its encoder beside it) as the plant of `train_controller`; the model itself
runs alongside as the observer, corrected by its linear base's Kalman gain, inside
the one differentiable rollout, and started by its encoder on the measured window
before the task."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import assert_gradient_matches_differences, toml_text


K = np.array([[1.0, 0.1], [0.0, 0.995]])
B = np.array([[0.0], [0.1]])
C = np.array([[1.0, 0.0]])
LEVELS = {"dt": 0.1, "input_level": [2.0], "output_level": [5.0]}


def _neural_model():
    """A neural model whose corrections are not zero (known, small weights)."""
    base = dynsys.LinearSystem(K, B, C, **LEVELS)
    model = dynsys.NeuralStateSpace(base, width_size=4, key=jax.random.key(0))
    leaves, tree = jax.tree.flatten(eqx.filter(model.state_net, eqx.is_inexact_array))
    keys = jax.random.split(jax.random.key(1), len(leaves))
    leaves = [
        0.05 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)
    ]
    net = eqx.combine(jax.tree.unflatten(tree, leaves), model.state_net)
    return eqx.tree_at(lambda m: m.state_net, model, net)


def _encoder(states: int, channels: int = 2):
    """An encoder of 3 past samples of `channels` channels (one input, one output
    by default) giving `states` states."""
    from dynsys._fitting.encoder import StateEncoder

    rng = np.random.default_rng(0)
    us = jnp.asarray(rng.normal(size=(20, 3, 1)))
    ys = jnp.asarray(rng.normal(size=(20, 3, channels - 1)))
    return StateEncoder.from_states(
        us, ys, jnp.asarray(rng.normal(size=(20, states))), width_size=4,
        key=jax.random.key(2),
    )


def test_a_neural_model_file_is_the_plant(tmp_path, monkeypatch):
    jax.config.update("jax_enable_x64", True)
    (tmp_path / "models").mkdir()
    (tmp_path / "configs").mkdir()
    dynsys.save(tmp_path / "models" / "neural_model.dynsys", _neural_model())
    dynsys.save(tmp_path / "models" / "neural_encoder.dynsys", _encoder(2))
    config = {
        "kind": "train_controller",
        "name": "on_neural",
        "system": {"file": "../models/neural_model.dynsys"},
        "controller": {"type": "linear"},
        "cost": {"set_point": [6.0], "Q": 1.0, "R": 1e-4},
        "train": {"horizon": 80, "initial_states": 4, "test_states": 4,
                  "spread": 0.2, "steps": 100, "optimizer": "lbfgs"},
    }  # fmt: skip
    path = tmp_path / "configs" / "control.toml"
    path.write_text(toml_text(config))
    monkeypatch.chdir(tmp_path / "configs")
    result = dynsys.run_experiment(
        path, out_root=tmp_path / "runs", progress=False, echo=None
    )
    scores = result.metrics["controllers"]
    assert set(scores) == {"trained"}
    trained = scores["trained"]["held_out_cost"]
    assert np.isfinite(trained) and result.metrics["cost_before"] > 2 * trained
    assert "neural model itself" in result.metrics["observer"]
    assert max(scores["trained"]["input_peak"]) < 100  # the loop stays bounded
    summary = (result.path / "summary.md").read_text()
    assert "| trained |" in summary and "LQG" not in summary.split("|")[0]


def test_the_gradient_through_the_neural_plant_and_observer_is_exact(tmp_path):
    from dynsys._control.observer import ObservedPlant

    jax.config.update("jax_enable_x64", True)
    model = _neural_model()
    loop = ObservedPlant(model, model, np.array([[0.5], [0.3]]))
    z0 = jnp.array([0.1, -0.05, 0.0, 0.0])

    def cost(gain):
        controller = dynsys.LinearFeedback(
            jnp.concatenate([jnp.zeros((1, 2)), gain], axis=1)
        )
        traj = dynsys.rollout(loop, z0, 20, controller=controller)
        return jnp.sum((traj.ys - 5.0) ** 2) + jnp.sum(traj.us**2)

    assert_gradient_matches_differences(cost, jnp.array([[0.3, 0.8]]))


@pytest.mark.parametrize(
    "encoder, message",
    [
        ("empty", r"does not read as the StateEncoder"),
        ("three states", r"gives 3 states from 6 values, but neural_model.dynsys "
                         r"has 2 states"),
        ("three channels", r"gives 2 states from 9 values.*an encoder of another"),
    ],
)  # fmt: skip
def test_a_wrong_encoder_is_refused_in_one_line(encoder, message, tmp_path):
    jax.config.update("jax_enable_x64", True)
    dynsys.save(tmp_path / "neural_model.dynsys", _neural_model())
    file = tmp_path / "neural_encoder.dynsys"
    if encoder == "empty":
        file.write_bytes(b"")
    else:
        dynsys.save(file, _encoder(*((3,) if encoder == "three states" else (2, 3))))
    config = {
        "kind": "train_controller",
        "name": "bad",
        "system": {"file": str(tmp_path / "neural_model.dynsys")},
        "controller": {"type": "linear"},
        "cost": {"set_point": [6.0]},
        "train": {"horizon": 10, "steps": 10**8},
    }
    with pytest.raises(dynsys.ConfigError, match=message) as refused:
        dynsys.run_experiment(
            config, out_root=tmp_path / "runs", progress=False, echo=None
        )
    assert "\n" not in str(refused.value)


def _task(tmp_path, model, encoder, **train):
    """The set-point task of a config on the neural `model` file with `encoder`
    beside it (set point 6, spread 0.3 about the operating point's 5)."""
    from dynsys._experiments.control.plant_file import load_plant
    from dynsys._experiments.control.task import set_point_task

    dynsys.save(tmp_path / "neural_model.dynsys", model)
    dynsys.save(tmp_path / "neural_encoder.dynsys", encoder)
    config = dynsys.resolve_config({
        "kind": "train_controller",
        "name": "start",
        "system": {"file": str(tmp_path / "neural_model.dynsys")},
        "controller": {"type": "linear"},
        "cost": {"set_point": [6.0], "Q": 1.0, "R": 1e-4},
        "train": {"horizon": 30, "spread": 0.3, **train},
    })  # fmt: skip
    return set_point_task(config, load_plant(config))


def _plant_starts(task, count=5):
    from dynsys._experiments.control.task import initial_states

    return initial_states(jax.random.key(3), count, task, np.array([0.3]))


def test_the_observer_starts_where_the_encoder_reads_the_window_before_the_task(
    tmp_path,
):
    """Each plant starts at rest; the observer's first state is the encoder on the
    `past` samples of the input that holds the plant there and the output it
    measures, built here by hand."""
    jax.config.update("jax_enable_x64", True)
    model, encoder = _neural_model(), _encoder(2)
    task = _task(tmp_path, model, encoder)
    z0s = np.asarray(_plant_starts(task))
    at_rest = np.block([[K - np.eye(2), B], [C, np.zeros((1, 1))]])
    for x, estimate in zip(z0s[:, :2], z0s[:, 2:]):
        # The linear base's steady state for the output offset C x: the input
        # that holds it, in the data's units.
        steady = np.linalg.solve(at_rest, np.r_[0.0, 0.0, C @ x])
        np.testing.assert_allclose(steady[:2], x, atol=1e-12)
        u = steady[2:] + 2.0
        y = np.asarray(model.output(0, jnp.asarray(x), jnp.asarray(u)))
        past_us, past_ys = np.tile(u, (encoder.past, 1)), np.tile(y, (encoder.past, 1))
        expected = encoder(jnp.asarray(past_us), jnp.asarray(past_ys))
        np.testing.assert_allclose(estimate, expected, rtol=1e-10, atol=1e-12)
    assert np.ptp(z0s[:, 0]) > 0.1  # the plants start at different levels
    # The step from the operating point starts the observer the same way.
    origin = np.asarray(task.at_rest(jnp.zeros((1, 1))))[0]
    held = encoder(jnp.full((encoder.past, 1), 2.0), jnp.full((encoder.past, 1), 5.0))
    np.testing.assert_allclose(origin, np.r_[0.0, 0.0, held], atol=1e-12)


def _exact_encoder(base, past: int = 3):
    """The encoder of the linear `base`'s state: its affine part fitted on 200
    noise-free simulated windows (exact, as the state is affine in the past
    inputs and outputs once `past` is at least the observability index)."""
    from dynsys._fitting.encoder import StateEncoder

    rng = np.random.default_rng(4)
    x0 = jnp.asarray(rng.normal(size=(200, 2)))
    us = jnp.asarray(2.0 + rng.normal(size=(200, past, 1)))
    trajectory = dynsys.rollout(base, x0, past, inputs=us)
    return StateEncoder.from_states(
        us, trajectory.ys, trajectory.xs[:, -1], width_size=4, key=jax.random.key(5)
    )


def test_the_encoder_start_knows_where_the_plant_starts(tmp_path):
    """On a neural model whose corrections are zero (its linear base) and the
    encoder of that base, the observer's error at t = 0 is near zero from the
    encoder, against the plant's whole offset from the operating point; the
    run's cost still differentiates exactly through the encoder-started loop."""
    jax.config.update("jax_enable_x64", True)
    base = dynsys.LinearSystem(K, B, C, **LEVELS)
    model = dynsys.NeuralStateSpace(base, width_size=4, key=jax.random.key(0))
    task = _task(tmp_path, model, _exact_encoder(base))
    z0s = _plant_starts(task)
    plant, estimate = z0s[:, :2], z0s[:, 2:]
    from_encoder = np.linalg.norm(estimate - plant, axis=-1)
    from_operating_point = np.linalg.norm(plant, axis=-1)  # the observer at 0
    assert np.all(from_operating_point > 0.01)
    assert np.all(from_encoder < 1e-4 * from_operating_point)

    def cost(gain):
        controller = dynsys.LinearFeedback(gain)
        return task.cost(controller, z0s)

    gain = jnp.array([[-0.3, -0.8, 0.5]])  # of [x_hat; r]
    assert_gradient_matches_differences(cost, gain)
