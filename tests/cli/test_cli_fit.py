"""`dynsys fit`: the default story, a user dataset, bad data, a diverging fit."""

import json
import math
import warnings

import numpy as np
import pytest

import dynsys
from dynsys import cli


FILES = {
    ".dynsys-run",  # the marker: a later --out may replace this folder
    "config.toml",
    "model.dynsys",
    "metrics.json",
    "history.csv",
    "summary.md",
    "trajectories.png",
    "eigenvalues.png",
    "loss.png",
}
SMALL = ["--trajectories", "4", "--length", "20", "--no-progress"]
# Adam for a fixed number of steps (the default optimiser stops when converged).
ADAM = ["--optimizer", "adam", "--steps", "20"]


def test_default_fit_writes_the_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["fit", *SMALL, *ADAM, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "eigenvalues" in printed and "true" in printed and "fit time" in printed
    assert "held-out fit % vs noise-free truth" in printed
    assert set(p.name for p in out.iterdir()) == FILES | {"data.npz"}
    for name in ("trajectories.png", "eigenvalues.png", "loss.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps_run"] == 20 and metrics["stop_reason"] is None
    assert len(metrics["eigenvalues"]["true"]) == 4
    model = dynsys.load(out / "model.dynsys")
    np.testing.assert_allclose(model.K, metrics["K"])
    lines = (out / "history.csv").read_text().splitlines()
    assert lines[0] == "step,train_loss,validation_loss" and len(lines) == 1 + 20 + 1
    data = dynsys.load_dataset(out / "data.npz")
    assert data.xs.shape == (4, 21, 4)
    # The folder is an experiment: its config reruns it, with the same metrics.
    config = dynsys.resolve_config(out / "config.toml")
    assert config["data"]["trajectories"] == 4 and config["fit"]["steps"] == 20
    rerun = dynsys.run_experiment(
        config, out=tmp_path / "rerun" / "run", progress=False, echo=None
    )
    assert rerun.metrics["fit_percent"] == metrics["fit_percent"]
    # A second run replaces the folder whole, leaving nothing else behind.
    assert cli.main(["fit", *SMALL, *ADAM, "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rerun", "run"]


def test_fit_a_csv_dataset_with_the_stable_model(tmp_path, capsys):
    K = np.array([[0.99, 0.1], [-0.1, 0.99]])
    rng = np.random.default_rng(0)
    data = dynsys.simulate(dynsys.LinearSystem(K), rng.normal(size=(4, 2)), 15)
    data.save(tmp_path / "d.csv")
    out = tmp_path / "run"
    code = cli.main(
        [
            "fit",
            str(tmp_path / "d.csv"),
            "--model",
            "stable",
            "--loss",
            "shooting",
            "--horizon",
            "5",
            "--steps",
            "5",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert set(p.name for p in out.iterdir()) == FILES
    model = dynsys.load(out / "model.dynsys")
    assert isinstance(model, dynsys.StableLinearSystem)
    assert dynsys.spectral_radius(model) < 1.0
    assert "held-out fit % vs measurements" in capsys.readouterr().out


def test_bad_csv_is_reported_with_line_and_column(tmp_path, capsys):
    path = tmp_path / "d.csv"
    path.write_text("trajectory,time,x0\n0,0,1\n0,1,oops\n")
    assert cli.main(["fit", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "line 3: column 3 ('x0'): 'oops' is not a number" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_bad_option_names_the_option(tmp_path, capsys):
    assert cli.main(["fit", "--steps", "0", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "--steps: expected a finite value in [1, 1e+08], got 0" in err
    assert not (tmp_path / "run").exists()


def test_diverging_fit_reports_and_writes_a_complete_folder(tmp_path, capsys):
    out = tmp_path / "run"
    with warnings.catch_warnings(record=True) as escaped:  # said once, by the run
        warnings.simplefilter("always")
        assert cli.main(["fit", *SMALL, *ADAM, "--lr", "1e30", "--out", str(out)]) == 0
    assert [str(w.message) for w in escaped] == []
    captured = capsys.readouterr()
    printed = captured.out
    assert "note: " in printed and "non-finite" in printed
    assert "Warning" not in captured.err
    assert set(p.name for p in out.iterdir()) == FILES | {"data.npz"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps_run"] < 20 and "non-finite" in metrics["stop_reason"]
    model = dynsys.load(out / "model.dynsys")
    assert np.all(np.isfinite(model.K))
    assert all(
        math.isfinite(v)
        for v in metrics["fit_percent"]["held-out fit % vs measurements"].values()
    )
