"""Every bad input gets a ValueError naming the argument and the shapes."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import dynsys


K = jnp.eye(3)
B = jnp.ones((3, 2))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(K=jnp.ones((3, 2))),
            r"K must have shape \(n, n\) \(a square matrix\), got \(3, 2\)",
        ),
        (dict(K=jnp.ones(3)), r"K must have shape \(n, n\).*got \(3,\)"),
        (
            dict(K=K, B=jnp.ones((4, 1))),
            r"B must have shape \(n, m\) = \(3, m\), got \(4, 1\)",
        ),
        (
            dict(K=K, B=jnp.ones(3)),
            r"B must have shape \(n, m\) = \(3, m\), got \(3,\)",
        ),
        (
            dict(K=K, C=jnp.ones((2, 4))),
            r"C must have shape \(p, n\) = \(p, 3\), got \(2, 4\)",
        ),
        (
            dict(K=K, B=B, C=jnp.ones((2, 3)), D=jnp.ones((2, 3))),
            r"D must have shape \(p, m\) = \(2, 2\), got \(2, 3\)",
        ),
        (
            dict(K=K, B=B, D=jnp.ones((2, 2))),
            r"D must have shape \(p, m\) = \(3, 2\), got \(2, 2\)",
        ),
        (dict(K=K, D=jnp.ones((3, 1))), r"D needs an input matrix B"),
        (
            dict(K=K, offset=jnp.ones(2)),
            r"offset must have shape \(n,\) = \(3,\), got \(2,\)",
        ),
        (dict(K=K, dt=0.0), r"dt must be positive, got 0.0"),
    ],
)
def test_linear_system_shape_errors(kwargs, message):
    name = next(k for k in ["dt", "offset", "D", "C", "B", "K"] if k in kwargs)
    with pytest.raises(ValueError, match=rf"LinearSystem\({name}=\.\.\.\): " + message):
        dynsys.LinearSystem(**kwargs)


def test_linear_feedback_gain_must_be_a_matrix():
    with pytest.raises(
        ValueError,
        match=r"LinearFeedback\(gain=\.\.\.\): gain must have shape \(m, n\), got \(3,\)",
    ):
        dynsys.LinearFeedback(jnp.ones(3))


def test_x0_of_wrong_size():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(x0=...): x0 must have shape (n,) or (..., n) = (..., 3), got (4,)."
        ),
    ):
        dynsys.rollout(dynsys.LinearSystem(K), jnp.ones(4), 5)
    with pytest.raises(ValueError, match=r"rollout\(x0=\.\.\.\).*got \(\)"):
        dynsys.rollout(dynsys.LinearSystem(K), 1.0, 5)


@pytest.mark.parametrize("num_steps", [-1, 2.5, True, "3"])
def test_num_steps_must_be_non_negative_integer(num_steps):
    with pytest.raises(
        ValueError,
        match=r"rollout\(num_steps=\.\.\.\): num_steps must be a non-negative Python integer, got",
    ):
        dynsys.rollout(dynsys.LinearSystem(K), jnp.ones(3), num_steps)


@pytest.mark.parametrize(
    "shape, got",
    [
        ((4, 2), r"\(4, 2\)"),
        ((5, 1), r"\(5, 1\)"),
        ((5,), r"\(5,\)"),
        ((2, 4, 3), r"\(2, 4, 3\)"),
    ],
)
def test_inputs_of_wrong_length_or_width(shape, got):
    expected = re.escape(
        "inputs must have shape (..., num_steps, m) = (..., 5, 2), got "
    )
    with pytest.raises(
        ValueError, match=r"rollout\(inputs=\.\.\.\): " + expected + got
    ):
        dynsys.rollout(
            dynsys.LinearSystem(K, B), jnp.ones(3), 5, inputs=jnp.ones(shape)
        )


def test_inputs_to_a_system_without_inputs():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(inputs=...): the system takes no input (input_size=0), got inputs of shape (5, 1)."
        ),
    ):
        dynsys.rollout(dynsys.LinearSystem(K), jnp.ones(3), 5, inputs=jnp.ones((5, 1)))


def test_system_with_inputs_needs_inputs_or_controller():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(inputs=...): the system takes inputs (input_size=2) but neither inputs nor controller was given"
        ),
    ):
        dynsys.rollout(dynsys.LinearSystem(K, B), jnp.ones(3), 5)


def test_batch_dimensions_that_do_not_broadcast():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(inputs=...): the batch dimensions of inputs (3,) do not broadcast against those of x0 (4,)."
        ),
    ):
        dynsys.rollout(
            dynsys.LinearSystem(K, B), jnp.ones((4, 3)), 5, inputs=jnp.ones((3, 5, 2))
        )


def test_controller_output_size_must_match_input_size():
    controller = dynsys.LinearFeedback(jnp.ones((1, 3)))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(controller=...): the controller must return an input of shape (m,) = (2,), the system's input size, got (1,)."
        ),
    ):
        dynsys.rollout(dynsys.LinearSystem(K, B), jnp.ones(3), 5, controller=controller)


def test_controller_for_a_system_without_inputs():
    controller = dynsys.LinearFeedback(jnp.ones((1, 3)))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(controller=...): the system takes no input (input_size=0), so it cannot be controlled."
        ),
    ):
        dynsys.rollout(dynsys.LinearSystem(K), jnp.ones(3), 5, controller=controller)


class WrongShape(dynsys.AbstractSystem):
    state_size: int = eqx.field(static=True, default=2)
    input_size: int = eqx.field(static=True, default=0)

    def step(self, t, x, u):
        return jnp.concatenate([x, x])


def test_user_system_returning_wrong_shape():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "rollout(system=...): WrongShape.step must return a state of shape (n,) = (2,), got (4,)."
        ),
    ):
        dynsys.rollout(WrongShape(), jnp.ones(2), 5)


def test_wrong_object_types():
    with pytest.raises(
        TypeError, match=r"rollout\(system=\.\.\.\): expected an AbstractSystem"
    ):
        dynsys.rollout(jnp.eye(3), jnp.ones(3), 5)
    with pytest.raises(
        TypeError, match=r"rollout\(controller=\.\.\.\): expected an AbstractController"
    ):
        dynsys.rollout(
            dynsys.LinearSystem(K, B), jnp.ones(3), 5, controller=lambda t, x: x
        )


def test_errors_are_raised_at_trace_time_under_jit():
    @jax.jit
    def bad(x0):
        return dynsys.rollout(dynsys.LinearSystem(K), x0, 5).xs

    with pytest.raises(ValueError, match=r"rollout\(x0=\.\.\.\)"):
        bad(jnp.ones(4))


def test_abstract_system_needs_step_and_sizes():
    class NoStep(dynsys.AbstractSystem):
        state_size: int = 1
        input_size: int = 0

    with pytest.raises(TypeError):
        NoStep()
