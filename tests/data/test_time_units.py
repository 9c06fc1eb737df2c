"""The unit of a time column, read from its name, converts its times to seconds
(`time_ms`, `t [min]`, `time_h`, ...); a unit that is not one of time is refused in
one line; names that are not time columns are never read as units."""

import json
import pathlib

import numpy as np
import pytest

import dynsys


REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"


@pytest.fixture(params=["fast", "built-in"])
def reader(request, monkeypatch):
    """Run a test with pandas' reader (when installed) and with the built-in one."""
    from dynsys._data import fast_csv, reader

    if request.param == "built-in":
        monkeypatch.setattr(fast_csv, "read_fast", lambda *args: None)
    else:
        monkeypatch.setattr(reader, "FAST_READER_MIN_BYTES", 0)
    return request.param


def _write(tmp_path, text: str) -> pathlib.Path:
    path = tmp_path / "data.csv"
    path.write_text(text, encoding="utf-8")
    return path


# column name -> seconds per unit (an independent table, written out by hand)
UNITS = {
    "time_ms": 1e-3,
    "Time (ms)": 1e-3,
    "t [min]": 60.0,
    "t (s)": 1.0,
    "time": 1.0,
    "time_h": 3600.0,
    "T_H": 3600.0,
    "t_us": 1e-6,
    "time [µs]": 1e-6,  # micro sign
    "time [μs]": 1e-6,  # Greek mu
    "timestamp_ns": 1e-9,
    "t-min": 60.0,
    "time_hours": 3600.0,
}


@pytest.mark.parametrize("column", sorted(UNITS))
def test_time_column_units_are_converted_to_seconds(tmp_path, column, reader):
    steps = np.array([0.0, 2000.0, 4000.0, 6000.0])  # in the column's unit
    rows = "".join(f"{t!r},{k},{k * k}\n" for k, t in enumerate(steps.tolist()))
    data = dynsys.load_dataset(_write(tmp_path, f"{column},u,y\n{rows}"))
    seconds = 2000.0 * UNITS[column]
    assert data.dt == pytest.approx(seconds, rel=1e-12)
    np.testing.assert_allclose(data.ts, steps * UNITS[column], rtol=1e-12)
    assert data.input_names == ("u",) and data.output_names == ("y",)


def test_whole_milliseconds_become_exact_seconds(tmp_path, reader):
    path = _write(tmp_path, "time_ms,u,y\n0,1,2\n2000,3,4\n4000,5,6\n")
    data = dynsys.load_dataset(path)
    assert data.dt == 2.0
    np.testing.assert_array_equal(data.ts, [0.0, 2.0, 4.0])


def test_a_real_record_in_milliseconds_equals_it_in_seconds(tmp_path):
    seconds = dynsys.load_dataset(
        REAL / "heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    lines = (REAL / "heating.csv").read_text().splitlines()
    assert lines[0] == "t_s,drive_V,temp_C"
    rows = [line.split(",", 1) for line in lines[1:]]
    text = "time_ms,drive_V,temp_C\n" + "".join(
        f"{float(t) * 1000!r},{rest}\n" for t, rest in rows
    )
    millis = dynsys.load_dataset(
        _write(tmp_path, text), inputs=["drive_V"], outputs=["temp_C"]
    )
    assert seconds.dt == millis.dt == 2.0
    np.testing.assert_array_equal(millis.ts, seconds.ts)
    np.testing.assert_array_equal(millis.ys, seconds.ys)


@pytest.mark.parametrize("column", ["t [days]", "time (°C)", "Time [UTC]"])
def test_a_unit_that_is_not_one_of_time_is_refused(tmp_path, column, reader):
    path = _write(tmp_path, f"{column},u,y\n0,1,2\n1,3,4\n")
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"load_dataset(time=...): the time column {column!r}")
    assert "s, ms, us (µs), ns, min and h" in message
    assert "pass time=False if it is not a time" in message
    # ... and time=False reads the file with the column ignored.
    assert dynsys.load_dataset(path, time=False).ts is None


