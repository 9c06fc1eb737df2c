"""`dynsys compare MODEL DATA`: a saved model scored on a record, against
`dynsys.compare` in Python (linear: least-squares initial state; neural: the
encoder's initial state and the rest of the record)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys import cli


def _record(path, system, num_steps=120, seed=0):
    """A CSV of `system` driven by white input, with a time column (dt 0.5 s)."""
    rng = np.random.default_rng(seed)
    us = rng.standard_normal((num_steps, system.input_size))
    x0 = jnp.asarray(rng.standard_normal(system.state_size))
    ys = np.asarray(dynsys.rollout(system, x0, num_steps, inputs=us).ys)
    ys = ys + 0.05 * rng.standard_normal(ys.shape)
    table = np.c_[0.5 * np.arange(num_steps), us, ys]
    np.savetxt(path, table, delimiter=",", header="time,u,y1,y2", comments="")
    return dynsys.load_dataset(path, inputs=["u"], outputs=["y1", "y2"])


def _linear():
    K = jnp.array([[0.9, 0.2], [-0.1, 0.7]], dtype=jnp.float64)
    return dynsys.LinearSystem(K, jnp.array([[0.0], [1.0]]), jnp.eye(2))


def _rms(comparison):
    error = np.asarray(comparison.measured) - np.asarray(comparison.predicted)
    return np.sqrt(np.mean(error[0] ** 2, axis=0))


def test_a_linear_model_scores_as_compare_does(tmp_path, capsys):
    jax.config.update("jax_enable_x64", True)
    model = _linear()
    dynsys.save(tmp_path / "model.dynsys", model)
    data = _record(tmp_path / "record.csv", model)
    out = tmp_path / "scores"
    args = ["compare", str(tmp_path / "model.dynsys"), str(tmp_path / "record.csv")]
    args += ["--inputs", "u", "--outputs", "y1,y2", "--out", str(out)]
    assert cli.main(args) == 0
    reference = dynsys.compare(model, data)
    scores = json.loads((out / "scores.json").read_text())
    np.testing.assert_allclose(scores["fit_percent"], reference.fit_percent, rtol=1e-9)
    np.testing.assert_allclose(scores["rms"], _rms(reference), rtol=1e-9)
    assert scores["channels"] == ["y1", "y2"] and scores["samples"] == 120
    assert (out / "comparison.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert f"{float(reference.fit_percent[0]):.1f}" in printed


def test_a_neural_model_starts_from_its_encoder(tmp_path):
    jax.config.update("jax_enable_x64", True)
    key1, key2 = jax.random.split(jax.random.key(0))
    linear = _linear()
    model = dynsys.NeuralStateSpace(linear, width_size=4, depth=2, key=key1)
    past = 5
    rng = np.random.default_rng(1)
    encoder = dynsys.StateEncoder.from_states(
        jnp.asarray(rng.standard_normal((20, past, 1))),
        jnp.asarray(rng.standard_normal((20, past, 2))),
        jnp.asarray(rng.standard_normal((20, 2))),
        width_size=4,
        key=key2,
    )
    dynsys.save(tmp_path / "neural_model.dynsys", model)
    dynsys.save(tmp_path / "neural_encoder.dynsys", encoder)  # found beside it
    data = _record(tmp_path / "record.csv", linear, seed=3)
    out = tmp_path / "scores"
    args = ["compare", str(tmp_path / "neural_model.dynsys"), str(tmp_path / "record.csv")]
    args += ["--inputs", "u", "--outputs", "y1,y2", "--out", str(out)]
    assert cli.main(args) == 0
    from dynsys._sysid.neural import neural_initial_state

    x0 = neural_initial_state(encoder, data)
    reference = dynsys.compare(model, data.window(past, None), x0=x0)
    scores = json.loads((out / "scores.json").read_text())
    np.testing.assert_allclose(scores["fit_percent"], reference.fit_percent, rtol=1e-9)
    np.testing.assert_allclose(scores["rms"], _rms(reference), rtol=1e-9)
    assert scores["skipped"] == past and scores["samples"] == 120 - past
    # The Python call of one neural model and its encoder gives the same numbers.
    by_encoder = dynsys.compare(model, data, encoder=encoder)
    np.testing.assert_allclose(scores["fit_percent"], by_encoder.fit_percent, rtol=1e-9)
    np.testing.assert_allclose(scores["rms"], _rms(by_encoder), rtol=1e-9)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--encoder", "ENC"], "--encoder: LinearSystem is not a neural model"),
        ([], None),
    ],
)
def test_refusals_are_one_line(tmp_path, capsys, extra, message):
    jax.config.update("jax_enable_x64", True)
    model = _linear()
    dynsys.save(tmp_path / "model.dynsys", model)
    _record(tmp_path / "record.csv", model)
    dynsys.save(tmp_path / "ENC", model)
    extra = [str(tmp_path / e) if e == "ENC" else e for e in extra]
    args = ["compare", str(tmp_path / "model.dynsys"), str(tmp_path / "record.csv")]
    args += ["--inputs", "u", "--outputs", "y1,y2", *extra]
    if message is None:  # a wrong column: the loader's one line
        args[-1] = "y1,nope"
        message = "nope"
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dynsys compare: ") and "\n" not in err and message in err


def test_a_neural_model_without_its_encoder_is_refused(tmp_path, capsys):
    jax.config.update("jax_enable_x64", True)
    model = dynsys.NeuralStateSpace(_linear(), width_size=4, depth=2, key=jax.random.key(0))
    dynsys.save(tmp_path / "neural_model.dynsys", model)
    _record(tmp_path / "record.csv", _linear())
    args = ["compare", str(tmp_path / "neural_model.dynsys"), str(tmp_path / "record.csv")]
    assert cli.main([*args, "--inputs", "u", "--outputs", "y1,y2"]) == 2
    err = capsys.readouterr().err
    assert "--encoder: a neural model needs its encoder" in err and err.count("\n") == 1
