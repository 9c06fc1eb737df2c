"""What the compile cache trusts and checks (issue 48, items 2, 3 and 10): a damaged
entry (bit flips, several seeds) gives the clean answer or is refused and compiled
again, never a crash or another answer; FIFOs, links and crafted pickles are refused
without hanging or running anything; a folder others may write is refused; pruning
removes only dynsys's own entries, on every run, whatever a stamp's date; a program
that cannot be written is said in one line and in the cache's status."""

import contextlib
import errno
import os
import pathlib
import pickle
import random
import signal
import subprocess
import sys
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._compile import (
    cache as _cache,
    entry_file as _entry_file,
    jit as _jit,
    kept_programs as _kept_programs,
    program_key as _program_key,
)


# This module's package, for the tests that let the key name its functions.
_ROOT = __name__.split(".")[0]
_keeps = pytest.mark.skipif(
    not _jit._keeps_programs(), reason="dynsys keeps no programs with this jaxlib"
)


def _program(x):
    """A small program with a LAPACK kernel (a custom call), as dynsys's have."""
    y = jnp.cumsum(jnp.sin(x) * x + 0.25) / 3.0
    s = jnp.linalg.svd(jnp.outer(y, x[:3]), compute_uv=False)
    return {"y": y, "s": s}


@contextlib.contextmanager
def _deadline(seconds: int):
    """Fail (rather than hang) when the block takes longer than `seconds`."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.fixture
def keyable(monkeypatch):
    """This module's functions may be kept; fresh records of what was said."""
    monkeypatch.setattr(_kept_programs, "_said", set())
    monkeypatch.setattr(_cache, "_said", set())
    monkeypatch.setattr(
        _program_key, "_NAMED_ROOTS", _program_key._NAMED_ROOTS | {_ROOT}
    )


@pytest.fixture
def kept_folder(tmp_path, monkeypatch, keyable):
    """A folder of kept programs, without a cache folder around it."""
    folder = tmp_path / "programs"
    monkeypatch.setattr(_kept_programs, "_folder", lambda: folder)
    return folder


def _said(caught, text: str) -> list[str]:
    return [str(w.message) for w in caught if text in str(w.message)]


def _flip(data: bytes, seed: int, flips: int) -> bytes:
    """`flips` random bits flipped in the middle 80 % of `data` (the probe's
    `flip.py`), or anywhere in it for odd seeds (its header and digest too)."""
    rng = random.Random(seed)
    damaged = bytearray(data)
    low, high = (0, len(data))
    if seed % 2 == 0:
        low, high = len(data) // 10, len(data) * 9 // 10
    for _ in range(flips):
        damaged[rng.randrange(low, high)] ^= 1 << rng.randrange(8)
    return bytes(damaged)


@_keeps
def test_a_damaged_kept_program_is_compiled_again_never_run(kept_folder):
    x = jnp.linspace(0.1, 2.0, 7)
    reference = eqx.filter_jit(_program)(x)
    _kept_programs.KeptProgram(_program, {})(x)
    (path,) = kept_folder.glob("*.program")
    clean = path.read_bytes()
    for seed in range(12):
        path.write_bytes(_flip(clean, seed, flips=1 + seed % 8))
        _cache._said.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = _kept_programs.KeptProgram(_program, {})(x)  # a new process's
        for name in ("y", "s"):
            np.testing.assert_array_equal(out[name], reference[name])
        assert len(_said(caught, "compile-cache entry was ignored")) == 1, seed
        # Written over with a whole entry, which the next process loads.
        assert _entry_file.read(path, path.stem) is not None, seed
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = _kept_programs.KeptProgram(_program, {})(x)
        assert not _said(caught, "ignored")
        np.testing.assert_array_equal(again["y"], reference["y"])


def test_a_damaged_jax_entry_is_compiled_again(tmp_path, pristine_cache, monkeypatch):
    # JAX's own entries go through dynsys's checked files too.
    status = dynsys.use_compile_cache(tmp_path / "cache")
    entries = tmp_path / "cache" / _cache.JAX_SUBFOLDER
    events = []
    listener = lambda event, **kw: events.append(event)  # noqa: E731
    jax.monitoring.register_event_listener(listener)

    def run():
        jax.clear_caches()
        return jax.jit(lambda v: jnp.cumsum(v * v + 0.5) / 3.0)(np.arange(5.0))

    try:
        _check_damaged_jax_entries(run, entries, events, monkeypatch)
    finally:
        jax.monitoring.unregister_event_listener(listener)
    assert status.folder == str(tmp_path / "cache")


