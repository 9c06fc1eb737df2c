"""The output-error loss of a model with an unstable mode, over windows
(`_fitting/unstable_window.py`): the window's closed form, and a scan whose
refinements of one unstable start agree whatever they are padded to."""

import math
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._fitting.unstable_window import (
    GROWTH,
    in_windows,
    scoring_window,
    SCORING_GROWTH,
    unstable_window,
    windowed_loss,
)
from dynsys._sysid.order import select_order

from ..experiments.test_unstable_plant import _closed_loop_csv
from ..sysid.test_stable_margin import _row


def _model(*eigenvalues):
    return dynsys.LinearSystem(K=jnp.diag(jnp.asarray(eigenvalues, jnp.float32)))


def test_the_window_is_where_the_unstable_mode_grows_by_the_bound():
    # 1.04^t = 100 at t = ln 100 / ln 1.04 = 117.4: a window of 118 steps.
    assert unstable_window(_model(1.04, 0.8), [1000], 500) == 118
    steps = unstable_window(_model(1.04, 0.8), [1000], 500)
    assert 1.04 ** (steps - 1) < GROWTH <= 1.04**steps
    # A fast mode's window still holds the state: at least 2 (n + 1) steps.
    assert unstable_window(_model(3.0, 0.5, 0.2), [1000], 500) == 8
    # At most the shortest record (held-out ones included).
    assert unstable_window(_model(1.04, 0.8), [1000], 60) == 60


@pytest.mark.parametrize(
    "eigenvalues, length",
    [((0.99, 0.5), 10_000), ((1.0, 0.5), 10_000), ((1.001, 0.5), 1000)],
)
def test_a_free_run_that_stays_well_posed_keeps_the_plain_loss(eigenvalues, length):
    # Stable, marginal, or growing less than GROWTH over the record
    # (1.001^1000 = 2.7).
    assert unstable_window(_model(*eigenvalues), [length], length) is None


def test_the_windowed_loss_holds_in_every_record():
    data = dynsys.Dataset(us=np.zeros((1, 1000, 1)), ys=np.zeros((1, 1000, 1)))
    held_out = dynsys.Dataset(us=np.zeros((1, 90, 1)), ys=np.zeros((1, 90, 1)))
    start = dynsys.LinearSystem(
        K=jnp.diag(jnp.array([1.04, 0.8])),
        B=jnp.ones((2, 1)),
        C=jnp.ones((1, 2)),
    )
    loss = windowed_loss(start, data, held_out)
    assert isinstance(loss, dynsys.MultipleShooting)
    assert loss.horizon == 90
    assert windowed_loss(start, data).horizon == math.ceil(
        math.log(GROWTH) / math.log(1.04)
    )


def test_an_unstable_start_is_refined_alike_whatever_the_scan_pads_it_to(tmp_path):
    """An order-2 plant with an open-loop eigenvalue 1.04, recorded under feedback
    (1,000 estimation steps: a free run grows 1e17-fold). Over the whole record
    the refinement of its order-2 subspace start ended at 95.8, 96.5 or 99.1 %
    held out, depending only on the size the scan padded it to (the list of
    orders); over windows each ends within 0.05 points of the true model's."""
    path = tmp_path / "closed_loop.csv"
    clean = _closed_loop_csv(path)
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    u, y = table[:, 1:2], table[:, 2:3]
    train = dynsys.Dataset(us=u[None, :1000], ys=y[None, :1000])
    held_out = dynsys.Dataset(us=u[None, 1000:], ys=y[None, 1000:])
    measured = y[1000:, 0]
    true_fit = 100 * (
        1
        - np.linalg.norm(measured - clean[1000:])
        / np.linalg.norm(measured - measured.mean())
    )
    scores = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for orders in ((2,), (1, 2, 3), range(1, 9)):
            scan = select_order(
                train,
                orders,
                feedthrough=(False,),
                method="fit",
                val_data=held_out,
                fit_options={"num_steps": 30},
            )
            (row,) = [c for c in scan.candidates if c.order == 2]
            assert row.refined
            scores.append(row.mean_fit)
    assert max(scores) - min(scores) < 0.05, scores
    assert min(scores) > true_fit - 0.1, (scores, true_fit)


