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
# And the XLA options the `dynsys` command compiles with (`dynsys/_compile/jit.py`), for every
# program of the run: 0.85x the time of the fitting tests.
from dynsys._compile.jit import use_for_process  # noqa: E402 (imports no JAX)


use_for_process()

# Compiled programs are shared by the whole test run through JAX's persistent
# compilation cache in a temporary folder (`_shared_compile_cache`), never dynsys's
# default folder in the user's home. A run given a cache by the user (either variable
# below) keeps it; DYNSYS_TEST_SHARED_CACHE=0, or a process that does not take part,
# compiles everything itself (DYNSYS_CACHE_DIR=off). The tests of the cache
# (test_compile_cache.py) give it folders of their own.
_USERS_CACHE = any(
    name in os.environ for name in ("DYNSYS_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")
)
_SHARE_CACHE = os.environ.get("DYNSYS_TEST_SHARED_CACHE", "1") != "0"
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # (a worker inherits the shared one)
    os.environ.setdefault("DYNSYS_CACHE_DIR", "off")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.monitoring  # noqa: E402
import pytest  # noqa: E402


# The shared cache. Most CLI tests fit the same built-in data and most library tests
# the same few shapes, in different modules and workers (each worker drops its
# compiled programs after every module, see below): a program one of them compiled is
# read back by the others. Only programs that take at least _SHARED_MIN_SECONDS to
# compile are written (they are most of the compile time; JAX scans the folder on
# every write), and a size limit makes JAX lock the folder around each read and write
# (filelock), so that two processes never read a half-written entry.
_SHARED_MIN_SECONDS = 0.2
_SHARED_OPTIONS = {  # JAX's options; each is also read from JAX_<NAME> at import
    "jax_persistent_cache_min_compile_time_secs": _SHARED_MIN_SECONDS,
    "jax_compilation_cache_max_size": 8 * 2**30,
}


def _shared_compile_cache(config) -> str | None:
    """In the process that starts the run (the xdist controller, or the only
    process): a temporary cache folder, handed to every process started after it
    (xdist workers, the dynsys processes tests start) by JAX's environment
    variables, and to this one by its config. `None` when not shared."""
    import importlib.util
    import tempfile

    if hasattr(config, "workerinput") or _USERS_CACHE or not _SHARE_CACHE:
        return None
    if importlib.util.find_spec("filelock") is None:  # (a test extra) no locking
        return None
    folder = tempfile.mkdtemp(prefix="dynsys-test-compile-cache-")
    del os.environ["DYNSYS_CACHE_DIR"]  # dynsys then uses JAX's folder as it is
    from jax.experimental.compilation_cache import compilation_cache

    for name, value in {"jax_compilation_cache_dir": folder, **_SHARED_OPTIONS}.items():
        os.environ[name.upper()] = str(value)  # the processes started later
        jax.config.update(name, value)  # this one (JAX is imported already)
    compilation_cache.reset_cache()
    return folder


def pytest_configure(config):
    config._dynsys_shared_cache = _shared_compile_cache(config)


def pytest_unconfigure(config):
    import shutil

    folder = getattr(config, "_dynsys_shared_cache", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


_CACHE_OPTIONS = (
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
    "jax_compilation_cache_max_size",
)


@pytest.fixture
def pristine_cache(monkeypatch):
    """Restore JAX's cache options and dynsys's record of them after a test that
    changes them."""
    from jax.experimental.compilation_cache import compilation_cache

    from dynsys._compile import cache

    saved = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    monkeypatch.setattr(cache, "_current", None)
    monkeypatch.setattr(cache, "_said", set())
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


@pytest.fixture
def no_persistent_cache(pristine_cache, monkeypatch):
    """No persistent compilation cache inside the test, for the tests that count or
    time compilations (a program read back from the shared cache is not compiled).
    `DYNSYS_CACHE_DIR` is `off` too: dynsys reads it again inside the test
    (`pristine_cache` forgets its choice), and a folder the user gave the run would
    serve programs that other tests compiled."""
    from jax.experimental.compilation_cache import compilation_cache

    monkeypatch.setenv("DYNSYS_CACHE_DIR", "off")
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    yield


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
def _no_shapes_known_from_other_tests(monkeypatch):
    """Each test starts with no padded shapes known to this process
    (`_compile/known_shapes.py`): which shapes a fit pads to would otherwise depend
    on the tests that ran before it in the same worker."""
    from dynsys._compile import known_shapes

    monkeypatch.setattr(known_shapes, "_in_memory", set())


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

# What the shared compilation cache gave this process (JAX's own events): programs
# read back instead of compiled. (JAX's "compile time saved" event is not used: it
# reads about zero where whole runs take half the time.)
_read_back = {"programs": 0}


def _count_read_back(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        _read_back["programs"] += 1


jax.monitoring.register_event_listener(_count_read_back)


def pytest_sessionfinish(session):
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: tell the controller
        output["peak_megabytes"] = _peak_megabytes()
        output["read_back"] = dict(_read_back)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker finished: keep its peak memory for the summary."""
    output = getattr(node, "workeroutput", {})
    if output.get("peak_megabytes") is not None:
        _peaks[node.gateway.id] = output["peak_megabytes"]
    for key, value in output.get("read_back", {}).items():
        _read_back[key] += value


def pytest_terminal_summary(terminalreporter, config):
    if not _peaks:  # no workers: this process ran the tests
        _peaks["main"] = _peak_megabytes()
    report = ", ".join(f"{name} {mb:,.0f} MB" for name, mb in sorted(_peaks.items()))
    caches = "kept" if _KEEP_CACHES else "dropped after each module"
    terminalreporter.write_line(
        f"peak memory per process (ru_maxrss; compiled programs {caches}): {report}"
    )
    if getattr(config, "_dynsys_shared_cache", None) is not None:
        terminalreporter.write_line(
            f"shared compilation cache: {_read_back['programs']:,} programs read back "
            "instead of compiled in the test processes (not counting the dynsys "
            "processes tests start)"
        )


def pytest_collection_modifyitems(items):
    """The tests marked slow run first: pytest-xdist hands out the rest as workers
    free up, so no worker is left finishing a minute-long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
