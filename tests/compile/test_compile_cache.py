"""JAX's persistent compilation cache as dynsys uses it: a second identical
`dynsys fit` compiles nothing (counted by JAX's own monitoring events and by the
cache folder's entries) and a third one with broken entries compiles them again;
an unusable folder runs without the cache and says so once; `import dynsys` and a
plain library call change no JAX setting, and `dynsys.use_compile_cache` turns the
cache on. Each run of the command is a fresh interpreter, so that the cache is all
it can reuse."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._compile import cache as _compile_cache, entry_file as _entry_file
from dynsys._compile import jit as _jit


# `dynsys fit` through `dynsys.cli.main`, counting JAX's compilation events: each
# compilation request that may use the cache, each hit, each entry written (JAX
# records a write as a "cache miss").
_COUNTED_FIT = """
import collections, json, sys
import jax.monitoring

counts = collections.Counter()
jax.monitoring.register_event_listener(lambda event, **kwargs: counts.update([event]))
from dynsys import cli

code = cli.main(json.loads(sys.argv[1]))
prefix = "/jax/compilation_cache/"
print(json.dumps({k[len(prefix):]: v for k, v in counts.items() if k.startswith(prefix)}))
sys.exit(code)
"""

# Tiny simulated data: the same shapes each run.
_FIT = ["fit", "--trajectories", "4", "--length", "20", "--steps", "3", "--no-progress"]


def _fit(tmp_path: pathlib.Path, cache: str, out: str, **env) -> tuple[dict, str]:
    environment = {**os.environ, "DYNSYS_CACHE_DIR": cache, **env}
    result = subprocess.run(
        [sys.executable, "-c", _COUNTED_FIT, json.dumps([*_FIT, "--out", out])],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    return counts, result.stderr


def _entries(cache: pathlib.Path) -> set[str]:
    """JAX's compiled programs in a cache folder (in dynsys's subfolder for them)."""
    folder = cache / _compile_cache.JAX_SUBFOLDER
    if not folder.is_dir():
        return set()
    suffix = _compile_cache.JAX_SUFFIX
    return {p.name for p in folder.iterdir() if p.name.endswith(suffix)}


def _metrics(tmp_path: pathlib.Path, out: str) -> dict:
    return json.loads((tmp_path / out / "metrics.json").read_text())


def _kept(cache: pathlib.Path) -> dict[str, bytes]:
    """dynsys's kept programs in a cache folder (`kept_programs`), by file name."""
    folder = cache / _compile_cache.KEPT_SUBFOLDER
    return {
        p.name: p.read_bytes() for p in folder.glob("*" + _compile_cache.KEPT_SUFFIX)
    }


_HEATING = pathlib.Path(__file__).parents[2] / "data" / "real" / "heating.csv"


