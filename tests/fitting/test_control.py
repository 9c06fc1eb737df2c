import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def _system(getkey, dt=0.1):
    K = jax.random.normal(getkey(), (3, 3))
    K = 0.9 * K / jnp.max(jnp.abs(jnp.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K,
        jax.random.normal(getkey(), (3, 2)),
        jax.random.normal(getkey(), (2, 3)),
        jax.random.normal(getkey(), (2, 2)),
        dt=dt,
    )


@pytest.mark.parametrize("dt", [0.1, None])
def test_round_trip_and_frequency_response(getkey, dt):
    control = pytest.importorskip("control")
    system = _system(getkey, dt)
    sys_ = dynsys.to_control(system)
    assert isinstance(sys_, control.StateSpace)
    assert sys_.dt == (True if dt is None else dt)
    back = dynsys.from_control(sys_)
    assert isinstance(back, dynsys.LinearSystem) and back.dt == dt
    for name in "KBCD":
        np.testing.assert_array_equal(getattr(back, name), getattr(system, name))
    # python-control's own frequency response agrees with ours.
    w = np.array([0.1, 1.0, 3.0]) / (dt or 1.0)
    theirs = sys_(np.exp(1j * w * (dt or 1.0)))  # (p, m, F)
    ours = dynsys.frequency_response(system, jnp.asarray(w))
    np.testing.assert_allclose(np.moveaxis(theirs, -1, 0), ours, rtol=1e-10)


def test_continuous_time_and_defaults():
    control = pytest.importorskip("control")
    ode = dynsys.LinearODE(
        jnp.array([[0.0, 1.0], [-4.0, -0.8]]), jnp.array([[0.0], [1.0]])
    )
    sys_ = dynsys.to_control(ode)
    assert sys_.dt == 0
    np.testing.assert_array_equal(sys_.C, np.eye(2))
    np.testing.assert_array_equal(sys_.D, np.zeros((2, 1)))
    back = dynsys.from_control(sys_)
    assert isinstance(back, dynsys.LinearODE) and back.D is None
    np.testing.assert_array_equal(back.A, ode.A)
    # A transfer function 1 / (z - 0.5), sampled at 0.2: same step response.
    tf = control.tf([1.0], [1.0, -0.5], 0.2)
    system = dynsys.from_control(tf)
    assert system.dt == 0.2
    np.testing.assert_allclose(
        dynsys.step_response(system, 5)[:, 0, 0],
        [0.0, 1.0, 1.5, 1.75, 1.875],
        rtol=1e-12,
    )


def test_bad_input(getkey):
    pytest.importorskip("control")
    with_offset = dynsys.LinearSystem(jnp.eye(2), offset=jnp.ones(2))
    with pytest.raises(ValueError, match="has an offset"):
        dynsys.to_control(with_offset)
    with pytest.raises(TypeError, match="expected a python-control system"):
        dynsys.from_control(_system(getkey))


def test_missing_python_control_is_a_clear_error(monkeypatch, getkey):
    monkeypatch.setitem(sys.modules, "control", None)  # import control fails
    with pytest.raises(ImportError, match="to_control needs python-control"):
        dynsys.to_control(_system(getkey))