def test_the_scoring_window_is_where_the_median_mode_grows_by_its_bound():
    # median 1.085: ln 1e4 / ln 1.085 = 112.9
    assert scoring_window([1.08, 1.085, 1.5], 1000, 10) == 113
    assert 1.085**112 < SCORING_GROWTH <= 1.085**113
    assert scoring_window([3.0], 1000, 10) == 22  # at least 2 (n + 1)
    assert scoring_window([1.085], 60, 10) == 60  # at most the held-out record


def test_records_cut_into_windows_are_their_slices():
    rng = np.random.default_rng(0)
    us = [rng.standard_normal((10, 2)), rng.standard_normal((7, 2))]
    ys = [rng.standard_normal((10, 1)), rng.standard_normal((7, 1))]
    data = dynsys.Dataset(us=us, ys=ys, ts=0.5 * np.arange(10))
    cut = in_windows(data, 3)
    assert cut.lengths == (3, 3, 3, 3, 3)  # 10 -> 3 windows, 7 -> 2
    starts = [(0, 0), (0, 3), (0, 6), (1, 0), (1, 3)]
    for k, (i, a) in enumerate(starts):
        np.testing.assert_array_equal(np.asarray(cut.us[k]), us[i][a : a + 3])
        np.testing.assert_array_equal(np.asarray(cut.ys[k]), ys[i][a : a + 3])
    assert cut.dt == 0.5
    assert in_windows(data, None) is data


def _scan_model(radius, order):
    K = np.diag([radius] + [0.5] * (order - 1))
    return dynsys.LinearSystem(
        K=jnp.asarray(K), B=jnp.ones((order, 1)), C=jnp.ones((1, order))
    )


@pytest.mark.parametrize(
    "radii, windowed",
    [
        # an inverted pendulum's orders 2-4 (and one stable order 1): one mode
        ({1: 0.9, 2: 1.085, 3: 1.087, 4: 1.064}, True),
        # a noisy stable plant's spurious estimates: rates 0.155-0.309, scattered
        ({1: 0.9, 2: 1.168, 3: 1.223, 4: 1.362}, False),
        # one order's wild estimate (with and without D: one K)
        ({1: 0.9, 2: 2.3}, False),
        # runaway within 1e8 over 1,000 steps (1.015^1000 = 3e6): a bad model
        ({1: 0.9, 2: 1.015, 3: 1.016, 4: 1.015}, False),
    ],
)
def test_a_scan_is_scored_over_windows_only_for_a_mode_its_orders_share(
    radii, windowed
):
    from dynsys._sysid.order import _scored_over_windows

    rows = [_row(n, 50.0 if r < 1 else -1e30, r) for n, r in radii.items()]
    rows = [r for row in rows for r in (row, row)]  # with and without D
    models = [_scan_model(r.spectral_radius, r.order) for r in rows]
    rng = np.random.default_rng(0)
    val = dynsys.Dataset(
        us=rng.standard_normal((1, 1000, 1)), ys=rng.standard_normal((1, 1000, 1))
    )
    scored, held_out, window = _scored_over_windows(rows, models, val, 4)
    if not windowed:
        assert window is None and scored is rows and held_out is val
        return
    assert window == scoring_window([1.085, 1.085, 1.087, 1.087, 1.064, 1.064], 1000, 4)
    assert held_out.lengths == (window,) * (1000 // window)
    for row, model, again in zip(rows, models, scored):
        expected = dynsys.compare(model, held_out).fit_percent
        assert again.fit_percent[0] == pytest.approx(float(expected[0]), rel=1e-6)
