"""Issue 44 item 5: `dynsys fit --structure armax|bj` (config keys `fit.structure`,
`fit.orders`): the saved model is the one `fit_armax` / `fit_box_jenkins` give on
the same data; a multi-output file and a constant input are one-line refusals,
exit 2, nothing written."""

import json

import jax
import numpy as np
import pytest
import scipy.signal

import dynsys
from dynsys import cli


def _armax_record(T: int = 600, seed: int = 0):
    """$y = B/A\\, u_{t-1} + C/A\\, e$ with $A = 1 - 1.5 q^{-1} + 0.7 q^{-2}$,
    $B = 1 + 0.5 q^{-1}$, $C = 1 + 0.4 q^{-1}$ (scipy's `lfilter`): `(u, y)`."""
    rng = np.random.default_rng(seed)
    u, e = rng.normal(size=T), 0.1 * rng.normal(size=T)
    a = [1.0, -1.5, 0.7]
    y = scipy.signal.lfilter([0.0, 1.0, 0.5], a, u)
    y += scipy.signal.lfilter([1.0, 0.4], a, e)
    return u, y


def _bj_record(T: int = 500, seed: int = 1):
    """$y = 0.5 q^{-1} / (1 - 0.8 q^{-1})\\, u + 1 / (1 - 0.9 q^{-1})\\, e$."""
    rng = np.random.default_rng(seed)
    u, e = rng.normal(size=T), 0.05 * rng.normal(size=T)
    y = scipy.signal.lfilter([0.0, 0.5], [1.0, -0.8], u)
    y += scipy.signal.lfilter([1.0], [1.0, -0.9], e)
    return u, y


def _csv(path, columns: dict):
    names = list(columns)
    np.savetxt(
        path,
        np.column_stack([columns[n] for n in names]),
        delimiter=",",
        header=",".join(names),
        comments="",
        fmt="%.17g",
    )
    return path


def _run(argv, out):
    return cli.main([*argv, "--no-progress", "--out", str(out)])


