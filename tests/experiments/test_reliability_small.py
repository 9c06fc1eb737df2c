"""The smaller reliability findings of issue 23: a full disk names the path, a file
too short for the default split names the data (not an option the user did not
give), an order above what a short record allows fails before the fit, and held-out
experiments that repeat estimation ones are reported."""

import errno
import json
import os
import pathlib

import numpy as np
import pytest

import dynsys
from dynsys import cli


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_names_the_file_being_saved(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", _full_disk)
    model_path, data_path = tmp_path / "m.dynsys", tmp_path / "d.npz"
    with pytest.raises(OSError) as info:
        dynsys.save(model_path, dynsys.LinearSystem(np.eye(2)))
    assert info.value.errno == errno.ENOSPC
    assert str(info.value) == (
        f"[Errno {errno.ENOSPC}] No space left on device: '{model_path}'"
    )
    with pytest.raises(OSError, match=r"No space left on device: '.*d\.npz'"):
        dynsys.Dataset(ys=np.ones((1, 5, 1))).save(data_path)
    assert os.listdir(tmp_path) == []  # no temporary file left behind


_CONFIG = """
kind = "fit"
name = "disk"
[system]
model = "mass_spring_damper"
[data]
trajectories = 2
length = 10
[fit]
steps = 1
"""


def test_a_full_disk_while_writing_a_run_names_the_run_folder(
    tmp_path, monkeypatch, capsys
):
    """`write` reports a full disk without a file name; the run names its folder."""
    config = tmp_path / "disk.toml"
    config.write_text(_CONFIG)
    write_text = pathlib.Path.write_text

    def full_in_staging(self, *args, **kwargs):
        if ".partial" in self.parent.name:  # the run's own files: the disk is full
            _full_disk()
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full_in_staging)
    out = tmp_path / "runs"
    code = cli.main(["run", str(config), "--out-root", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(
        "dynsys run: [Errno 28] No space left on device while writing the run "
        f"folder: '{out.absolute()}/disk-"
    ), err
    assert os.listdir(out) == []  # nothing half-written is kept


def test_a_signal_that_ends_a_run_in_another_error_names_it(
    tmp_path, monkeypatch, capsys
):
    """A signal whose `KeyboardInterrupt` a runner turns into another error (a
    half-made result): the run is an interrupted one (143, nothing kept) and the
    line names the error, so the moment the signal arrived is known. (SIGTERM: a
    background job may have SIGINT ignored, and keeps it so.)"""
    import signal
    import time

    from dynsys._experiments import single

    def runner(config, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5.0)  # the handler raises in here
        except KeyboardInterrupt:
            raise RuntimeError("a half-made result") from None
        raise AssertionError("the signal never came")

    monkeypatch.setitem(single.RUNNERS, "fit", runner)
    config = tmp_path / "disk.toml"
    config.write_text(_CONFIG)
    out = tmp_path / "runs"
    code = cli.main(["run", str(config), "--out-root", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 128 + signal.SIGTERM, err
    assert err == (
        "dynsys run: interrupted (SIGTERM) while running (RuntimeError: a half-made "
        "result); nothing was written."
    )
    assert os.listdir(out) == []


def _fails(argv, capsys, tmp_path) -> str:
    out = tmp_path / "run"
    code = cli.main([*argv, "--no-progress", "--out", str(out)])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
    return err, captured.out


@pytest.mark.parametrize("rows", [1, 8])
def test_a_file_too_short_for_the_default_split_names_the_data(tmp_path, capsys, rows):
    path = tmp_path / "short.csv"
    values = np.column_stack([np.sin(np.arange(rows)), np.cos(np.arange(rows))])
    np.savetxt(path, values, delimiter=",", header="u,y", comments="")
    err, _ = _fails(
        ["fit", str(path), "--inputs", "u", "--outputs", "y"], capsys, tmp_path
    )
    assert err == (
        f"dynsys fit: DATA: {path}: its one experiment has {rows} "
        f"sample{'s' * (rows != 1)}, too few to fit a model and check it on held-out "
        "data (at least 12 samples: a third of them held out, 4 on each side); give "
        "a longer record or a separate validation file."
    )
    assert "--order" not in err and "--validation-split" not in err


def test_an_order_above_a_short_record_fails_before_the_fit(tmp_path, capsys):
    path = tmp_path / "record.csv"
    rng = np.random.default_rng(0)
    u = rng.normal(size=60)
    y = np.convolve(u, [0.0, 1.0, 0.5])[:60]
    np.savetxt(path, np.column_stack([u, y]), delimiter=",", header="u,y", comments="")
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y", "--order", "40"]
    err, printed = _fails(argv, capsys, tmp_path)
    assert err.startswith(
        "dynsys fit: --order: the estimation data (40 samples, 1 outputs) allow at "
        "most order "
    ), err
    largest = int(err.split("allow at most order ")[1].split(",")[0])
    assert 1 <= largest < 40 and err.endswith("got 40.")
    assert "subspace start" not in printed  # refused before any identification
    assert "_" not in err.split(": ", 1)[1]  # names no internal function


def _experiments(values: list[np.ndarray]):
    return dynsys.Dataset(us=[v[:, :1] for v in values], ys=[v[:, 1:] for v in values])


def test_split_overlap_finds_repeated_experiments():
    from dynsys._experiments.fit.data_checks import split_overlap

    rng = np.random.default_rng(1)
    a, b, c = (rng.normal(size=(20, 2)) for _ in range(3))
    estimation, held_out = _experiments([a, b, c]), _experiments([c, b.copy() + 1e-12])
    finding = split_overlap(estimation, held_out)
    assert finding is not None and finding["level"] == "warn"
    assert finding["message"].startswith(
        "1 held-out experiment of 2 repeats an estimation experiment sample for "
        "sample (held-out 0 = estimation 2): the validation score is not independent"
    )
    assert split_overlap(estimation, _experiments([b[:10], a + 1.0])) is None
    assert split_overlap(estimation, None) is None
    two = split_overlap(estimation, _experiments([a, c]))
    assert two["message"].startswith("2 held-out experiments of 2 repeat ")


@pytest.mark.slow  # a whole fit from the command line
def test_duplicated_experiments_across_the_split_are_reported(tmp_path, capsys):
    rng = np.random.default_rng(2)
    records = [rng.normal(size=(40, 2)) for _ in range(3)]
    for record in records:
        record[1:, 1] = 0.8 * record[:-1, 1] + record[:-1, 0]  # y+ = 0.8 y + u
    records.append(records[0].copy())  # experiment 3 repeats experiment 0
    path = tmp_path / "repeated.csv"
    rows = [np.column_stack([np.full(40, k), r]) for k, r in enumerate(records)]
    np.savetxt(
        path,
        np.vstack(rows),
        delimiter=",",
        header="trajectory,u,y",
        comments="",
        fmt="%.6g",
    )
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y", "--steps", "3"]
    argv += ["--order", "1", "--no-feedthrough"]  # no structure scan (CI time)
    code = cli.main([*argv, "--validation", "0.25", "--no-progress", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    expected = (
        "1 held-out experiment of 1 repeats an estimation experiment sample for "
        "sample (held-out 0 = estimation 0)"
    )
    assert expected in captured.out and expected in captured.err
    metrics = json.loads((out / "metrics.json").read_text())
    kinds = [finding["kind"] for finding in metrics["data_checks"]]
    assert "duplicate_split" in kinds
    assert any(expected in line for line in metrics["warnings"])
