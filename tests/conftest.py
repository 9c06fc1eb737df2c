import jax
import pytest


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
