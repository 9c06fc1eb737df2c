"""quadratic_cost and tracking_cost against plain NumPy loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def make_traj(key, batch=(3,), T=6, n=3, m=2, p=2, inputs=True):
    kx, ku, ky = jax.random.split(key, 3)
    return dynsys.Trajectory(
        ts=jnp.arange(T + 1),
        xs=jax.random.normal(kx, (*batch, T + 1, n)),
        us=jax.random.normal(ku, (*batch, T, m)) if inputs else None,
        ys=jax.random.normal(ky, (*batch, T, p)),
    )


def as_matrix(W, size):
    W = np.asarray(W, dtype=np.float64)
    if W.ndim == 0:
        return W * np.eye(size)
    if W.ndim == 1:
        return np.diag(W)
    return W


def numpy_cost(xs, us, Q, R, Q_final, reference=None):
    """Loop over trajectories and times; average over the batch."""
    xs = np.asarray(xs).reshape(-1, *xs.shape[-2:])
    n = xs.shape[-1]
    if us is not None:
        us = np.asarray(us).reshape(-1, *us.shape[-2:])
    ref = None
    if reference is not None:
        ref = np.broadcast_to(np.asarray(reference), xs.shape[-2:])
    totals = []
    for i in range(xs.shape[0]):
        total = 0.0
        for t in range(xs.shape[1] - 1):
            e = xs[i, t] - (0 if ref is None else ref[t])
            total += e @ as_matrix(Q, n) @ e
            if R is not None:
                total += us[i, t] @ as_matrix(R, us.shape[-1]) @ us[i, t]
        if Q_final is not None:
            e = xs[i, -1] - (0 if ref is None else ref[-1])
            total += e @ as_matrix(Q_final, n) @ e
        totals.append(total)
    return np.mean(totals)


WEIGHTS = {
    "scalar": 2.0,
    "diagonal": np.array([1.0, 2.0, 3.0]),
    "matrix": np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.1], [0.0, 0.1, 3.0]]),
}


@pytest.mark.parametrize("Q", WEIGHTS, ids=str)
@pytest.mark.parametrize("R", [None, 0.5, np.array([[1.0, 0.2], [0.2, 2.0]])])
@pytest.mark.parametrize("Q_final", [None, 10.0])
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_quadratic_cost_matches_numpy(getkey, Q, R, Q_final, batch):
    traj = make_traj(getkey(), batch=batch)
    Q = WEIGHTS[Q]
    cost = dynsys.quadratic_cost(traj, Q, R, Q_final=Q_final)
    assert cost.shape == ()
    np.testing.assert_allclose(
        cost, numpy_cost(traj.xs, traj.us, Q, R, Q_final), rtol=1e-12
    )


def test_quadratic_cost_closed_form_for_scalar_decay():
    """x_{t+1} = a x_t from x_0 = 1: sum_{t<T} a^(2t) = (1 - a^(2T)) / (1 - a^2)."""
    system = dynsys.LinearSystem(K=jnp.array([[0.8]]))
    traj = dynsys.rollout(system, jnp.array([1.0]), 30)
    np.testing.assert_allclose(
        dynsys.quadratic_cost(traj, 1.0, Q_final=2.0),
        (1 - 0.8**60) / (1 - 0.64) + 2.0 * 0.8**60,
        rtol=1e-12,
    )


@pytest.mark.parametrize("shape", ["constant", "trajectory", "per_batch"])
def test_tracking_cost_states(getkey, shape):
    traj = make_traj(getkey(), batch=(3,))
    reference = {
        "constant": jnp.array([1.0, -1.0, 0.5]),
        "trajectory": jax.random.normal(getkey(), (7, 3)),
        "per_batch": jax.random.normal(getkey(), (3, 7, 3)),
    }[shape]
    Q = WEIGHTS["matrix"]
    cost = dynsys.tracking_cost(traj, reference, Q, 0.3, Q_final=4.0)
    if shape == "per_batch":
        expected = np.mean(
            [
                numpy_cost(traj.xs[i], traj.us[i], Q, 0.3, 4.0, reference[i])
                for i in range(3)
            ]
        )
    else:
        expected = numpy_cost(traj.xs, traj.us, Q, 0.3, 4.0, reference)
    np.testing.assert_allclose(cost, expected, rtol=1e-12)
    # A zero reference is the regulation cost.
    np.testing.assert_allclose(
        dynsys.tracking_cost(traj, jnp.zeros(3), Q, 0.3, Q_final=4.0),
        dynsys.quadratic_cost(traj, Q, 0.3, Q_final=4.0),
        rtol=1e-12,
    )


def test_tracking_cost_outputs(getkey):
    traj = make_traj(getkey(), batch=(2,))
    reference = jnp.array([0.5, -0.5])
    cost = dynsys.tracking_cost(traj, reference, outputs=True)
    errors = np.asarray(traj.ys) - np.asarray(reference)
    np.testing.assert_allclose(
        cost, np.mean(np.sum(errors**2, axis=(-1, -2))), rtol=1e-12
    )


def test_cost_gradient_is_closed_form(getkey):
    """d/dx_t of x_t^T Q x_t averaged over a batch of B is 2 Q x_t / B."""
    traj = make_traj(getkey(), batch=(2,), inputs=False)
    Q = WEIGHTS["matrix"]
    grad = jax.grad(
        lambda xs: dynsys.quadratic_cost(
            dynsys.Trajectory(traj.ts, xs, None, traj.ys), Q
        )
    )(traj.xs)
    expected = np.einsum("ij,btj->bti", 2 * Q, np.asarray(traj.xs)) / 2
    expected[:, -1] = 0.0  # no terminal weight
    np.testing.assert_allclose(grad, expected, rtol=1e-12)


def test_cost_errors(getkey):
    traj = make_traj(getkey())
    with pytest.raises(
        ValueError,
        match=r"quadratic_cost\(Q=...\): Q must be a scalar, shape \(3,\) \(a diagonal\) or \(3, 3\), got \(2, 2\)",
    ):
        dynsys.quadratic_cost(traj, jnp.eye(2))
    with pytest.raises(
        ValueError, match=r"quadratic_cost\(R=...\): R must be a scalar, shape \(2,\)"
    ):
        dynsys.quadratic_cost(traj, 1.0, jnp.ones(3))
    with pytest.raises(ValueError, match=r"quadratic_cost\(Q_final=...\)"):
        dynsys.quadratic_cost(traj, 1.0, Q_final=jnp.ones(4))
    no_inputs = make_traj(getkey(), inputs=False)
    with pytest.raises(
        ValueError, match=r"R was given but the trajectory has no inputs"
    ):
        dynsys.quadratic_cost(no_inputs, 1.0, 1.0)
    with pytest.raises(
        ValueError,
        match=r"tracking_cost\(reference=...\): reference must have shape \(3,\), \(T, 3\) or a shape broadcasting to xs \(3, 7, 3\), got \(2,\)",
    ):
        dynsys.tracking_cost(traj, jnp.ones(2))
    with pytest.raises(ValueError, match=r"got \(\)"):
        dynsys.tracking_cost(traj, 1.0)
    with pytest.raises(
        ValueError, match=r"broadcasting to ys \(3, 6, 2\), got \(7, 2\)"
    ):
        dynsys.tracking_cost(traj, jnp.ones((7, 2)), outputs=True)
    with pytest.raises(ValueError, match=r"Q_final needs outputs=False"):
        dynsys.tracking_cost(traj, jnp.ones(2), Q_final=1.0, outputs=True)
    with pytest.raises(
        TypeError, match=r"quadratic_cost\(traj=...\): expected a Trajectory"
    ):
        dynsys.quadratic_cost(np.ones((3, 3)), 1.0)
