"""MATLAB .mat files (written by scipy.io.savemat) read by load_dataset."""

import pathlib

import numpy as np
import pytest

import dynsys


scipy_io = pytest.importorskip("scipy.io")
REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"


def test_mat_variables_as_columns_and_matrices(tmp_path):
    rng = np.random.default_rng(0)
    u, y = rng.normal(size=(40, 1)), rng.normal(size=(40, 2))
    t = 0.1 * np.arange(40)[None, :]  # a row vector
    scipy_io.savemat(tmp_path / "x.mat", {"u": u, "y": y, "t": t, "note": "text"})
    data = dynsys.load_dataset(tmp_path / "x.mat", inputs=["u"], outputs=["y"])
    assert data.input_names == ("u",) and data.output_names == ("y1", "y2")
    assert data.dt == pytest.approx(0.1) and data.lengths == (40,)
    np.testing.assert_allclose(data.us[0], u, rtol=1e-6)
    np.testing.assert_allclose(data.ys[0], y, rtol=1e-6)
    picked = dynsys.load_dataset(tmp_path / "x.mat", inputs=["u"], outputs=["y2"])
    np.testing.assert_allclose(picked.ys[0, :, 0], y[:, 1], rtol=1e-6)


def test_a_real_record_saved_as_mat_equals_its_csv(tmp_path):
    raw = np.loadtxt(REAL / "heating.csv", delimiter=",", skiprows=1)
    scipy_io.savemat(
        tmp_path / "heating.mat", {"drive_V": raw[:, 1:2], "temp_C": raw[:, 2:3]}
    )
    mat = dynsys.load_dataset(
        tmp_path / "heating.mat", inputs=["drive_V"], outputs=["temp_C"], dt=2.0
    )
    csv = dynsys.load_dataset(
        REAL / "heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    np.testing.assert_array_equal(mat.ys, csv.ys)
    assert mat.dt == csv.dt == 2.0


def test_mat_errors(tmp_path):
    path = tmp_path / "x.mat"
    scipy_io.savemat(path, {"u": np.ones((5, 1)), "y": np.ones((4, 1))})
    with pytest.raises(ValueError, match=r"different numbers of samples"):
        dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    with pytest.raises(ValueError, match=r"load_dataset\(outputs=...\): no column 'z'"):
        dynsys.load_dataset(path, inputs=["u"], outputs=["z"])
    (tmp_path / "bad.mat").write_bytes(b"not a mat file at all" * 10)
    with pytest.raises(ValueError, match=r"not a readable .mat file"):
        dynsys.load_dataset(tmp_path / "bad.mat")