def _same_model(saved, expected):
    assert type(saved) is type(expected) is dynsys.InnovationSystem
    names = ("K", "B", "C", "D", "kalman_gain", "innovation_covariance")
    for name in (*names, "input_level", "output_level"):
        a, b = getattr(saved, name), getattr(expected, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_allclose(
                np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12, err_msg=name
            )


def test_armax_from_the_cli_is_fit_armax(tmp_path, capsys):
    u, y = _armax_record()
    path = _csv(tmp_path / "armax.csv", {"u": u, "y": y})
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y"]
    assert _run([*argv, "--structure", "armax", "--orders", "2,2,1,1"], out) == 0
    printed = capsys.readouterr().out
    assert "ARMAX fit (na=2, nb=2, nc=1, nk=1" in printed
    saved = dynsys.load(out / "model.dynsys")
    # The saved model is the refit on the whole file: fit_armax on the same data.
    with jax.enable_x64(True):
        data = dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
        expected = dynsys.fit_armax(data, na=2, nb=2, nc=1, nk=1)
    _same_model(saved, expected)
    # Its simulated response is the true B/A's (scipy), to the noise's accuracy.
    steps = 40
    impulse = np.asarray(dynsys.impulse_response(saved, steps))[:, 0, 0]
    true = scipy.signal.lfilter([0.0, 1.0, 0.5], [1.0, -1.5, 0.7], np.eye(1, steps)[0])
    assert np.max(np.abs(impulse - true)) < 0.05 * np.max(np.abs(true))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["structure"] == "armax" and metrics["loss"] == "prediction"
    assert metrics["polynomial"]["orders"] == {"na": 2, "nb": 2, "nc": 1, "nk": 1}
    assert not metrics["order_chosen"] and metrics["order"] == 2
    rows = metrics["fit_percent"]
    assert list(rows)[-1] == "held-out fit % vs measurements"  # the headline
    assert "held-out 1-step prediction fit % (Kalman predictor)" in rows
    summary = (out / "summary.md").read_text()
    assert "ARMAX model (na=2, nb=2, nc=1, nk=1; given)" in summary
    assert {"comparison.png", "residuals.png", "bode.png"} <= {
        p.name for p in out.iterdir()
    }


def test_box_jenkins_scan_chooses_on_the_held_out_part(tmp_path, capsys):
    u, y = _bj_record()
    path = _csv(tmp_path / "bj.csv", {"u": u, "y": y})
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y", "--structure", "bj"]
    assert _run(argv, out) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    polynomial = metrics["polynomial"]
    table = polynomial["scan"]["table"]
    assert [tuple(r["orders"].values()) for r in table[:2]] == [
        (1, 1, 1, 1, 0),
        (1, 1, 1, 1, 1),
    ]
    # Each row: fit_box_jenkins on the first two thirds, scored by compare on the
    # last third; the chosen orders are the best row's (or the fewest parameters
    # within 0.2 points of it); the saved model is the refit on all of the file.
    with jax.enable_x64(True):
        data = dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
        train, val = data.split_time(1 / 3)
        row = table[1]  # nb = nc = nd = nf = 1, nk = 1: the true structure
        model = dynsys.fit_box_jenkins(train, **row["orders"])
        fit = float(dynsys.compare(model, val).fit_percent[0])
        assert row["mean_fit"] == pytest.approx(fit, abs=1e-6)
        best = max(r["mean_fit"] for r in table)
        near = [r for r in table if r["mean_fit"] >= best - 0.2]
        chosen = min(near, key=lambda r: (r["parameters"], -r["mean_fit"]))
        assert polynomial["orders"] == chosen["orders"]
        expected = dynsys.fit_box_jenkins(data, **chosen["orders"])
    _same_model(dynsys.load(out / "model.dynsys"), expected)
    assert "structure scan (Box–Jenkins): 8 candidates" in capsys.readouterr().out


def _refused(argv, out, capsys) -> str:
    code = _run(argv, out)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    return err


def test_polynomial_structures_refuse_several_outputs(tmp_path, capsys):
    u, y = _armax_record(T=200)
    path = _csv(tmp_path / "two.csv", {"u": u, "y1": y, "y2": 2 * y})
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y1,y2"]
    err = _refused([*argv, "--structure", "armax"], tmp_path / "run", capsys)
    assert "--structure: 'armax' fits one output, got 2 (y1, y2)" in err
    err = _refused(
        [*argv[:-1], "y1", "--structure", "bj", "--orders", "1,1,1"],
        tmp_path / "run",
        capsys,
    )
    assert "--orders: 'bj' takes 5 orders (nb, nc, nd, nf, nk), got 3" in err


@pytest.mark.parametrize(
    "inputs, expected",
    [
        (
            "u1,u2",
            "--inputs: the input 'u2' is constant (2.5 throughout) in c.csv: no model "
            "can learn its effect (B); leave it out of --inputs (keeping 'u1')",
        ),
        ("u2", "the input 'u2' is constant (2.5 throughout) in c.csv"),
    ],
)
def test_a_constant_input_is_refused_before_any_fit(tmp_path, capsys, inputs, expected):
    u, y = _armax_record(T=200)
    u2 = np.full_like(u, 2.5)
    path = _csv(tmp_path / "c.csv", {"u1": u, "u2": u2, "y": y})
    argv = ["fit", str(path), "--inputs", inputs, "--outputs", "y"]
    err = _refused(argv, tmp_path / "run", capsys)
    assert expected in err
    assert ("excite the system" in err) == (inputs == "u2")


def test_structure_config_keys(tmp_path):
    u, y = _armax_record(T=300)
    path = _csv(tmp_path / "armax.csv", {"u": u, "y": y})
    config = {
        "kind": "fit",
        "data": {"file": str(path), "inputs": ["u"], "outputs": ["y"]},
        "fit": {"structure": "armax", "orders": [2, 2, 1, 1]},
    }
    result = dynsys.run_experiment(config, out=tmp_path / "run", progress=False)
    assert result.metrics["structure"] == "armax"
    assert result.metrics["polynomial"]["orders"]["na"] == 2
    recorded = dynsys.resolve_config(tmp_path / "run" / "config.toml")
    assert recorded["fit"]["structure"] == "armax"
    assert recorded["fit"]["orders"] == [2, 2, 1, 1]
    with pytest.raises(ValueError, match="config key 'fit.orders': polynomial orders"):
        dynsys.run_experiment(
            {**config, "fit": {"orders": [2, 2, 1, 1]}}, out=tmp_path / "r2"
        )
    with pytest.raises(ValueError, match="config key 'fit.order': with config key"):
        dynsys.run_experiment(
            {**config, "fit": {"structure": "bj", "order": 3}}, out=tmp_path / "r3"
        )


@pytest.mark.slow  # two prediction-error fits compiled (about 15 s)
def test_prediction_loss_fits_a_noise_model(tmp_path, capsys):
    """`--loss prediction`: a state-space model with a noise model, fitted by its
    one-step prediction error, whose held-out one-step predictions are as good
    as the true ARMAX predictor's (scipy's `lfilter` of the true polynomials)."""
    u, y = _armax_record()
    path = _csv(tmp_path / "armax.csv", {"u": u, "y": y})
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y", "--loss"]
    argv += ["prediction", "--order", "2", "--no-feedthrough", "--steps", "30"]
    assert _run(argv, out) == 0
    assert "prediction-error fit (prediction loss" in capsys.readouterr().out
    assert isinstance(dynsys.load(out / "model.dynsys"), dynsys.InnovationSystem)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["loss"] == "prediction" and metrics["structure"] == "state-space"
    assert metrics["uncertainty"]["hint"] is None  # it has a noise model
    # The true predictor's errors e = (A y - B u) / C, over the last third.
    a, c = [1.0, -1.5, 0.7], [1.0, 0.4]
    e = scipy.signal.lfilter(a, c, y) - scipy.signal.lfilter([0.0, 1.0, 0.5], c, u)
    held = slice(400, None)
    spread = np.linalg.norm(y[held] - y[held].mean())
    true_fit = 100 * (1 - np.linalg.norm(e[held]) / spread)
    row = metrics["fit_percent"]["held-out 1-step prediction fit % (Kalman predictor)"]
    assert row["fitted"][0] > true_fit - 1.0
    assert row["fitted"][0] >= row["subspace"][0] - 0.1


def test_identify_takes_the_structure(tmp_path):
    u, y = _armax_record(T=300)
    with jax.enable_x64(True):
        data = dynsys.Dataset(us=u[None, :, None], ys=y[None, :, None])
        found = dynsys.identify(data, structure="armax", orders=(2, 2, 1, 1))
        expected = dynsys.fit_armax(data, na=2, nb=2, nc=1, nk=1)
        _same_model(found.model, expected)  # refitted on all of `data`
        assert (found.order, found.feedthrough) == (2, False)
        two = dynsys.Dataset(us=u[None, :, None], ys=np.stack([y, y], -1)[None])
        with pytest.raises(ValueError, match=r"identify\(structure=...\): 'armax'"):
            dynsys.identify(two, structure="armax")
