"""Parallel and Chunked agree with Sequential (values and gradients, float64)."""

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._rollout.method import default_chunk_size, default_method

from ..helpers import python_loop_rollout


METHODS = [dynsys.Parallel(), dynsys.Chunked(1), dynsys.Chunked(4), dynsys.Chunked(7)]
IDS = ["parallel", "chunked1", "chunked4", "chunked7"]
# Which arrays each case has: K only; inputs; every part; feedback with everything.
CASES = ["autonomous", "inputs", "affine", "feedback"]


def make_case(getkey, case, num_steps, batch=()):
    n, m, p = 3, 2, 2
    arrays = dict(
        K=0.4 * jax.random.normal(getkey(), (n, n)),
        x0=jax.random.normal(getkey(), batch + (n,)),
    )
    if case != "autonomous":
        arrays["B"] = jax.random.normal(getkey(), (n, m))
        arrays["inputs"] = jax.random.normal(getkey(), batch + (num_steps, m))
    if case in ("affine", "feedback"):
        arrays["C"] = jax.random.normal(getkey(), (p, n))
        arrays["D"] = jax.random.normal(getkey(), (p, m))
        arrays["offset"] = jax.random.normal(getkey(), (n,))
    if case == "feedback":
        arrays["gain"] = 0.2 * jax.random.normal(getkey(), (m, n))
    return arrays


@eqx.filter_jit
def run(arrays, num_steps, method, adjoint=dynsys.Autodiff()):
    system = dynsys.LinearSystem(
        arrays["K"],
        arrays.get("B"),
        arrays.get("C"),
        arrays.get("D"),
        arrays.get("offset"),
    )
    gain = arrays.get("gain")
    controller = None if gain is None else dynsys.LinearFeedback(gain)
    return dynsys.rollout(
        system,
        arrays["x0"],
        num_steps,
        controller=controller,
        inputs=arrays.get("inputs"),
        method=method,
        adjoint=adjoint,
    )


def loss(arrays, num_steps, method, adjoint=dynsys.Autodiff()):
    traj = run(arrays, num_steps, method, adjoint)
    value = jnp.mean(traj.xs**2) + jnp.mean(jnp.sin(traj.ys))
    if traj.us is not None:
        value = value + jnp.mean(traj.us**2)
    return value


# Jitted (num_steps, method and adjoint are static): one compilation per case
# instead of op-by-op dispatch of every primitive.
grad_loss = eqx.filter_jit(jax.grad(loss))


def assert_trees_close(got, want, rtol=1e-10, atol=1e-12):
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)
    ):
        np.testing.assert_allclose(
            a, b, rtol=rtol, atol=atol, err_msg=jax.tree_util.keystr(path)
        )


@pytest.mark.parametrize("method", METHODS, ids=IDS)
@pytest.mark.parametrize(
    "case, num_steps",
    [("autonomous", 0), ("feedback", 1), *((case, 20) for case in CASES)],
)
def test_values_equal_sequential(getkey, method, case, num_steps):
    arrays = make_case(getkey, case, num_steps)
    got = run(arrays, num_steps, method)
    want = run(arrays, num_steps, dynsys.Sequential())
    assert got.xs.shape == want.xs.shape and got.ys.shape == want.ys.shape
    assert_trees_close(got, want)


