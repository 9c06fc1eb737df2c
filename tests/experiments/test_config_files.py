"""Issue 48, items 6, 7 and 9 for configs: paths relative to the config file, the
written config.toml rerun from anywhere, nesting and sizes bounded before any work,
a validation file whose sample time disagrees refused."""

import copy
import json
import os
import pathlib
import tomllib

import numpy as np
import pytest

import dynsys
from dynsys import cli


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _record(path: pathlib.Path, count: int, seed: int, time: float | None = None):
    """A first-order record `y_{t+1} = 0.8 y_t + 0.5 u_t` plus noise, as CSV (with
    a time column of step `time` when given)."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=count)
    y = np.zeros(count)
    for t in range(count - 1):
        y[t + 1] = 0.8 * y[t] + 0.5 * u[t]
    y += 0.01 * rng.normal(size=count)
    columns, header = [u, y], "u,y"
    if time is not None:
        columns, header = [time * np.arange(count), u, y], "t_s,u,y"
    np.savetxt(path, np.column_stack(columns), delimiter=",", header=header,
               comments="", fmt="%.8g")  # fmt: skip


_CONFIG = """
kind = "fit"
name = "paths"
[data]
file = "data/estimation.csv"
validation_file = "data/validation.csv"
validation = 0.25
inputs = ["u"]
outputs = ["y"]
[fit]
order = 1
feedthrough = false
steps = 3
"""


def _metrics(folder: pathlib.Path) -> dict:
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics.pop("timing")
    return metrics


def _only_run(root: pathlib.Path) -> pathlib.Path:
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    return folder


def test_config_paths_are_read_from_its_folder_and_its_record_reruns_anywhere(
    tmp_path, monkeypatch, capsys
):
    """A relative `data.file` (and validation file) is read from the config's
    folder, whatever the current folder; the run's config.toml stores both as
    absolute paths, leaves out `validation` (a file is held out), and reruns to the
    same metrics from inside the run folder and from another folder."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    _record(project / "data" / "estimation.csv", 60, seed=0)
    _record(project / "data" / "validation.csv", 40, seed=1)
    (project / "fit.toml").write_text(_CONFIG)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the data are not under the current folder
    argv = ["--no-progress", "--out-root"]
    assert cli.main(["run", str(project / "fit.toml"), *argv, "first"]) == 0, (
        capsys.readouterr().err
    )
    run = _only_run(elsewhere / "first")
    written = tomllib.loads((run / "config.toml").read_text())
    data = project / "data"
    assert written["data"]["file"] == str((data / "estimation.csv").resolve())
    held_out = str((data / "validation.csv").resolve())
    assert written["data"]["validation_file"] == held_out
    assert "validation" not in written["data"]  # it meant nothing next to a file
    first = _metrics(run)
    # The key that meant nothing was noted, once; the record leaves it out.
    note = "config key 'data.validation' (0.25) is not used: the validation file is"
    assert first["warnings"][0].startswith(note)
    assert [f["kind"] for f in first["data_checks"]] == ["unused_option"]
    first["warnings"], first["data_checks"] = first["warnings"][1:], []

    monkeypatch.chdir(run)  # as summary.md says: `dynsys run config.toml`
    assert cli.main(["run", "config.toml", *argv, str(tmp_path / "again")]) == 0
    assert _metrics(_only_run(tmp_path / "again")) == first
    monkeypatch.chdir(tmp_path)  # and from any other folder
    third = tmp_path / "third"
    assert cli.main(["run", str(run / "config.toml"), *argv, str(third)]) == 0
    assert _metrics(_only_run(third)) == first


def test_a_relative_path_is_not_read_from_the_current_folder(tmp_path, monkeypatch):
    """Issue 48 item 7: the file beside the current folder is not the config's."""
    (tmp_path / "configs").mkdir()
    _record(tmp_path / "heating.csv", 30, seed=0)
    (tmp_path / "configs" / "c.toml").write_text(
        'kind = "fit"\n[data]\nfile = "heating.csv"\n'
    )
    monkeypatch.chdir(tmp_path)
    expected = str(tmp_path / "configs" / "heating.csv")
    with pytest.raises(dynsys.ConfigError, match=f"no such file '{expected}'"):
        dynsys.run_experiment("configs/c.toml", out_root=tmp_path / "runs")
    # A path given by an override is read from the current folder.
    config = dynsys.resolve_config("configs/c.toml", ["data.file=heating.csv"])
    assert config["data"]["file"] == "heating.csv"
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_the_example_configs_resolve_from_any_folder(tmp_path, monkeypatch):
    """The TOML users write is unchanged: every shipped config resolves, and the
    one with a data file finds it from another folder."""
    monkeypatch.chdir(tmp_path)
    configs = sorted((ROOT / "examples" / "configs").glob("*.toml"))
    assert configs
    for path in configs:
        resolved = dynsys.resolve_config(path)
        if resolved["kind"] == "fit" and resolved["data"]["file"] is not None:
            assert pathlib.Path(resolved["data"]["file"]).is_file(), path


