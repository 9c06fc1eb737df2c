"""The suite runs with jaxtyping + beartype checking the package's annotations at run
time (`--jaxtyping-packages` in pyproject.toml's addopts): a call that breaks an
annotation fails the test that makes it. A function that checks its own arguments
and raises the one-line errors its docs promise is marked `checks_own_arguments`
(`dynsys/_type_checks.py`): the checks leave its own arguments to it, so that its
refusals are what the tests of its errors see, and still check what it calls."""

import pathlib
import tomllib

import jax.numpy as jnp
import jaxtyping
import pytest

import dynsys


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _checked(pytestconfig) -> bool:
    option = pytestconfig.getoption("jaxtyping_packages", default=None) or ""
    packages = option.split(",")[:-1]
    return "dynsys" in packages or "dynsys._rollout" in packages


def test_the_suite_checks_the_package_by_default():
    with open(ROOT / "pyproject.toml", "rb") as file:
        options = tomllib.load(file)["tool"]["pytest"]["ini_options"]
    assert "--jaxtyping-packages=dynsys,beartype.beartype" in options["addopts"]


def test_annotations_are_checked_at_run_time(pytestconfig):
    if not _checked(pytestconfig):
        pytest.skip("the suite runs without jaxtyping's run-time checks of dynsys")
    ts, ys = jnp.arange(4.0), jnp.zeros((3, 1))  # T+1 = 4 times, T = 3 outputs
    dynsys.Trajectory(ts, jnp.zeros((4, 2)), None, ys)
    # 5 states for 4 times: only the check of the annotations rejects it.
    with pytest.raises(jaxtyping.TypeCheckError, match="Trajectory"):
        dynsys.Trajectory(ts, jnp.zeros((5, 2)), None, ys)


def test_a_function_that_checks_its_own_arguments_gives_its_own_refusal():
    # `rollout` is marked: a scalar `x0` breaks its annotation (`"... n"`), and the
    # refusal is still its own one line, with or without the checks.
    assert dynsys.rollout.__no_type_check__
    system = dynsys.LinearSystem(K=0.5 * jnp.eye(2))
    with pytest.raises(ValueError, match=r"^rollout\(x0=\.\.\.\): x0 must have shape"):
        dynsys.rollout(system, 1.0, 3)
    with pytest.raises(ValueError, match=r"^LevenbergMarquardt\(separable=\.\.\.\)"):
        dynsys.LevenbergMarquardt(separable=True)
