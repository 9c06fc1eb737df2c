"""From measured data to a controller: a neural model file (`NeuralStateSpace`,
with its encoder beside it) as the plant of `train_controller`; the model itself
runs alongside as the observer, corrected by its linear base's Kalman gain, inside
the one differentiable rollout."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


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


def _toml(config: dict) -> str:
    def value(v):
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    lines = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for section, keys in config.items():
        if isinstance(keys, dict):
            lines += [f"[{section}]", *(f"{k} = {value(v)}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


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
    path.write_text(_toml(config))
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

    gain = jnp.array([[0.3, 0.8]])
    grad = np.asarray(jax.grad(cost)(gain))
    step = 1e-6
    for index in np.ndindex(gain.shape):
        bump = np.zeros(gain.shape)
        bump[index] = step
        numeric = (cost(gain + bump) - cost(gain - bump)) / (2 * step)
        np.testing.assert_allclose(grad[index], numeric, rtol=1e-6)
    assert np.all(grad != 0)


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
