"""The `dynsys` command."""

import json
import subprocess
import sys

import pytest

import dynsys
from dynsys import cli


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"dynsys {dynsys.__version__}"
    assert cli.main([]) == 0
    assert "simulate" in capsys.readouterr().out


def test_console_script_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "dynsys.cli", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0 and "usage: dynsys" in result.stdout


def test_simulate_writes_figure_and_data(tmp_path):
    out = tmp_path / "sim"
    assert (
        cli.main(
            ["simulate", "pendulum", "--steps", "20", "--batch", "3", "--out", str(out)]
        )
        == 0
    )
    assert (out / "trajectory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == "pendulum" and summary["num_steps"] == 20
    import numpy as np

    data = np.load(out / "trajectory.npz")
    assert data["xs"].shape == (3, 21, 2) and data["us"].shape == (3, 20, 1)


def test_simulate_unknown_model(tmp_path, capsys):
    assert cli.main(["simulate", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err


def test_run_a_config_with_overrides(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(
        'kind = "fit"\nname = "tiny"\n[data]\ntrajectories = 3\nlength = 10\n'
        '[fit]\noptimizer = "adam"\nsteps = 50\n'
    )
    code = cli.main(
        [
            "run",
            str(config),
            "--out-root",
            str(tmp_path / "runs"),
            "--set",
            "fit.steps=5",
            "--set",
            "fit.loss=one_step",
            "--no-progress",
        ]
    )
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("tiny-") and "wrote" in capsys.readouterr().out
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["steps_run"] == 5 and metrics["loss"] == "one_step"


def test_run_reports_config_errors(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text('kind = "fit"\n[fit]\nstep = 5\n')
    assert cli.main(["run", str(config), "--out-root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "dynsys run: unknown config key 'fit.step'" in err and "steps" in err
    assert cli.main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_simulate_a_model_that_needs_positive_states(tmp_path, capsys):
    """Lotka-Volterra from states around 0 fails in the solver: a clear error and a
    hint; from positive states it simulates."""
    from dynsys import cli

    bad = ["simulate", "lotka_volterra", "--steps", "60", "--batch", "8"]
    assert cli.main([*bad, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "the rollout of lotka_volterra failed" in err and "--x0-mean 2" in err
    good = [*bad, "--x0-mean", "2", "--x0-scale", "0.3", "--out", str(tmp_path / "ok")]
    assert cli.main(good) == 0
    assert (tmp_path / "ok" / "trajectory.png").exists()
