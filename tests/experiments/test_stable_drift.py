"""A fit from a stable start that drifts unstable on bounded data is refitted as a
stable model, kept when it validates within `STABLE_MARGIN` points
(`_experiments/fit/stable_drift.py`)."""

import dataclasses
import json

import numpy as np
import pytest

import dynsys
from dynsys import cli
from dynsys._experiments.fit import checks as fit_checks
from dynsys._experiments.fit import stable_drift
from dynsys._experiments.fit.estimate import Estimate, fit_model
from dynsys._experiments.schema import resolve_config
from dynsys._sysid.order import held_out_fit


K_TRUE = np.array([[0.95, 0.0], [0.0, 0.7]])
B_TRUE = np.array([[1.0], [1.0]])
C_TRUE = np.array([[0.2, 0.5]])


def _plant(K=K_TRUE) -> dynsys.LinearSystem:
    return dynsys.LinearSystem(K=K, B=B_TRUE, C=C_TRUE)


def _records(num_steps=600, seed=0):
    """A stable order-2 plant (eigenvalues 0.95 and 0.7) driven by a random
    binary input, output noise 0.02: `(estimation first two thirds, held-out
    last third)`."""
    rng = np.random.default_rng(seed)
    us = np.repeat(rng.choice([-1.0, 1.0], size=num_steps // 5), 5)[:, None]
    x, ys = np.zeros(2), np.empty((num_steps, 1))
    for t in range(num_steps):
        ys[t] = C_TRUE @ x + 0.02 * rng.standard_normal()
        x = K_TRUE @ x + B_TRUE @ us[t]
    data = dynsys.Dataset(ys=ys[None], us=us[None])
    return data.split_time(1 / 3)


def _drifted_estimate(fitted) -> Estimate:
    """An `Estimate` of `fitted` (the only field the refit reads)."""
    return Estimate(None, fitted, 0.0, "", 0, None)


def _config(**fit) -> dict:
    return resolve_config(
        {"kind": "fit", "name": "drift", "fit": {"steps": 60, **fit}}
    )


def test_a_drift_is_a_stable_start_fitted_unstable_on_bounded_data_with_held_out_data():
    train, val = _records()
    fit_cfg = _config()["fit"]
    begin, drifted = _plant(), _drifted_estimate(_plant(np.diag([1.01, 0.7])))
    assert stable_drift.drifted(fit_cfg, begin, drifted, train, val)
    # Each condition alone undoes it.
    stable = _drifted_estimate(_plant())
    assert not stable_drift.drifted(fit_cfg, begin, stable, train, val)
    assert not stable_drift.drifted(fit_cfg, drifted.fitted, drifted, train, val)
    assert not stable_drift.drifted(fit_cfg, begin, drifted, train, None)
    windowed = dataclasses.replace(drifted, window=118)
    assert not stable_drift.drifted(fit_cfg, begin, windowed, train, val)
    for key, value in (
        ("model", "stable"),
        ("loss", "prediction"),
        ("stabilise", False),
    ):
        other = {**fit_cfg, key: value}
        assert not stable_drift.drifted(other, begin, drifted, train, val), key
    growing = 1.05 ** np.cumsum(np.ones_like(np.asarray(train.ys)), axis=1)
    unbounded = dynsys.Dataset(ys=growing, us=train.us)
    assert not fit_checks.looks_bounded(unbounded)
    assert not stable_drift.drifted(fit_cfg, begin, drifted, unbounded, val)


def test_the_stable_refit_of_a_drifted_fit_is_kept_and_validates_as_the_true_model():
    train, val = _records()
    config = _config()
    drifted = _drifted_estimate(_plant(np.diag([1.01, 0.7])))
    kept, refit = stable_drift.stable_refit(
        fit_model, config, drifted, train, val, False
    )
    true_fit = held_out_fit(_plant(), val)[1]
    assert refit.unstable_fit == pytest.approx(held_out_fit(drifted.fitted, val)[1])
    assert refit.unstable_radius == pytest.approx(1.01)
    assert refit.kept_stable
    assert fit_checks.spectral_radius(kept.fitted) < 1.0
    assert refit.stable_fit == pytest.approx(held_out_fit(kept.fitted, val)[1])
    assert refit.stable_fit > true_fit - 0.5, (refit.stable_fit, true_fit)
    assert "the stable model is kept" in refit.line()


def test_the_unstable_model_is_kept_when_the_stable_one_validates_far_worse():
    refit = stable_drift.StableRefit(1.04, 90.0, 80.0, False)
    line = refit.line()
    assert "validates 80.0 % against 90.0 %" in line
    assert "the unstable model is kept" in line
    assert refit.metrics() == {
        "unstable_radius": 1.04,
        "unstable_fit": 90.0,
        "stable_fit": 80.0,
        "kept_stable": False,
    }


def test_a_run_whose_fit_drifted_saves_the_stable_refit_and_says_so(
    tmp_path, monkeypatch
):
    """The run's wiring: with every fit taken for a drift, the stable refit is
    the fitted model, its line is in the console and summary.md, its scores in
    metrics.json, and no warning calls the fitted model unstable."""
    train, val = _records()
    ys = np.concatenate([np.asarray(train.ys[0]), np.asarray(val.ys[0])])
    us = np.concatenate([np.asarray(train.us[0]), np.asarray(val.us[0])])
    data = tmp_path / "plant.csv"
    np.savetxt(data, np.c_[us, ys], delimiter=",", header="u,y", comments="")
    monkeypatch.setattr(stable_drift, "drifted", lambda *args: True)
    out = tmp_path / "run"
    args = ["fit", str(data), "--inputs", "u", "--outputs", "y", "--order", "2"]
    args += ["--no-feedthrough", "--no-progress", "--out", str(out)]
    assert cli.main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    refit = metrics["stable_refit"]
    assert refit["kept_stable"] is True
    fitted = metrics["fit_percent"]["held-out fit % vs measurements"]["fitted"][0]
    assert fitted == pytest.approx(refit["stable_fit"])
    assert np.max(np.abs(np.linalg.eigvals(np.asarray(metrics["K"])))) < 1.0
    assert "refitted as a stable model" in (out / "summary.md").read_text()
    assert not any("fitted model is unstable" in w for w in metrics["warnings"])
    saved = dynsys.load(out / "model.dynsys")
    assert fit_checks.spectral_radius(saved) < 1.0
