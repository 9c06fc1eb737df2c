"""Reliability on shared folders, interrupted sweeps, data that cannot support a
model, degenerate outputs and hostile files (issue 23).

Processes that must die, be signalled or live in another PID namespace run as real
subprocesses; each wait is bounded. The slow ones are marked `slow` (CI runs them).
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dynsys
from dynsys._experiments.run_folder import clean_stale, MARKER


ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------------
# 1. Run folders on shared file systems


# A child that builds a staging folder as a run does, writes into it, and dies
# without cleaning up (as a killed run, or a run on another host, looks from here).
_ABANDON = """
import os, pathlib, socket, sys
host = sys.argv[2]
if host:  # a run on another machine sharing this folder
    socket.gethostname = lambda: host
from dynsys._experiments.run_folder import reserve_folder, staging_folder
root = pathlib.Path(sys.argv[1])
staging = staging_folder(reserve_folder(root, "shared"))
(staging / "model.dynsys").write_bytes(b"work in progress")
print(staging.name, flush=True)
os._exit(0)
"""


def _abandon(root: pathlib.Path, host: str = "") -> pathlib.Path:
    result = subprocess.run(
        [sys.executable, "-c", _ABANDON, str(root), host],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert result.returncode == 0, result.stderr
    return root / result.stdout.split()[-1]


def test_a_run_from_another_host_is_never_removed(tmp_path):
    """Its pid means nothing here: it always looks dead, yet the run may be alive
    on its own machine. Only the same host's (and boot's) dead runs are cleaned."""
    foreign = _abandon(tmp_path, host="compute-node-17.cluster")
    ours = _abandon(tmp_path)
    assert "compute-node-17" in foreign.name
    removed = clean_stale(tmp_path)
    assert foreign.is_dir() and (foreign / "model.dynsys").is_file()
    assert (tmp_path / foreign.name.split(".partial-")[0][1:]).is_dir()  # reserved
    assert ours in removed and not ours.exists()
    # Nor does a whole run in the same folder touch it.
    dynsys.run_experiment(
        {"kind": "fit", "name": "small", "data": {"trajectories": 2, "length": 10},
         "fit": {"steps": 2}},
        out_root=tmp_path, progress=False, echo=None,
    )  # fmt: skip
    assert (foreign / "model.dynsys").read_bytes() == b"work in progress"


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


def _wait_for(process: subprocess.Popen, words: str, timeout: float = 240) -> str:
    """Read the process's output until `words` appear (bounded)."""
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
            raise AssertionError(f"{words!r} never came (exit):\n{seen}")
        seen += chunk
    return seen


def _descendants(pid: int) -> list[int]:
    children = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        children += [int(c) for c in text]
    return children + [d for c in children for d in _descendants(c)]


