"""detrend: levels and trends removed and restored, against numpy."""

import pathlib

import numpy as np
import pytest

import dynsys


REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"


def _raw(with_states=True):
    rng = np.random.default_rng(1)
    lengths = (20, 13)
    us = [5.0 + 0.1 * np.arange(T)[:, None] + rng.normal(size=(T, 2)) for T in lengths]
    ys = [100.0 + rng.normal(size=(T, 1)) for T in lengths]
    xs = [-3.0 + rng.normal(size=(T + 1, 2)) for T in lengths] if with_states else None
    return dynsys.Dataset(xs, us, ys=ys), xs, us, ys


@pytest.mark.parametrize("with_states", [False, True])
def test_mean_detrend_removes_means_over_valid_samples(with_states, getkey):
    data, xs, us, ys = _raw(with_states)
    centred, levels = dynsys.detrend(data)
    expected_u = np.concatenate(us).mean(axis=0)  # padding excluded
    np.testing.assert_allclose(levels.inputs, expected_u, rtol=1e-6)
    np.testing.assert_allclose(levels.outputs, np.concatenate(ys).mean(0), rtol=1e-6)
    if with_states:
        np.testing.assert_allclose(levels.states, np.concatenate(xs).mean(0), rtol=1e-5)
    else:
        assert levels.states is None
    for i, T in enumerate(data.lengths):
        np.testing.assert_allclose(centred.us[i, :T], us[i] - expected_u, atol=1e-5)
        np.testing.assert_array_equal(centred.us[i, T:], 0.0)  # padding stays zero
    back = levels.restore(centred)
    np.testing.assert_allclose(back.us, data.us, atol=1e-5)
    np.testing.assert_allclose(back.ys, data.ys, rtol=1e-6)
    assert levels.kind == "mean" and centred.input_names == data.input_names


def test_linear_detrend_removes_each_experiments_line():
    data, xs, us, ys = _raw()
    flat, levels = dynsys.detrend(data, kind="linear")
    for i, T in enumerate(data.lengths):
        t = np.arange(T)
        for j in range(2):
            slope, intercept = np.polyfit(t, us[i][:, j], 1)  # the reference line
            np.testing.assert_allclose(
                flat.us[i, :T, j], us[i][:, j] - (intercept + slope * t), atol=2e-5
            )
            np.testing.assert_allclose(
                levels.trends["inputs"][i, 1, j], slope, rtol=1e-4
            )
    back = levels.restore(flat)
    np.testing.assert_allclose(back.xs, data.xs, atol=1e-5)
    np.testing.assert_allclose(back.us, data.us, atol=1e-5)


def test_detrend_a_real_record_as_received():
    data = dynsys.load_dataset(
        REAL / "heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    raw = np.loadtxt(REAL / "heating.csv", delimiter=",", skiprows=1)
    centred, levels = dynsys.detrend(data)
    np.testing.assert_allclose(levels.inputs, [raw[:, 1].mean()], rtol=1e-6)
    np.testing.assert_allclose(levels.outputs, [raw[:, 2].mean()], rtol=1e-6)
    np.testing.assert_allclose(
        centred.ys[0, :, 0], raw[:, 2] - raw[:, 2].mean(), atol=1e-4
    )
    assert centred.dt == 2.0
    np.testing.assert_allclose(levels.restore(centred).ys, data.ys, rtol=1e-6)


def test_detrend_errors():
    data, *_ = _raw()
    with pytest.raises(ValueError, match=r"detrend\(kind=...\): expected 'mean' or"):
        dynsys.detrend(data, kind="quadratic")
    with pytest.raises(ValueError, match=r"detrend\(data=...\): expected a Dataset"):
        dynsys.detrend(np.zeros((3, 2)))
