"""Issue 50, item 3: what a scan or fit raises as a Python warning is said once, in
one `dynsys` line, never as Python's two-line warning with a path inside dynsys."""

import json
import pathlib
import re
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys import _cli_warnings, cli


REAL = pathlib.Path(__file__).parents[2] / "data" / "real"


def _split_heating(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """heating.csv as an estimation file (its first 300 samples) and a validation
    file (the rest): on this split the scan's high orders diverge."""
    lines = (REAL / "heating.csv").read_text().splitlines()
    estimation, validation = folder / "est.csv", folder / "val.csv"
    estimation.write_text("\n".join(lines[:301]) + "\n")
    validation.write_text("\n".join([lines[0], *lines[301:]]) + "\n")
    return estimation, validation


@pytest.mark.slow
def test_scan_with_diverging_candidates_gives_no_raw_warning(
    tmp_path, capsys, monkeypatch
):
    from dynsys._experiments.fit import order as fit_order

    monkeypatch.setattr(fit_order, "SCAN_REFINE_STEPS", 10)
    estimation, validation = _split_heating(tmp_path)
    out = tmp_path / "run"
    argv = ["fit", str(estimation), "--validation-data", str(validation)]
    argv += ["--inputs", "drive_V", "--outputs", "temp_C", "--steps", "20"]
    argv += ["--select-on-validation"]  # the split on which candidates diverge
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        assert cli.main([*argv, "--no-progress", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert [str(w.message) for w in escaped] == []
    assert "Warning" not in err and "encountered in" not in err
    assert all(line.startswith("dynsys fit: ") for line in err.splitlines()), err
    summary = (out / "summary.md").read_text()
    assert "diverged" in summary  # the scan did have diverging candidates
    for text in (summary, (out / "metrics.json").read_text()):
        assert not re.search(r"(?<![\d.])\d{16,}", text)  # no 16-digit integer part


def test_tiny_fit_warning_is_said_once(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["fit", "--trajectories", "4", "--length", "20", "--no-progress"]
    argv += ["--optimizer", "adam", "--steps", "20", "--lr", "50", "--out", str(out)]
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert [str(w.message) for w in escaped] == []
    assert "UserWarning" not in captured.err and "estimate.py" not in captured.err
    reason = json.loads((out / "metrics.json").read_text())["stop_reason"]
    assert reason.startswith("no better than the start")
    said = (captured.out + captured.err).count("no better than the start")
    assert said == 1, captured


def _caught(*raise_them):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for raise_it in raise_them:
            raise_it()
    return caught


def test_lines_say_each_warning_once_in_our_words():
    def overflow():
        with np.errstate(over="warn"):
            np.full((2, 2), 1e300) @ np.full((2, 2), 1e300)

    def divide():
        with np.errstate(divide="warn"):
            np.float64(1.0) / np.float64(0.0)

    def fit_note():
        warnings.warn("fit: the loss grew.", UserWarning)

    caught = _caught(overflow, overflow, divide, fit_note, fit_note)
    lines = _cli_warnings.lines(caught)
    assert lines[0] == "warning: the loss grew"
    assert len(lines) == 2 and lines[1].startswith("note: a model's free run diverged")
    assert "overflow encountered in matmul" in lines[1]
    assert "divide by zero encountered" in lines[1]
    # What the run said already (its warnings, its stop reason) is not said again.
    assert _cli_warnings.lines(_caught(fit_note), known=["the loss grew."]) == []


def test_information_criteria_of_a_diverging_model_raise_no_warning():
    K = jnp.array([[3.0]], dtype=jnp.float64)
    model = dynsys.LinearSystem(K, jnp.ones((1, 1)), jnp.ones((1, 1)))
    u = np.random.default_rng(0).normal(size=(1, 400, 1))
    y = np.random.default_rng(1).normal(size=(1, 400, 1))
    data = dynsys.Dataset(us=jnp.asarray(u), ys=jnp.asarray(y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aic, bic, fpe = dynsys.information_criteria(model, data, 3)
    assert aic == bic == fpe == np.inf
