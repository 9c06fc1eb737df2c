"""Files as they come: the real records in data/real/ exactly as received, plain
single-experiment tables, time columns, units, whitespace-separated files."""

import pathlib
import sys

import numpy as np
import pytest

import dynsys


REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"

# The roles of data/real/README.md.
ROLES = {
    "heating.csv": (["drive_V"], ["temp_C"]),
    "dryer.csv": (
        ["fuel_flow", "fan_speed", "material_flow"],
        ["dry_bulb_temp", "wet_bulb_temp", "moisture"],
    ),
    "cd_player_arm.csv": (["u1", "u2"], ["y1", "y2"]),
    "evaporator.csv": (
        ["feed_flow", "vapour_flow", "cooling_water_flow"],
        ["dry_matter", "product_flow", "product_temp"],
    ),
    "ph_neutralisation.csv": (["acid_flow", "base_flow"], ["pH"]),
    "glass_furnace.csv": (
        ["u1", "u2", "u3"],
        ["y1", "y2", "y3", "y4", "y5", "y6"],
    ),
}


@pytest.fixture(params=["fast", "built-in"])
def reader(request, monkeypatch):
    """Run a test with pandas' reader (when installed; for files of any size) and
    with the built-in one."""
    from dynsys._data import fast_csv, reader

    if request.param == "built-in":
        monkeypatch.setattr(fast_csv, "read_fast", lambda *args: None)
    else:
        monkeypatch.setattr(reader, "FAST_READER_MIN_BYTES", 0)
    return request.param


@pytest.mark.parametrize("name", sorted(ROLES))
def test_every_real_file_loads_as_received_with_inputs_and_outputs(name, reader):
    inputs, outputs = ROLES[name]
    data = dynsys.load_dataset(REAL / name, inputs=inputs, outputs=outputs)
    with open(REAL / name) as file:
        header = file.readline().strip().split(",")
    table = np.loadtxt(REAL / name, delimiter=",", skiprows=1)  # the reference
    assert data.num_trajectories == 1 and data.lengths == (table.shape[0],)
    assert data.input_names == tuple(inputs) and data.output_names == tuple(outputs)
    for names, values in ((inputs, data.us[0]), (outputs, data.ys[0])):
        expected = table[:, [header.index(n) for n in names]]
        np.testing.assert_allclose(values, expected, rtol=1e-6, atol=0)
    if name == "heating.csv":  # t_s: a time column, 2 s steps
        assert data.dt == 2.0
        np.testing.assert_array_equal(data.ts, table[:, 0])
    else:  # no time column; glass_furnace's k is a sample index, not a time
        assert data.ts is None and data.dt is None


def test_real_file_with_dt_and_units(reader):
    inputs, outputs = ROLES["dryer.csv"]
    data = dynsys.load_dataset(
        REAL / "dryer.csv", inputs=inputs, outputs=outputs, dt=10,
        units={"dry_bulb_temp": "°C", "wet_bulb_temp": "°C"},
    )  # fmt: skip
    assert data.dt == 10.0
    np.testing.assert_allclose(data.ts, 10.0 * np.arange(867))
    assert data.output_names == ("dry_bulb_temp (°C)", "wet_bulb_temp (°C)", "moisture")


def test_real_file_roles_not_inferable_says_what_to_pass(reader):
    with pytest.raises(ValueError, match=r"outputs=\[\.\.\.\].*--outputs") as info:
        dynsys.load_dataset(REAL / "ph_neutralisation.csv")
    assert "\n" not in str(info.value) and "ph_neutralisation.csv" in str(info.value)


