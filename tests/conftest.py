import ctypes
import gc
import os
import resource


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

import equinox as eqx  # noqa: E402
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


# Memory. Each pytest-xdist worker is one process holding a JAX runtime, and every
# program it compiles stays in JAX's (and equinox's) caches until they are cleared:
# a `dynsys fit` on a real record compiles ~400 programs, ~0.6 GB with their
# caches. They are dropped after each test module (a later module rarely runs the
# same shapes again), and after any test that leaves the process above
# _RELEASE_ABOVE_MB (the CLI tests run several such fits in one module). Freed
# memory stays in glibc's arenas until malloc_trim gives it back to the system.
# DYNSYS_TEST_KEEP_CACHES=1 keeps them, to measure the difference. Each worker's
# peak resident memory is reported at the end of the run ("peak memory per
# process").
_KEEP_CACHES = os.environ.get("DYNSYS_TEST_KEEP_CACHES") == "1"
_RELEASE_ABOVE_MB = 800


def _release_compiled_programs() -> None:
    eqx.clear_caches()
    jax.clear_caches()
    gc.collect()
    try:  # glibc only (Linux); elsewhere the memory stays with the process
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _resident_megabytes() -> float:
    """This process's resident memory now (Linux; 0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs_after_each_module():
    yield
    if not _KEEP_CACHES:
        _release_compiled_programs()


@pytest.fixture(autouse=True)
def _drop_compiled_programs_after_a_heavy_test():
    yield
    if not _KEEP_CACHES and _resident_megabytes() > _RELEASE_ABOVE_MB:
        _release_compiled_programs()


def _peak_megabytes() -> float:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if os.uname().sysname == "Darwin" else peak / 2**10


_peaks: dict[str, float] = {}


def pytest_sessionfinish(session):
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: tell the controller
        output["peak_megabytes"] = _peak_megabytes()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker finished: keep its peak memory for the summary."""
    peak = getattr(node, "workeroutput", {}).get("peak_megabytes")
    if peak is not None:
        _peaks[node.gateway.id] = peak


def pytest_terminal_summary(terminalreporter):
    if not _peaks:  # no workers: this process ran the tests
        _peaks["main"] = _peak_megabytes()
    report = ", ".join(f"{name} {mb:,.0f} MB" for name, mb in sorted(_peaks.items()))
    caches = "kept" if _KEEP_CACHES else "dropped after each module"
    terminalreporter.write_line(
        f"peak memory per process (ru_maxrss; compiled programs {caches}): {report}"
    )


def pytest_collection_modifyitems(items):
    """The tests marked slow run first: pytest-xdist hands out the rest as workers
    free up, so no worker is left finishing a minute-long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