@pytest.mark.parametrize(
    "method, case, batch",
    [
        *(
            (METHODS[i], case, batch)
            for i in (0, 2)
            for case in CASES
            for batch in [(), (2, 2)]
        ),
        (METHODS[1], "feedback", (3,)),
        (METHODS[3], "feedback", (3,)),
        (METHODS[3], "affine", ()),
    ],
)
def test_gradients_equal_sequential(getkey, method, case, batch):
    arrays = make_case(getkey, case, 13, batch)
    got = grad_loss(arrays, 13, method)
    want = grad_loss(arrays, 13, dynsys.Sequential())
    assert_trees_close(got, want)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_broadcast_inputs_and_batched_x0(getkey, method):
    """One input sequence shared by a batch of initial states, and the reverse."""
    arrays = make_case(getkey, "feedback", 11)
    arrays["x0"] = jax.random.normal(getkey(), (4, 3))
    assert_trees_close(
        grad_loss(arrays, 11, method),
        grad_loss(arrays, 11, dynsys.Sequential()),
    )
    arrays["x0"] = arrays["x0"][0]
    arrays["inputs"] = jax.random.normal(getkey(), (4, 11, 2))
    assert_trees_close(run(arrays, 11, method), run(arrays, 11, dynsys.Sequential()))


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_equals_python_loop(getkey, method):
    arrays = make_case(getkey, "feedback", 17)
    traj = run(arrays, 17, method)
    K, B, C, D = (np.asarray(arrays[k]) for k in "KBCD")
    offset, gain = np.asarray(arrays["offset"]), np.asarray(arrays["gain"])
    xs, us, ys = python_loop_rollout(
        lambda t, x, u: K @ x + B @ u + offset,
        lambda t, x, u: C @ x + D @ u,
        lambda t, x: -gain @ x,
        arrays["x0"],
        17,
        inputs=np.asarray(arrays["inputs"]),
    )
    np.testing.assert_allclose(traj.xs, xs, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(traj.us, us, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(traj.ys, ys, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("num_steps", [10, 201, 1000])
@pytest.mark.parametrize(
    "method",
    [None, dynsys.Sequential(), *METHODS],
    ids=["default", "sequential", *IDS],
)
@pytest.mark.parametrize("with_inputs", [False, True], ids=["offset", "offset+inputs"])
def test_offset_at_long_horizons_equals_python_loop(
    getkey, method, num_steps, with_inputs
):
    """An offset alone (no inputs, no feedback) once crashed the chunked solver past
    about 100 steps, the horizon from which the default picks it."""
    n, m = 3, 2
    K = 0.5 * jnp.eye(n) + 0.1 * jax.random.normal(getkey(), (n, n))
    offset = jax.random.normal(getkey(), (n,))
    B = jax.random.normal(getkey(), (n, m)) if with_inputs else None
    inputs = jax.random.normal(getkey(), (2, num_steps, m)) if with_inputs else None
    x0 = jax.random.normal(getkey(), (2, n))
    system = dynsys.LinearSystem(K, B, offset=offset)
    kwargs = {} if method is None else {"method": method}
    traj = dynsys.rollout(system, x0, num_steps, inputs=inputs, **kwargs)
    for i in range(2):
        u = None if inputs is None else np.asarray(inputs[i])
        xs, _, _ = python_loop_rollout(
            lambda t, x, u: (
                np.asarray(K) @ x
                + (0 if u is None else np.asarray(B) @ u)
                + np.asarray(offset)
            ),
            lambda t, x, u: x,
            None,
            x0[i],
            num_steps,
            inputs=u,
        )
        np.testing.assert_allclose(traj.xs[i], xs, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_under_jit_and_vmap(getkey, method):
    arrays = make_case(getkey, "inputs", 9)
    x0s = jax.random.normal(getkey(), (5, 3))
    f = jax.jit(jax.vmap(lambda x0: run({**arrays, "x0": x0}, 9, method).xs))
    np.testing.assert_allclose(
        f(x0s), run({**arrays, "x0": x0s}, 9, dynsys.Sequential()).xs, rtol=1e-10
    )


@pytest.mark.parametrize("size", [3, 8])
def test_chunked_unstable_system_float64(getkey, size):
    """Powers of K with norm > 1: still exact in float64 for a moderate horizon."""
    K = 1.05 * jnp.linalg.qr(jax.random.normal(getkey(), (4, 4)))[0]
    x0 = jax.random.normal(getkey(), (4,))
    system = dynsys.LinearSystem(K)
    got = dynsys.rollout(system, x0, 60, method=dynsys.Chunked(size)).xs
    want = dynsys.rollout(system, x0, 60, method=dynsys.Sequential()).xs
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_chunked_float32(getkey):
    K = 0.9 * jnp.linalg.qr(jax.random.normal(getkey(), (4, 4)))[0]
    x0 = jax.random.normal(getkey(), (2, 4))
    system32 = dynsys.LinearSystem(K.astype(jnp.float32))
    got = dynsys.rollout(
        system32, x0.astype(jnp.float32), 200, method=dynsys.Chunked(16)
    )
    want = dynsys.rollout(dynsys.LinearSystem(K), x0, 200, method=dynsys.Sequential())
    assert got.xs.dtype == jnp.float32
    np.testing.assert_allclose(got.xs, want.xs, rtol=1e-4, atol=1e-5)


def test_default_method_rule():
    linear = dynsys.LinearSystem(0.5 * jnp.eye(3), jnp.ones((3, 1)))
    autodiff = dynsys.Autodiff()
    assert default_method(linear, None, True, autodiff, 10) == dynsys.Sequential()
    chosen = default_method(linear, None, True, autodiff, 10_000)
    assert isinstance(chosen, dynsys.Chunked) and 1 < chosen.size <= 100
    feedback = dynsys.LinearFeedback(jnp.ones((1, 3)))
    assert isinstance(
        default_method(linear, feedback, False, autodiff, 1000), dynsys.Chunked
    )
    mlp = dynsys.MLPController(3, 1, width_size=4, depth=1, key=jax.random.key(0))
    assert default_method(linear, mlp, False, autodiff, 1000) == dynsys.Sequential()
    # Without inputs: chunked, also for large batches (the same multiply-adds in a
    # few large products), with a size that divides T+1 = 1001 = 7 * 11 * 13.
    big = dynsys.LinearSystem(jnp.eye(32))
    assert default_method(big, None, False, autodiff, 1000, 1024) == dynsys.Chunked(143)
    assert default_method(big, None, False, autodiff, 1000, 16) == dynsys.Chunked(13)
    # With a few inputs: chunked at any batch size (the input term is m-wide), at
    # most sqrt(T) = 31 here.
    big_b = dynsys.LinearSystem(jnp.eye(32), jnp.ones((32, 1)))
    assert default_method(big_b, None, True, autodiff, 1000, 1024) == dynsys.Chunked(31)
    # As many inputs as states: the Toeplitz term would cost more than the scan.
    square = dynsys.LinearSystem(jnp.eye(32), jnp.ones((32, 32)))
    assert default_method(square, None, True, autodiff, 1000, 64) == dynsys.Sequential()
    # ...unless the batched steps are tiny (they then cost mostly loop overhead).
    tiny = dynsys.LinearSystem(jnp.eye(4), jnp.ones((4, 4)))
    assert default_method(tiny, None, True, autodiff, 1000, 4) == dynsys.Chunked(4)
    # A large state and one trajectory: the powers would cost more than the scan.
    huge = dynsys.LinearSystem(jnp.eye(256))
    assert default_method(huge, None, False, autodiff, 1000) == dynsys.Sequential()
    pendulum = zoo.Pendulum()
    assert default_method(pendulum, None, True, autodiff, 1000) == dynsys.Sequential()


@pytest.mark.parametrize(
    "n, num_steps, has_inputs, batch, m, want",
    [
        (32, 1000, False, 1024, 0, 143),  # ideal 179; divisors of 1001: 77, 91, 143
        (256, 2000, False, 16, 0, 23),  # ideal 11; divisors of 2001: 3, 23, 29
        (3, 100_000, False, 1, 0, 182),  # ideal 182; 100001 = 11 * 9091: padded
        (3, 10_000, True, 1, 1, 6),  # ideal 57, capped at 2 n / m = 6
        (3, 10_000, True, 4, 5, 4),  # 2 n / m = 1, but tiny steps: 4
        (300, 100, True, 1, 1, 1),  # ideal sqrt(101/300) < 1
        # The reported case (64 x 1000 steps, 32 states, 4 inputs): capped at
        # 2 n^2 / (m n) = 16, then the divisor 13 of 1001.
        (32, 1000, True, 64, 4, 13),
        (32, 1000, True, 1, 4, 7),  # one trajectory: ideal sqrt(1001/32) = 5 -> 7
        (256, 2000, True, 16, 4, 11),  # no divisor of 2001 within 2x of 11
        (8, 1000, True, 64, 8, 4),  # 2 n / m = 2, but N n^2 = 4096 is tiny: 4
        (32, 1000, True, 64, 32, 2),  # capped at 2: chunking does not pay
        (32, 1000, True, 1024, 1, 31),  # sqrt(T); no divisor of 1001 in 16..31
    ],
)
def test_default_chunk_size(n, num_steps, has_inputs, batch, m, want):
    got = default_chunk_size(n, num_steps, has_inputs, batch, input_size=m)
    assert got == want


@pytest.mark.parametrize(
    "adjoint", [dynsys.Autodiff(), dynsys.LinearAdjoint()], ids=["autodiff", "linear"]
)
@pytest.mark.parametrize("case", ["inputs", "affine", "feedback", "wide"])
def test_default_with_inputs_equals_sequential(getkey, case, adjoint):
    """With inputs the default is `Chunked`, whose input term goes through the
    m-wide blocks (M^k B)^T: values and gradients (K, B, C, D, offset, gain, x0 and
    the inputs) equal Sequential's in float64; also with more inputs than states
    ("wide") and a chunk size that does not divide T+1 = 101 (4: tiny steps)."""
    num_steps, batch = 100, (4,)
    arrays = make_case(getkey, "affine" if case == "wide" else case, num_steps, batch)
    if case == "wide":
        arrays["B"] = jax.random.normal(getkey(), (3, 5))
        arrays["D"] = jax.random.normal(getkey(), (2, 5))
        arrays["inputs"] = jax.random.normal(getkey(), batch + (num_steps, 5))
    system = dynsys.LinearSystem(arrays["K"], arrays["B"])
    method = default_method(system, None, True, adjoint, num_steps, 4)
    assert method == dynsys.Chunked(4)
    assert_trees_close(
        run(arrays, num_steps, None, adjoint),
        run(arrays, num_steps, dynsys.Sequential()),
    )
    assert_trees_close(
        grad_loss(arrays, num_steps, None, adjoint),
        grad_loss(arrays, num_steps, dynsys.Sequential()),
    )


def test_factored_input_term_equals_dense(getkey):
    """The chunked solver gives the same states whether the input term B w_t comes
    as its factors (m-wide Toeplitz) or multiplied out (n-wide Toeplitz)."""
    from dynsys._rollout.affine import _chunked_solve_batch, _dense, Factored

    M = 0.4 * jax.random.normal(getkey(), (3, 3))
    x0 = jax.random.normal(getkey(), (2, 3))
    term = Factored(
        jax.random.normal(getkey(), (2, 30, 2)), jax.random.normal(getkey(), (3, 2))
    )
    offset = jax.random.normal(getkey(), (3,))
    for size in (1, 4, 7, 31):
        got = _chunked_solve_batch(jax.lax.scan, size, M, x0, term, offset, 30)
        want = _chunked_solve_batch(jax.lax.scan, size, M, x0, _dense(term), offset, 30)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _bare_scan_loss(arrays, num_steps):
    """`loss` of a hand-written scan over `x_{t+1} = K x_t + B u_t + offset`."""
    K, B, C, D, offset = (arrays[k] for k in ("K", "B", "C", "D", "offset"))
    x0, inputs = arrays["x0"], arrays["inputs"]
    inputs = jnp.broadcast_to(inputs, x0.shape[:-1] + inputs.shape[-2:])

    def body(x, u):
        return x @ K.T + u @ B.T + offset[None], x

    final, before = jax.lax.scan(body, x0, jnp.moveaxis(inputs, -2, 0))
    before = jnp.moveaxis(before, 0, -2)
    xs = jnp.concatenate([before, final[..., None, :]], axis=-2)
    ys = before @ C.T + inputs @ D.T
    return jnp.mean(xs**2) + jnp.mean(jnp.sin(ys)) + jnp.mean(inputs**2)


@pytest.mark.parametrize("shared_inputs", [False, True])
@pytest.mark.parametrize("batch, n", [(4, 3), (32, 32)])
def test_sequential_batched_inputs(getkey, batch, n, shared_inputs):
    """Sequential with open-loop inputs for a batch, with small steps (the input
    term multiplied out before the scan) and large ones (`u_t @ B^T` in the scan):
    states against a Python loop, gradients against a hand-written scan."""
    m, p, num_steps = 2, 2, 6
    arrays = dict(
        K=0.4 * jax.random.normal(getkey(), (n, n)) / np.sqrt(n),
        B=jax.random.normal(getkey(), (n, m)),
        C=jax.random.normal(getkey(), (p, n)),
        D=jax.random.normal(getkey(), (p, m)),
        offset=jax.random.normal(getkey(), (n,)),
        x0=jax.random.normal(getkey(), (batch, n)),
    )
    input_batch = 1 if shared_inputs else batch
    arrays["inputs"] = jax.random.normal(getkey(), (input_batch, num_steps, m))
    traj = run(arrays, num_steps, dynsys.Sequential())
    K, B, C, D, offset = (np.asarray(arrays[k]) for k in ("K", "B", "C", "D", "offset"))
    for i in range(batch):
        xs, _, ys = python_loop_rollout(
            lambda t, x, u: K @ x + B @ u + offset,
            lambda t, x, u: C @ x + D @ u,
            None,
            arrays["x0"][i],
            num_steps,
            inputs=np.asarray(arrays["inputs"][0 if shared_inputs else i]),
        )
        np.testing.assert_allclose(traj.xs[i], xs, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(traj.ys[i], ys, rtol=1e-10, atol=1e-12)
    assert_trees_close(
        grad_loss(arrays, num_steps, dynsys.Sequential()),
        jax.grad(_bare_scan_loss)(arrays, num_steps),
    )


@pytest.mark.usefixtures("no_persistent_cache")  # counts or times compilations
def test_default_gradient_memory_below_sequential(getkey):
    """Chunked autodiff keeps only the chunk starts and the powers of K for the
    reverse pass, not the trajectory: less temporary memory than the scan."""
    K = 0.3 * jax.random.normal(getkey(), (4, 4))
    x0 = jax.random.normal(getkey(), (64, 4))
    target = jnp.zeros((64, 200, 4))

    def temp_bytes(method):
        def f(K, x0, target):
            traj = dynsys.rollout(dynsys.LinearSystem(K), x0, 199, method=method)
            return jnp.mean((traj.xs - target) ** 2)

        grad = jax.jit(jax.grad(f, argnums=(0, 1)))
        return grad.lower(K, x0, target).compile().memory_analysis().temp_size_in_bytes

    assert default_method(dynsys.LinearSystem(K), None, False, None, 199, 64) == (
        dynsys.Chunked(50)
    )
    assert temp_bytes(None) < 0.75 * temp_bytes(dynsys.Sequential())


def test_default_method_is_exact_for_a_long_horizon(getkey):
    """The default (chunked for a long horizon) gives Sequential's gradients."""
    K = 0.3 * jax.random.normal(getkey(), (3, 3))
    x0 = jax.random.normal(getkey(), (2, 3))

    def f(K, method):
        return jnp.sum(
            dynsys.rollout(dynsys.LinearSystem(K), x0, 500, method=method).xs ** 2
        )

    np.testing.assert_allclose(
        jax.grad(f)(K, None), jax.grad(f)(K, dynsys.Sequential()), rtol=1e-10
    )


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_nonlinear_system_is_rejected(method):
    name = "Parallel" if isinstance(method, dynsys.Parallel) else "Chunked"
    with pytest.raises(
        ValueError,
        match=rf"method={name}\(\d*\)\): {name}\(\d*\) needs a LinearSystem.*got Pendulum",
    ):
        dynsys.rollout(
            zoo.Pendulum(), jnp.zeros(2), 5, inputs=jnp.zeros((5, 1)), method=method
        )


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_nonlinear_controller_is_rejected(method):
    system = dynsys.LinearSystem(0.5 * jnp.eye(2), jnp.ones((2, 1)))
    mlp = dynsys.MLPController(2, 1, width_size=4, depth=1, key=jax.random.key(0))
    with pytest.raises(
        ValueError,
        match="needs open-loop inputs or a LinearFeedback.*got MLPController",
    ):
        dynsys.rollout(system, jnp.zeros(2), 5, controller=mlp, method=method)


def test_parallel_rejects_checkpointed():
    system = dynsys.LinearSystem(0.5 * jnp.eye(2))
    with pytest.raises(
        ValueError, match=r"method=Parallel\(\)\): Checkpointed\(\) recomputes"
    ):
        dynsys.rollout(
            system,
            jnp.ones(2),
            5,
            method=dynsys.Parallel(),
            adjoint=dynsys.Checkpointed(),
        )


@pytest.mark.parametrize("size", [0, -3, 2.5, True, "4"])
def test_chunk_size_must_be_positive_integer(size):
    with pytest.raises(
        ValueError, match=r"Chunked\(size=...\): size must be a positive integer"
    ):
        dynsys.Chunked(size)


def test_errors_under_jit():
    system = dynsys.LinearSystem(0.5 * jnp.eye(2), jnp.ones((2, 1)))
    mlp = dynsys.MLPController(2, 1, width_size=4, depth=1, key=jax.random.key(0))

    @eqx.filter_jit
    def f(x0):
        return dynsys.rollout(
            system, x0, 5, controller=mlp, method=dynsys.Parallel()
        ).xs

    with pytest.raises(ValueError, match=r"Parallel\(\) needs open-loop inputs"):
        f(jnp.zeros(2))
