"""The held-input probe of a nonlinear model (`_sysid/held_probe.py`): inputs held
at random levels inside the measured range, and how far the free run leaves the
measured outputs' range, against a plain NumPy loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._sysid.held_probe import held_input_excursion, held_levels


def test_held_levels_stay_in_range_and_hold_each_level_as_drawn():
    rng = np.random.default_rng(3)
    low, high = np.array([-1.0, 2.0]), np.array([0.5, 2.5])
    u = held_levels(500, low, high, (4, 9), rng)
    assert u.shape == (500, 2)
    assert np.all(u >= low) and np.all(u <= high)
    for j in range(2):
        # the lengths of the runs of equal values, as a plain loop counts them
        runs, count = [], 1
        for a, b in zip(u[:-1, j], u[1:, j]):
            if a == b:
                count += 1
            else:
                runs.append(count)
                count = 1
        assert all(4 <= r <= 9 for r in runs), runs  # the last run may be cut
        assert count <= 9
    # the channels switch at independent times
    assert not np.array_equal(np.diff(u[:, 0]) != 0, np.diff(u[:, 1]) != 0)


def _model_and_encoder(K, B, C, past, us, ys):
    """An untrained `NeuralStateSpace` on `LinearSystem(K, B, C)` (equal to it)
    and an encoder fitted to the states of a free run from 0."""
    linear = dynsys.LinearSystem(K, B, C)
    model = dynsys.NeuralStateSpace(linear, width_size=4, depth=2,
                                    key=jax.random.key(0))  # fmt: skip
    windows = np.lib.stride_tricks.sliding_window_view
    xs = [np.zeros(len(K))]
    for u in us[:-1]:
        xs.append(K @ xs[-1] + B @ u)
    xs = np.array(xs)
    past_us = windows(us, past, axis=0)[:-1].transpose(0, 2, 1)
    past_ys = windows(ys, past, axis=0)[:-1].transpose(0, 2, 1)
    encoder = dynsys.StateEncoder.from_states(
        jnp.asarray(past_us), jnp.asarray(past_ys), jnp.asarray(xs[past:]),
        width_size=4, depth=2, key=jax.random.key(1),
    )  # fmt: skip
    return model, encoder


def test_the_excursion_is_that_of_a_numpy_free_run_on_the_same_held_inputs():
    rng = np.random.default_rng(0)
    K = np.array([[0.9, 0.2], [-0.1, 0.7]])
    B, C = np.array([[1.0], [0.5]]), np.array([[1.0, -0.3]])
    T, past = 300, 5
    us = rng.uniform(-1.0, 2.0, (T, 1))
    x, ys = np.zeros(2), []
    for u in us:
        ys.append(C @ x)
        x = K @ x + B @ u
    # measured outputs of a smaller range than the held inputs give
    ys = 0.5 * np.array(ys)
    model, encoder = _model_and_encoder(K, B, C, past, us, 2 * ys)
    got = held_input_excursion(model, encoder, us, ys, holds=(10, 30), records=3,
                               seed=7)  # fmt: skip

    probe_rng = np.random.default_rng(7)
    width = ys.max() - ys.min()
    worst = 0.0
    for _ in range(3):
        u = np.concatenate(
            [us[:past], held_levels(T - past, us.min(0), us.max(0), (10, 30), probe_rng)]
        )
        data = dynsys.Dataset(us=u[None], ys=ys[None])
        x = np.asarray(dynsys.neural_initial_state(encoder, data))[0]
        for t in range(past, T):
            y = C @ x
            worst = max(worst, float(max(y[0] - ys.max(), ys.min() - y[0]) / width))
            x = K @ x + B @ u[t]
    assert worst > 0.1  # the probe leaves the range: the comparison means something
    assert got == pytest.approx(worst, rel=1e-9)


def test_a_model_that_overflows_on_the_held_inputs_has_an_infinite_excursion():
    rng = np.random.default_rng(1)
    K, B, C = np.array([[1.5]]), np.array([[1.0]]), np.array([[1.0]])
    us, ys = rng.uniform(0.0, 1.0, (2000, 1)), rng.normal(size=(2000, 1))
    model, encoder = _model_and_encoder(
        np.array([[0.5]]), B, C, 5, us, ys
    )  # the encoder of a stable model, then the growing one
    model = dynsys.NeuralStateSpace(dynsys.LinearSystem(K, B, C), width_size=4,
                                    depth=2, key=jax.random.key(0))  # fmt: skip
    assert held_input_excursion(model, encoder, us, ys, holds=(5, 10)) == np.inf


@pytest.mark.parametrize(
    "us, ys, holds, match",
    [
        (np.zeros((50,)), np.zeros((50, 1)), (2, 4), r"us=\.\.\., ys=.*\(50,\)"),
        (np.zeros((50, 1)), np.zeros((40, 1)), (2, 4), r"shapes \(50, 1\) and \(40, 1\)"),
        (np.zeros((5, 1)), np.zeros((5, 1)), (2, 4), r"us=.*5 samples.*past = 5"),
        (np.zeros((50, 1)), np.zeros((50, 1)), (4, 2), r"holds=.*\(4, 2\)"),
        (np.zeros((50, 1)), np.zeros((50, 1)), (0, 2), r"holds=.*\(0, 2\)"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_naming_them(us, ys, holds, match):
    rng = np.random.default_rng(2)
    model, encoder = _model_and_encoder(
        np.array([[0.5]]), np.array([[1.0]]), np.array([[1.0]]), 5,
        rng.normal(size=(40, 1)), rng.normal(size=(40, 1)),
    )  # fmt: skip
    with pytest.raises(ValueError, match=match) as error:
        dynsys.held_input_excursion(model, encoder, us, ys, holds=holds)
    assert "\n" not in str(error.value)
