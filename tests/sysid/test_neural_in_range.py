"""`fit_neural`'s early stopping scores each validation record only up to where
its input leaves the training inputs' range (`validate_in_range`): the cut against
a plain loop, and the fit against the same fit given the cut records by hand."""

import jax
import numpy as np
import pytest

import dynsys
from dynsys._sysid.in_range import in_range_lengths, in_range_part, RANGE_MARGIN
from dynsys._sysid.signals import signals

from ..systems.test_neural_ss import duffing


def _signals(us_list):
    ys = [np.zeros((len(u), 1)) for u in us_list]
    return signals(dynsys.Dataset(us=list(us_list), ys=ys), "test")


def _plain_cut(train_us, val_us, margin):
    """The samples before the first input outside the training range widened by
    `margin` of its width, by a loop over samples and channels."""
    stacked = np.concatenate(train_us)
    low, high = stacked.min(axis=0), stacked.max(axis=0)
    cuts = []
    for u in val_us:
        cut = len(u)
        for t in range(len(u)):
            if any(
                u[t, j] < low[j] - margin * (high[j] - low[j])
                or u[t, j] > high[j] + margin * (high[j] - low[j])
                for j in range(u.shape[1])
            ):
                cut = t
                break
        cuts.append(cut)
    return tuple(cuts)


def test_in_range_lengths_equal_a_plain_loop():
    """Two input channels, records of different lengths: each validation record
    is cut at its first sample outside the widened range, on either side and in
    either channel; a record inside it keeps its length."""
    rng = np.random.default_rng(0)
    train_us = [rng.uniform(0.0, 1.0, (50, 2)), rng.uniform(0.0, 1.0, (37, 2))]
    inside = rng.uniform(0.0, 1.0, (40, 2))
    above = rng.uniform(0.0, 1.0, (30, 2))
    above[17, 1] = 1.2  # the second channel, 20 % of the width above
    below = rng.uniform(0.0, 1.0, (25, 2))
    below[9, 0] = -0.2
    below[12, 1] = 1.5
    val_us = [inside, above, below]
    cut = in_range_lengths(_signals(train_us), _signals(val_us))
    assert cut == _plain_cut(train_us, val_us, RANGE_MARGIN)
    assert cut == (40, 17, 9)


def test_an_input_a_little_beyond_the_training_range_cuts_nothing():
    """Within `RANGE_MARGIN` of the width beyond the range (a broadband input's
    extremes) nothing is cut, and `in_range_part` returns the records as they
    are."""
    train = _signals([np.linspace(0.0, 1.0, 60)[:, None]])
    u = np.full((30, 1), 0.5)
    u[5, 0] = 1.0 + 0.9 * RANGE_MARGIN
    val = _signals([u])
    assert in_range_lengths(train, val) == (30,)
    part, scored = in_range_part(train, val, past=4, horizon=8)
    assert part is val and scored == (30,)


def test_records_leaving_the_range_before_a_scored_sample_are_dropped():
    """A record that leaves the range within its first `past` samples is dropped
    (0 scored); when every record would be, or the in-range parts score fewer
    samples than one window of `horizon`, all are kept whole."""
    train = _signals([np.linspace(0.0, 1.0, 60)[:, None]])
    early, late = np.full((30, 1), 0.5), np.full((20, 1), 0.5)
    early[3, 0] = 2.0
    late[12, 0] = 2.0
    both = _signals([early, late])
    part, scored = in_range_part(train, both, past=4, horizon=8)
    assert scored == (0, 12) and part.lengths == (12,)
    np.testing.assert_array_equal(np.asarray(part.us)[0], late[:12])
    alone = _signals([early])
    part, scored = in_range_part(train, alone, past=4, horizon=8)
    assert part is alone and scored == (30,)
    # 12 - 4 = 8 samples scored in range: one fewer than a window of 9
    part, scored = in_range_part(train, both, past=4, horizon=9)
    assert part is both and scored == (30, 20)


def test_fit_neural_stops_on_the_in_range_part_as_if_given_it():
    """A validation record whose input leaves the training range trains exactly
    as the same fit given its in-range part by hand (with the cut off): the same
    validation losses, best step and training losses; `val_scored` says where it
    was cut. With `validate_in_range=False` the whole record scores."""
    jax.config.update("jax_enable_x64", True)
    estimation, validation = duffing(200, 3), duffing(120, 5)
    us = np.asarray(validation.us).copy()
    high = float(np.asarray(estimation.us).max())
    low = float(np.asarray(estimation.us).min())
    us[0, 70, 0] = high + 0.5 * (high - low)
    leaving = dynsys.Dataset(us=us, ys=validation.ys)
    by_hand = dynsys.Dataset(us=us[:, :70], ys=np.asarray(validation.ys)[:, :70])
    kwargs = dict(base=dynsys.fit_subspace(estimation, 2), horizon=12, past=6,
                  width_size=4, num_steps=40, eval_every=10, batch_size=8,
                  learning_rate=1e-2, refine_linear=False, key=jax.random.key(1))
    cut = dynsys.fit_neural(estimation, leaving, **kwargs)
    given = dynsys.fit_neural(estimation, by_hand, validate_in_range=False, **kwargs)
    whole = dynsys.fit_neural(estimation, leaving, validate_in_range=False, **kwargs)
    assert cut.val_scored == (70,) and whole.val_scored == (120,)
    np.testing.assert_allclose(
        [v for _, v in cut.val_losses], [v for _, v in given.val_losses], rtol=1e-12
    )
    assert cut.best_step == given.best_step
    np.testing.assert_allclose(cut.losses, given.losses, rtol=1e-12)
    assert [v for _, v in whole.val_losses] != [v for _, v in cut.val_losses]


@pytest.mark.slow
def test_cli_scores_the_in_range_part_and_says_so(tmp_path, capsys):
    """`dynsys fit --model neural` on a record whose held-out last third drives
    the input far above anything before it: the early stopping scores the held-out
    part up to there (`validation_scored_samples`, by the plain loop), the run says
    so in one line, and the in-range table's linear RMS equals numpy's over those
    samples from the saved linear start."""
    import json

    from dynsys import cli

    record = duffing(300, 3)
    u = np.asarray(record.us)[0].copy()
    y = np.asarray(record.ys)[0]
    T = len(u)
    k = T - int(np.floor(T / 3 + 0.5))
    leaves = k + 60
    u[leaves, 0] = u.max() + 2.0 * (u.max() - u.min())
    path = tmp_path / "record.csv"
    np.savetxt(path, np.column_stack([u, y]), delimiter=",", header="u,y",
               comments="")  # fmt: skip
    out = tmp_path / "run"
    argv = ["fit", str(path), "--inputs", "u", "--outputs", "y", "--dt", "0.3",
            "--model", "neural", "--neural-steps", "20", "--neural-horizon", "16",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert _plain_cut([u[:k]], [u[k:]], RANGE_MARGIN) == (60,)
    assert "the early stopping scored the held-out data up to where" in printed
    neural = json.loads((out / "metrics.json").read_text())["neural"]
    assert neural["validation_scored_samples"] == [60]
    model = dynsys.load(out / "neural_linear_model.dynsys")
    held = dynsys.Dataset(us=u[None, k:], ys=y[None, k:])
    predicted = np.asarray(dynsys.compare(model, held).predicted[0, 20:60])
    rms = np.sqrt(np.mean((y[k + 20 : k + 60] - predicted) ** 2))
    np.testing.assert_allclose(neural["in_range"]["rms"]["linear"], [rms], rtol=1e-5)
