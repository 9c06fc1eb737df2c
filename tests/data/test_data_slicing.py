"""Dataset time slices (window, split_time) and joins, against numpy slicing of
the same arrays; on a real record as received."""

import pathlib

import numpy as np
import pytest

import dynsys


REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"


def _ragged(with_states=False, ts=True):
    rng = np.random.default_rng(0)
    lengths = (12, 7, 9)
    us = [rng.normal(size=(T, 2)) for T in lengths]
    ys = [rng.normal(size=(T, 1)) for T in lengths]
    xs = [rng.normal(size=(T + 1, 3)) for T in lengths] if with_states else None
    times = 0.25 * np.arange(12 + with_states) if ts else None
    data = dynsys.Dataset(xs, us, times, ys=ys, output_names=["temp (°C)"])
    return data, xs, us, ys


@pytest.mark.parametrize("with_states", [False, True])
@pytest.mark.parametrize("start, stop", [(2, 6), (-5, None), (None, -3), (1, 100)])
def test_window_equals_numpy_slices_of_each_experiment(with_states, start, stop):
    data, xs, us, ys = _ragged(with_states)
    window = data.window(start, stop)
    for i in range(3):
        a, b, _ = slice(start, stop).indices(data.lengths[i])
        assert window.lengths[i] == b - a
        np.testing.assert_allclose(window.us[i, : b - a], us[i][a:b], rtol=1e-6)
        np.testing.assert_allclose(window.ys[i, : b - a], ys[i][a:b], rtol=1e-6)
        if with_states:
            np.testing.assert_allclose(
                window.xs[i, : b - a + 1], xs[i][a : b + 1], rtol=1e-6
            )
    assert window.output_names == ("temp (°C)",) and window.dt == pytest.approx(0.25)
    if start is None or start >= 0:  # every window starts at the same sample
        a = start or 0
        np.testing.assert_allclose(
            window.ts, 0.25 * np.arange(a, a + window.ts.shape[0])
        )


def test_window_errors():
    data, *_ = _ragged()
    with pytest.raises(
        ValueError, match=r"window\(start=8, stop=None\): experiment 1 has 7"
    ):
        data.window(8)
    with pytest.raises(ValueError, match=r"window\(start=...\): expected an integer"):
        data.window(1.5)


@pytest.mark.parametrize("with_states", [False, True])
def test_split_time_holds_out_the_last_fraction(with_states):
    data, xs, us, ys = _ragged(with_states)
    estimation, validation = data.split_time(1 / 3)
    for i, T in enumerate(data.lengths):
        held = int(np.floor(T / 3 + 0.5))
        assert validation.lengths[i] == held and estimation.lengths[i] == T - held
        joined = np.concatenate([estimation.us[i, : T - held], validation.us[i, :held]])
        np.testing.assert_allclose(joined, us[i], rtol=1e-6)
        if with_states:  # both sides share the state at the split
            np.testing.assert_allclose(validation.xs[i, 0], xs[i][T - held], rtol=1e-6)
    with pytest.raises(
        ValueError,
        match=r"split_time\(fraction=0.9\): experiment 0 has 12 .* leaves 1 for est",
    ):
        data.split_time(0.9)
    with pytest.raises(ValueError, match=r"fraction=1.5\): expected a fraction"):
        data.split_time(1.5)
    with pytest.raises(ValueError, match=r"each side needs at least 5"):
        data.split_time(0.5, min_samples=5)


def test_split_time_of_a_real_record():
    data = dynsys.load_dataset(
        REAL / "heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    estimation, validation = data.split_time(1 / 3)
    assert (estimation.lengths, validation.lengths) == ((534,), (267,))
    raw = np.loadtxt(REAL / "heating.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(validation.ys[0, :, 0], raw[534:, 2], rtol=1e-6)
    np.testing.assert_allclose(validation.ts, raw[534:, 0])
    assert validation.dt == estimation.dt == 2.0
    again = dynsys.Dataset.join(estimation, validation)
    assert again.lengths == (534, 267) and again.dt == 2.0


def test_join_keeps_experiments_and_checks_channels():
    data, _, us, _ = _ragged()
    joined = dynsys.Dataset.join(data[0], data[1:])
    assert joined.lengths == data.lengths
    for i in range(3):
        np.testing.assert_array_equal(joined.us[i], data.us[i])
    np.testing.assert_array_equal(joined.ts, data.ts)
    other = dynsys.Dataset(us=us[0], ys=us[0][:, :1], ts=0.25 * np.arange(12))
    with pytest.raises(ValueError, match=r"join: dataset 1 has outputs \('y0',\) but"):
        dynsys.Dataset.join(data, other)
    slower = dynsys.Dataset(
        us=us[0], ys=us[0][:, :1], ts=0.5 * np.arange(12), output_names=["temp (°C)"]
    )
    with pytest.raises(ValueError, match=r"join: dataset 1 has sample time dt=0.5"):
        dynsys.Dataset.join(data, slower)
    with pytest.raises(ValueError, match=r"join: argument 1 is a ndarray"):
        dynsys.Dataset.join(data, us[0])
