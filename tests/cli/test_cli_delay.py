"""The input delay (dead time) in `dynsys fit` and `dynsys.identify`
(`fit.input_delay`): estimated by default, given by `--delay`, off with
`--no-delay`; the scan sees the plant behind it and the saved model carries it."""

import json

import jax
import numpy as np
import pytest

import dynsys
from dynsys import cli

from ..helpers import refused_in_one_line


def _record(path, delay: int, count: int = 400, seed: int = 0) -> str:
    """A second-order plant whose input acts `delay` samples late:
    `y_t = 1.5 y_{t-1} - 0.7 y_{t-2} + 0.5 u_{t-1-delay}`, a little noise."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=count)
    y = np.zeros(count)
    for t in range(2, count):
        k = t - 1 - delay
        y[t] = 1.5 * y[t - 1] - 0.7 * y[t - 2] + (0.5 * u[k] if k >= 0 else 0.0)
    y += 0.01 * rng.normal(size=count)
    np.savetxt(path, np.column_stack([u, y]), delimiter=",", header="u,y",
               comments="", fmt="%.8g")  # fmt: skip
    return str(path)


def _fit(tmp_path, capsys, data, *flags):
    out = tmp_path / "run"
    argv = ["fit", data, "--inputs", "u", "--outputs", "y", "--no-progress"]
    assert cli.main([*argv, *flags, "--out", str(out)]) == 0
    console = capsys.readouterr().out
    return json.loads((out / "metrics.json").read_text()), console, out


def test_a_known_dead_time_is_recovered_and_carried(tmp_path, capsys):
    """Delay 3 estimated; the scan chooses the plant's order 2 without D; the
    saved model, loaded and compared on the raw records (an independent path),
    gives the fit % the run reports."""
    data = _record(tmp_path / "d.csv", 3)
    test = _record(tmp_path / "v.csv", 3, count=200, seed=1)
    metrics, console, out = _fit(
        tmp_path, capsys, data, "--validation-data", test, "--steps", "20"
    )
    assert "  input delay: 3 samples (estimated)" in console
    assert metrics["input_delay"] == [3] and metrics["input_delay_estimated"]
    assert (metrics["order"], metrics["feedthrough"]) == (2, False)
    assert metrics["structure_scan"]["order"] == 2
    summary = (out / "summary.md").read_text()
    assert "Input delay: 3 samples (estimated)." in summary
    with jax.enable_x64(True):
        model = dynsys.load(out / "model.dynsys")
        assert model.state_size == 2 + 3
        raw = dynsys.load_dataset(test, inputs=["u"], outputs=["y"])
        tested = float(dynsys.compare(model, raw).fit_percent[0])
        whole = dynsys.load_dataset(data, inputs=["u"], outputs=["y"])
        trained = float(dynsys.compare(model, whole).fit_percent[0])
    final = metrics["final_model"]
    assert tested == pytest.approx(final["test_fit_percent"][0], abs=1e-6)
    assert trained == pytest.approx(final["estimation_fit_percent"][0], abs=1e-6)
    assert tested > 98.0


def test_no_delay_is_invented(tmp_path, capsys):
    metrics, console, _ = _fit(
        tmp_path, capsys, _record(tmp_path / "d.csv", 0),
        "--order", "2", "--no-feedthrough", "--steps", "5",
    )  # fmt: skip
    assert "  input delay: 0 samples (estimated)" in console
    assert metrics["input_delay"] == [0] and metrics["order"] == 2


def test_a_structure_that_carries_no_delay_says_none_was_estimated(
    tmp_path, capsys
):
    """`--loss prediction` fits a noise model's predictor, which is not delayed:
    the default `"auto"` estimates nothing, and the console says so."""
    metrics, console, _ = _fit(
        tmp_path, capsys, _record(tmp_path / "d.csv", 2),
        "--order", "2", "--loss", "prediction", "--steps", "5",
    )  # fmt: skip
    assert "  input delay: not estimated (it is for a state-space model" in console
    assert metrics["input_delay"] == [0]


@pytest.mark.parametrize("flags, delay, line", [
    (["--delay", "2"], [2], "input delay: 2 samples (given)"),
    (["--no-delay"], [0], "input delay: 0 samples (given)"),
])  # fmt: skip
def test_the_given_delay_overrides_the_estimate(flags, delay, line, tmp_path, capsys):
    metrics, console, out = _fit(
        tmp_path, capsys, _record(tmp_path / "d.csv", 3),
        "--order", "2", "--no-feedthrough", "--steps", "5", *flags,
    )  # fmt: skip
    assert f"  {line}" in console.splitlines()
    assert metrics["input_delay"] == delay and not metrics["input_delay_estimated"]
    assert dynsys.load(out / "model.dynsys").state_size == 2 + delay[0]


def test_identify_recovers_the_delay_and_the_config_key_sets_it(tmp_path):
    data = dynsys.load_dataset(_record(tmp_path / "d.csv", 3), inputs=["u"],
                               outputs=["y"])  # fmt: skip
    found = dynsys.identify(data, order=2, feedthrough=False, steps=5)
    assert (found.order, found.input_delay) == (2, (3,))
    assert found.model.state_size == 5 and found.held_out_fit_percent[0] > 98.0
    assert "input delay 3" in found.summary().splitlines()[0]
    given = dynsys.identify(data, order=2, feedthrough=False, steps=5, input_delay=[1])
    assert given.input_delay == (1,) and given.model.state_size == 3
    with pytest.raises(ValueError, match=r"^identify\(input_delay=\.\.\.\): expected"):
        dynsys.identify(data, order=2, input_delay=[1, 2])


@pytest.mark.parametrize("value, message", [
    ("-1", "expected a finite value >= 0, got -1."),
    ("1.5", "expected 'auto', an integer >= 0 or a list of one per input, got '1.5'."),
    ("2,1", "expected one delay per input (1), got 2: [2, 1]."),
    ("90", "expected at most 33 samples (half the shortest experiment of the "
           "split, 67 samples), got 90."),
])  # fmt: skip
def test_a_bad_delay_is_refused_in_one_line(value, message, tmp_path, capsys):
    data = _record(tmp_path / "d.csv", 0, count=200)
    argv = ["fit", data, "--inputs", "u", "--outputs", "y", f"--delay={value}"]
    err = refused_in_one_line(argv, tmp_path, capsys)
    assert err == f"dynsys fit: --delay: {message}"


def test_the_config_key_is_refused_by_its_name(tmp_path, capsys):
    data = _record(tmp_path / "d.csv", 0, count=200)
    config = tmp_path / "c.toml"
    config.write_text(
        f'kind = "fit"\n[data]\nfile = "{data}"\ninputs = ["u"]\noutputs = ["y"]\n'
        "[fit]\norder = 2\ninput_delay = [1, 1]\n"
    )
    code = cli.main(["run", str(config), "--out-root", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.endswith(
        "config key 'fit.input_delay': expected one delay per input (1), got 2: "
        "[1, 1]."
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