def _heating_fits(tmp_path: pathlib.Path, runs: list) -> None:
    """`dynsys fit DATA` with the heating record's roles for each `(out, DATA)` of
    `runs`, in order, with one cache folder (`tmp_path/cache`)."""
    environment = {**os.environ, "DYNSYS_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "dynsys.cli", "fit", "--inputs", "drive_V"]
    command += ["--outputs", "temp_C", "--no-progress"]
    for out, data in runs:
        result = subprocess.run(
            [*command, str(data), "--out", out],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr


@pytest.mark.skipif(
    not _jit._keeps_programs(), reason="dynsys keeps no programs with this jaxlib"
)
@pytest.mark.slow
def test_a_warm_fit_of_a_file_traces_nothing(tmp_path):
    # The command's second fit of a real record loads every program whole: nothing
    # is traced, not even a small eager operation (`jnp.asarray` of a host array,
    # an eager slice or sum, a PRNG key), each of which compiles a program of its
    # own; its programs were read ahead; the fit is the same.
    _heating_fits(tmp_path, [("first", _HEATING), ("second", _HEATING)])
    stages = _metrics(tmp_path, "second")["timing"]["stages"]
    for count in ("traces", "cache_hits", "programs_compiled"):
        assert sum(stage[count] for stage in stages.values()) == 0, (count, stages)
    assert sum(stage["programs_loaded"] for stage in stages.values()) >= 10
    listed = tmp_path / "cache" / _compile_cache.KEPT_SUBFOLDER
    assert len(list(listed.glob("*" + _compile_cache.NEXT_SUFFIX))) == 1
    first = _metrics(tmp_path, "first")
    assert _metrics(tmp_path, "second")["fit_percent"] == first["fit_percent"]


@pytest.mark.skipif(
    not _jit._keeps_programs(), reason="dynsys keeps no programs with this jaxlib"
)
@pytest.mark.slow
def test_a_file_of_another_length_compiles_none_of_the_fits_programs(tmp_path):
    # After a fit of the whole record, its first 720 samples: their own length
    # buckets (768, and 512 for the scan's first part) and a smaller chosen order,
    # but the fits are padded to the first run's shapes (`known_shapes`), so the
    # scan, the fit and the refit load their programs and compile none.
    lines = _HEATING.read_text().splitlines(keepends=True)
    shorter = tmp_path / "heating_720.csv"
    shorter.write_text("".join(lines[:721]))
    _heating_fits(tmp_path, [("whole", _HEATING), ("shorter", shorter)])
    first = _metrics(tmp_path, "whole")["timing"]
    assert first["stages"]["structure scan"]["programs_compiled"] > 0
    # The refit's chunk was compiled while the scan ran (`fit/ahead.py`).
    assert first["compiled_ahead"]["programs_compiled"] >= 1, first
    assert first["stages"]["refit"]["traces"] <= 1, first
    timing = _metrics(tmp_path, "shorter")["timing"]
    stages = timing["stages"]
    fitting = {name: stages[name] for name in ("structure scan", "fit", "refit")}
    for name, stage in fitting.items():
        assert stage["programs_compiled"] == stage["traces"] == 0, (name, stage)
    assert fitting["structure scan"]["programs_loaded"] > 0, fitting
    loaded = fitting["refit"]["programs_loaded"]
    assert loaded + timing["compiled_ahead"]["programs_loaded"] > 0, timing
    assert timing["compiled_ahead"]["programs_compiled"] == 0, timing


@pytest.mark.slow
def test_a_second_identical_fit_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    first, _ = _fit(tmp_path, str(cache), "first")
    written, kept = _entries(cache), _kept(cache)
    assert first.get("cache_misses", 0) == len(written) > 0
    # The optimiser's chunk, among others (none where dynsys keeps no programs: a
    # jaxlib it was not tested with, or an accelerator).
    assert bool(kept) == _jit._keeps_programs()
    second, _ = _fit(tmp_path, str(cache), "second")
    # Every compilation request of the second run was answered from the cache,
    # and the kept programs were not even asked for.
    assert second["compile_requests_use_cache"] > 0
    assert second.get("cache_hits", 0) == second["compile_requests_use_cache"]
    assert second.get("cache_misses", 0) == 0
    assert _entries(cache) == written and _kept(cache) == kept
    metrics = _metrics(tmp_path, "second")
    assert metrics["compile_cache"] == {
        "folder": str(cache),
        "source": "DYNSYS_CACHE_DIR",
        "reason": None,
    }
    assert metrics["summary"] == _metrics(tmp_path, "first")["summary"]
    # The stages' own counts (metrics.json["timing"]["stages"]) agree: the first
    # run compiled its programs (the kept ones outside JAX's cache), the second
    # loaded every one, from JAX's cache or as a kept program.
    for run, counts, loaded in (("first", first, 0), ("second", second, len(kept))):
        stages = _metrics(tmp_path, run)["timing"]["stages"]
        hits = sum(stage["cache_hits"] for stage in stages.values())
        compiled = sum(stage["programs_compiled"] for stage in stages.values())
        assert hits == counts.get("cache_hits", 0), (run, stages)
        kept_now = len(kept) if run == "first" else 0
        assert compiled == counts.get("cache_misses", 0) + kept_now, (run, stages)
        assert sum(s["programs_loaded"] for s in stages.values()) == loaded
    fit_stage = stages["fit"]
    assert fit_stage["programs_compiled"] == 0
    assert (fit_stage["programs_loaded"] > 0) == bool(kept)
    summary = (tmp_path / "second" / "summary.md").read_text()
    assert f"compiled programs are kept in {cache}" in summary

    # An entry that is not a whole entry of dynsys's (damaged, cut short, written
    # by someone else) is refused before JAX sees it and compiled again, with one
    # line for the whole run; a kept program likewise, written over; the run
    # succeeds with the same results.
    for name in written:
        (cache / _compile_cache.JAX_SUBFOLDER / name).write_bytes(b"not a program")
    for name in kept:
        (cache / _compile_cache.KEPT_SUBFOLDER / name).write_bytes(b"cut short")
    third, stderr = _fit(tmp_path, str(cache), "third")
    # Each refused entry compiled and written again (a program the run asks for
    # twice is read back from the entry it wrote over).
    assert third.get("cache_misses", 0) == first.get("cache_misses", 0) > 0
    assert third.get("cache_hits", 0) == first.get("cache_hits", 0)
    assert stderr.count("dynsys: a compile-cache entry was ignored") == 1, stderr
    assert "Error reading persistent compilation cache entry" not in stderr
    assert _metrics(tmp_path, "third")["summary"] == metrics["summary"]
    assert _kept(cache).keys() == kept.keys()
    assert all(content != b"cut short" for content in _kept(cache).values())
    assert all(
        (cache / _compile_cache.JAX_SUBFOLDER / name).read_bytes() != b"not a program"
        for name in written
    )


@pytest.mark.slow
def test_an_unusable_folder_runs_without_the_cache_and_says_so_once(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    cache = tmp_path / "a-file" / "cache"  # cannot be created, even by root
    counts, stderr = _fit(tmp_path, str(cache), "run")
    assert stderr.count("no compilation cache") == 1, stderr
    assert f"cannot write to {cache}" in stderr
    assert counts.get("cache_hits", 0) == counts.get("cache_misses", 0) == 0
    record = _metrics(tmp_path, "run")["compile_cache"]
    assert record["folder"] is None and f"cannot write to {cache}" in record["reason"]


def test_library_calls_leave_jax_alone_and_use_compile_cache_turns_it_on(tmp_path):
    """`import dynsys`, a rollout and `fit` change no JAX setting and write nothing
    to the default folder; `dynsys.use_compile_cache()` points the cache at
    `$XDG_CACHE_HOME/dynsys/jax`, and a later `fit` writes its programs there."""
    code = (
        "import jax, jax.numpy as jnp, dynsys\n"
        "system = dynsys.LinearSystem(K=0.5 * jnp.eye(2))\n"
        "data = dynsys.simulate(system, jnp.ones((2, 2)), 5)\n"
        "print(jax.config.jax_compilation_cache_dir)\n"
        "dynsys.fit(system, data, num_steps=2, progress=False)\n"
        "print(jax.config.jax_compilation_cache_dir)\n"
        "print(dynsys.use_compile_cache().folder)\n"
        "data = dynsys.simulate(system, jnp.ones((2, 2)), 6)\n"  # not compiled yet
        "dynsys.fit(system, data, num_steps=2, progress=False)\n"
        "print(jax.config.jax_compilation_cache_dir)\n"
    )
    # Neither dynsys's variable nor JAX's (the test run's shared cache).
    environment = {
        k: v
        for k, v in os.environ.items()
        if k != "DYNSYS_CACHE_DIR" and not k.startswith("JAX_COMPILATION_CACHE")
    }
    environment["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "xdg" / "dynsys" / "jax"
    assert result.stdout.split() == ["None", "None", str(folder), str(folder)]
    assert _entries(folder)


def test_a_plain_fit_changes_no_jax_setting(tmp_path, monkeypatch, pristine_cache):
    # Even with a folder of dynsys's in the environment (which `fit` once pointed
    # JAX's cache at): a library call leaves every JAX setting as it found it.
    monkeypatch.setenv("DYNSYS_CACHE_DIR", str(tmp_path / "from-env"))
    true = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    data = dynsys.simulate(true, jax.random.normal(jax.random.key(0), (4, 2)), 20)
    start = dynsys.LinearSystem(K=0.5 * jnp.eye(2))
    before = dict(jax.config.values)
    plain = dynsys.fit(start, data, progress=False)
    assert dict(jax.config.values) == before
    assert _compile_cache.current_status() is None
    assert not (tmp_path / "from-env").exists()

    # `use_compile_cache(folder)` turns the cache on at that folder and says so.
    folder = tmp_path / "mine"
    status = dynsys.use_compile_cache(folder)
    assert status == _compile_cache.CacheStatus(str(folder), "config")
    assert _compile_cache.current_status() == status
    assert jax.config.jax_compilation_cache_dir == str(folder) and folder.is_dir()
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == -1
    assert jax.config.jax_compilation_cache_max_size == -1
    # A fit with the cache on (kept programs, where this jaxlib keeps them) gives
    # the same model, to the bit.
    cached = dynsys.fit(start, data, progress=False)
    np.testing.assert_array_equal(cached.model.K, plain.model.K)
    np.testing.assert_array_equal(cached.losses, plain.losses)
    if _jit._keeps_programs():
        assert list((folder / _compile_cache.KEPT_SUBFOLDER).iterdir())


def test_which_setting_wins(tmp_path, monkeypatch, pristine_cache):
    monkeypatch.setenv("DYNSYS_CACHE_DIR", str(tmp_path / "from-env"))
    status = _compile_cache.use_compile_cache(str(tmp_path / "from-config"))
    assert (status.folder, status.source) == (str(tmp_path / "from-config"), "config")
    assert jax.config.jax_compilation_cache_dir == status.folder
    status = _compile_cache.use_compile_cache()
    assert (status.folder, status.source) == (
        str(tmp_path / "from-env"),
        "DYNSYS_CACHE_DIR",
    )
    for off in ("off", "", "OFF"):
        monkeypatch.setenv("DYNSYS_CACHE_DIR", off)
        status = _compile_cache.use_compile_cache()
        assert status.folder is None and "turned off" in status.reason
        assert jax.config.jax_compilation_cache_dir is None
    status = _compile_cache.use_compile_cache("off")
    assert status.reason == "turned off (config key 'compile_cache' = 'off')"


def test_the_users_own_jax_folder_is_kept(tmp_path, monkeypatch, pristine_cache):
    monkeypatch.delenv("DYNSYS_CACHE_DIR", raising=False)
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "theirs"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.5)
    status = _compile_cache.use_compile_cache()
    assert (status.folder, status.source) == (str(tmp_path / "theirs"), "jax")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.5
    # A second run of the process keeps it (it once went to the default folder).
    assert _compile_cache.use_compile_cache() == status
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "theirs")


def test_the_default_folder_honours_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _compile_cache.default_folder() == tmp_path / "dynsys" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".cache" / "dynsys" / "jax"
    assert _compile_cache.default_folder() == expected


def test_a_full_disk_turns_the_cache_off(tmp_path, monkeypatch, pristine_cache):
    class Usage:
        free = 10 * 2**20

    monkeypatch.setattr(_compile_cache.shutil, "disk_usage", lambda path: Usage)
    with pytest.warns(RuntimeWarning, match="10 MiB free") as caught:
        status = _compile_cache.use_compile_cache(str(tmp_path / "cache"))
        _compile_cache.use_compile_cache(str(tmp_path / "cache"))  # said once
    assert len(caught) == 1
    assert caught[0].filename == __file__  # the caller's line, not dynsys's
    assert status.folder is None and jax.config.jax_compilation_cache_dir is None


def _entry(path: pathlib.Path, size: int, used: float) -> None:
    path.parent.mkdir(exist_ok=True)
    _entry_file.write(path, path.name, b"x" * size)
    os.utime(path, (used, used))


def test_a_folder_over_its_size_loses_its_least_recently_used_programs(tmp_path):
    """`prune_folder` keeps the most recently used entries of dynsys's subfolders
    (JAX's and the kept programs, counted together) within the size, and leaves
    every other file alone; it runs each time it is called (no stamp)."""
    jax_folder = tmp_path / _compile_cache.JAX_SUBFOLDER
    for k in range(6):  # entry k used at time k
        _entry(jax_folder / f"jit_f-{k}{_compile_cache.JAX_SUFFIX}", 1000, 1e6 + k)
    (tmp_path / "notes.txt").write_text("not the cache's")
    (jax_folder / "notes.txt").write_text("not the cache's")
    size = (jax_folder / f"jit_f-0{_compile_cache.JAX_SUFFIX}").stat().st_size
    removed = _compile_cache.prune_folder(tmp_path, max_bytes=3 * size)
    assert removed == 3
    assert _entries(tmp_path) == {f"jit_f-{k}.entry" for k in (3, 4, 5)}
    assert (tmp_path / "notes.txt").read_text() == "not the cache's"
    assert (jax_folder / "notes.txt").read_text() == "not the cache's"
    # Called again at once: checked again.
    _entry(jax_folder / "jit_g-0.entry", 5000, 2e6)
    assert _compile_cache.prune_folder(tmp_path, max_bytes=5100) == 3
    assert _entries(tmp_path) == {"jit_g-0.entry"}  # the newest, alone at the limit
    # dynsys's kept programs (and read-ahead lists) are counted and pruned with
    # JAX's entries, by use.
    kept = tmp_path / _compile_cache.KEPT_SUBFOLDER
    for k in range(2):
        _entry(kept / f"{k}{_compile_cache.KEPT_SUFFIX}", 1000, 3e9 + k)  # newest
    (kept / "notes.txt").write_text("not the cache's")
    assert _compile_cache.prune_folder(tmp_path, max_bytes=2 * size) == 1
    assert _entries(tmp_path) == set()
    assert sorted(p.name for p in kept.iterdir()) == [
        "0.program",
        "1.program",
        "notes.txt",
    ]
    _entry(kept / f"1{_compile_cache.NEXT_SUFFIX}", 10, 3e9 + 2)
    assert _compile_cache.prune_folder(tmp_path, max_bytes=size + 100) == 1
    assert sorted(p.name for p in kept.iterdir()) == [
        "1.next",
        "1.program",
        "notes.txt",
    ]
