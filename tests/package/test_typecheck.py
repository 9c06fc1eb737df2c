"""The suite runs with jaxtyping + beartype checking the package's annotations at run
time (`--jaxtyping-packages` in pyproject.toml's addopts): a call that breaks an
annotation fails the test that makes it."""

import jax.numpy as jnp
import jaxtyping
import pytest

import dynsys


def _checked(pytestconfig) -> bool:
    option = pytestconfig.getoption("jaxtyping_packages", default=None) or ""
    packages = option.split(",")[:-1]
    return "dynsys" in packages or "dynsys._rollout" in packages


def test_annotations_are_checked_at_run_time(pytestconfig):
    if not _checked(pytestconfig):
        pytest.skip("the suite runs without jaxtyping's run-time checks of dynsys")
    ts, ys = jnp.arange(4.0), jnp.zeros((3, 1))  # T+1 = 4 times, T = 3 outputs
    dynsys.Trajectory(ts, jnp.zeros((4, 2)), None, ys)
    # 5 states for 4 times: only the check of the annotations rejects it.
    with pytest.raises(jaxtyping.TypeCheckError, match="Trajectory"):
        dynsys.Trajectory(ts, jnp.zeros((5, 2)), None, ys)
