"""Datasets: validation, .npz/.csv files, split, simulate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import python_loop_rollout


def _data(N=3, T=5, n=2, m=1, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(N, T + 1, n))
    us = None if m == 0 else rng.normal(size=(N, T, m))
    return xs, us


def test_construction_and_sizes():
    xs, us = _data()
    data = dynsys.Dataset(xs, us)
    assert (data.num_trajectories, data.num_steps, data.state_size) == (3, 5, 2)
    assert data.input_size == 1 and data.ts is None and data.dt is None
    assert data.state_names == ("x0", "x1") and data.input_names == ("u0",)
    from_lists = dynsys.Dataset(list(xs), list(us))
    np.testing.assert_array_equal(from_lists.xs, data.xs)
    one = dynsys.Dataset(xs[0], us[0])
    assert one.num_trajectories == 1
    timed = dynsys.Dataset(xs, ts=0.1 * np.arange(6))
    assert timed.dt == pytest.approx(0.1) and timed.input_size == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_states_name_trajectory_time_and_column(bad):
    xs, us = _data()
    xs[1, 3, 0] = bad
    with pytest.raises(
        ValueError, match=r"xs\[1, 3, 0\].*trajectory 1, time index 3, column 0 'x0'"
    ):
        dynsys.Dataset(xs, us)


def test_non_finite_inputs():
    xs, us = _data()
    us[2, 4, 0] = np.nan
    with pytest.raises(
        ValueError, match=r"us\[2, 4, 0\].*trajectory 2, time index 4, column 0 'u0'"
    ):
        dynsys.Dataset(xs, us)


def test_trajectories_of_different_widths_or_lengths():
    with pytest.raises(
        ValueError, match="trajectory 1 has 3 state columns, but trajectory 0 has 2"
    ):
        dynsys.Dataset([np.zeros((5, 2)), np.zeros((5, 3))])
    # Different lengths are accepted (ragged data); the inputs must follow them.
    with pytest.raises(
        ValueError,
        match=r"us=.*trajectory 2 has us of shape \(4, 1\), but xs of shape "
        r"\(4, 2\): expected 3 time points",
    ):
        dynsys.Dataset(
            [np.zeros((5, 2)), np.zeros((5, 2)), np.zeros((4, 2))],
            [np.zeros((4, 1)), np.zeros((4, 1)), np.zeros((4, 1))],
        )
    with pytest.raises(
        ValueError, match=r"us must have shape \(N, T, m\) = \(3, 5, m\)"
    ):
        dynsys.Dataset(np.zeros((3, 6, 2)), np.zeros((3, 6, 1)))


def test_empty_dataset():
    with pytest.raises(ValueError, match="empty"):
        dynsys.Dataset([])
    with pytest.raises(ValueError, match="empty"):
        dynsys.Dataset(np.zeros((0, 5, 2)))
    with pytest.raises(ValueError, match="at least 2 time points"):
        dynsys.Dataset(np.zeros((2, 1, 2)))
    with pytest.raises(ValueError, match=r"must have shape \(N, T\+1, n\)"):
        dynsys.Dataset(np.zeros((2, 3, 4, 5)))


def test_bad_times():
    xs, _ = _data(m=0)
    with pytest.raises(ValueError, match=r"ts must have shape \(T\+1,\) = \(6,\)"):
        dynsys.Dataset(xs, ts=np.arange(5))
    with pytest.raises(ValueError, match=r"strictly increasing, but ts\[3\] = 1.0"):
        dynsys.Dataset(xs, ts=np.array([0.0, 1.0, 2.0, 1.0, 4.0, 5.0]))


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
@pytest.mark.parametrize("m", [0, 2])
def test_save_load_round_trip(tmp_path, suffix, m):
    xs, us = _data(m=m)
    data = dynsys.Dataset(xs, us, ts=0.5 + 0.1 * np.arange(6))
    path = tmp_path / f"data{suffix}"
    data.save(path)
    back = dynsys.load_dataset(path)
    np.testing.assert_array_equal(back.xs, data.xs)
    np.testing.assert_array_equal(back.ts, data.ts)
    if m:
        np.testing.assert_array_equal(back.us, data.us)
    else:
        assert back.us is None
    assert back.state_names == data.state_names
    assert back.input_names == data.input_names
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left


def test_csv_long_format_by_hand(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text(
        "trajectory,time,x_pos,x_vel,u_force,comment\n"
        "a,0,1,2,0.5,hi\n"
        "a,1,3,4,0.25,\n"
        "a,2,5,6,,\n"
        "b,0,-1,-2,1,\n"
        "b,1,-3,-4,2,\n"
        "b,2,-5,-6,,\n"
    )
    data = dynsys.load_dataset(path)
    np.testing.assert_array_equal(data.xs[1], [[-1, -2], [-3, -4], [-5, -6]])
    np.testing.assert_array_equal(data.us[:, :, 0], [[0.5, 0.25], [1, 2]])
    assert data.state_names == ("x_pos", "x_vel") and data.input_names == ("u_force",)
    picked = dynsys.load_dataset(path, states=["x_vel"], inputs=[])
    assert picked.state_size == 1 and picked.us is None


def test_csv_non_numeric_cell_names_line_and_column(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("trajectory,time,x0,x1\n0,0,1.0,2.0\n0,1,1.5,abc\n")
    with pytest.raises(
        ValueError, match=r"line 3: column 4 \('x1'\): 'abc' is not a number"
    ):
        dynsys.load_dataset(path)


def test_csv_structural_errors(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("id,time,x0\n0,0,1\n0,1,2\n")
    with pytest.raises(
        ValueError,
        match=r"load_dataset\(trajectory='trajectory'\): .* has no "
        r"'trajectory' column; columns found: \['id', 'time', 'x0'\]",
    ):
        dynsys.load_dataset(path, trajectory="trajectory")
    assert dynsys.load_dataset(path).lengths == (1,)  # one experiment, no 'id' role
    path.write_text("trajectory,time,x0\n0,0,1\n0,1\n")
    with pytest.raises(ValueError, match="line 3: expected 3 cells"):
        dynsys.load_dataset(path)
    path.write_text("trajectory,time,x0\n0,0,1\n0,1,2\n1,0,1\n")
    with pytest.raises(
        ValueError, match="line 4: trajectory '1' has 1 row.*at least 2"
    ):
        dynsys.load_dataset(path)
    path.write_text("trajectory,time,x0\n")
    with pytest.raises(ValueError, match="empty"):
        dynsys.load_dataset(path)
    path.write_text("trajectory,time,x0\n0,0,1\n0,1,nan\n")
    with pytest.raises(ValueError, match=r"xs\[0, 1, 0\] is nan"):
        dynsys.load_dataset(path)
    (tmp_path / "d.txt").write_text("")
    with pytest.raises(ValueError, match="the file is empty"):
        dynsys.load_dataset(tmp_path / "d.txt")
    (tmp_path / "d.json").write_text("{}")
    with pytest.raises(ValueError, match="expected a .csv, .dat, .txt, .npz or .mat"):
        dynsys.load_dataset(tmp_path / "d.json")
    with pytest.raises(ValueError, match="no such file"):
        dynsys.load_dataset(tmp_path / "missing.csv")


def test_split():
    xs, us = _data(N=5)
    data = dynsys.Dataset(xs, us)
    train, val = data.split(2)
    np.testing.assert_array_equal(train.xs, xs[:3])
    np.testing.assert_array_equal(val.us, us[3:])
    train, val = data.split(0.2)
    assert (train.num_trajectories, val.num_trajectories) == (4, 1)
    train, val = data.split(2, key=jax.random.key(0))
    together = np.concatenate([train.xs, val.xs])
    assert sorted(map(tuple, together[:, 0, :].tolist())) == sorted(
        map(tuple, xs[:, 0, :].tolist())
    )
    with pytest.raises(ValueError, match=r"a count must be in \[1, 4\]"):
        data.split(5)
    with pytest.raises(ValueError, match=r"a fraction must be in \(0, 1\)"):
        data.split(1.5)
    with pytest.raises(ValueError, match="need at least 2 trajectories"):
        data[0].split()


def test_simulate_matches_python_loop():
    K = np.array([[0.9, 0.2], [-0.1, 0.8]])
    B = np.array([[0.0], [1.0]])
    system = dynsys.LinearSystem(K, B)
    x0s = np.array([[1.0, 0.0], [0.0, -1.0]])
    inputs = np.random.default_rng(0).normal(size=(2, 7, 1))
    data = dynsys.simulate(system, x0s, 7, inputs=inputs)
    for i in range(2):
        xs, _, _ = python_loop_rollout(
            lambda t, x, u: K @ x + B @ u, lambda t, x, u: x, None, x0s[i], 7, inputs[i]
        )
        np.testing.assert_allclose(data.xs[i], xs, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(data.us, inputs)


def test_simulate_process_noise_enters_the_state():
    K = np.array([[0.5, 0.0], [0.0, 0.5]])
    system = dynsys.LinearSystem(K)
    key = jax.random.key(3)
    data = dynsys.simulate(system, np.ones((4, 2)), 6, process_noise=0.1, key=key)
    # The noise actually added: w_t = x_{t+1} - K x_t, independent of the state.
    w = np.asarray(data.xs[:, 1:]) - np.einsum("ij,ntj->nti", K, data.xs[:, :-1])
    assert 0.05 < w.std() < 0.15
    # The same key gives the same data.
    again = dynsys.simulate(system, np.ones((4, 2)), 6, process_noise=0.1, key=key)
    np.testing.assert_array_equal(again.xs, data.xs)


def test_simulate_measurement_noise_statistics():
    system = dynsys.LinearSystem(0.9 * np.eye(3))
    x0s = np.ones((50, 3))
    clean = dynsys.simulate(system, x0s, 40)
    noisy = dynsys.simulate(
        system, x0s, 40, measurement_noise=0.2, key=jax.random.key(1)
    )
    noise = np.asarray(noisy.xs - clean.xs)
    assert noise.std() == pytest.approx(0.2, rel=0.03)
    assert abs(noise.mean()) < 0.01


def test_simulate_errors():
    system = dynsys.LinearSystem(np.eye(2), np.ones((2, 1)))
    with pytest.raises(ValueError, match="takes inputs"):
        dynsys.simulate(system, np.ones((3, 2)), 5)
    with pytest.raises(
        ValueError, match=r"inputs must have shape \(N, T, m\) = \(3, 5, 1\)"
    ):
        dynsys.simulate(system, np.ones((3, 2)), 5, inputs=np.ones((3, 4, 1)))
    with pytest.raises(ValueError, match=r"x0s must have shape \(N, n\) = \(N, 2\)"):
        dynsys.simulate(system, np.ones((3, 3)), 5, inputs=np.ones((5, 1)))
    with pytest.raises(ValueError, match="a PRNG key is needed"):
        dynsys.simulate(
            system, np.ones((3, 2)), 5, inputs=np.ones((5, 1)), measurement_noise=0.1
        )
    with pytest.raises(ValueError, match="process_noise.*>= 0"):
        dynsys.simulate(
            system, np.ones((3, 2)), 5, inputs=np.ones((5, 1)), process_noise=-1.0
        )
    free = dynsys.LinearSystem(np.eye(2))
    with pytest.raises(ValueError, match="takes no input"):
        dynsys.simulate(free, np.ones((3, 2)), 5, inputs=np.ones((5, 1)))
    assert dynsys.simulate(
        system, jnp.ones((3, 2)), 5, inputs=np.ones((5, 1))
    ).us.shape == (3, 5, 1)
