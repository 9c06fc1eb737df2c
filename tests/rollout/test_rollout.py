"""The rollout equals a plain Python loop, for every kind of system and batch."""

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from ..helpers import python_loop_rollout


def random_linear_system(getkey, n=3, m=2, p=2, dtype=jnp.float64, **parts):
    keys = [getkey() for _ in range(5)]
    arrays = dict(
        K=0.4 * jax.random.normal(keys[0], (n, n), dtype),
        B=jax.random.normal(keys[1], (n, m), dtype),
        C=jax.random.normal(keys[2], (p, n), dtype),
        D=jax.random.normal(keys[3], (p, m), dtype),
        offset=jax.random.normal(keys[4], (n,), dtype),
    )
    return dynsys.LinearSystem(
        **{k: v for k, v in arrays.items() if parts.get(k, True)}
    )


def numpy_linear(system):
    K = np.asarray(system.K)
    B = None if system.B is None else np.asarray(system.B)
    C = None if system.C is None else np.asarray(system.C)
    D = None if system.D is None else np.asarray(system.D)
    b = None if system.offset is None else np.asarray(system.offset)

    def step(t, x, u):
        out = K @ x
        if B is not None:
            out = out + B @ u
        return out if b is None else out + b

    def output(t, x, u):
        y = x if C is None else C @ x
        return y if D is None else y + D @ u

    return step, output


@pytest.mark.parametrize("num_steps", [1, 10, 50])
@pytest.mark.parametrize(
    "parts",
    [
        dict(B=False, C=False, D=False, offset=False),
        dict(C=False, D=False, offset=False),
        dict(),
    ],
)
def test_linear_rollout_equals_python_loop(getkey, num_steps, parts):
    system = random_linear_system(getkey, **parts)
    x0 = jax.random.normal(getkey(), (3,))
    inputs = None
    if system.input_size:
        inputs = jax.random.normal(getkey(), (num_steps, 2))
    traj = dynsys.rollout(system, x0, num_steps, inputs=inputs)
    step, output = numpy_linear(system)
    xs, us, ys = python_loop_rollout(
        step,
        output,
        None,
        x0,
        num_steps,
        None if inputs is None else np.asarray(inputs),
    )
    np.testing.assert_allclose(traj.xs, xs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traj.ys, ys, rtol=1e-12, atol=1e-12)
    if inputs is None:
        assert traj.us is None
    else:
        np.testing.assert_array_equal(traj.us, inputs)
    np.testing.assert_array_equal(traj.ts, np.arange(num_steps + 1))


def test_closed_loop_with_open_loop_inputs_equals_python_loop(getkey):
    system = random_linear_system(getkey, C=False, D=False)
    gain = 0.3 * jax.random.normal(getkey(), (2, 3))
    controller = dynsys.LinearFeedback(gain)
    x0 = jax.random.normal(getkey(), (3,))
    inputs = jax.random.normal(getkey(), (20, 2))
    traj = dynsys.rollout(system, x0, 20, controller=controller, inputs=inputs)
    step, output = numpy_linear(system)
    G = np.asarray(gain)
    xs, us, ys = python_loop_rollout(
        step, output, lambda t, x: -G @ x, x0, 20, np.asarray(inputs)
    )
    np.testing.assert_allclose(traj.xs, xs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traj.us, us, rtol=1e-12, atol=1e-12)


def test_nonlinear_pendulum_equals_python_loop(getkey):
    pendulum = zoo.Pendulum(damping=0.3, dt=0.05)
    g, length, c, dt = 9.81, 1.0, 0.3, 0.05

    def step(t, x, u):
        omega = x[1] + dt * (-g / length * np.sin(x[0]) - c * x[1] + u[0])
        return np.array([x[0] + dt * omega, omega])

    controller = dynsys.LinearFeedback(jnp.array([[2.0, 0.5]]))
    x0 = jnp.array([2.5, 0.0])
    traj = dynsys.rollout(pendulum, x0, 40, controller=controller)
    xs, us, _ = python_loop_rollout(
        step, lambda t, x, u: x, lambda t, x: -np.array([[2.0, 0.5]]) @ x, x0, 40
    )
    np.testing.assert_allclose(traj.xs, xs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traj.us, us, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traj.ts, 0.05 * np.arange(41), rtol=1e-12)


class TimeVarying(dynsys.AbstractSystem):
    """x_{t+1} = x_t * cos(t) + u_t: checks that the step sees the right times."""

    state_size: int = eqx.field(static=True, default=1)
    input_size: int = eqx.field(static=True, default=1)

    def step(self, t, x, u):
        return x * jnp.cos(t) + u