def _deep_inline(depth: int) -> str:
    return 'kind = "fit"\nx = ' + "{a = " * depth + "1" + "}" * depth + "\n"


@pytest.mark.parametrize(
    "text",
    [
        _deep_inline(5000),
        'kind = "fit"\nx = ' + "[" * 50000 + "1" + "]" * 50000 + "\n",
        'kind = "fit"\n[' + ".".join(["a"] * 5000) + "]\n",
        _deep_inline(40),  # within Python's limit, beyond the config's
    ],
    ids=["inline-tables", "arrays", "dotted-table", "forty"],
)
def test_a_deeply_nested_config_is_one_line(text, tmp_path, capsys):
    """Issue 48 item 7 (N9): a RecursionError traceback of 3,000 lines before."""
    path = tmp_path / "deep.toml"
    path.write_text(text)
    code = cli.main(["run", str(path), "--out-root", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        f"dynsys run: config file {str(path)!r} is not valid TOML for a config: "
        "tables or arrays nested too deeply (at most 32 levels)."
    )
    nested = tomllib.loads("x = " + "[" * 40 + "]" * 40)
    with pytest.raises(dynsys.ConfigError, match="nested too deeply"):
        dynsys.resolve_config({"kind": "fit", **nested})


@pytest.mark.parametrize(
    "override, message",
    [
        ("fit.neural_width=1000000", r"'fit.neural_width': expected a finite value "
         r"in \[1, 4096\], got 1000000"),
        ("fit.neural_depth=1000000", r"'fit.neural_depth': expected a finite value "
         r"in \[2, 64\], got 1000000"),
        ("fit.neural_steps=1000000000000", r"'fit.neural_steps': expected a finite "
         r"value in \[1, 1e\+08\]"),
        ("data.trajectories=100000", r"config keys 'data.trajectories' x "
         r"'data.length': expected at most 1e\+08 simulated samples in all, got "
         r"100000 x 10000"),
        ("data.dt=0.0", r"'data.dt': expected a finite value > 0, got 0.0"),
    ],
)  # fmt: skip
def test_sizes_are_bounded_before_any_work(override, message):
    """Issue 48 item 6 (N5): a width of 10^6 ran the linear stage, then a 103-line
    RESOURCE_EXHAUSTED traceback; a depth of 10^6 hung."""
    config = {"kind": "fit", "data": {"length": 10000}}
    with pytest.raises(dynsys.ConfigError, match=message):
        dynsys.resolve_config(config, [override])


def test_the_neural_stage_memory_is_estimated_before_the_linear_stage(
    tmp_path, monkeypatch
):
    """Sizes each within bounds whose product would not fit the machine are
    refused after reading the data, before any fit."""
    from dynsys._experiments import sizes
    from dynsys._experiments.fit import pipeline

    monkeypatch.setattr(sizes, "machine_memory", lambda: 8 * 10**9)
    monkeypatch.setattr(
        pipeline, "estimate_outputs", lambda *a, **k: pytest.fail("fit")
    )
    _record(tmp_path / "r.csv", 300, seed=0)
    config = {
        "kind": "fit",
        "data": {"file": str(tmp_path / "r.csv"), "inputs": ["u"], "outputs": ["y"]},
        "fit": {"model": "neural", "order": 1, "feedthrough": False,
                "neural_width": 4096, "neural_depth": 8, "neural_horizon": 100},
    }  # fmt: skip
    with pytest.raises(dynsys.ConfigError) as info:
        dynsys.run_experiment(config, out_root=tmp_path / "runs", echo=None)
    text = str(info.value)
    assert text.startswith("config key 'fit.neural_width': the neural stage ")
    assert "more than 50% of this machine's 8 GB" in text
    assert len(text.splitlines()) == 1


def test_sizes_within_the_bounds_fit_a_machine_of_average_memory():
    """The defaults need a few MB; the estimate grows with width squared."""
    from dynsys._experiments.sizes import neural_bytes

    config = dynsys.resolve_config({"kind": "fit"})["fit"]
    assert neural_bytes(config, channels=3, windows=1000, itemsize=8) < 50 * 10**6
    wide = {**config, "neural_width": 2 * config["neural_width"], "neural_depth": 4}
    narrow = {**config, "neural_depth": 4}
    ratio = neural_bytes(wide, 3, 1000, 8) / neural_bytes(narrow, 3, 1000, 8)
    assert 2 < ratio < 4


def test_a_validation_file_with_another_sample_time_is_refused(tmp_path):
    """Issue 48 item 9: an estimation file without times and a validation file
    whose times step by 2 s were accepted (with data.dt = 1, refused)."""
    _record(tmp_path / "e.csv", 60, seed=0)
    _record(tmp_path / "v.csv", 40, seed=1, time=2.0)
    data = {"file": str(tmp_path / "e.csv"), "validation_file": str(tmp_path / "v.csv"),
            "inputs": ["u"], "outputs": ["y"]}  # fmt: skip
    config = {"kind": "fit", "data": data, "fit": {"order": 1, "feedthrough": False}}
    with pytest.raises(dynsys.ConfigError) as info:
        dynsys.run_experiment(config, out_root=tmp_path / "runs", echo=None)
    assert str(info.value) == (
        f"config key 'data.validation_file': {tmp_path / 'v.csv'} has dt 2 s, but "
        f"the estimation data ({tmp_path / 'e.csv'}) have no sample time (no time "
        "column); set config key 'data.dt' to 2 for both."
    )
    _record(tmp_path / "e.csv", 60, seed=0, time=1.0)
    same = r"has dt 2 s, but the estimation data \(.*\) have dt 1 s; give files with"
    with pytest.raises(dynsys.ConfigError, match=same):
        dynsys.run_experiment(config, out_root=tmp_path / "runs", echo=None)


def test_the_config_dict_keeps_its_depth_check_free_of_recursion():
    """A dict nested past Python's recursion limit is refused, not copied."""
    deep: dict = {}
    inner = deep
    for _ in range(5000):
        inner["a"] = {}
        inner = inner["a"]
    with pytest.raises(dynsys.ConfigError, match="nested too deeply"):
        dynsys.resolve_config({"kind": "fit", "system": {"params": deep}})
    assert os.getpid()  # the interpreter is fine
    copy.deepcopy({"kind": "fit"})


def test_an_order_far_above_the_data_is_warned_about_before_any_work():
    """Issue 48 item 9: `--order 50` on a short record ran 248 s to an unstable
    model without a word. One line, with the parameter count against the samples
    and the cost against the scan's largest order; orders the data support (or at
    most the scan's) pass silently."""
    from dynsys._experiments.fit.start import _warn_high_order

    rng = np.random.default_rng(0)
    train = dynsys.Dataset(us=rng.normal(size=(1, 534, 1)),
                           ys=rng.normal(size=(1, 534, 1)))  # fmt: skip
    found, echoed = [], []
    fit_cfg = {"order": 50, "feedthrough": False}
    _warn_high_order(fit_cfg, train, found, echoed.append)
    assert found == [
        "config key 'fit.order': order 50 is far above what the data support: its "
        "model has 2,600 parameters for 534 estimation samples of 1 output (4.9 per "
        "measured value; above 0.25 a model fits the noise); expect a much longer "
        "run (22x the parameters of order 10, the structure scan's largest; the "
        "fit's time grows faster than that) and a model that does not validate."
    ]
    assert echoed == ["  warning: " + found[0].rstrip(".")]
    for order in (10, 11):  # 11: 143 parameters, 0.27 per value; 10: the scan's
        found = []
        _warn_high_order({**fit_cfg, "order": order}, train, found, echoed.append)
        assert bool(found) == (order == 11)
    long = dynsys.Dataset(us=rng.normal(size=(1, 20000, 1)),
                          ys=rng.normal(size=(1, 20000, 1)))  # fmt: skip
    found = []
    _warn_high_order(fit_cfg, long, found, echoed.append)
    assert found == []


def test_the_typed_configs_map_one_to_one_onto_the_calls_they_drive():
    """Issue 49 item 3: `FitConfig` and `NeuralConfig` hold `fit`'s and
    `fit_neural`'s arguments, each field named as the argument, built from the
    TOML section users write (unchanged)."""
    import dataclasses
    import inspect

    from dynsys._experiments.fit.typed_config import FitConfig, NeuralConfig

    section = dynsys.resolve_config(
        {"kind": "fit", "fit": {"neural_width": 8, "optimizer": "adam", "lr": 0.1}}
    )["fit"]
    neural = NeuralConfig.from_section(section)
    taken = inspect.signature(dynsys.fit_neural).parameters
    assert set(neural.arguments()) <= set(taken)
    assert neural.width_size == 8 and neural.past == section["neural_past"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        neural.depth = 3  # type: ignore[misc]
    data = dynsys.Dataset(ys=np.ones((1, 30, 1)))
    fit = FitConfig.from_section(section, data)
    assert set(fit.arguments()) <= set(inspect.signature(dynsys.fit).parameters)
    assert fit.num_steps == 400 and fit.described == "Adam (lr 0.1)"
    assert isinstance(fit.loss, dynsys.Simulation)
    shooting = {**section, "loss": "shooting", "horizon": 50}
    with pytest.raises(dynsys.ConfigError, match="'fit.horizon'.*longer than"):
        FitConfig.from_section(shooting, data)
