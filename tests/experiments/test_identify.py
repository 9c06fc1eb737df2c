"""Issue 44 item 7: `dynsys.identify` gives in Python the answer `dynsys fit` gives
from the command line (the same structure scan, fit, refit and fallback), prints
nothing unless asked, leaves JAX's settings alone, and refuses bad arguments in one
line naming the argument."""

import json

import jax
import numpy as np
import pytest

import dynsys
from dynsys import cli
from dynsys._experiments.fit import order as fit_order


def _plant_record(path, num_steps: int, seed: int, feedthrough: float) -> str:
    """A second-order plant (poles 0.9, 0.5) driven by a random binary input, its
    output with measurement noise and `feedthrough` * u, as a CSV with a time
    column (written with 10 digits, read back exactly by both paths)."""
    rng = np.random.default_rng(seed)
    u = np.repeat(rng.choice([-1.0, 1.0], size=num_steps // 5 + 1), 5)[:num_steps]
    K = np.array([[0.9, 0.2], [0.0, 0.5]])
    B, C = np.array([0.0, 1.0]), np.array([1.0, 0.0])
    x, y = np.zeros(2), np.empty(num_steps)
    for t in range(num_steps):
        y[t] = C @ x + feedthrough * u[t] + 0.05 * rng.standard_normal()
        x = K @ x + B * u[t]
    table = np.c_[0.1 * np.arange(num_steps), u, y]
    np.savetxt(path, table, delimiter=",", header="time,u,y", comments="", fmt="%.10g")
    return str(path)


def _arrays(model) -> dict[str, np.ndarray]:
    return {
        name: np.asarray(getattr(model, name))
        for name in ("K", "B", "C", "D", "input_level", "output_level")
        if getattr(model, name) is not None
    }


@pytest.fixture
def small_scan(monkeypatch):
    """The structure scan's budget cut for speed, for the command and `identify`
    alike (both read these constants of `order.py` when they run)."""
    monkeypatch.setattr(fit_order, "SCAN_MAX_ORDER", 4)
    monkeypatch.setattr(fit_order, "SCAN_REFINE_STEPS", 10)


@pytest.mark.slow
def test_identify_gives_the_model_dynsys_fit_writes(tmp_path, small_scan, capsys):
    """One experiment: the last third chooses the structure and the kept step, the
    chosen structure is refitted on the whole record. Both the saved model and the
    reported held-out fit % agree to rounding."""
    csv = _plant_record(tmp_path / "plant.csv", 240, seed=3, feedthrough=0.3)
    out = tmp_path / "run"
    argv = ["fit", csv, "--inputs", "u", "--outputs", "y", "--steps", "40"]
    assert cli.main([*argv, "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    saved = dynsys.load(out / "model.dynsys")
    metrics = json.loads((out / "metrics.json").read_text())

    data = dynsys.load_dataset(csv, inputs=["u"], outputs=["y"])
    found = dynsys.identify(data, steps=40)
    assert capsys.readouterr().out == ""  # nothing printed unless asked

    assert type(found.model) is type(saved)
    want = _arrays(saved)
    got = _arrays(found.model)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-12)
    assert found.order == metrics["order"] == saved.state_size
    assert found.feedthrough == metrics["feedthrough"]
    assert found.scan is not None
    rows, want_rows = found.scan.table(), metrics["structure_scan"]["table"]
    assert [(r["order"], r["feedthrough"], r["refined"]) for r in rows] == [
        (r["order"], r["feedthrough"], r["refined"]) for r in want_rows
    ]
    np.testing.assert_allclose(
        [r["mean_fit"] for r in rows], [r["mean_fit"] for r in want_rows], rtol=1e-9
    )
    held_out = metrics["fit_percent"]["held-out fit % vs measurements"]["fitted"]
    np.testing.assert_allclose(found.held_out_fit_percent, held_out, rtol=1e-9)
    # The final model is the refit on the whole record unless it ended unstable.
    refit = metrics["final_model"] is not None
    assert (found.model is not found.first_part) == refit


@pytest.mark.slow
def test_identify_chooses_the_true_order_of_a_simulated_plant(small_scan, capsys):
    """A third-order plant without feedthrough, eight experiments (two held out):
    the scan (orders 1 to 4 here, with and without `D`) chooses order 3 without
    `D`, and the model validates on fresh data as well as the true system."""
    A = np.array([[0.9, 0.3, 0.0], [-0.3, 0.9, 0.0], [0.0, 0.0, 0.6]])
    true = dynsys.LinearSystem(
        K=A, B=np.array([[0.0], [1.0], [1.0]]), C=np.array([[1.0, 0.0, 1.0]])
    )
    keys = jax.random.split(jax.random.key(7), 6)

    def record(k0, ku, kn, count):
        inputs = jax.random.normal(ku, (count, 100, 1))
        x0s = jax.random.normal(k0, (count, 3))
        return dynsys.simulate(
            true, x0s, 100, inputs=inputs, measurement_noise=0.05, key=kn
        )

    data, fresh = record(*keys[:3], 8), record(*keys[3:], 2)
    x64 = jax.config.jax_enable_x64
    found = dynsys.identify(data, steps=30)
    assert capsys.readouterr().out == ""
    assert jax.config.jax_enable_x64 == x64  # JAX's setting left as it was
    assert (found.order, found.feedthrough) == (3, False)
    assert found.held_out == "2 experiments held out"
    # An independent check: the true system's own fit % on fresh data, and the
    # identified model's within a point of it.
    truth = np.asarray(dynsys.compare(true, fresh).fit_percent)
    model = np.asarray(dynsys.compare(found.model, fresh).fit_percent)
    assert model > truth - 1.0


def _short_data(num_steps: int = 60, names=("u", "y"), dt=None, flat_output=False):
    rng = np.random.default_rng(0)
    u = rng.standard_normal((num_steps, 1))
    y = np.cumsum(u, axis=0) * 0.1 + 0.01 * rng.standard_normal((num_steps, 1))
    if flat_output:  # nothing to learn: refused before any fit
        y = np.ones_like(y)
    ts = None if dt is None else dt * np.arange(num_steps)
    return dynsys.Dataset(
        us=u[None], ys=y[None], ts=ts, input_names=names[:1], output_names=names[1:]
    )


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"data": np.zeros((10, 2))}, "data"),
        ({"model": "neural"}, "model"),
        ({"order": 0}, "order"),
        ({"loss": "l1"}, "loss"),
        ({"order": 40}, "order"),
        ({"validation_split": 0.3, "validation_fraction": 0.2}, "validation_fraction"),
        ({"select_on_validation": True}, "select_on_validation"),
        ({"validation": _short_data(names=("v", "y"))}, "validation"),
        ({"validation": _short_data(dt=0.5)}, "validation"),
        ({"precision": "float16"}, "precision"),
        ({"data": _short_data(9)}, "data"),
        ({"data": _short_data(flat_output=True)}, "data"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_argument(arguments, named):
    arguments = {"data": _short_data(), **arguments}
    with pytest.raises(ValueError) as caught:
        dynsys.identify(**arguments)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"identify({named}=...)"), message



def test_a_float32_session_gets_float32_models_and_a_warning(recwarn):
    """With JAX's 64-bit mode off, `identify` still computes in float64 (inside
    `jax.enable_x64`, the session's setting untouched), says that the data were
    already rounded to float32, and returns float32 models that compute there
    without JAX's truncation warnings; `print(found)` shows the model under the
    data's names, its pole and static gain (against NumPy on its matrices) with
    their standard deviations."""
    with jax.enable_x64(False):
        true = dynsys.LinearSystem(
            K=np.array([[0.8]]), B=np.array([[1.0]]), C=np.array([[1.0]])
        )
        u = jax.random.normal(jax.random.key(0), (4, 40, 1))
        data = dynsys.simulate(
            true,
            np.zeros((4, 1)),
            40,
            inputs=u,
            measurement_noise=0.01,
            key=jax.random.key(1),
        )
        data = dynsys.Dataset(us=data.us, ys=data.ys, input_names=["drive (V)"],
                              output_names=["temp (C)"])  # fmt: skip
        found = dynsys.identify(data, order=1, feedthrough=False, steps=5)
        assert jax.config.jax_enable_x64 is False
        assert found.model.K.dtype == found.first_part.K.dtype == np.float32
        fit = np.asarray(dynsys.compare(found.model, data).fit_percent)
        text = str(found)
        _, gain_std = dynsys.static_gain_uncertainty(found.covariance)
    assert fit > 90.0
    assert (found.input_names, found.output_names) == (("drive (V)",), ("temp (C)",))
    K, B, C = (np.asarray(getattr(found.model, name), np.float64) for name in "KBC")
    (pole,) = np.linalg.eigvals(K)
    gain = (C @ np.linalg.solve(np.eye(1) - K, B))[0, 0]
    assert abs(pole - 0.8) < 0.02 and abs(gain - 5.0) < 0.1  # the plant's
    assert f"\n  {pole.real:.6g}; " in text
    assert f"static gain {gain:.6g} ± {float(np.asarray(gain_std)[0, 0]):.2g}" in text
    assert "drive (V) → temp (C):" in text
    assert f"held-out fit: temp (C) {found.held_out_fit_percent[0]:.1f} %" in text
    short = repr(found)
    assert "order 1, drive (V) → temp (C); held-out fit temp (C)" in short
    assert "\n" not in short
    assert [w for w in found.warnings if "the data are float32" in w]
    truncated = [w for w in recwarn if "will be truncated" in str(w.message)]
    assert not truncated, truncated[0].message


def test_a_share_of_experiments_on_one_experiment_is_said_in_the_warnings():
    """`validation_fraction` holds out whole experiments; on one experiment the
    last third is held out by time instead, and `identify` says so (as `dynsys
    fit --validation 0.2` does on a one-experiment file)."""
    found = dynsys.identify(
        _short_data(), validation_fraction=0.2, order=1, feedthrough=False, steps=3
    )
    assert found.held_out == "the last 33% of each experiment held out (20 of 60 samples)"
    (line,) = [w for w in found.warnings if "validation_fraction" in w]
    assert line.startswith("identify(validation_fraction=...) (0.2) holds out whole")
    assert "identify(validation_split=...) chooses how much" in line