def _check_damaged_jax_entries(run, entries, events, monkeypatch):
    reference = run()
    (path,) = entries.glob("*" + _cache.JAX_SUFFIX)
    clean = path.read_bytes()
    events.clear()
    np.testing.assert_array_equal(run(), reference)
    assert "/jax/compilation_cache/cache_hits" in events  # read back, checked
    for seed in range(6):
        path.write_bytes(_flip(clean, seed, flips=1 + seed))
        monkeypatch.setattr(_cache, "_said", set())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            np.testing.assert_array_equal(run(), reference)
        assert len(_said(caught, "compile-cache entry was ignored")) == 1, seed
        assert _entry_file.read(path, path.name[: -len(_cache.JAX_SUFFIX)]) is not None


@_keeps
def test_fifos_and_links_are_refused_without_waiting(kept_folder, tmp_path):
    x = jnp.linspace(0.1, 2.0, 7)
    reference = eqx.filter_jit(_program)(x)
    _kept_programs.KeptProgram(_program, {})(x)
    (path,) = kept_folder.glob("*.program")
    valid = tmp_path / "valid.program"
    path.rename(valid)
    for make in (
        os.mkfifo,
        lambda p: p.symlink_to("/dev/zero"),
        lambda p: p.symlink_to(valid),  # even to a valid entry: not followed
    ):
        make(path)
        with _deadline(60), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _cache._said.clear()
            out = _kept_programs.KeptProgram(_program, {})(x)
        np.testing.assert_array_equal(out["y"], reference["y"])
        assert _said(caught, "compile-cache entry was ignored")
        assert path.is_file() and not path.is_symlink()  # written over
        path.unlink()
    with _deadline(60), pytest.raises(_entry_file.Refused, match="not a regular"):
        os.mkfifo(tmp_path / "fifo")
        _entry_file.read(tmp_path / "fifo", "fifo")
    with pytest.raises(_entry_file.Refused, match=r"holds \d+ bytes \(at most 63\)"):
        _entry_file.read(valid, path.stem, max_bytes=10)


