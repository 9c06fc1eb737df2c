"""Continuous-time systems against independent references.

ZOH against an eigen-decomposition and a Taylor series in NumPy; bilinear and Euler
against their formulas; `Sampled` against the analytic solution of a forced harmonic
oscillator and against a fine fixed-step RK4 written here in NumPy; gradients against
float64 finite differences and method against method.
"""

import math

import diffrax
import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dynsys

from ..helpers import finite_difference_gradient


# Tight tolerances; a smaller max_steps than the default 4096 compiles the gradients
# of the checkpointed adjoint faster.
TIGHT = dict(rtol=1e-11, atol=1e-12, max_steps=256)

A2 = np.array([[0.0, 1.0], [-2.0, -0.3]])
B2 = np.array([[0.0], [1.0]])


def random_linear_ode(rng, n=3, m=2):
    A = rng.normal(size=(n, n)) - 0.5 * np.eye(n)
    B = rng.normal(size=(n, m))
    return A, B


# --- LinearODE -------------------------------------------------------------------


def test_linear_ode_vector_field_output_and_sizes():
    rng = np.random.default_rng(0)
    A, B = random_linear_ode(rng)
    C, D = rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
    ode = dynsys.LinearODE(A, B, C, D)
    x, u = rng.normal(size=3), rng.normal(size=2)
    np.testing.assert_allclose(ode.vector_field(0.0, x, u), A @ x + B @ u)
    np.testing.assert_allclose(ode.output(0.0, x, u), C @ x + D @ u)
    assert (ode.state_size, ode.input_size, ode.output_size) == (3, 2, 4)
    free = dynsys.LinearODE(jnp.eye(2, dtype=jnp.float32))
    assert (free.state_size, free.input_size, free.output_size) == (2, 0, 2)
    assert free.A.dtype == jnp.float32
    np.testing.assert_array_equal(free.output(0.0, jnp.ones(2), None), 1.0)
    assert dynsys.LinearODE([[1, 0], [0, 1]]).A.dtype == jnp.float64  # ints -> float


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(A=jnp.ones((3, 2))),
            r"LinearODE\(A=\.\.\.\): A must have shape \(n, n\) \(a square matrix\), "
            r"got \(3, 2\)",
        ),
        (
            dict(A=jnp.eye(3), B=jnp.ones((4, 1))),
            r"LinearODE\(B=\.\.\.\): B must have shape \(n, m\) = \(3, m\), "
            r"got \(4, 1\)",
        ),
        (
            dict(A=jnp.eye(3), C=jnp.ones((2, 4))),
            r"LinearODE\(C=\.\.\.\): C must have shape \(p, n\) = \(p, 3\), "
            r"got \(2, 4\)",
        ),
        (
            dict(A=jnp.eye(3), D=jnp.ones((3, 1))),
            r"LinearODE\(D=\.\.\.\): D needs an input matrix B, but B is None",
        ),
        (
            dict(
                A=jnp.eye(3), B=jnp.ones((3, 2)), C=jnp.ones((1, 3)), D=jnp.ones((3, 2))
            ),
            r"LinearODE\(D=\.\.\.\): D must have shape \(p, m\) = \(1, 2\), "
            r"got \(3, 2\)",
        ),
    ],
)
def test_linear_ode_shape_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dynsys.LinearODE(**kwargs)


# --- discretize --------------------------------------------------------------------