def test_two_units_that_disagree_are_refused(tmp_path):
    path = _write(tmp_path, "time_ms (s),u,y\n0,1,2\n1,3,4\n")
    with pytest.raises(ValueError, match=r"gives two units, 'ms' and 's'") as info:
        dynsys.load_dataset(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("column", ["thing_h", "t_in", "tmax", "hours", "k_ms"])
def test_other_names_are_not_time_columns(tmp_path, column, reader):
    path = _write(tmp_path, f"{column},u,y\n5,1,2\n3,3,4\n")
    data = dynsys.load_dataset(path)
    assert data.ts is None and data.dt is None


def test_a_time_column_given_by_name_takes_its_suffix(tmp_path, reader):
    path = _write(tmp_path, "clock_ms,elapsed,u,y\n0,0,1,2\n500,7,3,4\n1000,14,5,6\n")
    assert dynsys.load_dataset(path, time="clock_ms").dt == 0.5
    assert dynsys.load_dataset(path, time="elapsed").dt == 7.0  # no unit: seconds


def test_dt_is_compared_in_seconds(tmp_path, reader):
    path = _write(tmp_path, "time_ms,u,y\n0,1,2\n2000,3,4\n4000,5,6\n")
    assert dynsys.load_dataset(path, dt=2.0).dt == 2.0
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path, dt=2000.0)
    assert str(info.value) == (
        f"load_dataset(path={str(path)!r}): dt=2000 disagrees with the time column "
        "'time_ms', whose step is 2 s (2000 in the column's unit); leave out dt, or "
        "pass time=False to ignore the column."
    )


def test_errors_quote_the_times_in_the_columns_unit(tmp_path, reader):
    path = _write(tmp_path, "time_ms,u,y\n0,1,2\n2000,3,4\n1000,5,6\n")
    with pytest.raises(ValueError, match=r"goes from 2000 to 1000; times must"):
        dynsys.load_dataset(path)


def test_mat_time_variable_in_milliseconds(tmp_path):
    scipy_io = pytest.importorskip("scipy.io")
    path = tmp_path / "x.mat"
    u, y = np.ones((5, 1)), np.arange(5.0)[:, None]
    scipy_io.savemat(path, {"u": u, "y": y, "t_ms": 250.0 * np.arange(5)})
    data = dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    assert data.dt == 0.25
    np.testing.assert_array_equal(data.ts, 0.25 * np.arange(5))


def test_dataframe_time_units_and_datetimes(tmp_path):
    pd = pytest.importorskip("pandas")
    columns = {"t [min]": [0.0, 0.5, 1.0], "u": [1.0, 2, 3], "y": [3.0, 2, 1]}
    frame = pd.DataFrame(columns)
    roles = {"inputs": ["u"], "outputs": ["y"]}
    assert dynsys.Dataset.from_dataframe(frame, **roles).dt == 30.0
    # Datetimes count in seconds whatever the name says (a zone is not a unit).
    dates = pd.date_range("2024-01-01", periods=3, freq="2s")
    for name in ("time (UTC)", "time_ms"):
        frame = pd.DataFrame({name: dates, "u": [1.0, 2, 3], "y": [3.0, 2, 1]})
        assert dynsys.Dataset.from_dataframe(frame, **roles).dt == 2.0


@pytest.mark.slow  # a whole `dynsys fit` (about 20 s)
def test_cli_reports_dt_in_seconds_for_a_time_column_in_ms(tmp_path, capsys):
    from dynsys import cli

    lines = (REAL / "heating.csv").read_text().splitlines()
    text = "time_ms,drive_V,temp_C\n" + "".join(
        f"{float(t) * 1000!r},{rest}\n"
        for t, rest in (line.split(",", 1) for line in lines[1:])
    )
    path = _write(tmp_path, text)
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "drive_V", "--outputs", "temp_C"]
    argv += ["--order", "2", "--steps", "2", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    assert "Traceback" not in capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["dt"] == 2.0
    assert "dt 2 s" in metrics["source"]
    assert "x 801 steps, dt 2 s." in (out / "summary.md").read_text()
    assert dynsys.load(out / "model.dynsys").dt == 2.0
