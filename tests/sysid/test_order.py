import json

import matplotlib
import numpy as np
import pytest
import scipy.linalg

import dynsys


matplotlib.use("Agg")


def _modal_system(modes, dt=1.0, feedthrough=None, seed=0):
    """A discretised (zero-order hold) sum of second-order modes `(omega, zeta)`:
    state size 2 * len(modes), one input, two outputs."""
    rng = np.random.default_rng(seed)
    n = 2 * len(modes)
    A = np.zeros((n, n))
    for k, (omega, zeta) in enumerate(modes):
        A[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [
            [0.0, 1.0],
            [-(omega**2), -2 * zeta * omega],
        ]
    B = np.zeros((n, 1))
    B[1::2, 0] = 1.0
    C = rng.standard_normal((2, n)) * np.tile([1.0, 0.2], len(modes))
    K = scipy.linalg.expm(A * dt)
    Bd = np.linalg.solve(A, (K - np.eye(n)) @ B)
    return dynsys.LinearSystem(K, Bd, C, feedthrough)


def _data(system, num_steps, seed, noise=0.01):
    """One experiment of white input, outputs with white measurement noise."""
    rng = np.random.default_rng(seed)
    us = rng.standard_normal((1, num_steps, system.input_size))
    x0 = rng.standard_normal((1, system.state_size))
    ys = np.asarray(dynsys.rollout(system, x0, num_steps, inputs=us).ys)
    ys = ys + noise * ys.std(axis=(0, 1)) * rng.standard_normal(ys.shape)
    return dynsys.Dataset(us=us, ys=ys)


@pytest.fixture(scope="module")
def lightly_damped():
    """Six states: two lightly damped modes (damping 0.015, 0.025), one well
    damped; estimation and validation records."""
    system = _modal_system([(0.35, 0.015), (1.2, 0.025), (0.7, 0.4)])
    return _data(system, 1200, 1), _data(system, 600, 2)


def test_picks_the_true_order_of_lightly_damped_modes(lightly_damped):
    train, val = lightly_damped
    scan = dynsys.select_order(
        train, orders=[8, 4, 6], feedthrough=(False,), val_data=val
    )
    assert scan.criterion == "validation"
    assert [c.order for c in scan.candidates] == [4, 6, 8]
    fits = {c.order: c.mean_fit for c in scan.candidates}
    assert scan.order == 6 or fits[scan.order] >= fits[6] - 0.5
    assert scan.order >= 6  # the lightly damped modes are kept
    # The scan's scores are compare's free-run fit %.
    expected = np.asarray(dynsys.compare(scan.model, val).fit_percent)
    np.testing.assert_allclose(scan.chosen.fit_percent, expected, atol=1e-6)
    assert scan.model.state_size == scan.order and scan.model.D is None
    assert scan.chosen.stable


def test_turns_feedthrough_on_when_the_data_need_it():
    system = _modal_system([(0.5, 0.3)], feedthrough=np.array([[1.0], [-0.5]]))
    train, val = _data(system, 500, 3), _data(system, 300, 4)
    scan = dynsys.select_order(train, orders=[2], val_data=val)
    assert [c.feedthrough for c in scan.candidates] == [False, True]
    assert scan.feedthrough and scan.model.D is not None
    without, with_d = scan.candidates
    assert with_d.mean_fit > without.mean_fit + 5.0
    # parameters: n (m + p) (+ p m with D)
    assert (without.parameters, with_d.parameters) == (6, 8)


def test_information_criteria_match_their_definitions(lightly_damped):
    train, _ = lightly_damped
    model = dynsys.fit_subspace(train, 6)
    c = dynsys.compare(model, train)
    e = np.asarray(c.measured - c.predicted)[0]
    N, p = e.shape
    d = 6 * 3
    sigma = e.T @ e / N
    logdet = np.log(np.linalg.det(sigma))
    aic, bic, fpe = dynsys.information_criteria(model, train, d)
    constant = N * p * (np.log(2 * np.pi) + 1)
    np.testing.assert_allclose(aic, N * logdet + 2 * d + constant, rtol=1e-8)
    np.testing.assert_allclose(bic, N * logdet + d * np.log(N) + constant, rtol=1e-8)
    np.testing.assert_allclose(
        fpe, np.linalg.det(sigma) * (1 + d / N) / (1 - d / N), rtol=1e-6
    )


def test_aic_without_validation_data_and_the_table(lightly_damped):
    train, _ = lightly_damped
    scan = dynsys.select_order(train, orders=(4, 6), feedthrough=False)
    assert scan.criterion == "aic"
    aics = [c.aic for c in scan.candidates]
    assert scan.order == (4, 6)[int(np.argmin(aics))]
    table = scan.table()
    assert [row["order"] for row in table] == [4, 6]
    assert table[0]["fit_percent"] is None
    assert "| order | D |" in scan.markdown()
    fig = dynsys.plot.order_scan(scan)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "model order $n$"
    assert "AIC" in ax.get_ylabel()


def test_order_scan_figure(lightly_damped):
    train, val = lightly_damped
    scan = dynsys.select_order(train, orders=(6,), val_data=val)
    fig = dynsys.plot.order_scan(scan, title="scan")
    ax = fig.axes[0]
    assert "validation fit %" in ax.get_ylabel()
    lines = [line for line in ax.get_lines() if line.get_label()[0] != "_"]
    labels = [line.get_label() for line in lines]
    assert labels[:2] == ["no feedthrough (D = 0)", "with feedthrough D"]
    marker = lines[-1]  # the chosen one, ringed
    assert marker.get_xdata()[0] == scan.order
    np.testing.assert_allclose(marker.get_ydata()[0], scan.chosen.mean_fit)
    with pytest.raises(ValueError, match=r"order_scan\(criterion=...\)"):
        dynsys.plot.order_scan(scan, criterion="r2")


def test_errors(lightly_damped):
    train, val = lightly_damped
    with pytest.raises(
        ValueError, match=r"select_order\(orders=...\): the order list is empty"
    ):
        dynsys.select_order(train, orders=[], val_data=val)
    with pytest.raises(
        ValueError,
        match=r"select_order\(orders=...\): the data allow at most order (\d+), got 5000",
    ):
        dynsys.select_order(train, orders=[3, 5000], val_data=val)
    with pytest.raises(
        ValueError, match=r"select_order\(orders=...\): orders must be positive"
    ):
        dynsys.select_order(train, orders=[0], val_data=val)
    with pytest.raises(ValueError, match=r"select_order\(criterion='validation'\)"):
        dynsys.select_order(train, orders=[2], criterion="validation")
    with pytest.raises(ValueError, match=r"select_order\(method=...\)"):
        dynsys.select_order(train, orders=[2], method="magic", val_data=val)
    no_inputs = dynsys.Dataset(ys=np.asarray(train.ys))
    with pytest.raises(ValueError, match=r"select_order\(feedthrough=...\)"):
        dynsys.select_order(no_inputs, orders=[2], feedthrough=(True,))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:fit. no better than the start")
def test_refined_by_fit():
    system = _modal_system([(0.5, 0.2)])
    train, val = _data(system, 300, 5, noise=0.05), _data(system, 200, 6)
    scan = dynsys.select_order(
        train,
        orders=[1, 2],
        feedthrough=(False,),
        method="fit",
        refine=1,
        val_data=val,
        fit_options={"num_steps": 5},
    )
    refined = [c for c in scan.candidates if c.refined]
    assert len(refined) == 1 and refined[0].order == 2
    expected = np.asarray(dynsys.compare(scan.model, val).fit_percent)
    np.testing.assert_allclose(scan.chosen.fit_percent, expected, atol=1e-6)


def test_scan_stops_after_orders_that_do_not_improve(lightly_damped, monkeypatch):
    """`stop_after=2`: the scan ends once two successive orders have not beaten the
    best mean fit by more than the tolerance (scores made up, fits not run)."""
    from dynsys._sysid import order as order_module

    scores = {1: 50.0, 2: 80.0, 3: 80.1, 4: 79.0, 5: 95.0}
    fitted = []

    def fake(data, val_data, n, f, options):
        fitted.append(n)
        row = order_module.OrderCandidate(
            n, f, 3 * n, (scores[n],), scores[n], 0.0, 0.0, 0.0, 0.5, True, False, 0.0
        )
        return row, dynsys.LinearSystem(np.eye(n) * 0.5)

    monkeypatch.setattr(order_module, "_subspace_candidate", fake)
    train, val = lightly_damped
    scan = dynsys.select_order(
        train, orders=range(1, 6), feedthrough=False, val_data=val, stop_after=2
    )
    assert fitted == [1, 2, 3, 4]  # 3 and 4 do not beat 80.0 + 0.2: stop
    assert scan.order == 2
    full = dynsys.select_order(
        train, orders=range(1, 6), feedthrough=False, val_data=val
    )
    assert full.order == 5


@pytest.mark.slow
def test_default_cli_fit_is_within_a_point_of_the_best_scanned_order(tmp_path):
    """The robot-arm-like case of docs/structure-selection.md, simulated: two
    lightly damped modes, a well damped one and an acceleration-like output that
    needs `D`. `dynsys fit` with no structure given must validate within one point
    of the best structure a full scan finds: every subspace candidate of orders
    1..10 with and without D, and the true structure refined by `fit`."""
    from dynsys import cli

    system = _modal_system(
        [(0.3, 0.012), (0.9, 0.02), (0.6, 0.5)],
        feedthrough=np.array([[0.8], [-0.4]]),
        seed=5,
    )
    data = _data(system, 600, 6, noise=0.03)
    data = dynsys.Dataset(
        us=data.us, ys=data.ys, input_names=["torque"], output_names=["y1", "y2"]
    )
    path = tmp_path / "arm.csv"
    data.save(path)
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "torque", "--outputs", "y1,y2"]
    assert cli.main([*argv, "--no-progress", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    default = np.mean(
        metrics["fit_percent"]["held-out fit % vs measurements"]["fitted"]
    )

    train, val = data.split_time(1 / 3, min_samples=4)  # the CLI's split
    scan = dynsys.select_order(train, range(1, 11), val_data=val)
    best_subspace = max(c.mean_fit for c in scan.candidates)
    start = dynsys.fit_subspace(train, 6, feedthrough=True)
    truth_structure = dynsys.fit(start, train, val_data=val, progress=False)
    refined = np.mean(
        np.asarray(dynsys.compare(truth_structure.model, val).fit_percent)
    )
    best = max(best_subspace, refined)
    assert default >= best - 1.0, (default, best_subspace, refined)


def test_a_remembered_scan_of_equal_data_computes_no_candidate_again(
    lightly_damped, monkeypatch
):
    """Within `remembered_scans` (one identification), a second scan of equal data
    and options (a copy, not the same object) reuses the first's candidates and
    chooses the same; other options, other data, or no context compute anew."""
    from dynsys._sysid import order as order_module
    from dynsys._sysid.scan_memo import remembered_scans

    real = order_module._subspace_candidate
    computed = []

    def counted(data, val_data, n, f, options):
        computed.append((n, f))
        return real(data, val_data, n, f, options)

    monkeypatch.setattr(order_module, "_subspace_candidate", counted)
    train, val = lightly_damped
    copy = dynsys.Dataset(us=np.array(train.us), ys=np.array(train.ys))
    orders = range(1, 5)
    with remembered_scans():
        first = dynsys.select_order(train, orders, val_data=val)
        assert len(computed) == 8
        again = dynsys.select_order(copy, orders, val_data=val)
        assert len(computed) == 8
        assert again.candidates == first.candidates
        assert (again.order, again.feedthrough) == (first.order, first.feedthrough)
        dynsys.select_order(train, orders, val_data=val, feedthrough=(False,))
        assert len(computed) == 12
        shifted = dynsys.Dataset(us=np.array(train.us), ys=np.array(train.ys) + 1e-9)
        dynsys.select_order(shifted, orders, val_data=val)
        assert len(computed) == 20
    dynsys.select_order(train, orders, val_data=val)
    assert len(computed) == 28
