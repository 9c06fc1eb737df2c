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

import pytest

import dynsys
from dynsys._experiments.run_folder import clean_stale, MARKER


ROOT = pathlib.Path(__file__).resolve().parents[1]
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


@pytest.mark.parametrize("moment", ["before", "writing"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_of_a_sub_run_keeps_the_finished_ones(
    tmp_path, monkeypatch, moment, sig
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
    seen = _wait_for(process, "train.steps=100000000/")  # the second one starts
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
