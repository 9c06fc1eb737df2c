"""pandas DataFrames in and out of a Dataset: names, units, lengths round-trip;
pandas is never imported by `import dynsys`."""

import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import dynsys


pd = pytest.importorskip("pandas")
REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"


def _ragged(with_states):
    rng = np.random.default_rng(0)
    lengths = (6, 3, 4)
    us = [rng.normal(size=(T, 1)) for T in lengths]
    ys = [rng.normal(size=(T, 2)) for T in lengths]
    xs = [rng.normal(size=(T + 1, 2)) for T in lengths] if with_states else None
    return dynsys.Dataset(
        xs, us, 0.5 * np.arange(6 + with_states), ys=ys,
        input_names=["drive (V)"], output_names=["temp (°C)", "flow"],
    )  # fmt: skip


@pytest.mark.parametrize("with_states", [False, True])
def test_round_trip_keeps_names_units_and_lengths(with_states):
    data = _ragged(with_states)
    frame = data.to_dataframe()
    extra = int(with_states)
    assert len(frame) == sum(T + extra for T in data.lengths)
    assert list(frame.columns)[:2] == ["trajectory", "time"]
    # The reference: rows built by a plain loop over the experiments.
    for i, T in enumerate(data.lengths):
        rows = frame[frame["trajectory"] == i]
        np.testing.assert_allclose(rows["flow"][:T], np.asarray(data.ys[i, :T, 1]))
        np.testing.assert_allclose(rows["time"], 0.5 * np.arange(T + extra))
        if with_states:
            assert np.isnan(rows["drive (V)"].iloc[-1])
    back = dynsys.Dataset.from_dataframe(
        frame, inputs=["drive (V)"], outputs=["temp (°C)", "flow"],
        states=list(data.state_names) or None,
    )  # fmt: skip
    assert back.lengths == data.lengths and back.dt == data.dt
    assert back.output_names == ("temp (°C)", "flow")
    assert back.input_names == ("drive (V)",) and back.state_names == data.state_names
    for name in ("xs", "us", "ys", "ts"):
        left, right = getattr(back, name), getattr(data, name)
        assert (left is None) == (right is None)
        if left is not None:
            np.testing.assert_array_equal(left, right)


def test_from_dataframe_of_a_real_file_equals_load_dataset():
    frame = pd.read_csv(REAL / "heating.csv")
    data = dynsys.Dataset.from_dataframe(frame, inputs=["drive_V"], outputs=["temp_C"])
    loaded = dynsys.load_dataset(
        REAL / "heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    assert data.dt == loaded.dt == 2.0 and data.lengths == loaded.lengths
    np.testing.assert_array_equal(data.ys, loaded.ys)


def test_datetime_time_column_counts_seconds():
    frame = pd.DataFrame(
        {
            "time": pd.date_range("2024-01-01", periods=4, freq="250ms"),
            "u": [1.0, 2, 3, 4],
            "y": [0.0, 1, 0, 1],
        }
    )
    data = dynsys.Dataset.from_dataframe(frame, inputs=["u"], outputs=["y"])
    assert data.dt == 0.25


def test_zone_aware_datetimes_count_seconds_across_a_clock_change():
    # 30 min steps over the night Berlin's clocks go from 02:00 to 03:00: the wall
    # clock jumps by 90 min once, the time elapsed never does.
    dates = pd.date_range("2024-03-31 00:00", periods=8, freq="30min", tz="UTC")
    local = dates.tz_convert("Europe/Berlin")
    assert (np.diff(local.hour * 60 + local.minute) == 90).any()
    frame = pd.DataFrame({"time": local, "u": np.arange(8.0), "y": np.ones(8)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = dynsys.Dataset.from_dataframe(frame, inputs=["u"], outputs=["y"])
    assert data.dt == 1800.0
    np.testing.assert_array_equal(data.ts, 1800.0 * np.arange(8))


@pytest.mark.parametrize("column", ["u", "y", "t"])
def test_complex_columns_are_refused_not_cast(column):
    frame = pd.DataFrame(
        {"t": np.arange(4.0), "u": np.arange(4.0), "y": np.ones(4)}
    ).astype({column: complex})
    frame[column] = frame[column] * (1 + 1j)
    word = "time" if column == "t" else "data"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        with pytest.raises(ValueError) as info:
            dynsys.Dataset.from_dataframe(frame, inputs=["u"], outputs=["y"])
    assert str(info.value) == (
        f"Dataset.from_dataframe(df=...): the {word} column {column!r} holds complex "
        "values; dynsys takes real signals: pass .real or abs() of it explicitly."
    )


def test_dataset_takes_dataframe_columns_and_their_names():
    frame = pd.DataFrame({"u": [1.0, 2, 3], "temp (°C)": [4.0, 5, 6]})
    data = dynsys.Dataset(us=frame[["u"]], ys=frame["temp (°C)"])
    assert data.input_names == ("u",) and data.output_names == ("temp (°C)",)
    np.testing.assert_array_equal(data.ys[0, :, 0], [4, 5, 6])


def test_from_dataframe_errors():
    frame = pd.DataFrame({"u": [1.0, 2, 3], "y": ["a", "b", "c"], "x": [1.0, None, 2]})
    with pytest.raises(
        ValueError, match=r"from_dataframe\(outputs=...\): no column 'z'"
    ):
        dynsys.Dataset.from_dataframe(frame, inputs=["u"], outputs=["z"])
    with pytest.raises(ValueError, match=r"the data column 'y' holds .* not numbers"):
        dynsys.Dataset.from_dataframe(frame, inputs=["u"], outputs=["y"])
    with pytest.raises(ValueError, match=r"row 1: the state column 'x' is empty"):
        dynsys.Dataset.from_dataframe(
            frame[["u", "x"]], inputs=["u"], outputs=None, states=["x"]
        )
    with pytest.raises(ValueError, match=r"expected a pandas DataFrame"):
        dynsys.Dataset.from_dataframe(np.zeros((3, 2)), inputs=None, outputs=None)


def test_import_dynsys_does_not_import_pandas():
    code = (
        "import sys, dynsys; "
        "d = dynsys.load_dataset if 'pandas' not in sys.modules else None; "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
