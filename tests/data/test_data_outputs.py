"""Datasets with measured outputs and experiments of different lengths; simulate's
outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import python_loop_rollout


def _ragged(lengths=(6, 3, 5), n=2, m=1, p=2, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(T + 1, n)) for T in lengths]
    us = [rng.normal(size=(T, m)) for T in lengths]
    ys = [rng.normal(size=(T, p)) for T in lengths]
    return xs, us, ys


def test_outputs_only_sizes_names_and_times():
    rng = np.random.default_rng(0)
    us, ys = rng.normal(size=(3, 8, 1)), rng.normal(size=(3, 8, 2))
    data = dynsys.Dataset(us=us, ys=ys, ts=0.25 * np.arange(8))
    assert data.xs is None and data.state_size == 0 and data.state_names == ()
    assert (data.num_trajectories, data.num_steps) == (3, 8)
    assert (data.input_size, data.output_size) == (1, 2)
    assert data.output_names == ("y0", "y1") and data.input_names == ("u0",)
    assert data.lengths == (8, 8, 8) and not data.is_ragged
    assert data.dt == pytest.approx(0.25)
    np.testing.assert_array_equal(data.ys, ys)
    assert bool(data.step_mask.all()) and data.step_mask.shape == (3, 8)
    # Without states, ts has one time per output sample: (T,), not (T+1,).
    with pytest.raises(ValueError, match=r"ts must have shape \(T,\) = \(8,\)"):
        dynsys.Dataset(us=us, ys=ys, ts=np.arange(9))


def test_states_inputs_and_outputs_together():
    xs, us, ys = _ragged(lengths=(5, 5))
    data = dynsys.Dataset(xs, us, np.arange(6.0), ys=ys, output_names=["pos", "vel"])
    assert (data.state_size, data.input_size, data.output_size) == (2, 1, 2)
    assert data.output_names == ("pos", "vel") and not data.is_ragged
    np.testing.assert_array_equal(data.ys, np.stack(ys))
    train, val = data.split(1)
    np.testing.assert_array_equal(val.ys[0], ys[1])
    assert train.output_names == ("pos", "vel")


def test_ragged_padding_mask_and_experiments():
    lengths = (6, 3, 5)
    xs, us, ys = _ragged(lengths)
    ts = 0.1 * np.arange(7)
    data = dynsys.Dataset(xs, us, ts, ys=ys)
    assert data.lengths == lengths and data.is_ragged and data.num_steps == 6
    assert data.xs.shape == (3, 7, 2) and data.us.shape == (3, 6, 1)
    assert data.ys.shape == (3, 6, 2)
    mask = np.asarray(data.step_mask)
    np.testing.assert_array_equal(mask, np.arange(6)[None] < np.array(lengths)[:, None])
    for i, T in enumerate(lengths):
        np.testing.assert_array_equal(data.xs[i, : T + 1], xs[i])
        np.testing.assert_array_equal(data.ys[i, :T], ys[i])
        # The padding is zeros.
        assert not np.any(np.asarray(data.xs[i, T + 1 :]))
        assert not np.any(np.asarray(data.us[i, T:]))
        one = data.experiment(i)
        assert one.lengths == (T,) and not one.is_ragged
        np.testing.assert_array_equal(one.xs[0], xs[i])
        np.testing.assert_array_equal(one.us[0], us[i])
        np.testing.assert_array_equal(one.ys[0], ys[i])
        np.testing.assert_array_equal(one.ts, data.ts[: T + 1])
    # Indexing keeps the lengths and trims the padding to the longest kept.
    sub = data[np.array([1, 2])]
    assert sub.lengths == (3, 5) and sub.num_steps == 5 and sub.xs.shape == (2, 6, 2)
    assert sub.ts.shape == (6,)
    np.testing.assert_array_equal(sub.ys[1, :5], ys[2])
    train, val = data.split(1)
    assert train.lengths == (6, 3) and val.lengths == (5,)
    with pytest.raises(ValueError, match=r"experiment\(i=...\): expected an integer"):
        data.experiment(3)


def test_padded_arrays_with_lengths_equal_the_sequence_form():
    lengths = (4, 2)
    xs, us, ys = _ragged(lengths)
    ragged = dynsys.Dataset(xs, us, ys=ys)
    padded = np.full((2, 5, 2), np.nan)  # the padding may hold anything, even NaN
    for i, T in enumerate(lengths):
        padded[i, : T + 1] = xs[i]
    again = dynsys.Dataset(padded, ragged.us, ys=ragged.ys, lengths=lengths)
    assert again.lengths == lengths
    np.testing.assert_array_equal(again.xs, ragged.xs)
    np.testing.assert_array_equal(again.us, ragged.us)
    with pytest.raises(ValueError, match=r"lengths\[0\] = 9 needs 10 time points"):
        dynsys.Dataset(padded, lengths=[9, 2])


def test_outputs_only_ragged():
    _, us, ys = _ragged((4, 7))
    data = dynsys.Dataset(us=us, ys=ys, ts=np.arange(7.0))
    assert data.lengths == (4, 7) and data.ys.shape == (2, 7, 2)
    one = data.experiment(0)
    assert one.ts.shape == (4,) and one.ys.shape == (1, 4, 2)


def test_output_length_must_match_inputs():
    _, us, ys = _ragged((4, 7))
    ys[1] = ys[1][:6]
    with pytest.raises(
        ValueError,
        match=r"Dataset\(ys=...\): trajectory 1 has ys of shape \(6, 2\), but us of "
        r"shape \(7, 1\)",
    ):
        dynsys.Dataset(us=us, ys=ys)
    with pytest.raises(
        ValueError,
        match=r"ys must have shape \(N, T, p\) = \(2, 5, p\) to match us \(2, 5, 1\), "
        r"got \(2, 6, 1\)",
    ):
        dynsys.Dataset(us=np.zeros((2, 5, 1)), ys=np.zeros((2, 6, 1)))
    with pytest.raises(ValueError, match="ys has 3 trajectories, but us has 2"):
        dynsys.Dataset(us=np.zeros((2, 5, 1)), ys=np.zeros((3, 5, 1)))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_output_names_trajectory_time_and_channel(bad):
    _, us, ys = _ragged((4, 7))
    ys[1][5, 1] = bad
    with pytest.raises(
        ValueError,
        match=r"ys\[1, 5, 1\] is .*trajectory 1, time index 5, column 1 'speed'",
    ):
        dynsys.Dataset(us=us, ys=ys, output_names=["pos", "speed"])


def test_construction_errors():
    with pytest.raises(ValueError, match="need states xs or measured outputs ys"):
        dynsys.Dataset(us=np.zeros((2, 5, 1)))
    with pytest.raises(ValueError, match="output_names=...\\): names given but ys"):
        dynsys.Dataset(np.zeros((2, 5, 1)), output_names=["a"])
    with pytest.raises(ValueError, match="'a' appears also in state_names"):
        dynsys.Dataset(
            np.zeros((2, 5, 1)),
            ys=np.zeros((2, 4, 1)),
            state_names=["a"],
            output_names=["a"],
        )
    with pytest.raises(ValueError, match="expected real numbers, got dtype complex"):
        dynsys.Dataset(ys=np.zeros((2, 4, 1), dtype=complex))
    with pytest.raises(ValueError, match="outputs have no columns"):
        dynsys.Dataset(ys=np.zeros((2, 4, 0)))


def test_float32_overflow_and_collapsing_times_are_refused_after_the_cast():
    big = np.zeros((1, 3, 1))
    big[0, 1, 0] = 1e39
    with jax.enable_x64(False):
        with pytest.raises(
            ValueError, match=r"xs\[0, 1, 0\] = 1e\+39 .*beyond the range of float32"
        ):
            dynsys.Dataset(big)
        with pytest.raises(
            ValueError, match=r"no longer strictly increasing in float32"
        ):
            dynsys.Dataset(np.zeros((1, 3, 1)), ts=1e8 + np.arange(3.0))
        with pytest.raises(ValueError, match=r"ys\[0, 1, 0\] = 1e\+39"):
            dynsys.Dataset(ys=big[:, :2])
    # float64 keeps both.
    assert float(dynsys.Dataset(big).xs[0, 1, 0]) == 1e39
    assert float(np.diff(dynsys.Dataset(big, ts=1e8 + np.arange(3.0)).ts)[0]) == 1.0


def test_least_squares_on_ragged_data_uses_only_real_transitions():
    rng = np.random.default_rng(1)
    K = np.array([[0.9, 0.2], [-0.1, 0.7]])
    B = np.array([[0.5], [1.0]])
    lengths = (9, 4, 6)
    xs, us = [], []
    for T in lengths:
        x = [rng.normal(size=2)]
        u = rng.normal(size=(T, 1))
        for t in range(T):
            x.append(K @ x[-1] + B @ u[t] + 0.05 * rng.normal(size=2))
        xs.append(np.stack(x))
        us.append(u)
    data = dynsys.Dataset(xs, us)
    estimate = dynsys.fit_least_squares(data)
    # Reference: numpy least squares on the stacked real transitions.
    Z = np.concatenate([np.hstack([x[:-1], u]) for x, u in zip(xs, us)])
    Y = np.concatenate([x[1:] for x in xs])
    KB = np.linalg.lstsq(Z, Y, rcond=None)[0].T
    np.testing.assert_allclose(estimate.K, KB[:, :2], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(estimate.B, KB[:, 2:], rtol=1e-10, atol=1e-12)


def test_least_squares_without_states_points_to_subspace():
    data = dynsys.Dataset(us=np.ones((2, 5, 1)), ys=np.ones((2, 5, 1)))
    with pytest.raises(ValueError, match="Use fit_subspace\\(data\\)"):
        dynsys.fit_least_squares(data)


def test_simulate_records_outputs_of_a_system_with_C_and_D():
    K = np.array([[0.9, 0.2], [-0.1, 0.8]])
    B = np.array([[0.0], [1.0]])
    C = np.array([[1.0, 0.5]])
    D = np.array([[0.3]])
    system = dynsys.LinearSystem(K, B, C, D)
    x0s = np.array([[1.0, 0.0], [0.0, -1.0]])
    inputs = np.random.default_rng(0).normal(size=(2, 7, 1))
    data = dynsys.simulate(system, x0s, 7, inputs=inputs)
    assert data.ys.shape == (2, 7, 1) and data.ts.shape == (8,)
    for i in range(2):
        xs, _, ys = python_loop_rollout(
            lambda t, x, u: K @ x + B @ u,
            lambda t, x, u: C @ x + D @ u,
            None,
            x0s[i],
            7,
            inputs[i],
        )
        np.testing.assert_allclose(data.xs[i], xs, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(data.ys[i], ys, rtol=1e-13, atol=1e-13)
    # Measurement noise goes on the outputs; the states stay noise-free.
    noisy = dynsys.simulate(
        system,
        np.ones((40, 2)),
        30,
        inputs=np.zeros((30, 1)),
        measurement_noise=0.2,
        key=jax.random.key(0),
    )
    clean = dynsys.simulate(system, np.ones((40, 2)), 30, inputs=np.zeros((30, 1)))
    np.testing.assert_array_equal(noisy.xs, clean.xs)
    noise = np.asarray(noisy.ys - clean.ys)
    assert noise.std() == pytest.approx(0.2, rel=0.05) and abs(noise.mean()) < 0.02


def test_simulate_output_of_a_custom_system_and_process_noise():
    class Observed(dynsys.AbstractSystem):
        K: jnp.ndarray

        @property
        def state_size(self):
            return 2

        @property
        def input_size(self):
            return 0

        @property
        def output_size(self):
            return 1

        def step(self, t, x, u):
            return self.K @ x

        def output(self, t, x, u):
            return x[:1] ** 2

    system = Observed(jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    data = dynsys.simulate(
        system, np.ones((3, 2)), 10, process_noise=0.1, key=jax.random.key(2)
    )
    # The outputs follow the (noisy) states exactly: y_t = x_t[0]^2.
    np.testing.assert_allclose(data.ys[..., 0], data.xs[:, :-1, 0] ** 2, rtol=1e-12)
    # A plain-state system keeps the release-1 behaviour: no ys.
    assert (
        dynsys.simulate(dynsys.LinearSystem(np.eye(2)), np.ones((1, 2)), 3).ys is None
    )


def test_dt_in_float32_and_float64():
    ts = 10.0 + 0.1 * np.arange(200)
    with jax.enable_x64(False):
        assert dynsys.Dataset(ys=np.zeros((1, 200, 1)), ts=ts).dt == pytest.approx(
            0.1, rel=1e-6
        )
    assert dynsys.Dataset(ys=np.zeros((1, 200, 1)), ts=ts).dt == pytest.approx(0.1)
    uneven = ts.copy()
    uneven[50:] += 0.01
    assert dynsys.Dataset(ys=np.zeros((1, 200, 1)), ts=uneven).dt is None
