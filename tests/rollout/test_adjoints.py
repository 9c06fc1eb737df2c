"""Every adjoint gives Autodiff's gradients (float64, 1e-10); Checkpointed saves memory."""

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys

from .test_methods import assert_trees_close, CASES, grad_loss, make_case


LINEAR = [
    (dynsys.Sequential(), dynsys.LinearAdjoint()),
    (dynsys.Parallel(), dynsys.LinearAdjoint()),
    (dynsys.Chunked(4), dynsys.LinearAdjoint()),
    (dynsys.Sequential(), dynsys.Checkpointed()),
    (dynsys.Sequential(), dynsys.Checkpointed(1)),
    (dynsys.Sequential(), dynsys.Checkpointed(5)),
    (dynsys.Sequential(), dynsys.Checkpointed(100)),
    (dynsys.Chunked(3), dynsys.Checkpointed(2)),
]
LINEAR_IDS = [
    "seq-linear",
    "parallel-linear",
    "chunked-linear",
    "seq-ckpt",
    "seq-ckpt1",
    "seq-ckpt5",
    "seq-ckpt100",
    "chunked-ckpt2",
]


@pytest.mark.parametrize("method, adjoint", LINEAR, ids=LINEAR_IDS)
@pytest.mark.parametrize("case", CASES)
def test_linear_gradients_equal_autodiff(getkey, method, adjoint, case):
    arrays = make_case(getkey, case, 13)
    got = grad_loss(arrays, 13, method, adjoint)
    want = grad_loss(arrays, 13, dynsys.Sequential(), dynsys.Autodiff())
    assert_trees_close(got, want)


@pytest.mark.parametrize("method, adjoint", LINEAR[:4], ids=LINEAR_IDS[:4])
@pytest.mark.parametrize("batch", [(3,), (2, 2)])
def test_batched_gradients_equal_autodiff(getkey, method, adjoint, batch):
    arrays = make_case(getkey, "feedback", 12, batch)
    got = grad_loss(arrays, 12, method, adjoint)
    want = grad_loss(arrays, 12, dynsys.Sequential(), dynsys.Autodiff())
    assert_trees_close(got, want)


@pytest.mark.parametrize("method", [dynsys.Sequential(), dynsys.Chunked(4)])
def test_linear_adjoint_broadcast_inputs(getkey, method):
    """Shared inputs over a batch of x0: their gradient sums over the batch."""
    arrays = make_case(getkey, "feedback", 10)
    arrays["x0"] = jax.random.normal(getkey(), (4, 3))
    got = grad_loss(arrays, 10, method, dynsys.LinearAdjoint())
    want = grad_loss(arrays, 10, dynsys.Sequential(), dynsys.Autodiff())
    assert_trees_close(got, want)


def test_linear_adjoint_chunked_large_steps(getkey):
    """Chunked + LinearAdjoint with large steps (N n^2 > 65536): the adjoint
    recurrence is solved by the batched scan; same gradients as Autodiff."""
    K = 0.3 * jax.random.normal(getkey(), (10, 10))
    x0 = jax.random.normal(getkey(), (700, 10))
    target = jax.random.normal(getkey(), (700, 12, 10))

    def f(K, x0, method, adjoint):
        traj = dynsys.rollout(
            dynsys.LinearSystem(K), x0, 11, method=method, adjoint=adjoint
        )
        return jnp.mean((traj.xs - target) ** 2)

    got = jax.grad(f, argnums=(0, 1))(K, x0, dynsys.Chunked(4), dynsys.LinearAdjoint())
    want = jax.grad(f, argnums=(0, 1))(K, x0, dynsys.Sequential(), dynsys.Autodiff())
    assert_trees_close(got, want)


@pytest.mark.parametrize("num_steps", [0, 1, 30])
def test_linear_adjoint_closed_form(getkey, num_steps):
    """d sum(x_T) / d x0 = (K^T)^T 1 and d sum(x_T) / dK = sum_t lambda_{t+1} x_t^T."""
    K = 0.5 * jax.random.normal(getkey(), (3, 3))
    x0 = jax.random.normal(getkey(), (3,))

    def f(K, x0):
        traj = dynsys.rollout(
            dynsys.LinearSystem(K), x0, num_steps, adjoint=dynsys.LinearAdjoint()
        )
        return jnp.sum(traj.xs[-1])

    dK, dx0 = jax.jit(jax.grad(f, argnums=(0, 1)))(K, x0)
    Kn = np.asarray(K)
    lambdas = [
        np.linalg.matrix_power(Kn.T, num_steps - t) @ np.ones(3)
        for t in range(num_steps + 1)
    ]
    xs = [np.linalg.matrix_power(Kn, t) @ np.asarray(x0) for t in range(num_steps + 1)]
    ref_dK = sum(
        (np.outer(lambdas[t + 1], xs[t]) for t in range(num_steps)), np.zeros((3, 3))
    )
    np.testing.assert_allclose(dx0, lambdas[0], rtol=1e-11)
    np.testing.assert_allclose(dK, ref_dK, rtol=1e-11, atol=1e-14)


