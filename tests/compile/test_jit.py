"""The XLA options of dynsys's host-loop programs (`dynsys/_compile/jit.py`): given only with
the jaxlib versions they were measured on, never over a user's own `XLA_FLAGS`,
attached to the programs (JAX refuses them on a nested one), and the programs
compute what they compute without them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dynsys._compile import jit as _jit


_OPTION = "xla_cpu_use_fusion_emitters"
_LEVEL = "xla_backend_optimization_level"


@pytest.fixture
def measured_jaxlib(monkeypatch):
    monkeypatch.setattr(_jit, "_jaxlib_version", lambda: _jit._MEASURED_JAXLIB[0])
    monkeypatch.setattr(_jit, "_cpu_only", lambda: True)


def test_the_options_are_given_only_with_a_measured_jaxlib(monkeypatch):
    monkeypatch.setattr(_jit, "_jaxlib_version", lambda: _jit._MEASURED_JAXLIB[0])
    monkeypatch.setattr(_jit, "_cpu_only", lambda: True)
    assert _jit.compiler_options("") == {_OPTION: False, _LEVEL: 0}
    for other in ((0, 5), (99, 0), None):
        monkeypatch.setattr(_jit, "_jaxlib_version", lambda other=other: other)
        assert _jit.compiler_options("") == {}
        environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
        _jit.use_for_process(environ)
        assert environ == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def test_the_installed_jaxlib_version_is_read():
    major, minor = (int(part) for part in jax.lib.__version__.split(".")[:2])
    assert _jit._jaxlib_version() == (major, minor)


def test_a_program_that_runs_many_times_is_compiled_at_llvms_level_1(measured_jaxlib):
    assert _jit.compiler_options("", repeated=True) == {_OPTION: False, _LEVEL: 1}


def test_the_levels_are_given_only_where_jax_can_only_use_the_cpu(monkeypatch):
    monkeypatch.setattr(_jit, "_jaxlib_version", lambda: _jit._MEASURED_JAXLIB[0])
    monkeypatch.setattr(_jit, "_cpu_only", lambda: False)
    assert _jit.compiler_options("") == {_OPTION: False}
    assert _jit.compiler_options("", repeated=True) == {_OPTION: False}


@pytest.mark.parametrize(
    "platforms, installed, expected",
    [
        ("cpu", ("jax_plugins",), True),
        ("cuda", (), False),
        ("", (), True),
        ("", ("jax_plugins",), False),
        ("", ("libtpu",), False),
    ],
)
def test_cpu_only_reads_jax_platforms_then_the_plugins(
    monkeypatch, platforms, installed, expected
):
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name in ("jax_plugins", "libtpu"):
            return object() if name in installed else None
        return real_find_spec(name, *args)

    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    _jit._cpu_only.cache_clear()
    try:
        assert _jit._cpu_only() is expected
    finally:
        _jit._cpu_only.cache_clear()


def test_a_users_own_xla_flags_setting_wins(measured_jaxlib):
    assert _jit.compiler_options(f"--{_OPTION}=true") == {_LEVEL: 0}
    assert _jit.compiler_options(f"--{_LEVEL}=2", repeated=True) == {_OPTION: False}
    environ = {"XLA_FLAGS": f"--{_OPTION}=true --{_LEVEL}=1"}
    _jit.use_for_process(environ)
    assert environ == {"XLA_FLAGS": f"--{_OPTION}=true --{_LEVEL}=1"}


def test_the_commands_own_flags_are_not_taken_for_the_users(measured_jaxlib):
    environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    _jit.use_for_process(environ)
    assert f"--{_LEVEL}=0" in environ["XLA_FLAGS"].split()
    assert _jit.users_flags(environ) == "--xla_force_host_platform_device_count=2"
    # the chunk of this process (and of a child process) is still compiled at 1
    flags = _jit.users_flags(environ)
    assert _jit.compiler_options(flags, repeated=True) == {_OPTION: False, _LEVEL: 1}


def test_the_command_process_gets_the_options_once(measured_jaxlib):
    environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    _jit.use_for_process(environ)
    _jit.use_for_process(environ)
    assert environ["XLA_FLAGS"].split() == [
        "--xla_force_host_platform_device_count=2",
        f"--{_OPTION}=false",
        f"--{_LEVEL}=0",
    ]
    empty = {}
    _jit.use_for_process(empty)
    assert empty["XLA_FLAGS"] == f"--{_OPTION}=false --{_LEVEL}=0"


def test_top_level_jit_passes_the_level_of_its_kind_of_program(
    measured_jaxlib, monkeypatch
):
    import equinox as eqx

    monkeypatch.setenv("XLA_FLAGS", "")
    given = []
    monkeypatch.setattr(
        eqx, "filter_jit", lambda fun, **kwargs: given.append(kwargs) or fun
    )
    _jit.top_level_jit(lambda x: x)
    _jit.top_level_jit(repeated=True)(lambda x: x)
    assert [kwargs["compiler_options"][_LEVEL] for kwargs in given] == [0, 1]


def _rollout_jacobian(K, x0, u):
    """A fit's kind of program: a linear rollout, its forward-mode Jacobian with
    respect to `K`, and an SVD of it."""

    def outputs(K):
        def step(x, u_t):
            x = K @ x + u_t
            return x, x[0]

        return jax.lax.scan(step, x0, u)[1]

    jacobian = jax.jacfwd(outputs)(K).reshape(u.shape[0], -1)
    return outputs(K), jnp.linalg.svd(jacobian, compute_uv=False)


@pytest.mark.parametrize("repeated", [False, True])
def test_a_program_compiled_with_the_options_computes_the_same(repeated):
    options = _jit.compiler_options("", repeated=repeated)
    if not options:
        pytest.skip("the installed jaxlib is not one the options were measured on")
    rng = np.random.default_rng(0)
    K = jnp.asarray(0.3 * rng.normal(size=(4, 4)) + 0.5 * np.eye(4))
    x0 = jnp.asarray(rng.normal(size=4))
    u = jnp.asarray(rng.normal(size=(200, 4)))
    plain = jax.jit(_rollout_jacobian)(K, x0, u)
    with_options = jax.jit(_rollout_jacobian, compiler_options=options)(K, x0, u)
    for a, b in zip(plain, with_options):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=0)


def test_top_level_jit_attaches_the_options(monkeypatch):
    if not _jit.compiler_options(""):
        pytest.skip("the installed jaxlib is not one the options were measured on")
    monkeypatch.setenv("XLA_FLAGS", "")  # (the test run may set them for all)
    double = _jit.top_level_jit(lambda x: 2 * x)
    assert float(double(jnp.array(1.5))) == 3.0
    # JAX refuses compiler options on a nested program: proof they are attached.
    with pytest.raises(ValueError, match="compiler_options"):
        jax.jit(lambda x: double(x) + 1)(jnp.array(1.5))


@pytest.mark.usefixtures("no_persistent_cache")  # a program read back is not counted
def test_device_array_moves_host_data_without_compiling_and_as_jnp_asarray():
    from ..compile_count import compiled_programs

    host = [
        np.arange(7.0).reshape(7, 1),
        np.arange(5, dtype=np.int32),
        np.array([1.5 + 2j]),
        np.ones((3, 2), bool),
    ]
    with compiled_programs(fresh=True) as compiled:
        moved = [_jit.device_array(a) for a in host]
        cast = _jit.device_array(np.arange(4.0).reshape(2, 2), np.float32)
    assert sum(compiled.values()) == 0, compiled
    for a, b in zip(host, moved):
        reference = jnp.asarray(a)
        assert isinstance(b, jax.Array) and b.dtype == reference.dtype
        np.testing.assert_array_equal(b, reference)
    assert cast.dtype == jnp.float32
    np.testing.assert_array_equal(cast, [[0, 1], [2, 3]])
    # JAX arrays and tracers go through `jnp.asarray`.
    x = jnp.arange(3.0)
    assert _jit.device_array(x) is x
    doubled = jax.jit(lambda v: _jit.device_array(v, jnp.float32) * 2)(x)
    np.testing.assert_array_equal(doubled, [0.0, 2.0, 4.0])


@pytest.mark.usefixtures("no_persistent_cache")
def test_host_key_is_jax_random_key_without_compiling():
    from ..compile_count import compiled_programs

    seeds = [0, 1, 7, 2**31 - 1]
    with compiled_programs(fresh=True) as compiled:
        keys = [_jit.host_key(seed) for seed in seeds]
    assert sum(compiled.values()) == 0, compiled
    for seed, key in zip(seeds, keys):
        reference = jax.random.key(seed)
        assert key.dtype == reference.dtype and key.shape == reference.shape
        np.testing.assert_array_equal(
            jax.random.key_data(key), jax.random.key_data(reference)
        )
        np.testing.assert_array_equal(
            jax.random.normal(key, (3,)), jax.random.normal(reference, (3,))
        )
    # Seeds outside the range go through `jax.random.key` itself.
    for seed in (-1, 2**31, 2**40 + 3):
        np.testing.assert_array_equal(
            jax.random.key_data(_jit.host_key(seed)),
            jax.random.key_data(jax.random.key(seed)),
        )


@pytest.mark.usefixtures("no_persistent_cache")
def test_a_linear_system_of_numpy_arrays_is_built_without_compiling():
    import dynsys

    from ..compile_count import compiled_programs

    K, B, C = np.eye(3) * 0.5, np.ones((3, 1)), np.arange(3.0)[None]
    with compiled_programs(fresh=True) as compiled:
        system = dynsys.LinearSystem(K, B, C)
    assert sum(compiled.values()) == 0, compiled
    for built, given in zip((system.K, system.B, system.C), (K, B, C)):
        assert isinstance(built, jax.Array) and built.dtype == jnp.asarray(given).dtype
        np.testing.assert_array_equal(built, given)
    # Integers become floats.
    assert dynsys.LinearSystem(np.eye(2, dtype=int), None, np.eye(2)).K.dtype == (
        jnp.asarray(1.0).dtype
    )