def _unshare_available() -> str | None:
    """Why separate PID namespaces cannot be made here (`None` when they can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"unshare --pid needs privileges here ({probe.stderr.decode()[:80]})"
    return None


@pytest.mark.slow
def test_runs_in_separate_pid_namespaces_on_one_folder_both_survive(tmp_path):
    """Containers on one volume: each sees the other's pid as dead. Run A trains;
    run B, in another namespace, starts in
    the same `runs/` folder and cleans stale folders first. A's lock keeps its
    staging folder; both runs end with their folders."""
    why = _unshare_available()
    if why is not None:
        pytest.skip(why)
    (tmp_path / "long.toml").write_text(_LONG)
    namespace = ["unshare", "--pid", "--fork", "--mount-proc"]
    # `sh` is pid 1 of A's namespace; 500 short processes later it forks Python, so
    # A's pid is above the thread ids of B (pid 1 of its namespace), which `kill(pid,
    # 0)` would find alive.
    script = 'for i in $(seq 500); do /bin/true; done; "$0" -c "$1" run long.toml'
    a = subprocess.Popen(
        [*namespace, "sh", "-c", script + "; exit $?", sys.executable, _DYNSYS],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV,
    )  # fmt: skip
    try:
        seen = _wait_for(a, "%|")  # A is training
        (staging,) = [p for p in (tmp_path / "runs").iterdir() if ".partial-" in p.name]
        assert int(staging.name.replace("~", "-").rpartition("-")[2]) > 500
        b = subprocess.run(
            [*namespace, sys.executable, "-c", _DYNSYS, "fit", "--steps", "3",
             "--trajectories", "2", "--length", "10", "--no-progress"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=ENV,
        )  # fmt: skip
        assert b.returncode == 0, b.stdout + b.stderr
        assert staging.is_dir(), "B removed A's staging folder"
        (python,) = [
            p for p in _descendants(a.pid)
            if pathlib.Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
            == os.fsencode(sys.executable)
        ]  # fmt: skip
        os.kill(python, signal.SIGTERM)
        output = seen + a.communicate(timeout=180)[0].decode(errors="replace")
    finally:
        if a.poll() is None:
            a.kill()
    assert a.returncode == 128 + signal.SIGTERM, output
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and not any(n.startswith(".") for n in folders), folders
    for name in folders:
        metrics = _strict_json((tmp_path / "runs" / name / "metrics.json").read_text())
        assert metrics["status"] in ("complete", "interrupted")
        assert MARKER in {p.name for p in (tmp_path / "runs" / name).iterdir()}


# ---------------------------------------------------------------------------------
# 2. Interrupted sweeps keep every finished sub-run


def test_loss_history_of_an_empty_history_is_an_empty_figure_with_a_note():
    """A run stopped while its first step compiled has no training loss (and
    perhaps a validation loss at step 0): before, `IndexError: index 0 is out of
    bounds for axis 0 with size 0`."""
    from dynsys import plot

    for val in (None, [(0, 1.5)]):
        fig = plot.loss_history([], val, best_step=0, stop_reason="interrupted")
        ax = fig.axes[0]
        assert "no training step ran" in ax.get_title(loc="left")
        (training, *_) = ax.get_lines()
        assert len(training.get_xdata()) == 0


_SWEEP = {
    "kind": "fit",
    "name": "sweep",
    "data": {"trajectories": 4, "length": 12, "validation": 0.25},
    "fit": {"steps": 2},
    "sweep": {"key": "fit.steps", "values": [2, 3, 4]},
}


@pytest.fixture
def sigint_heard():
    """SIGINT handled as Python's default (KeyboardInterrupt) during the test: a
    suite started in the background (`cmd &`) inherits an ignored SIGINT, which a
    run rightly keeps ignoring, and these tests are about a signal that arrives."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("moment", ["before", "writing"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_of_a_sub_run_keeps_the_finished_ones(
    tmp_path, monkeypatch, moment, sig, sigint_heard
):
    """A real signal to this process when the second sub-run starts (before its
    data and compilation) or while it writes its folder: the sweep stops, every
    finished sub-run is kept, the rest are marked not run."""
    from dynsys._experiments import single

    calls = {"n": 0}
    real_write = single._write_single

    def write(*args):
        calls["n"] += 1
        if moment == "writing" and calls["n"] == 2:
            os.kill(os.getpid(), sig)  # arrives while the folder is written
        return real_write(*args)

    real_runner = single.RUNNERS["fit"]

    def runner(config, **kwargs):
        if moment == "before" and calls["n"] == 1:
            os.kill(os.getpid(), sig)  # arrives before data and compilation
        return real_runner(config, **kwargs)

    monkeypatch.setattr(single, "_write_single", write)
    monkeypatch.setitem(single.RUNNERS, "fit", runner)
    result = dynsys.run_experiment(_SWEEP, out_root=tmp_path, progress=False, echo=None)
    metrics = _strict_json((result.path / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["signal"] == sig.name
    kept = 2 if moment == "writing" else 1  # one written whole while signalled
    assert [r["folder"] for r in metrics["runs"]] == ["steps=2", "steps=3"][:kept]
    assert metrics["not_run"] == [2, 3, 4][kept:]
    subs = sorted(p.name for p in result.path.iterdir() if p.is_dir())
    assert subs == [r["folder"] for r in metrics["runs"]]
    for sub in subs:  # each kept sub-run is whole: strict JSON, a loadable model
        _strict_json((result.path / sub / "metrics.json").read_text())
        dynsys.load(result.path / sub / "model.dynsys")
    table = (result.path / "summary.md").read_text()
    assert table.count("not run") == 3 - kept


_SWEEP_TOML = _LONG + '[sweep]\nkey = "train.steps"\nvalues = [3, 100000000, 5]\n'


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, moment",
    [(signal.SIGINT, "compiling"), (signal.SIGTERM, "compiling"),
     (signal.SIGTERM, "steps")],
)  # fmt: skip
def test_a_signal_to_dynsys_run_of_a_sweep_keeps_the_finished_sub_runs(
    tmp_path, sig, moment
):
    """The reported case: Ctrl-C or SIGTERM while the next sub-run compiles (or
    trains). Exit 128 + signal, no traceback, the finished sub-run kept."""
    (tmp_path / "sweep.toml").write_text(_SWEEP_TOML)
    process = subprocess.Popen(
        [sys.executable, "-c", _DYNSYS, "run", "sweep.toml"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV,
    )  # fmt: skip
    seen = _wait_for(process, "-> steps=100000000/")  # the second one starts
    if moment == "steps":
        seen += _wait_for(process, "%|")
        time.sleep(1.0)
    process.send_signal(sig)
    output = seen + process.communicate(timeout=180)[0].decode(errors="replace")
    assert process.returncode == 128 + sig, output
    assert "Traceback" not in output and "interrupted" in output
    (folder,) = (tmp_path / "runs").iterdir()
    metrics = _strict_json((folder / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["signal"] == sig.name
    first, *rest = metrics["runs"]
    assert first["status"] == "complete" and (folder / first["folder"]).is_dir()
    assert [r["status"] for r in rest] in ([], ["interrupted"])
    assert metrics["not_run"] == [100000000, 5][len(rest) :]


# ---------------------------------------------------------------------------------
# 3. Data that cannot support a model


def _hankel_rank(u: np.ndarray, depth: int) -> int:
    """The rank of the block-Hankel matrix of `u (T, m)`, built by a plain loop."""
    columns = [np.concatenate([u[t + k] for k in range(depth)])
               for t in range(u.shape[0] - depth + 1)]  # fmt: skip
    return int(
        np.linalg.matrix_rank(
            np.stack(columns, axis=1), tol=1e-6 * np.linalg.norm(columns)
        )
    )


def _signals(T=200, seed=0):
    rng = np.random.default_rng(seed)
    ys = np.cumsum(rng.standard_normal((1, T, 1)), axis=1)
    return rng, ys


@pytest.mark.parametrize(
    "name, make, kind",
    [("constant", lambda rng, T: np.full((T, 1), 2.5), "input_constant"),
     ("zero", lambda rng, T: np.zeros((T, 1)), "input_zero"),
     ("one sinusoid", lambda rng, T: np.sin(0.3 * np.arange(T))[:, None],
      "input_excitation"),
     ("collinear", lambda rng, T: rng.standard_normal((T, 1)) * [1.0, -2.0],
      "input_excitation"),
     ("white noise", lambda rng, T: rng.standard_normal((T, 2)), None),
     ("three sinusoids", lambda rng, T: sum(np.sin(w * np.arange(T)) for w in
      (0.2, 0.9, 2.1))[:, None], None)],
)  # fmt: skip
def test_input_excitation_matches_the_rank_of_the_hankel_matrix(name, make, kind):
    """For order 2 an input must be persistently exciting of order 4: the
    block-Hankel matrix with 4 block rows has full rank (a plain-loop reference)."""
    rng, ys = _signals()
    us = make(rng, 200)
    findings = dynsys.check_data(dynsys.Dataset(us=us[None], ys=ys), order=2)
    full = _hankel_rank(us, 4) == 4 * us.shape[1]
    assert [f.kind for f in findings] == ([] if kind is None else [kind])
    assert full == (kind is None)
    if kind == "input_constant":
        assert "the input is constant" in findings[0].message
        assert "B cannot be identified" in findings[0].message
        with pytest.warns(UserWarning, match="fit_subspace: the input is constant"):
            dynsys.fit_subspace(dynsys.Dataset(us=us[None], ys=ys), order=2)


def test_measured_heating_data_pass_and_a_held_step_does_not():
    """`data/real/heating.csv` exactly as received (801 samples, lamp voltage in,
    plate temperature out, levels far from zero): nothing to report. The same
    record with the input held at its first value is named."""
    table = np.genfromtxt(ROOT / "data/real/heating.csv", delimiter=",", names=True)
    us, ys = table["drive_V"][None, :, None], table["temp_C"][None, :, None]
    names = dict(input_names=["drive_V"], output_names=["temp_C"])
    assert dynsys.check_data(dynsys.Dataset(us=us, ys=ys, **names), order=4) == []
    held = dynsys.Dataset(us=np.full_like(us, us[0, 0, 0]), ys=ys, **names)
    (finding,) = dynsys.check_data(held, order=4)
    assert finding.level == "warn" and "'drive_V'" in finding.message


def test_outputs_without_variance_have_an_undefined_fit_not_100_or_minus_inf():
    """Before: `fit`'s fit % was 100.0 for an all-zero output and `compare` -inf
    for a constant one. The reference: the channel's standard deviation (numpy)."""
    rng, ys = _signals(T=60)
    us = rng.standard_normal((1, 60, 1))
    for level in (0.0, 3.7):
        flat = np.concatenate([ys, np.full_like(ys, level)], axis=-1)
        assert np.ptp(flat[0, :, 1]) == 0.0  # no variance (np.std: round-off only)
        data = dynsys.Dataset(us=us, ys=flat)
        (finding,) = dynsys.check_data(data)
        assert finding.kind == "output_no_variance" and finding.level == "warn"
        assert "'y1'" in finding.message and "undefined" in finding.message
        prediction = flat + 0.1
        values = np.asarray(dynsys.fit_percent(flat, prediction, per_channel=True))
        reference = 100 * (1 - np.linalg.norm(0.1 * np.ones(60)) / np.linalg.norm(
            flat[0, :, 0] - flat[0, :, 0].mean()))  # fmt: skip
        np.testing.assert_allclose(values[0], reference, rtol=1e-10)
        assert np.isnan(values[1])
        model = dynsys.LinearSystem(0.5 * np.eye(2), np.ones((2, 1)), np.eye(2), None)
        comparison = dynsys.compare(model, data)
        assert np.isfinite(comparison.fit_percent[0])
        assert np.isnan(comparison.fit_percent[1])
    zero = dynsys.Dataset(us=us, ys=np.zeros((1, 60, 1)))
    (finding,) = dynsys.check_data(zero)
    assert finding.level == "refuse"
    model = dynsys.LinearSystem(0.5 * np.eye(1), np.ones((1, 1)), np.eye(1), None)
    with pytest.warns(UserWarning, match="no variance"):
        result = dynsys.fit(model, zero, num_steps=2, progress=False)
    assert np.isnan(result.metrics["train"]["fit_percent"])


def test_values_whose_squares_overflow_float32_are_refused():
    """|y| ~ 1e20 in float32: squared norms overflow (3.4e38), so every fit % is
    wrong; the same data in float64, or at unit scale, pass."""
    rng, ys = _signals()
    us = rng.standard_normal((1, 200, 1))
    big = dynsys.Dataset(us=us, ys=1e20 * ys)
    (finding,) = dynsys.check_data(big, dtype=np.float32)
    assert finding.kind == "scale" and finding.level == "refuse"
    assert "float32" in finding.message and "'y0'" in finding.message
    assert np.max(np.abs(1e20 * ys)) ** 2 * 200 > np.finfo(np.float32).max
    assert dynsys.check_data(big, dtype=np.float64) == []
    assert dynsys.check_data(dynsys.Dataset(us=us, ys=ys), dtype=np.float32) == []


def test_dynsys_fit_refuses_an_all_zero_output_in_one_line(tmp_path):
    """Before: NaN/null fit %, status complete, exit 0."""
    rng = np.random.default_rng(0)
    rows = ["trajectory,time,u,y"] + [
        f"{i},{t},{rng.standard_normal():.6f},0.0" for i in range(2) for t in range(50)
    ]
    (tmp_path / "zero.csv").write_text("\n".join(rows) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "dynsys.cli", "fit", "zero.csv", "--inputs", "u",
         "--outputs", "y", "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=ENV,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "'y'" in line and "no variance" in line and "Traceback" not in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