def test_a_crafted_pickle_with_a_valid_digest_runs_nothing(kept_folder, tmp_path):
    marker = tmp_path / "MARKER"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    key = "0" * 64
    kept_folder.mkdir()
    _entry_file.write(kept_folder / f"{key}.program", key, pickle.dumps(Payload()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _kept_programs.load(kept_folder / f"{key}.program", key) is None
    assert not marker.exists()
    assert _said(caught, "names posix.system") or _said(caught, "names os.system")


def test_an_entry_filed_under_another_key_is_refused(tmp_path):
    path = tmp_path / "a.entry"
    _entry_file.write(path, "a", b"content")
    assert _entry_file.read(path, "a") == b"content"
    with pytest.raises(_entry_file.Refused, match="digest"):
        _entry_file.read(path, "b")
    path.write_bytes(b"content without a header")
    with pytest.raises(_entry_file.Refused, match="not an entry"):
        _entry_file.read(path, "a")
    assert _entry_file.read(tmp_path / "missing", "a") is None


def test_a_folder_others_may_write_is_refused(tmp_path, pristine_cache):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="can be written by group or others"):
        status = dynsys.use_compile_cache(folder)
    assert status.folder is None and "mode 0o777" in status.reason
    assert jax.config.jax_compilation_cache_dir is None
    # A subfolder of dynsys's that group may write: the same.
    folder.chmod(0o700)
    assert dynsys.use_compile_cache(folder).folder == str(folder)
    (folder / _cache.KEPT_SUBFOLDER).chmod(0o770)
    with pytest.warns(RuntimeWarning, match="can be written by group or others"):
        status = dynsys.use_compile_cache(folder)
    assert status.folder is None
    (folder / _cache.KEPT_SUBFOLDER).chmod(0o700)
    assert dynsys.use_compile_cache(folder).folder == str(folder)


def test_a_folder_of_another_user_is_refused(tmp_path, pristine_cache, monkeypatch):
    monkeypatch.setattr(_cache, "_user_id", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.warns(RuntimeWarning, match="belongs to another user"):
        status = dynsys.use_compile_cache(tmp_path / "cache")
    assert status.folder is None and "who could plant programs" in status.reason


def _ours(folder: pathlib.Path, name: str, size: int, used: float) -> pathlib.Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    _entry_file.write(path, name, b"x" * size)
    os.utime(path, (used, used))
    return path


def test_pruning_removes_only_dynsys_entries(tmp_path):
    # The probe's folder: a user's 3 GiB backup and its companion, notes, and
    # files named like entries in dynsys's subfolders that dynsys did not write.
    foreign = {
        "backup-cache": None,
        "backup-atime": b"x",
        "notes.txt": b"mine",
        "jit_f-0-cache": b"an old JAX entry",
        "programs/mine.program": b"not dynsys's" * 100,
        "jax/mine.entry": b"not dynsys's" * 100,
        "programs/notes.txt": b"mine",
    }
    for name, content in foreign.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        if content is None:
            with open(path, "wb") as file:
                file.truncate(3 * 2**30)  # sparse
        else:
            path.write_bytes(content)
        os.utime(path, (1_000_000, 1_000_000))  # the oldest of all
    for k in range(3):
        _ours(tmp_path / "programs", f"{k}.program", 1000, 2_000_000 + k)
        _ours(tmp_path / "jax", f"k{k}.entry", 1000, 2_000_000 + k)
    # Files named as entries count (they fill dynsys's subfolders), but only
    # dynsys's own are removed: 6 x 1053 bytes of its own, 2 x 1200 of others'.
    removed = _cache.prune_folder(tmp_path, max_bytes=4600)
    assert removed == 4  # the four least recently used of dynsys's own
    left = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    assert {"programs/2.program", "jax/k2.entry"} <= left
    assert not {"programs/0.program", "jax/k0.entry", "jax/k1.entry"} & left
    for name in foreign:
        assert (tmp_path / name).exists(), name
    assert (tmp_path / "backup-cache").stat().st_size == 3 * 2**30
    # However far over: nothing but dynsys's entries goes.
    _cache.prune_folder(tmp_path, max_bytes=0)
    for name in foreign:
        assert (tmp_path / name).exists(), name


def test_the_cap_holds_on_every_run_whatever_a_stamp_says(
    tmp_path, pristine_cache, monkeypatch
):
    monkeypatch.setattr(_cache, "_MAX_BYTES", 3000)
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    stamp = folder / ".dynsys-pruned"  # what once switched pruning off for a day
    stamp.touch()
    os.utime(stamp, (4_102_444_800, 4_102_444_800))  # 2100-01-01
    for k in range(5):
        _ours(folder / "programs", f"{k}.program", 1000, 2_000_000 + k)
    # An entry dated in the future counts as used now, not as newest forever.
    _ours(folder / "programs", "future.program", 1000, 4_102_444_800)
    dynsys.use_compile_cache(folder)
    left = {p.name for p in (folder / "programs").iterdir()}
    assert len(left) == 2 and "4.program" in left, left
    for k in range(5, 8):  # the next run's programs
        _ours(folder / "programs", f"{k}.program", 1000, 3_000_000 + k)
    dynsys.use_compile_cache(folder)  # a second run, at once: pruned again
    left = {p.name for p in (folder / "programs").iterdir()}
    assert left == {"7.program", "future.program"}
    assert stamp.exists()  # not dynsys's to remove
    # Within a run, the writes that take the folder over the cap prune it.
    for k in range(8, 12):
        path = _ours(folder / "programs", f"{k}.program", 1000, 4_000_000 + k)
        _cache.note_written(path.parent, path.stat().st_size)
    assert sum(p.stat().st_size for p in (folder / "programs").iterdir()) <= 3000


@_keeps
def test_a_failed_write_after_the_first_is_said_and_in_the_status(
    tmp_path, pristine_cache, keyable, monkeypatch, capsys
):
    # The probe's full disk: the first program is kept, the next ones are not,
    # inside a stage that silences warnings.
    status = dynsys.use_compile_cache(tmp_path / "cache")
    inputs = [np.ones(n) for n in (4, 5, 6)]
    real_write = _entry_file.write
    written = []

    def fill_up(path, name, content):
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(path)
        return real_write(path, name, content)

    monkeypatch.setattr(_entry_file, "write", fill_up)
    with _cache.lines_printed(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in inputs:
            _kept_programs.KeptProgram(_program, {})(x)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"dynsys: compiled programs are not kept in {status.folder}/programs "
        "(No space left on device); compiling as usual."
    ]
    now = _cache.current_status()
    full = "No space left on device"
    assert now.not_kept == f"2 programs that could not be written ({full})"
    assert now.describe().endswith(", except " + now.not_kept)
    assert _cache.CacheStatus(**now.as_dict()) == now  # as metrics.json holds it
    # A new run counts anew.
    assert dynsys.use_compile_cache(tmp_path / "cache").not_kept is None


def test_the_commands_cache_lines_are_one_line_each(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    command = [sys.executable, "-m", "dynsys.cli", "fit", "--trajectories", "2"]
    command += ["--length", "10", "--steps", "2", "--no-progress", "--out", "run"]
    environment = {**os.environ, "DYNSYS_CACHE_DIR": str(folder)}
    environment["PYTHONPATH"] = str(pathlib.Path(dynsys.__file__).parents[1])
    result = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "compil" in line]
    assert lines == [
        f"dynsys: no compilation cache: {folder} can be written by group or others "
        f"(mode 0o777); 'chmod go-w {folder}' to use it; compiling as usual."
    ], result.stderr
    assert "RuntimeWarning" not in result.stderr