def _write(tmp_path, text, name="d.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_plain_file_is_one_experiment_with_dt_or_steps(tmp_path, reader):
    path = _write(tmp_path, "u,y\n1,2\n3,4\n5,6\n")
    data = dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    assert data.lengths == (3,) and data.ts is None
    np.testing.assert_array_equal(data.ys[0, :, 0], [2, 4, 6])
    timed = dynsys.load_dataset(path, inputs=["u"], outputs=["y"], dt=0.5)
    assert timed.dt == 0.5
    np.testing.assert_array_equal(timed.ts, [0.0, 0.5, 1.0])
    for bad in (0, -1.0, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match=r"load_dataset\(dt=\.\.\.\)"):
            dynsys.load_dataset(path, inputs=["u"], outputs=["y"], dt=bad)


# In seconds; a column in another unit (`time_ms`) is converted: test_time_units.py.
@pytest.mark.parametrize("column", ["t", "time", "Time (s)", "T_S", "time_s", "t [s]"])
def test_time_columns_recognised_by_name(tmp_path, column, reader):
    path = _write(tmp_path, f"{column},u,y\n10,1,2\n10.25,3,4\n10.5,5,6\n")
    data = dynsys.load_dataset(path)
    assert data.dt == 0.25 and data.input_names == ("u",)
    np.testing.assert_array_equal(data.ts, [10.0, 10.25, 10.5])


@pytest.mark.parametrize("column", ["k", "n", "sample", "index", "tt", "timer"])
def test_other_columns_are_never_a_time(tmp_path, column, reader):
    path = _write(tmp_path, f"{column},u,y\n1,1,2\n2,3,4\n3,5,6\n")
    data = dynsys.load_dataset(path)
    assert data.ts is None and data.dt is None
    assert dynsys.load_dataset(path, time=column).dt == 1.0  # when asked for


def test_time_column_errors_name_the_line(tmp_path, reader):
    path = _write(tmp_path, "t,u,y\n0,1,2\n1,3,4\n2.5,5,6\n3.5,1,1\n")
    with pytest.raises(ValueError, match=r"line 4: the time column 't' is not unif"):
        dynsys.load_dataset(path)
    assert dynsys.load_dataset(path, time=False).ts is None
    path = _write(tmp_path, "t,u,y\n0,1,2\n1,3,4\n1,5,6\n")
    with pytest.raises(ValueError, match=r"line 4: .*goes from 1 to 1; times must inc"):
        dynsys.load_dataset(path)
    path = _write(tmp_path, "t,time,u,y\n0,0,1,2\n1,1,3,4\n")
    with pytest.raises(ValueError, match=r"several columns that could be the time"):
        dynsys.load_dataset(path)
    assert dynsys.load_dataset(path, time="time").dt == 1.0
    path = _write(tmp_path, "t,u,y\n0,1,2\n1,3,4\n2,5,6\n")
    with pytest.raises(ValueError, match=r"dt=0.5 disagrees with the time column 't'"):
        dynsys.load_dataset(path, dt=0.5)
    assert dynsys.load_dataset(path, dt=1.0).dt == 1.0


def test_near_uniform_times_become_their_uniform_grid(tmp_path, reader):
    times = 0.1 * np.arange(50)
    times[1:-1] += 0.0004 * np.random.default_rng(0).uniform(-1, 1, 48)  # jitter
    rows = "".join(f"{float(t)!r},{k},{2 * k}\n" for k, t in enumerate(times))
    data = dynsys.load_dataset(_write(tmp_path, "time,u0,y0\n" + rows))
    np.testing.assert_allclose(data.ts, 0.1 * np.arange(50), rtol=0, atol=1e-6)
    assert data.dt == pytest.approx(0.1)


def test_trailing_empty_column_is_ignored(tmp_path, reader):
    path = _write(tmp_path, "u,y,\n1,2,\n3,4,\n5,6,\n")
    data = dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    np.testing.assert_array_equal(data.us[0, :, 0], [1, 3, 5])
    path = _write(tmp_path, "u,y\n1,2,\n3,4,\n")  # only the rows end with a comma
    assert dynsys.load_dataset(path, inputs=["u"], outputs=["y"]).lengths == (2,)
    path = _write(tmp_path, "u,y,\n1,2,\n3,4,7\n")  # an unnamed cell with a value
    with pytest.raises(ValueError, match="line 3: expected 2 cells"):
        dynsys.load_dataset(path, inputs=["u"], outputs=["y"])


def test_whitespace_and_headerless_files(tmp_path, reader):
    text = "t  u   y\n0\t1 2\n0.5 3\t4\n\n1.0 5 6\n"
    data = dynsys.load_dataset(_write(tmp_path, text, "d.dat"))
    assert data.dt == 0.5 and data.lengths == (3,)
    np.testing.assert_array_equal(data.us[0, :, 0], [1, 3, 5])
    data = dynsys.load_dataset(
        _write(tmp_path, "1 2 3\n4 5 6\n", "d.txt"), inputs=["1", "2"], outputs=["3"]
    )
    np.testing.assert_array_equal(data.us[0], [[1, 2], [4, 5]])
    comma = _write(tmp_path, "u,y\n1,2\n3,4\n", "d.txt")
    assert dynsys.load_dataset(comma).input_names == ("u",)


def test_units_in_names_and_from_units(tmp_path, reader):
    path = _write(tmp_path, "t (s),drive (V),temp [°C],flow\n0,1,2,3\n1,3,4,5\n")
    data = dynsys.load_dataset(
        path, inputs=["drive (V)"], outputs=["temp [°C]", "flow"]
    )
    assert data.output_names == ("temp [°C]", "flow") and data.dt == 1.0
    data = dynsys.load_dataset(
        path,
        inputs=["drive (V)"],
        outputs=["temp [°C]", "flow"],
        units=[None, "", "kg/s"],
    )
    assert data.output_names == ("temp [°C]", "flow (kg/s)")
    with pytest.raises(ValueError, match=r"units=.*'drive \(V\)' already has the unit"):
        dynsys.load_dataset(
            path, inputs=["drive (V)"], outputs=["flow"], units={"drive (V)": "mV"}
        )
    with pytest.raises(ValueError, match=r"units=.*no input, output or state col"):
        dynsys.load_dataset(
            path, inputs=["drive (V)"], outputs=["flow"], units={"x": "m"}
        )
    with pytest.raises(ValueError, match=r"units=.*expected 2 units"):
        dynsys.load_dataset(path, inputs=["drive (V)"], outputs=["flow"], units=["V"])


def test_long_format_keeps_working(tmp_path, reader):
    path = _write(
        tmp_path,
        "trajectory,time,u0,y0\na,0,1,2\na,1,3,4\na,2,5,6\nb,0,7,8\nb,1,9,10\n",
    )
    data = dynsys.load_dataset(path)
    assert data.lengths == (3, 2) and data.dt == 1.0
    np.testing.assert_array_equal(data.ys[1, :2, 0], [8, 10])


def test_fast_reader_is_used_when_pandas_is_installed(tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    from dynsys._data import reader

    def refuse(*args):
        raise AssertionError("the built-in reader ran on a clean file")

    monkeypatch.setattr(reader, "read_text", refuse)
    data = dynsys.load_dataset(
        REAL / "heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    assert data.lengths == (801,) and data.dt == 2.0
    path = _write(tmp_path, "trajectory,time,x0,u0\na,0,1,2\na,1,3,\nb,0,5,6\nb,1,7,\n")
    assert dynsys.load_dataset(path).lengths == (1, 1)  # a state file's blank cells


def test_both_readers_agree_on_a_state_file_and_its_errors(tmp_path, monkeypatch):
    text = "trajectory,time,x0,u0,y0\na,0,1,2,3\nb,0,4,5,6\na,1,7,,\nb,1,8,,\n"
    path = _write(tmp_path, text)
    from dynsys._data import fast_csv, reader

    monkeypatch.setattr(reader, "FAST_READER_MIN_BYTES", 0)
    fast = dynsys.load_dataset(path)
    monkeypatch.setattr(fast_csv, "read_fast", lambda *args: None)
    slow = dynsys.load_dataset(path)
    for name in ("xs", "us", "ys", "ts"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
    np.testing.assert_array_equal(fast.xs[:, :, 0], [[1, 7], [4, 8]])  # interleaved


def test_a_small_file_is_read_without_importing_pandas(tmp_path, monkeypatch):
    from dynsys._data import fast_csv, reader

    calls = []
    monkeypatch.setattr(fast_csv, "read_fast", lambda *args: calls.append(args))
    monkeypatch.delitem(sys.modules, "pandas", raising=False)  # (restored after)
    path = _write(tmp_path, "trajectory,time,x0,u0,y0\na,0,1,2,3\na,1,4,5,6\n")
    data = dynsys.load_dataset(path)
    assert calls == [] and "pandas" not in sys.modules
    np.testing.assert_array_equal(data.xs[0, :, 0], [1, 4])
    # From the size limit on (or with pandas imported), the fast reader is asked.
    monkeypatch.setattr(reader, "FAST_READER_MIN_BYTES", path.stat().st_size)
    dynsys.load_dataset(path)
    assert len(calls) == 1
    monkeypatch.setattr(reader, "FAST_READER_MIN_BYTES", path.stat().st_size + 1)
    monkeypatch.setitem(sys.modules, "pandas", object())
    dynsys.load_dataset(path)
    assert len(calls) == 2
