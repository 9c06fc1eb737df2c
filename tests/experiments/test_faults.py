"""Fault injection: hostile files fail small, signals stop runs cleanly, a killed run
never looks complete, --out never deletes a user's files, eager rollouts stay flat.

The memory and signal checks run in subprocesses (peak RSS is per process; signals
need a process to hit). The slowest ones are marked `slow` (CI still runs them).
"""

import hashlib
import io
import json
import os
import pathlib
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
import tomllib

import numpy as np
import pytest

import dynsys
from dynsys import cli
from dynsys._experiments.run_folder import clean_stale, MARKER


ROOT = pathlib.Path(__file__).resolve().parents[2]
FIT = {
    "kind": "fit",
    "name": "small",
    "data": {"trajectories": 4, "length": 20},
    "fit": {"steps": 10},
}


def _python(script: str, cwd, timeout=180) -> dict:
    """Run `script` in a fresh interpreter; it prints one JSON line last."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------------
# Hostile model files


def _model_file(path, header, payload=None):
    if payload is None:
        buffer = io.BytesIO()
        np.save(buffer, np.eye(2, dtype=np.float32))
        payload = buffer.getvalue()
    if isinstance(header, dict):
        header = {
            "payload_bytes": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
            **header,
        }
        header = json.dumps(header).encode()
    length = struct.pack("<Q", len(header))
    path.write_bytes(b"DYNSYS-MODEL\n" + length + header + payload)


def _hostile_model_files(folder: pathlib.Path) -> dict[str, str]:
    """name -> the words the refusal must contain."""
    big = [32768, 32768]  # 4 GiB of float32 if a template were allocated
    base = {"format": "dynsys-model", "format_version": 1}
    linear = {**base, "class": "dynsys.LinearSystem"}
    two = {"shape": [2, 2], "dtype": "float32"}
    cases = {}

    def add(name, words, header, payload=None):
        _model_file(folder / name, header, payload)
        cases[name] = words

    add("bomb", "claims", {**linear, "leaves": [{"shape": big, "dtype": "float32"}],
        "fields": {"K": {"shape": big, "dtype": "float32"}}})  # fmt: skip
    add("bomb_fields", "disagree", {**linear, "leaves": [two],
        "fields": {"K": {"shape": big, "dtype": "float32"}}})  # fmt: skip
    add("bomb_rank", "has rank 40", {**linear, "leaves": [two],
        "fields": {"K": {"shape": [2] * 40, "dtype": "float32"}}})  # fmt: skip
    add("object_dtype", "not a numeric dtype", {**linear,
        "leaves": [{"shape": [2, 2], "dtype": "object"}],
        "fields": {"K": {"shape": [2, 2], "dtype": "object"}}})  # fmt: skip
    add("extra_field", "does not have", {**linear, "leaves": [two],
        "fields": {"K": two, "__class__": {"static": "os.system"}}})  # fmt: skip
    add("version_string", "not an integer", {**linear, "format_version": "9",
        "leaves": [two], "fields": {"K": two}})  # fmt: skip
    add("no_payload_bytes", "payload_bytes", b'{"format": "dynsys-model", '
        b'"class": "dynsys.LinearSystem", "leaves": []}')  # fmt: skip
    add("list_header", "wrong format", b"[]")
    add("deep_header", "nested too deeply", b"[" * 100_000)
    add("huge_header_length", "truncated", b"")
    raw = (folder / "huge_header_length").read_bytes()
    (folder / "huge_header_length").write_bytes(
        raw[:13] + struct.pack("<Q", 2**64 - 1) + raw[21:]
    )
    # The payload's own npy header claims 160 GB; the template says (2, 2).
    inner = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        inner, {"descr": "<f4", "fortran_order": False, "shape": (200000, 200000)}
    )
    inner = inner.getvalue() + bytes(16)
    add("inner_npy_bomb", "shape (200000, 200000) on disk", {**linear,
        "leaves": [two], "fields": {"K": two}}, inner)  # fmt: skip
    os.symlink("/dev/zero", folder / "zero_link")
    cases["zero_link"] = "not a regular file"
    os.mkfifo(folder / "fifo")
    cases["fifo"] = "not a regular file"
    (folder / "a_folder").mkdir()
    cases["a_folder"] = "a folder"
    return cases


def test_hostile_model_files_fail_small(tmp_path):
    """Each hostile file is one ValueError naming the problem; peak memory stays
    within 100 MB of loading a normal small model (measured in a subprocess)."""
    cases = _hostile_model_files(tmp_path)
    dynsys.save(tmp_path / "good", dynsys.LinearSystem(np.eye(2, dtype=np.float32)))
    result = _python(
        f"""
        import json, resource
        import dynsys
        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        for _ in range(2):
            dynsys.load("good")
        baseline = peak()
        out = {{}}
        for name in {sorted(cases)!r}:
            try:
                dynsys.load(name)
                out[name] = "LOADED"
            except ValueError as error:
                out[name] = str(error)
            except BaseException as error:
                out[name] = f"{{type(error).__name__}}: {{error}}"
        print(json.dumps({{"messages": out, "baseline": baseline, "peak": peak()}}))
        """,
        cwd=tmp_path,
    )
    for name, words in cases.items():
        message = result["messages"][name]
        assert message.startswith(f"load(path='{name}'):") or message.startswith(
            "load(like=...)"
        ), message
        assert words in message, (name, message)
        assert "\n" not in message
    assert result["peak"] - result["baseline"] < 100, result


def test_model_files_remember_static_settings(tmp_path, getkey):
    """A template with another bound, activation, use_time or width is refused,
    naming the field (not silently loaded into a different controller)."""
    import jax

    def controller(**changes):
        settings = dict(width_size=8, depth=3, bound=15.0, use_time=False) | changes
        return dynsys.StackedController.mlp(2, 1, **settings, key=jax.random.key(0))

    path = tmp_path / "c.dynsys"
    saved = controller()
    dynsys.save(path, saved)
    back = dynsys.load(path, like=controller())
    np.testing.assert_array_equal(back(0.0, np.ones(2)), saved(0.0, np.ones(2)))
    for changes, field in [
        ({"bound": None}, "like.bound"),
        ({"bound": 1.0}, "like.bound"),
        ({"use_time": True}, "like.use_time"),
        ({"width_size": 16}, "like.first.out_size"),
    ]:
        with pytest.raises(ValueError, match=rf"load\(like=\.\.\.\): {field}"):
            dynsys.load(path, like=controller(**changes))
    mlp = dynsys.MLPController(2, 1, 8, 2, bound=2.0, key=getkey())
    dynsys.save(path, mlp)
    relu = dynsys.MLPController(
        2, 1, 8, 2, bound=2.0, activation=jax.nn.relu, key=getkey()
    )
    with pytest.raises(ValueError, match=r"like\.mlp\.activation is .*relu.*tanh"):
        dynsys.load(path, like=relu)


# ---------------------------------------------------------------------------------
# --out never deletes what dynsys did not write


def _user_files(folder: pathlib.Path) -> dict[str, bytes]:
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.tex").write_text("my thesis")
    (folder / "sub" / "data.bin").write_bytes(b"\x00\x01")
    return _snapshot(folder)


def _snapshot(folder: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("command", ["fit", "simulate", "api"])
def test_out_over_user_files_is_refused_before_anything_runs(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim"
    before = _user_files(victim)
    (tmp_path / "afile").write_text("keep me")
    (tmp_path / "work").mkdir()
    os.symlink(victim, tmp_path / "link")
    refusals = {
        "victim": "did not write",
        "afile": "existing file",
        "afile/sub": "not a folder",
        "link": "symbolic link",
        ".": "not a folder name",
        "..": "not a folder name",
        str(tmp_path): "working folder or one of its parents",
        "/proc/dynsys-test/x": "cannot be created",
    }
    for out, words in refusals.items():
        start = time.perf_counter()
        if command == "api":
            with pytest.raises(ValueError, match=words):
                dynsys.run_experiment(FIT, out=out, progress=False, echo=None)
        else:
            args = {
                "fit": ["fit", "--steps", "5", "--no-progress"],
                "simulate": ["simulate", "pendulum", "--steps", "5"],
            }[command]
            assert cli.main([*args, "--out", out]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and words in err and "--out" in err, err
        assert time.perf_counter() - start < 5  # refused before any fitting
    assert _snapshot(victim) == before
    assert (tmp_path / "afile").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "afile",
        "link",
        "victim",
        "work",
    ]


def test_out_replaces_only_its_own_run_folder(tmp_path):
    out = tmp_path / "run"
    description = 'line1\nline2\ttab\x07bell\x00nul\x7fdel "q" \\ é \u2028'
    first = dynsys.run_experiment(
        {**FIT, "description": description}, out=out, progress=False, echo=None
    )
    assert (out / MARKER).is_file() and first.metrics["status"] == "complete"
    # config.toml round-trips any string; metrics.json is strict JSON.
    written = tomllib.loads((out / "config.toml").read_text(encoding="utf-8"))
    assert written["description"] == description
    assert written["precision"] == "float64"
    _strict_json((out / "metrics.json").read_text())
    (out / "stale.txt").write_text("from the first run")
    dynsys.run_experiment(FIT, out=out, progress=False, echo=None)
    assert not (out / "stale.txt").exists()  # replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    older = tmp_path / "older"  # a run folder from before the marker
    older.mkdir()
    for name in ("config.toml", "metrics.json", "model.dynsys", "loss.png"):
        (older / name).write_text("")
    dynsys.run_experiment(FIT, out=older, progress=False, echo=None)
    assert (older / MARKER).is_file()
    (older / MARKER).unlink()
    (older / "notes.txt").write_text("mine")  # no longer only a run's files
    with pytest.raises(ValueError, match="did not write"):
        dynsys.run_experiment(FIT, out=older, progress=False, echo=None)
    assert (older / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder holds nothing to lose
    dynsys.run_experiment(FIT, out=empty, progress=False, echo=None)
    assert (empty / "metrics.json").is_file()


# ---------------------------------------------------------------------------------
# One-line errors


@pytest.mark.parametrize(
    "args, words",
    [
        (["simulate", "pendulum", "--steps", "-5"], "--steps"),
        (["simulate", "pendulum", "--batch", "0"], "--batch"),
        (["simulate", "pendulum", "--seed", str(2**70)], "--seed"),
        (["simulate", "pendulum", "--x0-mean", "nan"], "--x0-mean"),
        (["simulate", "lotka_volterra"], "--x0-mean 2"),
        (["fit", "--seed", str(2**70)], "--seed"),
        (["fit", "DIR"], "DATA"),
        (["fit", "EMPTY.npz"], "DATA"),
        (["fit", "GARBAGE.npz"], "DATA"),
        (["fit", "--loss", "shooting", "--horizon", "500"], "--horizon"),
        (["run", "BAD:system.params={num_masses = -2}"], "need at least 1 mass"),
        (["run", "BAD:system.params={mass = 0}"], "mass=0"),
        (["run", "BAD:system.params={num_masses = 100000}"], "numbers"),
        (["run", "BAD:seed=" + str(2**70)], "seed"),
        (["run", "BAD:name='" + "a" * 300 + "'"], "name"),
        (["run", "BAD:fit.batch_size=1000"], "batch_size"),
        (["run", "BAD:fit.steps=1000000000"], "'fit.steps'"),
        (["run", "DIR"], "not a regular file"),
    ],
)
def test_bad_input_is_one_line_with_status_2(args, words, tmp_path, capsys):
    (tmp_path / "DIR").mkdir()
    (tmp_path / "EMPTY.npz").write_bytes(b"")
    (tmp_path / "GARBAGE.npz").write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    config = tmp_path / "c.toml"
    config.write_text(
        'kind = "fit"\n[data]\ntrajectories = 4\nlength = 20\n[fit]\nsteps = 3\n'
    )
    if args[0] == "run":
        target = args[1]
        if target.startswith("BAD:"):
            args = ["run", str(config), "--set", target[4:]]
        else:
            args = ["run", str(tmp_path / target)]
        args += ["--out-root", str(tmp_path / "runs"), "--no-progress"]
    else:
        files = {"DIR", "EMPTY.npz", "GARBAGE.npz"}
        args = [str(tmp_path / a) if a in files else a for a in args]
        args += ["--out", str(tmp_path / "out")]
        if args[0] == "fit":
            args += ["--no-progress", "--steps", "3", "--trajectories", "4"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert words in err, err
    assert not (tmp_path / "out").exists()
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # nothing left behind


# ---------------------------------------------------------------------------------
# Strict JSON and config round trips


def test_metrics_are_strict_json_with_a_reason_for_non_finite_values():
    from dynsys._experiments.results import strict_json

    text = strict_json({"a": float("inf"), "b": [1.0, float("nan")], "c": {"d": 2}})
    value = _strict_json(text)
    assert value["a"] is None and value["b"] == [1.0, None] and value["c"] == {"d": 2}
    assert value["non_finite"] == {"a": "inf", "b[1]": "nan"}


# ---------------------------------------------------------------------------------
# Eager rollouts: compiled once, flat memory


def test_repeated_eager_rollouts_do_not_recompile_or_grow(tmp_path):
    result = _python(
        """
        import json, logging, os
        import jax, jax.numpy as jnp
        import dynsys

        def rss():
            pages = int(open("/proc/self/statm").read().split()[1])
            return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

        compiles = []

        class Count(logging.Handler):
            def emit(self, record):
                if "Compiling" in record.getMessage():
                    compiles.append(record.getMessage())

        logging.getLogger("jax").addHandler(Count())
        B = jnp.array([[0.0], [1.0]])
        x0, us = jnp.ones((8, 2)), jnp.zeros((8, 100, 1))
        def call(i):
            K = jnp.array([[0.95, 0.2], [-0.2, 0.95]]) * (1 - 1e-4 * i)
            traj = dynsys.rollout(dynsys.LinearSystem(K, B), x0, 100, inputs=us)
            return traj.xs.block_until_ready()
        for i in range(5):
            call(i)
        jax.config.update("jax_log_compiles", True)
        before = rss()
        for i in range(300):
            call(i)
        print(json.dumps({"growth": rss() - before, "compiles": len(compiles)}))
        """,
        cwd=tmp_path,
    )
    # Before the cache: 2 compilations and +3.4 MB per call (about 1 GB here).
    assert result["compiles"] == 0, result
    assert result["growth"] < 40, result


# ---------------------------------------------------------------------------------
# Signals and kills (subprocesses running the real command)

_LONG = """
kind = "train_controller"
name = "long"
[controller]
type = "mlp"
width = 4
depth = 1
[train]
horizon = 10
initial_states = 8
test_states = 2
steps = 100000000
"""


# `dynsys` with Ctrl-C restored (a background job may inherit SIGINT ignored).
_DYNSYS = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from dynsys.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _start(args, cwd) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _DYNSYS, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def _wait_for(process: subprocess.Popen, words: str, timeout: float = 240) -> str:
    """Read the process's output until `words` appear (progress bars end lines with
    a carriage return, so read what is there, not lines)."""
    import select

    seen, deadline = "", time.monotonic() + timeout
    while words not in seen:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{words!r} never came:\n{seen}")
        if not ready:
            continue
        chunk = os.read(process.stdout.fileno(), 4096).decode(errors="replace")
        if not chunk:
            raise AssertionError(seen)
        seen += chunk
    return seen


def _check_runs(runs: pathlib.Path) -> list[pathlib.Path]:
    """Whatever a stop left in `runs`: nothing visible may look complete unless it
    is (then strict JSON, a loadable model, and its status). Returns the complete."""
    complete = []
    for entry in sorted(runs.iterdir()):
        if entry.name.startswith("."):
            continue
        names = {p.name for p in entry.iterdir()}
        if not names:
            continue  # an empty reserved folder: cleaned by the next run
        assert {"config.toml", "metrics.json", "summary.md", MARKER} <= names, names
        metrics = _strict_json((entry / "metrics.json").read_text())
        assert metrics["status"] in ("complete", "interrupted")
        if "sweep" not in metrics:  # the model file is whole (its checksum holds)
            with pytest.raises(ValueError, match="not built into dynsys"):
                dynsys.load(entry / "model.dynsys")  # a controller: needs like=
        complete.append(entry)
    return complete


@pytest.mark.slow
def test_sigterm_stops_two_identical_runs_started_together(tmp_path):
    """SIGTERM (timeout, Slurm, Kubernetes) is handled like Ctrl-C: each run keeps
    its best model in its own folder, marked interrupted; two identical runs started
    together never share a folder."""
    sig = signal.SIGTERM
    (tmp_path / "long.toml").write_text(_LONG)
    processes = [_start(["run", "long.toml"], tmp_path) for _ in range(2)]
    seen = [_wait_for(p, "%|") for p in processes]  # training has begun
    time.sleep(3.0)
    for process in processes:
        process.send_signal(sig)
    for process, before in zip(processes, seen):
        output = before + process.communicate(timeout=180)[0]
        assert process.returncode == 128 + sig, output
        assert "interrupted" in output
    folders = _check_runs(tmp_path / "runs")
    assert len(folders) == 2
    for folder in folders:
        metrics = _strict_json((folder / "metrics.json").read_text())
        assert metrics["status"] == "interrupted" and metrics["signal"] == sig.name
        assert "interrupted" in metrics["stop_reason"]
        assert metrics["steps_run"] < 100000000
        assert "**Interrupted**" in (folder / "summary.md").read_text()
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert names == sorted(f.name for f in folders)  # nothing hidden left


@pytest.mark.slow
def test_ctrl_c_stops_a_whole_sweep(tmp_path):
    sweep = _LONG + '[sweep]\nkey = "train.lr"\nvalues = [0.001, 0.002, 0.003]\n'
    (tmp_path / "sweep.toml").write_text(sweep)
    process = _start(["run", "sweep.toml"], tmp_path)
    seen = _wait_for(process, "%|")
    time.sleep(3.0)
    process.send_signal(signal.SIGINT)
    output = seen + process.communicate(timeout=180)[0]
    assert process.returncode == 130, output
    complete = _check_runs(tmp_path / "runs")
    assert len(complete) == 1, output
    (folder,) = complete
    metrics = _strict_json((folder / "metrics.json").read_text())
    assert metrics["status"] == "interrupted"
    assert [run["status"] for run in metrics["runs"]] == ["interrupted"]
    assert metrics["not_run"] == [0.002, 0.003]
    table = (folder / "summary.md").read_text()
    assert "| interrupted |" in table and table.count("not run") == 2
    subs = [p.name for p in folder.iterdir() if p.is_dir()]
    assert subs == ["lr=0.001"]


@pytest.mark.slow
def test_sigkill_at_random_moments_never_leaves_a_complete_looking_run(tmp_path):
    short = _LONG.replace("steps = 100000000", "steps = 30")
    (tmp_path / "short.toml").write_text(short)
    rng = random.Random(0)
    for delay in sorted(rng.uniform(1.0, 12.0) for _ in range(2)):
        process = _start(["run", "short.toml", "--no-progress"], tmp_path)
        time.sleep(delay)
        process.kill()
        process.wait(timeout=60)
        if (tmp_path / "runs").exists():
            _check_runs(tmp_path / "runs")
    runs = tmp_path / "runs"
    if runs.exists():
        complete = _check_runs(runs)
        clean_stale(runs)  # what the next run does first
        left = sorted(p.name for p in runs.iterdir())
        assert left == sorted(p.name for p in complete), left  # no litter


def test_leftovers_of_a_killed_run_are_cleaned_by_the_next(tmp_path):
    from dynsys._experiments.run_folder import _identity, _tag

    runs = tmp_path / "runs"
    runs.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    owner = {**_identity(), "pid": dead.pid}  # this host and boot, a dead pid
    tag = _tag(owner)

    def leftover(name, marker=True):
        folder = runs / name
        folder.mkdir()
        if marker:
            (folder / MARKER).write_text("")
            (folder / ".dynsys-owner").write_text(json.dumps(owner))
        return folder

    reserved = runs / "long-20260101-000000"
    reserved.mkdir()
    staging = leftover(f".{reserved.name}.partial-{tag}")
    (staging / "trajectories.png").write_bytes(b"")
    leftover(f".other.old-{tag}")
    alive = runs / f".mine.partial-{_tag(_identity())}"  # a run still going: kept
    alive.mkdir()
    (alive / MARKER).write_text("")
    (alive / ".dynsys-owner").write_text(json.dumps(_identity()))
    foreign = leftover(f".notes.partial-{tag}", marker=False)  # not ours: kept
    (foreign / "notes.txt").write_text("mine")
    # A dynsys from before host tags: its pid may be another host's, so kept.
    older = leftover(f".older.partial-{dead.pid}")
    result = dynsys.run_experiment(FIT, out_root=runs, progress=False, echo=None)
    left = sorted(p.name for p in runs.iterdir())
    assert left == sorted([alive.name, foreign.name, older.name, result.path.name])
