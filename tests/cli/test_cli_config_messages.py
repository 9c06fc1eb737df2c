"""Issue 48 items 9 and 10 on the command line: conflicting options refused in one
line before any work, and messages that name the flag the user typed (not the config
key it set)."""

import numpy as np
import pytest

from dynsys import cli

from ..helpers import refused_in_one_line


def _record(path, count: int, seed: int, time: float | None = None) -> str:
    rng = np.random.default_rng(seed)
    u = rng.normal(size=count)
    y = np.convolve(u, 0.8 ** np.arange(count))[:count] + 0.01 * rng.normal(size=count)
    columns, header = [u, y], "u,y"
    if time is not None:
        columns, header = [time * np.arange(count), u, y], "t_s,u,y"
    np.savetxt(path, np.column_stack(columns), delimiter=",", header=header,
               comments="", fmt="%.8g")  # fmt: skip
    return str(path)


@pytest.mark.parametrize("other", [["--validation-split", "0.5"],
                                   ["--validation-data", "v.csv"]])  # fmt: skip
def test_validation_with_a_split_or_a_file_is_refused(other, tmp_path, capsys):
    """`--validation 0.5 --validation-split 0.5`: --validation did nothing."""
    data = _record(tmp_path / "d.csv", 60, seed=0)
    argv = ["fit", data, "--inputs", "u", "--outputs", "y", "--validation", "0.5"]
    err = refused_in_one_line([*argv, *other], tmp_path, capsys)
    assert err == (
        f"dynsys fit: --validation 0.5 and {other[0]} {other[1]}: give one "
        "(--validation holds out a share of whole experiments; "
        f"{other[0]} chooses the held-out data itself)."
    )


def test_validation_on_one_experiment_is_noted(tmp_path, capsys):
    """On a one-experiment file --validation holds nothing out: a warning says what
    is held out instead, naming the flags."""
    data = _record(tmp_path / "d.csv", 60, seed=0)
    argv = ["fit", data, "--inputs", "u", "--outputs", "y", "--validation", "0.5"]
    argv += ["--order", "1", "--no-feedthrough", "--steps", "2", "--no-progress"]
    assert cli.main([*argv, "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert (
        "dynsys fit: warning: --validation (0.5) holds out whole experiments, but "
        "the data are one; the last third of it is held out by time instead "
        "(--validation-split chooses how much)."
    ) in err.splitlines()


def test_a_validation_file_with_another_sample_time_names_the_flags(
    tmp_path, capsys
):
    """Without --dt the pair was accepted; with --dt 1 it was refused."""
    data = _record(tmp_path / "e.csv", 60, seed=0)
    held = _record(tmp_path / "v.csv", 40, seed=1, time=2.0)
    argv = ["fit", data, "--validation-data", held, "--inputs", "u", "--outputs", "y"]
    err = refused_in_one_line([*argv, "--order", "1"], tmp_path, capsys)
    assert err == (
        f"dynsys fit: --validation-data: {held} has dt 2 s, but the estimation "
        f"data ({data}) have no sample time (no time column); set --dt to 2 for "
        "both."
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--neural-steps", "0"], "--neural-steps: expected a finite value in "
         "[1, 1e+08], got 0."),
        (["--neural-horizon", "0"], "--neural-horizon: expected a finite value in "
         "[1, 1e+08], got 0."),
        (["--model", "neural", "--neural-horizon", "100"], "--neural-horizon (100) "
         "with 'fit.neural_past' (20): a training window of past + horizon = 120 "
         "samples is longer than the longest estimation record (40); choose a "
         "shorter horizon or past."),
    ],
)  # fmt: skip
def test_neural_flags_are_named_as_typed(flags, message, tmp_path, capsys):
    """The --neural-* errors named 'config key fit.neural_steps'; the past +
    horizon one named fit.neural_horizon even when the past was too long."""
    data = _record(tmp_path / "d.csv", 60, seed=0)
    argv = ["fit", data, "--inputs", "u", "--outputs", "y", "--order", "1"]
    err = refused_in_one_line([*argv, *flags], tmp_path, capsys)
    assert err == f"dynsys fit: {message}"


def test_a_neural_learning_rate_of_zero_is_refused_before_the_linear_stage(
    tmp_path, capsys
):
    """`fit.neural_lr = 0` passed the schema (>= 0) and trained nothing."""
    data = _record(tmp_path / "d.csv", 60, seed=0)
    config = tmp_path / "c.toml"
    config.write_text(
        f'kind = "fit"\n[data]\nfile = "{data}"\ninputs = ["u"]\noutputs = ["y"]\n'
        '[fit]\nmodel = "neural"\norder = 1\nneural_lr = 0.0\n'
        "neural_horizon = 8\nneural_past = 4\n"
    )
    code = cli.main(["run", str(config), "--out-root", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.endswith(
        "config key 'fit.neural_lr': expected a finite number > 0, got 0.0."
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