def test_checkpointed_nonlinear_with_mlp_controller(getkey):
    """Checkpointed on a nonlinear system and a neural controller: Autodiff's gradients."""
    system = zoo.Pendulum()
    controller = dynsys.MLPController(2, 1, width_size=8, depth=2, key=getkey())
    x0 = jax.random.normal(getkey(), (3, 2))

    def f(model, adjoint):
        system, controller = model
        traj = dynsys.rollout(system, x0, 23, controller=controller, adjoint=adjoint)
        return jnp.mean(traj.xs**2) + jnp.mean(traj.us**2)

    model = (system, controller)
    want = eqx.filter_grad(f)(model, dynsys.Autodiff())
    for adjoint in [
        dynsys.Checkpointed(),
        dynsys.Checkpointed(4),
        dynsys.Checkpointed(1),
    ]:
        assert_trees_close(eqx.filter_grad(f)(model, adjoint), want)


@pytest.mark.usefixtures("no_persistent_cache")  # counts or times compilations
def test_checkpointed_bounds_memory(getkey):
    """Recomputation: far less temporary memory than Autodiff for a neural controller."""
    system = dynsys.LinearSystem(0.9 * jnp.eye(4), jnp.ones((4, 2)))
    controller = dynsys.MLPController(4, 2, width_size=32, depth=2, key=getkey())
    x0 = jax.random.normal(getkey(), (8, 4))

    def temp_bytes(adjoint):
        def f(controller):
            traj = dynsys.rollout(
                system, x0, 400, controller=controller, adjoint=adjoint
            )
            return jnp.mean(traj.xs**2)

        params, static = eqx.partition(controller, eqx.is_array)
        grad = jax.jit(jax.grad(lambda p: f(eqx.combine(p, static))))
        compiled = grad.lower(params).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    autodiff, checkpointed = (
        temp_bytes(dynsys.Autodiff()),
        temp_bytes(dynsys.Checkpointed()),
    )
    assert checkpointed < 0.5 * autodiff, (checkpointed, autodiff)


def test_linear_adjoint_float32(getkey):
    K = 0.3 * jax.random.normal(getkey(), (3, 3))
    x0 = jax.random.normal(getkey(), (3,))

    def f(K, x0, adjoint):
        traj = dynsys.rollout(dynsys.LinearSystem(K), x0, 40, adjoint=adjoint)
        return jnp.sum(traj.xs**2)

    g32 = jax.grad(f, argnums=(0, 1))(
        K.astype(jnp.float32), x0.astype(jnp.float32), dynsys.LinearAdjoint()
    )
    g64 = jax.grad(f, argnums=(0, 1))(K, x0, dynsys.Autodiff())
    assert g32[0].dtype == jnp.float32 and g32[1].dtype == jnp.float32
    assert_trees_close(g32, g64, rtol=1e-4, atol=1e-5)


def test_linear_adjoint_rejects_nonlinear_system():
    with pytest.raises(
        ValueError,
        match=r"adjoint=LinearAdjoint\(\)\): LinearAdjoint\(\) needs a LinearSystem.*got Pendulum",
    ):
        dynsys.rollout(
            zoo.Pendulum(),
            jnp.zeros(2),
            5,
            inputs=jnp.zeros((5, 1)),
            adjoint=dynsys.LinearAdjoint(),
        )


def test_linear_adjoint_rejects_nonlinear_controller():
    system = dynsys.LinearSystem(0.5 * jnp.eye(2), jnp.ones((2, 1)))
    mlp = dynsys.MLPController(2, 1, width_size=4, depth=1, key=jax.random.key(0))
    with pytest.raises(
        ValueError,
        match=r"LinearAdjoint\(\) needs open-loop inputs or a LinearFeedback",
    ):
        dynsys.rollout(
            system, jnp.zeros(2), 5, controller=mlp, adjoint=dynsys.LinearAdjoint()
        )


@pytest.mark.parametrize("segment_length", [0, -1, 1.5, True])
def test_checkpointed_segment_length_must_be_positive(segment_length):
    with pytest.raises(
        ValueError,
        match=r"Checkpointed\(segment_length=...\): segment_length must be a positive integer",
    ):
        dynsys.Checkpointed(segment_length)
