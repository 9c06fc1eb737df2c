"""Neural state-space models through `dynsys.save` / `dynsys.load` without a
template: bitwise round trips (leaves, static settings, simulations), activations
stored by name, files that only a template rebuilds, damaged or unknown trees
refused in one line, and the `dynsys fit --model neural` run folder's files."""

import hashlib
import json
import re
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import randomised


def _digest(header: dict) -> str:
    """A model file's `header_sha256`, computed here as the format defines it: the
    SHA-256 of every other header entry as canonical JSON (sorted keys, no
    spaces)."""
    covered = {key: value for key, value in header.items() if key != "header_sha256"}
    canonical = json.dumps(covered, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _refusal(error_type, function, *args) -> str:
    """The message of the `error_type` that `function(*args)` raises (the test
    fails if it raises nothing)."""
    with pytest.raises(error_type) as error:
        function(*args)
    return str(error.value)


def _base(kind, key):
    k1, k2, k3 = jax.random.split(key, 3)
    K = 0.5 * jax.random.orthogonal(k1, 3)
    if kind == "linear":
        return dynsys.LinearSystem(
            K, jax.random.normal(k2, (3, 2)), jax.random.normal(k3, (2, 3)),
            input_level=jnp.full((2,), 0.5), output_level=jnp.full((2,), -1.0),
            dt=0.1,
        )  # fmt: skip
    if kind == "stable":
        return dynsys.StableLinearSystem(
            K, jnp.eye(3), jax.random.normal(k2, (3, 2)), jax.random.normal(k3, (2, 3)),
            bound=0.95,
        )  # fmt: skip
    return dynsys.LinearSystem(K, C=jax.random.normal(k3, (2, 3)))  # no input


def _neural(kind="linear", activation=jax.nn.tanh, output_correction=True, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    base = _base(kind, keys[0])
    model = dynsys.NeuralStateSpace(
        base, width_size=5, depth=3, state_mean=jnp.array([0.1, -0.2, 0.3]),
        state_scale=jnp.array([1.0, 2.0, 0.5]), output_scale=jnp.array([2.0, 1.0]),
        output_correction=output_correction, activation=activation, key=keys[1],
    )  # fmt: skip
    return randomised(model, keys[2])


def _assert_same_bits(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)  # static settings too
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(
    "kind, activation, output_correction",
    [
        ("linear", jax.nn.tanh, True),
        ("stable", jax.nn.relu, True),
        ("no input", jax.nn.softplus, False),
    ],
)
def test_neural_model_round_trip_bitwise_without_template(
    tmp_path, kind, activation, output_correction
):
    model = _neural(kind, activation, output_correction)
    path = tmp_path / "neural.dynsys"
    dynsys.save(path, model)
    back = dynsys.load(path)
    assert type(back) is dynsys.NeuralStateSpace
    _assert_same_bits(model, back)
    assert back.state_net.layers[0].activation is activation
    assert back.state_net.layers[-1].activation is None
    assert (back.output_net is None) is (not output_correction)
    assert back.dt == model.dt
    # The loaded model simulates exactly as the saved one, from a state far from 0
    # (where the nets' nonlinearity matters).
    x0 = jnp.array([[1.0, -2.0, 0.5]])
    inputs = None if kind == "no input" else jnp.sin(jnp.arange(60.0))[None, :, None]
    inputs = None if inputs is None else jnp.concatenate([inputs, -inputs], axis=-1)
    saved = dynsys.rollout(model, x0, 60, inputs=inputs)
    loaded = dynsys.rollout(back, x0, 60, inputs=inputs)
    np.testing.assert_array_equal(np.asarray(saved.ys), np.asarray(loaded.ys))
    # ...and differs from its base (the corrections are really in it).
    linear = dynsys.rollout(model.base, x0, 60, inputs=inputs)
    assert np.max(np.abs(np.asarray(loaded.ys) - np.asarray(linear.ys))) > 1e-2


def _encoder(seed=0):
    keys = jax.random.split(jax.random.key(seed), 5)
    past_us = jax.random.normal(keys[0], (40, 6, 2))
    past_ys = jax.random.normal(keys[1], (40, 6, 1))
    states = jax.random.normal(keys[2], (40, 3))
    encoder = dynsys.StateEncoder.from_states(
        past_us, past_ys, states, width_size=4, depth=2, key=keys[3]
    )
    return randomised(encoder, keys[4]), past_us, past_ys


def test_encoder_round_trip_bitwise_without_template(tmp_path):
    encoder, past_us, past_ys = _encoder()
    dynsys.save(tmp_path / "encoder.dynsys", encoder)
    back = dynsys.load(tmp_path / "encoder.dynsys")
    assert type(back) is dynsys.StateEncoder and back.past == 6
    _assert_same_bits(encoder, back)
    np.testing.assert_array_equal(
        np.asarray(jax.vmap(back)(past_us, past_ys)),
        np.asarray(jax.vmap(encoder)(past_us, past_ys)),
    )


def test_layered_controller_round_trip_without_template(tmp_path):
    controller = dynsys.LayeredController.mlp(
        2, 1, 4, 3, reference=jnp.array([0.5]), bound=2.0, key=jax.random.key(1)
    )
    dynsys.save(tmp_path / "c.dynsys", controller)
    back = dynsys.load(tmp_path / "c.dynsys")
    _assert_same_bits(controller, back)
    assert back.bound == controller.bound and back.use_time


def _rewrite_header(path, change):
    """Apply `change` to the file's header and write it back with a valid header
    checksum (as a newer or hostile writer would)."""
    raw = path.read_bytes()
    start = len(b"DYNSYS-MODEL\n")
    (length,) = struct.unpack("<Q", raw[start : start + 8])
    header = json.loads(raw[start + 8 : start + 8 + length])
    change(header)
    header["header_sha256"] = _digest(header)
    encoded = json.dumps(header).encode()
    payload = raw[start + 8 + length :]
    path.write_bytes(raw[:start] + struct.pack("<Q", len(encoded)) + encoded + payload)


def test_the_header_digest_is_the_sha256_of_the_canonical_header(tmp_path):
    path = tmp_path / "model.dynsys"
    dynsys.save(path, _neural())
    raw = path.read_bytes()
    start = len(b"DYNSYS-MODEL\n")
    (length,) = struct.unpack("<Q", raw[start : start + 8])
    header = json.loads(raw[start + 8 : start + 8 + length])
    assert header["header_sha256"] == _digest(header)


def _one_line_error(path, match):
    with pytest.raises(ValueError, match=match) as error:
        dynsys.load(path)
    assert "\n" not in str(error.value)


def test_unknown_activation_in_the_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "neural.dynsys"
    dynsys.save(path, _neural(activation=jax.nn.relu))

    def rename(header):
        layer = header["tree"]["fields"]["state_net"]["fields"]["layers"]["tuple"][1]
        layer["fields"]["activation"] = {"activation": "os.system"}

    _rewrite_header(path, rename)
    _one_line_error(
        path,
        r"state_net\.layers\[1\]\.activation names the activation 'os\.system', "
        r"which dynsys does not know \(known: jax\.nn\.tanh, ",
    )


def test_unknown_class_or_edited_tree_is_refused_in_one_line(tmp_path):
    path = tmp_path / "neural.dynsys"
    dynsys.save(path, _neural())
    _rewrite_header(
        path, lambda h: h["tree"]["fields"]["base"].update({"class": "os.system"})
    )
    _one_line_error(
        path, r"names a class 'os\.system' at base, which dynsys does not rebuild"
    )
    # An edit without the header's checksum: refused as damaged.
    raw = path.read_bytes().replace(b"jax.nn.tanh", b"jax.nn.relu", 1)
    path.write_bytes(raw)
    _one_line_error(path, r"the checksum of the header .* does not match")


def test_tree_whose_shapes_do_not_fit_together_is_refused(tmp_path):
    path = tmp_path / "neural.dynsys"
    dynsys.save(path, _neural())

    def widen(header):  # the first hidden layer's bias claims another width
        layers = header["tree"]["fields"]["state_net"]["fields"]["layers"]["tuple"]
        layers[0]["fields"]["bias"]["shape"] = [6]

    _rewrite_header(path, widen)
    _one_line_error(path, r"the header's fields and leaves disagree")


def test_user_activation_saves_with_a_warning_and_loads_with_like(tmp_path):
    def swish(z):
        return z * jax.nn.sigmoid(z)

    model = _neural(activation=swish)
    path = tmp_path / "neural.dynsys"
    with pytest.warns(UserWarning, match=r"swish, not an activation dynsys knows"):
        dynsys.save(path, model)
    _one_line_error(
        path,
        r"holds a dynsys\.NeuralStateSpace that only a template rebuilds "
        r"\(state_net\.layers\[0\]\.activation is .*swish, not an activation",
    )
    _assert_same_bits(model, dynsys.load(path, like=_neural(activation=swish, seed=1)))


class _Tank(dynsys.AbstractSystem):
    """A grey-box base: a tank with square-root outflow."""

    a: jax.Array

    @property
    def state_size(self):
        return 1

    @property
    def input_size(self):
        return 1

    def step(self, t, x, u):
        return x + self.a * (u - jnp.sqrt(jnp.abs(x)))


def test_grey_box_base_needs_a_template(tmp_path):
    model = dynsys.NeuralStateSpace(
        _Tank(jnp.array(0.2)), width_size=3, key=jax.random.key(0)
    )
    path = tmp_path / "grey.dynsys"
    with pytest.warns(UserWarning, match=r"base is a tests\.io\.test_neural_io\._Tank"):
        dynsys.save(path, model)
    _one_line_error(path, r"base is a tests\.io\.test_neural_io\._Tank, which dynsys")
    _assert_same_bits(model, dynsys.load(path, like=model))


def _tank_csv(path, num_samples, seed):
    """A nonlinear record: a tank with square-root outflow fed a staircase flow."""
    rng = np.random.default_rng(seed)
    u = np.repeat(rng.uniform(0.5, 2.0, num_samples // 10 + 1), 10)[:num_samples]
    h, y = 1.0, []
    for flow in u:
        y.append(h + 0.01 * rng.standard_normal())
        h = max(h + 0.2 * (flow - np.sqrt(h)), 0.0)
    lines = ["u,y"] + [f"{float(a)!r},{float(b)!r}" for a, b in zip(u, y)]
    path.write_text("\n".join(lines) + "\n")
    return u[:, None], np.array(y)[:, None]


@pytest.mark.slow  # the linear stage's fit and figures: about 40 s on a shared CPU
def test_cli_run_folder_neural_files_reproduce_the_printed_fit(tmp_path, capsys):
    from dynsys import cli

    _tank_csv(tmp_path / "estimation.csv", 200, seed=0)
    u, y = _tank_csv(tmp_path / "validation.csv", 80, seed=1)
    out = tmp_path / "run"
    argv = ["fit", str(tmp_path / "estimation.csv"), "--inputs", "u", "--outputs", "y",
            "--validation-data", str(tmp_path / "validation.csv"), "--model", "neural",
            "--order", "1", "--no-feedthrough", "--steps", "5", "--neural-steps", "10",
            "--neural-horizon", "16", "--no-progress", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert not (out / "neural_model.eqx").exists()
    model = dynsys.load(out / "neural_model.dynsys")
    encoder = dynsys.load(out / "neural_encoder.dynsys")
    assert (
        type(model) is dynsys.NeuralStateSpace and type(encoder) is dynsys.StateEncoder
    )
    assert type(dynsys.load(out / "model.dynsys")) is dynsys.LinearSystem
    for name in ("model.dynsys", "neural_model.dynsys", "neural_linear_model.dynsys"):
        assert dynsys.load_names(out / name) == (("u",), ("y",)), name
    past = encoder.past
    # The free run from sample `past`, started by the encoder, scored with numpy.
    data = dynsys.Dataset(us=u[None], ys=y[None])
    x0 = dynsys.neural_initial_state(encoder, data)
    run = dynsys.rollout(model, x0, len(y) - past, inputs=jnp.asarray(u[None, past:]))
    predicted, measured = np.asarray(run.ys[0]), y[past:]
    fit = 100 * (1 - np.linalg.norm(measured - predicted)
                 / np.linalg.norm(measured - measured.mean()))  # fmt: skip
    rms = np.sqrt(np.mean((measured - predicted) ** 2))
    neural = json.loads((out / "metrics.json").read_text())["neural"]
    np.testing.assert_allclose(neural["fit_percent"]["neural"], [fit], rtol=1e-9)
    np.testing.assert_allclose(neural["rms"]["neural"], [rms], rtol=1e-9)
    row = re.search(r"^\s+y\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", printed, re.M)
    assert row is not None, printed
    assert float(row.group(2)) == pytest.approx(fit, abs=0.051)
    assert float(row.group(4)) == pytest.approx(rms, rel=1e-3)
    summary = (out / "summary.md").read_text()
    assert "`neural_encoder.dynsys`" in summary and "dynsys.load(path)" in summary
    # `dynsys simulate FILE` rolls the saved model out from the documented random
    # start (x0 ~ N(0, 1), inputs 0.5 N(0, 1), from --seed), as a rollout does.
    sim = tmp_path / "sim"
    argv = ["simulate", str(out / "neural_model.dynsys"), "--steps", "30", "--batch",
            "2", "--seed", "3", "--out", str(sim)]  # fmt: skip
    assert cli.main(argv) == 0
    key_x0, key_u = jax.random.split(jax.random.key(3))
    x0 = jax.random.normal(key_x0, (2, 1))
    inputs = 0.5 * jax.random.normal(key_u, (2, 30, 1))
    expected = dynsys.rollout(model, x0, 30, inputs=inputs).xs
    written = dynsys.load_dataset(sim / "trajectory.npz").xs
    np.testing.assert_allclose(written, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # two neural trainings after the linear stage
def test_the_saved_neural_model_is_trained_again_on_all_the_estimation_data(
    tmp_path, capsys
):
    """Without a validation file, the held-out part is carved from the estimation
    record: the table scores the model trained on the first part, and the saved
    neural model is trained again on the whole record for the first part's best
    step scaled to as many passes (`refit_steps`); its reported training fit %
    is its free run on the whole record, recomputed here with numpy."""
    from dynsys import cli
    from dynsys._experiments.fit.neural import refit_steps

    u, y = _tank_csv(tmp_path / "estimation.csv", 240, seed=0)
    out = tmp_path / "run"
    argv = ["fit", str(tmp_path / "estimation.csv"), "--inputs", "u", "--outputs", "y",
            "--model", "neural", "--order", "1", "--no-feedthrough", "--steps", "5",
            "--neural-steps", "100", "--neural-horizon", "16", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    neural = json.loads((out / "metrics.json").read_text())["neural"]
    assert neural["best_step"] > 0, printed
    T, held = 240, int(np.floor(240 / 3 + 0.5))
    # Equal passes: 240 / 160 times the best step, within [50, neural_steps].
    expected = min(100, max(50, round(neural["best_step"] * T / (T - held))))
    assert neural["final"]["steps"] == expected
    assert neural["final"]["saved"]  # it fits the whole record better than the first
    # the held-input probe of the saved final model, recomputed from its files
    from dynsys._sysid.held_probe import held_input_excursion

    saved = held_input_excursion(
        dynsys.load(out / "neural_model.dynsys"),
        dynsys.load(out / "neural_encoder.dynsys"), u, y, holds=(4, 16),
    )  # fmt: skip
    excursion = neural["final"]["held_input_excursion"]
    assert excursion["final"] == pytest.approx(saved, rel=1e-9, abs=1e-12)
    assert excursion["final"] <= max(1.0, 3.0 * excursion["first"])
    assert np.mean(neural["final"]["training_fit_percent"]) >= np.mean(
        neural["final"]["first_part_model_fit_percent"]
    )
    assert refit_steps(150, _Lengths([160]), _Lengths([240]), 1000) == 225
    assert refit_steps(10, _Lengths([160]), _Lengths([240]), 1000) == 50
    assert refit_steps(900, _Lengths([160]), _Lengths([240]), 1000) == 1000
    assert "final neural model: trained again on all the estimation data" in printed
    model = dynsys.load(out / "neural_model.dynsys")
    encoder = dynsys.load(out / "neural_encoder.dynsys")
    data = dynsys.Dataset(us=u[None], ys=y[None])
    x0 = dynsys.neural_initial_state(encoder, data)
    past = encoder.past
    run = dynsys.rollout(model, x0, T - past, inputs=jnp.asarray(u[None, past:]))
    predicted, measured = np.asarray(run.ys[0]), y[past:]
    fit = 100 * (1 - np.linalg.norm(measured - predicted)
                 / np.linalg.norm(measured - measured.mean()))  # fmt: skip
    np.testing.assert_allclose(neural["final"]["training_fit_percent"], [fit],
                               rtol=1e-9)  # fmt: skip


def test_a_final_neural_model_that_fits_its_data_worse_is_not_saved():
    from dynsys._experiments.fit.neural import NeuralRefit, _refit_refused

    better = NeuralRefit(None, 240, 75, 1.0, ([91.0, 80.0], [0.1, 0.2]), [90.0, 80.5])
    worse = NeuralRefit(None, 240, 75, 1.0, ([89.0, 80.0], [0.1, 0.2]), [90.0, 80.5])
    assert better.kept and not worse.kept
    assert _refit_refused(worse) == (
        "the neural model trained again on all the estimation data fits them worse "
        "(84.5 %) than the one trained on their first part (85.2 %): that one is saved"
    )


def test_a_final_neural_model_that_runs_away_on_held_inputs_is_not_saved():
    """The final model is refused when its free run on held inputs leaves the
    measured outputs' range by more than `RUNAWAY_WIDTHS` widths and more than
    `RUNAWAY_RATIO` times the first part's model does (both printed)."""
    from dynsys._experiments.fit.neural import (
        _refit_refused,
        NeuralRefit,
        RUNAWAY_RATIO,
        RUNAWAY_WIDTHS,
    )

    def refit(first, final):
        fits = ([91.0], [0.1])  # fits the estimation data better than the first
        return NeuralRefit(None, 240, 75, 1.0, fits, [90.0], (first, final))

    assert (RUNAWAY_WIDTHS, RUNAWAY_RATIO) == (1.0, 3.0)
    assert refit(0.0, 0.9).kept  # inside one width: an overshoot, not a runaway
    assert refit(0.5, 1.4).kept  # the first part's model overshoots alike
    assert not refit(0.1, 2.02).kept and refit(0.1, 2.02).runs_away
    assert not refit(0.7, 2.2).kept
    assert not refit(0.2, np.inf).kept
    assert _refit_refused(refit(0.052, 2.02)) == (
        "the neural model trained again on all the estimation data runs away when "
        "its inputs are held at random levels inside the measured range (its free "
        "run leaves the measured outputs' range by 2.02 times its width; the one "
        "trained on their first part by 0.052): that one is saved"
    )


class _Lengths:
    def __init__(self, lengths):
        self.lengths = lengths


def test_cli_simulate_refuses_a_missing_file_or_an_encoder(tmp_path, capsys):
    from dynsys import cli

    assert cli.main(["simulate", str(tmp_path / "none.dynsys")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"dynsys simulate: MODEL: no such model file {str(tmp_path / 'none.dynsys')!r}."
    )
    encoder, _, _ = _encoder()
    dynsys.save(tmp_path / "encoder.dynsys", encoder)
    out = tmp_path / "sim"
    assert (
        cli.main(["simulate", str(tmp_path / "encoder.dynsys"), "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds a StateEncoder, not a system" in err
    assert not out.exists()


def _edit_past(path, past):
    """The encoder file with `past` changed in its tree and its static values."""

    def change(header):
        header["tree"]["fields"]["past"] = {"static": past}
        header["static"]["past"] = past

    _rewrite_header(path, change)


@pytest.mark.parametrize("past", [0, -5, 2.5, True, 10**9, 4, 5])
def test_an_encoder_with_an_impossible_past_is_refused_at_load(tmp_path, past):
    # 18 features: past 6 of 3 channels. A past that is not a positive int dividing
    # 18 cannot be what the encoder reads (it loaded, and failed at first use with a
    # 37-line JAX error).
    encoder, _, _ = _encoder()
    path = tmp_path / "encoder.dynsys"
    dynsys.save(path, encoder)
    _edit_past(path, past)
    _one_line_error(
        path,
        rf"StateEncoder \(past = {re.escape(repr(past))} samples: expected a "
        r"positive int dividing its 18 features",
    )


def test_an_encoder_of_other_channels_is_refused_at_first_use_in_one_line(tmp_path):
    encoder, past_us, past_ys = _encoder()
    data = dynsys.Dataset(
        us=jnp.concatenate([past_us[:2], past_us[:2]], axis=1),
        ys=jnp.concatenate([past_ys[:2], past_ys[:2]], axis=1),
    )  # 2 experiments of 12 samples, 2 inputs and 1 output
    # The encoder as saved: the state its affine map and net give the first 6 samples.
    np.testing.assert_allclose(
        dynsys.neural_initial_state(encoder, data),
        jax.vmap(encoder)(past_us[:2], past_ys[:2]),
        rtol=1e-6,
    )
    # past 9 divides its 18 features (9 samples of 2 channels), but this data has 3.
    path = tmp_path / "encoder.dynsys"
    dynsys.save(path, encoder)
    _edit_past(path, 9)
    edited = dynsys.load(path)
    assert _refusal(ValueError, dynsys.neural_initial_state, edited, data) == (
        "neural_initial_state(encoder=..., data=...): the encoder reads 18 values, "
        "which are not its past = 9 samples of the data's 3 channels (inputs and "
        "outputs, 27 values): an encoder of other data, or an edited one."
    )


def test_swapped_model_and_encoder_files_are_named_in_one_line(tmp_path):
    model, encoder = _neural(), _encoder()[0]
    dynsys.save(tmp_path / "neural_model.dynsys", model)
    dynsys.save(tmp_path / "neural_encoder.dynsys", encoder)
    # The files swapped: the encoder's file read as the model, and the other way.
    as_model = dynsys.load(tmp_path / "neural_encoder.dynsys")
    as_encoder = dynsys.load(tmp_path / "neural_model.dynsys")
    data = dynsys.Dataset(
        us=jnp.ones((1, 20, 2)), ys=jnp.ones((1, 20, 2))
    )  # the model's 2 inputs and 2 outputs
    assert _refusal(TypeError, dynsys.neural_initial_state, as_encoder, data) == (
        "neural_initial_state(encoder=...): expected a StateEncoder (the "
        "initial-state encoder that fit_neural returns and saves beside its model), "
        "got a NeuralStateSpace (a model)."
    )
    assert _refusal(TypeError, dynsys.compare, as_model, data) == (
        "compare(model=...): expected a model (a dynsys.AbstractSystem, such as a "
        "NeuralStateSpace or a LinearSystem), got a StateEncoder (an initial-state "
        "encoder)."
    )
    with pytest.raises(TypeError, match=r"^estimate_x0\(model=\.\.\.\): .* got a "):
        dynsys.estimate_x0(as_model, data)