def test_zoh_against_eigendecomposition():
    """K = V e^{L dt} V^-1 and B_d = V diag((e^{l dt} - 1) / l) V^-1 B."""
    rng = np.random.default_rng(1)
    A, B = random_linear_ode(rng, n=4, m=2)
    C, D = rng.normal(size=(1, 4)), rng.normal(size=(1, 2))
    dt = 0.37
    system = dynsys.discretize(dynsys.LinearODE(A, B, C, D), dt)
    eigenvalues, V = np.linalg.eig(A)
    V_inv = np.linalg.inv(V)
    K_ref = (V * np.exp(eigenvalues * dt)) @ V_inv
    B_ref = (V * ((np.exp(eigenvalues * dt) - 1) / eigenvalues)) @ V_inv @ B
    np.testing.assert_allclose(system.K, K_ref.real, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(system.B, B_ref.real, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(system.C, C)
    np.testing.assert_array_equal(system.D, D)
    assert isinstance(system, dynsys.LinearSystem) and system.dt == dt


def test_zoh_against_taylor_series_for_singular_A():
    """A double integrator (A nilpotent, no eigen-decomposition): the series is exact."""
    A = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    B = np.array([[0.0], [0.0], [1.0]])
    dt = 0.5
    system = dynsys.discretize(dynsys.LinearODE(A, B), dt)
    K_ref, B_ref = np.zeros((3, 3)), np.zeros((3, 1))
    power = np.eye(3)
    for k in range(30):
        K_ref += power * dt**k / math.factorial(k)
        B_ref += power @ B * dt ** (k + 1) / math.factorial(k + 1)
        power = power @ A
    np.testing.assert_allclose(system.K, K_ref, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(system.B, B_ref, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(system.B[:, 0], [dt**3 / 6, dt**2 / 2, dt])


def test_zoh_without_input_is_expm_by_series():
    rng = np.random.default_rng(2)
    A = 0.5 * rng.normal(size=(3, 3))
    system = dynsys.discretize(dynsys.LinearODE(A), 0.2)
    K_ref, term = np.eye(3), np.eye(3)
    for k in range(1, 30):
        term = term @ (A * 0.2) / k
        K_ref = K_ref + term
    np.testing.assert_allclose(system.K, K_ref, rtol=1e-13, atol=1e-14)
    assert system.B is None and system.input_size == 0


def test_bilinear_and_euler_against_their_formulas():
    rng = np.random.default_rng(3)
    A, B = random_linear_ode(rng)
    dt = 0.25
    ode = dynsys.LinearODE(A, B)
    tustin = dynsys.discretize(ode, dt, method="bilinear")
    left_inverse = np.linalg.inv(np.eye(3) - A * dt / 2)
    np.testing.assert_allclose(
        tustin.K, left_inverse @ (np.eye(3) + A * dt / 2), rtol=1e-12, atol=1e-13
    )
    np.testing.assert_allclose(tustin.B, left_inverse @ B * dt, rtol=1e-12, atol=1e-13)
    euler = dynsys.discretize(ode, dt, method="euler")
    np.testing.assert_allclose(euler.K, np.eye(3) + A * dt, rtol=1e-15)
    np.testing.assert_allclose(euler.B, B * dt, rtol=1e-15)
    assert tustin.dt == euler.dt == dt


def test_methods_agree_to_their_order_as_dt_shrinks():
    """Euler's one-step error is O(dt^2) and Tustin's O(dt^3) against the exact ZOH."""
    rng = np.random.default_rng(4)
    ode = dynsys.LinearODE(*random_linear_ode(rng))
    errors = {"euler": [], "bilinear": []}
    for dt in (0.02, 0.01):
        exact = dynsys.discretize(ode, dt)
        for method in errors:
            approx = dynsys.discretize(ode, dt, method=method)
            errors[method].append(float(jnp.max(jnp.abs(approx.K - exact.K))))
    assert errors["euler"][0] / errors["euler"][1] == pytest.approx(4, rel=0.05)
    assert errors["bilinear"][0] / errors["bilinear"][1] == pytest.approx(8, rel=0.05)


def test_discretize_keeps_float32_and_labels_time():
    ode = dynsys.LinearODE(jnp.asarray(A2, jnp.float32), jnp.asarray(B2, jnp.float32))
    system = dynsys.discretize(ode, 0.1)
    assert system.K.dtype == system.B.dtype == jnp.float32
    traj = dynsys.rollout(system, jnp.zeros(2, jnp.float32), 5, inputs=jnp.ones((5, 1)))
    np.testing.assert_allclose(traj.ts, 0.1 * np.arange(6), rtol=1e-6)
    # A concrete JAX array dt also labels time.
    assert dynsys.discretize(ode, jnp.array(0.1)).dt == pytest.approx(0.1)


def test_traced_dt_has_no_label_but_the_same_matrices():
    ode = dynsys.LinearODE(A2, B2)
    K = jax.jit(lambda dt: dynsys.discretize(ode, dt).K)(0.3)
    np.testing.assert_allclose(K, dynsys.discretize(ode, 0.3).K, rtol=1e-14)
    labels = []
    jax.jit(lambda dt: labels.append(dynsys.discretize(ode, dt).dt) or dt)(0.3)
    assert labels == [None]


@pytest.mark.parametrize("method", ["zoh", "bilinear", "euler"])
def test_discretize_gradients_against_finite_differences(method):
    """d/dA, d/dB and d/d(dt) of a simulation loss of the discretised system."""
    rng = np.random.default_rng(5)
    A, B = random_linear_ode(rng, n=3, m=1)
    x0, inputs = rng.normal(size=3), rng.normal(size=(8, 1))
    dt = 0.15

    def loss(A, B, dt):
        system = dynsys.discretize(dynsys.LinearODE(A, B), dt, method=method)
        traj = dynsys.rollout(system, x0, 8, inputs=inputs)
        return jnp.sum(jnp.sin(traj.xs))

    grads = jax.grad(loss, argnums=(0, 1, 2))(A, B, jnp.array(dt))
    loss = jax.jit(loss)
    references = (
        finite_difference_gradient(lambda a: loss(a, B, dt), A),
        finite_difference_gradient(lambda b: loss(A, b, dt), B),
        finite_difference_gradient(lambda d: loss(A, B, d), np.array(dt)),
    )
    for grad, reference in zip(grads, references):
        np.testing.assert_allclose(grad, reference, rtol=1e-6, atol=1e-8)


def test_zoh_dt_derivative_is_A_expm():
    """Closed form: d e^{A dt} / d dt = A e^{A dt}."""
    ode = dynsys.LinearODE(A2)
    jac = jax.jacfwd(lambda dt: dynsys.discretize(ode, dt).K)(jnp.array(0.4))
    K = np.asarray(dynsys.discretize(ode, 0.4).K)
    np.testing.assert_allclose(jac, A2 @ K, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dt", [0.0, -0.1, float("nan"), float("inf")])
def test_discretize_rejects_bad_dt(dt):
    with pytest.raises(
        ValueError,
        match=r"discretize\(dt=\.\.\.\): dt must be a positive finite number",
    ):
        dynsys.discretize(dynsys.LinearODE(A2, B2), dt)


def test_discretize_errors():
    ode = dynsys.LinearODE(A2, B2)
    with pytest.raises(
        ValueError,
        match=r"discretize\(dt=\.\.\.\): dt must be a scalar, got shape \(2,\)",
    ):
        dynsys.discretize(ode, jnp.array([0.1, 0.2]))
    with pytest.raises(TypeError, match=r"discretize\(dt=\.\.\.\): dt must be a real"):
        dynsys.discretize(ode, "0.1")
    with pytest.raises(TypeError, match=r"discretize\(dt=\.\.\.\): dt must be a real"):
        dynsys.discretize(ode, True)
    with pytest.raises(
        ValueError,
        match=r"discretize\(method=\.\.\.\): method must be one of zoh, bilinear, "
        r"euler, got 'rk4'",
    ):
        dynsys.discretize(ode, 0.1, method="rk4")
    with pytest.raises(
        TypeError,
        match=r"discretize\(ode=\.\.\.\): only a LinearODE .* got VanDerPol; sample",
    ):
        dynsys.discretize(zoo.VanDerPol(), 0.1)


@pytest.mark.parametrize("dt", [-0.1, float("nan")])
def test_discretize_rejects_bad_traced_dt_at_run_time(dt):
    ode = dynsys.LinearODE(A2, B2)
    message = r"discretize\(dt=\.\.\.\): dt must be a positive finite number"
    with pytest.raises(RuntimeError, match=message):
        jax.jit(lambda dt: dynsys.discretize(ode, dt).K)(dt)
    with pytest.raises(RuntimeError, match=message):
        jax.vmap(lambda dt: dynsys.discretize(ode, dt).K)(jnp.array([0.1, dt]))


# --- Sampled -----------------------------------------------------------------------


def test_forced_harmonic_oscillator_against_analytic_solution():
    """x'' = -w^2 x + u with u held: x(t) = u/w^2 + (x0 - u/w^2) cos wt + v0/w sin wt."""
    w, dt, T = 2.0, 0.3, 12
    ode = dynsys.LinearODE([[0.0, 1.0], [-(w**2), 0.0]], [[0.0], [1.0]])
    system = dynsys.Sampled(ode, dt, **TIGHT)
    inputs = np.random.default_rng(6).normal(size=(T, 1))
    traj = dynsys.rollout(system, jnp.array([1.0, 0.5]), T, inputs=inputs)

    x, v = 1.0, 0.5
    reference = [(x, v)]
    for k in range(T):
        rest = inputs[k, 0] / w**2
        c, s = np.cos(w * dt), np.sin(w * dt)
        x, v = rest + (x - rest) * c + v / w * s, -(x - rest) * w * s + v * c
        reference.append((x, v))
    np.testing.assert_allclose(traj.xs, np.array(reference), rtol=0, atol=1e-9)
    np.testing.assert_allclose(traj.ts, dt * np.arange(T + 1), rtol=1e-15)
    assert system.dt == dt and system.state_size == 2 and system.input_size == 1


def rk4_reference(vector_field, x0, inputs, dt, substeps):
    """A fine fixed-step classical RK4 in NumPy, input held over each sample."""
    x = np.asarray(x0, dtype=np.float64)
    xs, h = [x], dt / substeps
    for u in inputs:
        for _ in range(substeps):
            k1 = vector_field(x, u)
            k2 = vector_field(x + h / 2 * k1, u)
            k3 = vector_field(x + h / 2 * k2, u)
            k4 = vector_field(x + h * k3, u)
            x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        xs.append(x)
    return np.stack(xs)


def test_van_der_pol_against_fine_rk4():
    mu, dt, T = 1.5, 0.2, 20
    inputs = 0.5 * np.random.default_rng(7).normal(size=(T, 1))

    def field(x, u):
        return np.array([x[1], mu * (1 - x[0] ** 2) * x[1] - x[0] + u[0]])

    reference = rk4_reference(field, [2.0, 0.0], inputs, dt, substeps=400)
    system = dynsys.Sampled(zoo.VanDerPol(mu), dt, **TIGHT)
    traj = dynsys.rollout(system, jnp.array([2.0, 0.0]), T, inputs=inputs)
    np.testing.assert_allclose(traj.xs, reference, rtol=0, atol=1e-9)


def test_lotka_volterra_against_fine_rk4_and_its_invariant():
    a, b, c, d = 1.5, 1.0, 3.0, 1.0
    dt, T = 0.1, 30

    def field(x, u):
        return np.array([a * x[0] - b * x[0] * x[1], d * x[0] * x[1] - c * x[1]])

    reference = rk4_reference(field, [1.0, 1.0], [None] * T, dt, substeps=200)
    system = zoo.lotka_volterra(a, b, c, d, dt=dt)
    traj = dynsys.rollout(system, jnp.array([1.0, 1.0]), T)
    # Default tolerances (rtol 1e-6, atol 1e-8) give about 1e-6 here.
    np.testing.assert_allclose(traj.xs, reference, rtol=1e-5, atol=1e-6)
    x, y = np.asarray(traj.xs).T
    invariant = d * x - c * np.log(x) + b * y - a * np.log(y)
    assert np.ptp(invariant) < 1e-5


def test_sampled_linear_ode_matches_exact_zoh_with_a_controller_and_batch():
    """Closed loop u_k = -G x_k: Sampled(ode) and discretize(ode) agree, batched."""
    rng = np.random.default_rng(8)
    A, B = random_linear_ode(rng, n=3, m=1)
    ode = dynsys.LinearODE(A, B)
    controller = dynsys.LinearFeedback(rng.normal(size=(1, 3)))
    x0 = rng.normal(size=(4, 3))
    sampled = dynsys.rollout(
        dynsys.Sampled(ode, 0.2, **TIGHT), x0, 10, controller=controller
    )
    exact = dynsys.rollout(dynsys.discretize(ode, 0.2), x0, 10, controller=controller)
    np.testing.assert_allclose(sampled.xs, exact.xs, rtol=0, atol=1e-9)
    np.testing.assert_allclose(sampled.us, exact.us, rtol=0, atol=1e-9)
    assert sampled.xs.shape == (4, 11, 3)
    single = dynsys.rollout(
        dynsys.Sampled(ode, 0.2, **TIGHT), x0[2], 10, controller=controller
    )
    np.testing.assert_allclose(sampled.xs[2], single.xs, rtol=0, atol=1e-13)


class SineController(dynsys.AbstractController):
    def __call__(self, t, x):
        return jnp.sin(t)[None]


class Integrator(dynsys.AbstractODE):
    state_size: int = eqx.field(static=True, default=1)
    input_size: int = eqx.field(static=True, default=1)

    def vector_field(self, t, x, u):
        return u


def test_controller_acts_at_sample_times_and_input_is_held():
    """x' = u with u_k = sin(t_k) held: x_{k+1} = x_k + dt sin(k dt + t0) exactly."""
    dt, t0 = 0.25, 1.0
    traj = dynsys.rollout(
        dynsys.Sampled(Integrator(), dt),
        jnp.zeros(1),
        8,
        controller=SineController(),
        t0=t0,
    )
    expected = np.concatenate([[0.0], np.cumsum(dt * np.sin(t0 + dt * np.arange(8)))])
    np.testing.assert_allclose(traj.xs[:, 0], expected, rtol=0, atol=1e-13)
    np.testing.assert_allclose(traj.ts, t0 + dt * np.arange(9), rtol=1e-15)


def test_sampled_keeps_float32():
    ode = dynsys.LinearODE(jnp.asarray(A2, jnp.float32), jnp.asarray(B2, jnp.float32))
    system = dynsys.Sampled(ode, 0.1, rtol=1e-4, atol=1e-6)
    traj = dynsys.rollout(
        system, jnp.ones(2, jnp.float32), 10, inputs=jnp.ones((10, 1), jnp.float32)
    )
    assert traj.xs.dtype == jnp.float32
    exact = dynsys.rollout(
        dynsys.discretize(ode, 0.1),
        jnp.ones(2, jnp.float32),
        10,
        inputs=jnp.ones((10, 1), jnp.float32),
    )
    np.testing.assert_allclose(traj.xs, exact.xs, atol=1e-4)


def test_sampled_gradients_against_finite_differences():
    """d/d(mu), d/dx0 and d/d(inputs) of a van der Pol simulation loss."""
    dt, T = 0.2, 6
    rng = np.random.default_rng(9)
    x0, inputs = np.array([1.0, -0.5]), 0.3 * rng.normal(size=(T, 1))

    def loss(mu, x0, inputs):
        system = dynsys.Sampled(
            zoo.VanDerPol(mu), dt, rtol=1e-12, atol=1e-12, max_steps=256
        )
        traj = dynsys.rollout(system, x0, T, inputs=inputs)
        return jnp.sum(traj.xs[-1] ** 2) + jnp.sum(traj.xs[:, 0])

    loss_jit = jax.jit(loss)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(jnp.array(0.8), x0, inputs)
    references = (
        finite_difference_gradient(
            lambda m: loss_jit(m, x0, inputs), np.array(0.8), 1e-5
        ),
        finite_difference_gradient(lambda x: loss_jit(0.8, x, inputs), x0, 1e-5),
        finite_difference_gradient(lambda u: loss_jit(0.8, x0, u), inputs, 1e-5),
    )
    for grad, reference in zip(grads, references):
        np.testing.assert_allclose(grad, reference, rtol=1e-6, atol=1e-7)


def linear_gradients(make, seed=10):
    """Gradients w.r.t. A and B of a simulation loss of `make(LinearODE(A, B))`."""
    rng = np.random.default_rng(seed)
    A, B = random_linear_ode(rng, n=2, m=1)
    x0, inputs = rng.normal(size=2), rng.normal(size=(5, 1))

    def loss(ode):
        traj = dynsys.rollout(make(ode), x0, 5, inputs=inputs)
        return jnp.sum(traj.xs**2)

    return jax.grad(loss)(dynsys.LinearODE(A, B))


def test_sampled_gradients_match_exact_zoh():
    """Gradients w.r.t. A and B: Sampled (checkpointed adjoint) vs discretize."""
    exact = linear_gradients(lambda o: dynsys.discretize(o, 0.3))
    sampled = linear_gradients(lambda o: dynsys.Sampled(o, 0.3, **TIGHT))
    np.testing.assert_allclose(sampled.A, exact.A, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(sampled.B, exact.B, rtol=1e-7, atol=1e-9)


@pytest.mark.slow
def test_sampled_backsolve_adjoint_gradients_match_exact_zoh():
    """The continuous adjoint reaches parameters passed through diffrax's args."""
    exact = linear_gradients(lambda o: dynsys.discretize(o, 0.3))
    backsolve = linear_gradients(
        lambda o: dynsys.Sampled(o, 0.3, adjoint=diffrax.BacksolveAdjoint(), **TIGHT)
    )
    np.testing.assert_allclose(backsolve.A, exact.A, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(backsolve.B, exact.B, rtol=1e-7, atol=1e-9)


def test_sampled_with_constant_step_solver():
    """Heun (2nd order) with a constant inner step: one step per sample unless dt0 is
    given; ten times smaller steps give a hundred times smaller error."""
    ode = dynsys.LinearODE(A2, B2)
    kwargs = dict(solver=diffrax.Heun(), stepsize_controller=diffrax.ConstantStepSize())
    inputs = jnp.ones((4, 1))
    coarse = dynsys.rollout(
        dynsys.Sampled(ode, 0.1, **kwargs), jnp.ones(2), 4, inputs=inputs
    )
    fine = dynsys.rollout(
        dynsys.Sampled(ode, 0.1, dt0=0.01, **kwargs), jnp.ones(2), 4, inputs=inputs
    )
    exact = dynsys.rollout(dynsys.discretize(ode, 0.1), jnp.ones(2), 4, inputs=inputs)
    coarse_error = float(jnp.max(jnp.abs(coarse.xs - exact.xs)))
    fine_error = float(jnp.max(jnp.abs(fine.xs - exact.xs)))
    assert 1e-6 < coarse_error < 1e-2
    assert coarse_error / fine_error == pytest.approx(100, rel=0.1)


class Blowup(dynsys.AbstractODE):
    """x' = x^2 from x0 = 1 blows up at t = 1."""

    state_size: int = eqx.field(static=True, default=1)
    input_size: int = eqx.field(static=True, default=0)

    def vector_field(self, t, x, u):
        return x**2


SOLVER_FAILED = (
    r"Sampled\.step: the ODE solver failed on a sample interval \[t, t \+ dt\] "
    r"\(dt=0\.5, max_steps=(4|4096), solver=Tsit5\).*Increase max_steps"
)


def test_solver_failure_is_an_error_not_garbage():
    system = dynsys.Sampled(Blowup(), 0.5)
    # The first sample [0, 0.5] is fine; [0.5, 1.0] reaches the singularity.
    with pytest.raises(RuntimeError, match=SOLVER_FAILED):
        dynsys.rollout(system, jnp.ones(1), 3)
    with pytest.raises(RuntimeError, match=SOLVER_FAILED):
        jax.jit(lambda x0: dynsys.rollout(system, x0, 3).xs)(jnp.ones(1))
    # Under vmap, one failing batch element is enough.
    with pytest.raises(RuntimeError, match=SOLVER_FAILED):
        jax.jit(lambda x0: dynsys.rollout(system, x0, 3).xs)(jnp.array([[0.1], [1.0]]))
    # A benign start is fine with the same system.
    traj = dynsys.rollout(system, jnp.array([0.1]), 3)
    np.testing.assert_allclose(traj.xs[:, 0], 0.1 / (1 - 0.1 * 0.5 * np.arange(4)))


def test_too_few_max_steps_is_an_error():
    system = dynsys.Sampled(
        zoo.VanDerPol(1.0), 0.5, rtol=1e-11, atol=1e-12, max_steps=4
    )
    with pytest.raises(RuntimeError, match=SOLVER_FAILED):
        dynsys.rollout(system, jnp.array([2.0, 0.0]), 2, inputs=jnp.zeros((2, 1)))


@pytest.mark.parametrize("dt", [0.0, -1.0, float("nan"), float("inf")])
def test_sampled_rejects_bad_dt(dt):
    with pytest.raises(
        ValueError, match=r"Sampled\(dt=\.\.\.\): dt must be a positive finite number"
    ):
        dynsys.Sampled(zoo.VanDerPol(), dt)


def test_sampled_errors():
    ode = zoo.VanDerPol()
    with pytest.raises(
        TypeError, match=r"Sampled\(ode=\.\.\.\): expected an AbstractODE"
    ):
        dynsys.Sampled(dynsys.LinearSystem(jnp.eye(2)), 0.1)
    with pytest.raises(TypeError, match=r"Sampled\(dt=\.\.\.\): dt must be concrete"):
        jax.jit(lambda dt: dynsys.Sampled(ode, dt).ode.mu)(0.1)
    with pytest.raises(ValueError, match=r"Sampled\(dt=\.\.\.\): dt must be a scalar"):
        dynsys.Sampled(ode, np.ones(2))
    with pytest.raises(
        ValueError, match=r"Sampled\(max_steps=\.\.\.\): max_steps must be a positive"
    ):
        dynsys.Sampled(ode, 0.1, max_steps=0)
    with pytest.raises(
        TypeError, match=r"Sampled\(max_steps=\.\.\.\): max_steps must be"
    ):
        dynsys.Sampled(ode, 0.1, max_steps=10.0)
    with pytest.raises(
        ValueError, match=r"Sampled\(dt0=\.\.\.\): dt0 must be a positive"
    ):
        dynsys.Sampled(ode, 0.1, dt0=-0.01)
    with pytest.raises(
        ValueError,
        match=r"Sampled\(rtol=\.\.\., atol=\.\.\.\): rtol and atol set the default",
    ):
        dynsys.Sampled(
            ode, 0.1, rtol=1e-3, stepsize_controller=diffrax.ConstantStepSize()
        )
    # Wrong shapes reach the rollout's checks.
    with pytest.raises(ValueError, match=r"rollout\(x0=\.\.\.\): x0 must have shape"):
        dynsys.rollout(
            dynsys.Sampled(ode, 0.1), jnp.ones(3), 2, inputs=jnp.ones((2, 1))
        )


# --- zoo ---------------------------------------------------------------------------


def test_zoo_ode_models():
    for name in ("pendulum_ode", "van_der_pol", "lotka_volterra"):
        system = zoo.get(name, dt=0.05)
        assert isinstance(system, dynsys.Sampled) and system.dt == 0.05
        assert system.state_size == 2


def test_pendulum_ode_conserves_energy_and_matches_its_period():
    """Undamped: energy is conserved; small oscillations have period 2 pi sqrt(l/g)."""
    g, length = 9.81, 0.5
    period = 2 * np.pi * np.sqrt(length / g)
    system = zoo.pendulum_ode(gravity=g, length=length, damping=0.0, dt=period / 8)
    traj = dynsys.rollout(system, jnp.array([1e-3, 0.0]), 8, inputs=jnp.zeros((8, 1)))
    # After one small-angle period the pendulum is back (to O(theta^2) in the period).
    np.testing.assert_allclose(traj.xs[-1], [1e-3, 0.0], atol=1e-7)
    np.testing.assert_allclose(traj.xs[4], [-1e-3, 0.0], atol=1e-7)
    big = dynsys.rollout(system, jnp.array([2.0, 0.0]), 8, inputs=jnp.zeros((8, 1)))
    theta, omega = np.asarray(big.xs).T
    energy = 0.5 * length**2 * omega**2 - g * length * np.cos(theta)
    assert np.ptp(energy) < 1e-5  # default tolerances: rtol 1e-6


def test_van_der_pol_limit_cycle_amplitude():
    """For mu = 1 the limit cycle's amplitude is about 2.009 (a classical value)."""
    system = zoo.van_der_pol(mu=1.0, dt=0.1)
    traj = dynsys.rollout(
        system, jnp.array([0.1, 0.0]), 400, inputs=jnp.zeros((400, 1))
    )
    late = np.asarray(traj.xs[200:, 0])
    assert np.max(np.abs(late)) == pytest.approx(2.009, abs=0.01)


# --- Discretized and fitting in continuous time -------------------------------------


@pytest.mark.parametrize("method", ["zoh", "bilinear"])
def test_discretized_steps_and_gradients_equal_discretize(method):
    rng = np.random.default_rng(11)
    A, B = random_linear_ode(rng)
    x0, inputs = rng.normal(size=3), rng.normal(size=(6, 2))
    ode = dynsys.LinearODE(A, B, C=rng.normal(size=(1, 3)))
    model = dynsys.Discretized(ode, 0.2, method=method)
    exact = dynsys.discretize(ode, 0.2, method=method)
    assert model.to_linear().dt == 0.2 and model.output_size == 1

    def loss(ode, make):
        traj = dynsys.rollout(make(ode), x0, 6, inputs=inputs)
        return jnp.sum(traj.xs**2) + jnp.sum(traj.ys)

    a = jax.grad(loss)(ode, lambda o: dynsys.Discretized(o, 0.2, method=method))
    b = jax.grad(loss)(ode, lambda o: dynsys.discretize(o, 0.2, method=method))
    for leaf_a, leaf_b in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(leaf_a, leaf_b, rtol=1e-12, atol=1e-14)
    traj = dynsys.rollout(model, x0, 6, inputs=inputs)
    reference = dynsys.rollout(exact, x0, 6, inputs=inputs)
    np.testing.assert_allclose(traj.xs, reference.xs, rtol=1e-13)
    np.testing.assert_allclose(traj.ys, reference.ys, rtol=1e-13)
    np.testing.assert_allclose(traj.ts, reference.ts, rtol=1e-15)


def test_discretized_errors():
    ode = dynsys.LinearODE(A2, B2)
    with pytest.raises(TypeError, match=r"Discretized\(ode=\.\.\.\): expected a"):
        dynsys.Discretized(zoo.VanDerPol(), 0.1)
    with pytest.raises(
        ValueError, match=r"Discretized\(dt=\.\.\.\): dt must be a positive finite"
    ):
        dynsys.Discretized(ode, -0.1)
    with pytest.raises(
        TypeError, match=r"Discretized\(dt=\.\.\.\): dt must be concrete"
    ):
        jax.jit(lambda dt: dynsys.Discretized(ode, dt).ode.A)(0.1)
    with pytest.raises(
        ValueError, match=r"Discretized\(method=\.\.\.\): method must be one of"
    ):
        dynsys.Discretized(ode, 0.1, method="tustin")


def test_fit_recovers_a_linear_ode_through_the_matrix_exponential():
    """Noise-free ZOH data of a damped oscillator: fit A and B from a perturbed start."""
    dt = 0.2
    true = dynsys.LinearODE(A2, B2)
    rng = np.random.default_rng(12)
    data = dynsys.simulate(
        dynsys.discretize(true, dt),
        rng.normal(size=(4, 2)),
        20,
        inputs=rng.normal(size=(4, 20, 1)),
    )
    start = dynsys.LinearODE(A2 + 0.3 * rng.normal(size=(2, 2)), 0.5 * B2)
    result = dynsys.fit(
        dynsys.Discretized(start, dt),
        data,
        solver=optax.adam(2e-2),
        num_steps=400,
        progress=False,
    )
    start_error = np.linalg.norm(start.A - A2)
    error = np.linalg.norm(result.model.ode.A - A2)
    assert error < 1e-2 * start_error
    np.testing.assert_allclose(result.model.ode.B, B2, atol=1e-2)


class NeuralField(dynsys.AbstractODE):
    mlp: eqx.nn.MLP
    state_size: int = eqx.field(static=True, default=2)
    input_size: int = eqx.field(static=True, default=1)

    def vector_field(self, t, x, u):
        return self.mlp(jnp.concatenate([x, u]))


@pytest.mark.slow
def test_fit_neural_vector_field_through_sampled(getkey):
    """A small MLP vector field fitted to van der Pol data: the loss drops 5x."""
    dt, T = 0.1, 10
    rng = np.random.default_rng(13)
    data = dynsys.simulate(
        zoo.van_der_pol(1.0, dt=dt),
        rng.uniform(-2, 2, size=(6, 2)),
        T,
        inputs=0.5 * rng.normal(size=(6, T, 1)),
    )
    mlp = eqx.nn.MLP(3, 2, 16, depth=1, activation=jnp.tanh, key=getkey())
    model = dynsys.Sampled(
        NeuralField(mlp),
        dt,
        solver=diffrax.Heun(),
        stepsize_controller=diffrax.ConstantStepSize(),
        dt0=dt / 2,
    )
    result = dynsys.fit(
        model, data, solver=optax.adam(1e-2), num_steps=150, progress=False
    )
    assert result.stop_reason is None
    assert result.train_result.best_loss < result.losses[0] / 5