def test_times_start_at_t0():
    inputs = jnp.linspace(-1.0, 1.0, 12).reshape(12, 1)
    traj = dynsys.rollout(TimeVarying(), jnp.array([0.5]), 12, inputs=inputs, t0=3)
    xs, _, _ = python_loop_rollout(
        lambda t, x, u: x * np.cos(t) + u,
        lambda t, x, u: x,
        None,
        [0.5],
        12,
        np.asarray(inputs),
        t0=3,
    )
    np.testing.assert_allclose(traj.xs, xs, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(traj.ts, 3 + np.arange(13))


@pytest.mark.parametrize(
    "x0_batch, inputs_batch, expected",
    [
        ((), (), ()),
        ((5,), (), (5,)),
        ((), (4,), (4,)),
        ((2, 3), (3,), (2, 3)),
        ((2, 1), (1, 4), (2, 4)),
    ],
)
def test_batch_dimensions_broadcast(getkey, x0_batch, inputs_batch, expected):
    system = random_linear_system(getkey, offset=False)
    x0 = jax.random.normal(getkey(), x0_batch + (3,))
    inputs = jax.random.normal(getkey(), inputs_batch + (7, 2))
    traj = dynsys.rollout(system, x0, 7, inputs=inputs)
    assert traj.xs.shape == expected + (8, 3)
    assert traj.us.shape == expected + (7, 2)
    assert traj.ys.shape == expected + (7, 2)
    assert traj.ts.shape == (8,)
    assert traj.batch_shape == expected and traj.num_steps == 7
    x0_full = jnp.broadcast_to(x0, expected + (3,)).reshape(-1, 3)
    inputs_full = jnp.broadcast_to(inputs, expected + (7, 2)).reshape(-1, 7, 2)
    for i in range(x0_full.shape[0]):
        single = dynsys.rollout(system, x0_full[i], 7, inputs=inputs_full[i])
        np.testing.assert_allclose(
            traj.xs.reshape(-1, 8, 3)[i], single.xs, rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_dtype_is_preserved(getkey, dtype):
    system = random_linear_system(getkey, dtype=dtype)
    x0 = jnp.ones(3, dtype)
    inputs = jnp.ones((5, 2), dtype)
    traj = dynsys.rollout(system, x0, 5, inputs=inputs)
    assert traj.xs.dtype == dtype and traj.ys.dtype == dtype and traj.us.dtype == dtype
    grad = jax.grad(lambda s: jnp.sum(dynsys.rollout(s, x0, 5, inputs=inputs).xs))(
        system
    )
    assert grad.K.dtype == dtype


def test_integer_x0_becomes_float():
    system = dynsys.LinearSystem(K=jnp.eye(2) * 0.5)
    traj = dynsys.rollout(system, jnp.array([1, 2]), 3)
    assert jnp.issubdtype(traj.xs.dtype, jnp.floating)
    np.testing.assert_allclose(traj.xs[-1], [0.125, 0.25])


def test_float32_state_with_float64_system_promotes():
    system = dynsys.LinearSystem(K=jnp.eye(2, dtype=jnp.float64))
    traj = dynsys.rollout(system, jnp.ones(2, jnp.float32), 3)
    assert traj.xs.dtype == jnp.float64


def test_zero_steps(getkey):
    system = random_linear_system(getkey)
    traj = dynsys.rollout(system, jnp.ones(3), 0, inputs=jnp.zeros((0, 2)))
    assert traj.xs.shape == (1, 3) and traj.us.shape == (0, 2)
    assert traj.ys.shape == (0, 2)
    np.testing.assert_array_equal(traj.xs[0], jnp.ones(3))


def test_works_under_jit_and_vmap(getkey):
    system = random_linear_system(getkey)
    x0s = jax.random.normal(getkey(), (6, 3))
    inputs = jax.random.normal(getkey(), (9, 2))

    @eqx.filter_jit
    def final_states(system, x0s):
        return jax.vmap(lambda x0: dynsys.rollout(system, x0, 9, inputs=inputs).xs)(x0s)

    batched = dynsys.rollout(system, x0s, 9, inputs=inputs).xs
    np.testing.assert_allclose(final_states(system, x0s), batched, rtol=1e-12)


def test_no_retracing_for_new_values(getkey):
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def loss(system, x0):
        return jnp.sum(dynsys.rollout(system, x0, 20).xs ** 2)

    for _ in range(3):
        system = dynsys.LinearSystem(K=0.5 * jax.random.normal(getkey(), (3, 3)))
        loss(system, jax.random.normal(getkey(), (3,)))


@pytest.mark.parametrize(
    "method", [dynsys.Sequential(), dynsys.Chunked(16)], ids=["sequential", "chunked"]
)
def test_program_size_does_not_grow_with_num_steps(method):
    """The compiled gradient for 100,000 steps is the same program as for 10 steps.

    (The default method may differ between a short and a long horizon, so each
    method is pinned here.)
    """
    system = dynsys.LinearSystem(K=0.5 * jnp.eye(3))

    def program(num_steps):
        def loss(system, x0):
            return jnp.sum(dynsys.rollout(system, x0, num_steps, method=method).xs)

        lowered = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(system, jnp.ones(3))
        text = lowered.as_text()
        # Only the trip count and array lengths differ between the two programs.
        return len(text.splitlines())

    assert program(10) == program(100_000)
