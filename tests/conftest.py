import os


# The tests are dominated by XLA compilation of small programs, not by running them:
# skip LLVM's optimisations (results are the same, compiled code slower). Set before
# JAX creates its CPU backend; a user's own XLA_FLAGS are kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

# Tests write no compilation cache into the user's home (dynsys's default folder);
# the tests of the cache (test_compile_cache.py) give it a folder of their own.
os.environ.setdefault("DYNSYS_CACHE_DIR", "off")

import jax  # noqa: E402
import pytest  # noqa: E402


# float64 is needed for exactness checks; float32 tests ask for it explicitly.
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """A function returning a fresh PRNG key on each call (fixed seed per test)."""
    key = jax.random.key(0)

    def _getkey():
        nonlocal key
        key, subkey = jax.random.split(key)
        return subkey

    return _getkey
