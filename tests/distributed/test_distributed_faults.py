"""Many hosts that fail: `dynsys run --distributed` ends in one line (which process,
what to check) with exit status 2 or the signal's, never a C++ stack trace, within
bounded waits, for a wrong process count, a coordinator port in use, two processes
with the same id, a lost peer, and SIGTERM/SIGINT while waiting for the peers.

Each case starts real `python -m dynsys.cli` processes on this machine (the command
line, so the watching process is in play) with short waits (5 s); each wait of the
test itself is bounded and kills what it started.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import dynsys
from dynsys._distributed import _check_port_free, DistributedError
from dynsys._experiments.runtime.supervise import crash_line, failure_line


CONFIG = """
kind = "fit"
name = "faults"
seed = 0
[system]
model = "mass_spring_damper"
[data]
trajectories = 5
length = {length}
validation = 0.2
[fit]
steps = {steps}
lr = 1e-3
"""

# Generous bounds for a loaded 2-core machine: JAX's start-up alone takes seconds.
LIMIT = 180.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(tmp_path, process_id, count, port, steps=3, length=20, **extra):
    config = tmp_path / f"faults-{steps}.toml"
    config.write_text(CONFIG.format(steps=steps, length=length))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DYNSYS_")},
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "DYNSYS_COORDINATOR": f"127.0.0.1:{port}",
        "DYNSYS_NUM_PROCESSES": str(count),
        "DYNSYS_PROCESS_ID": str(process_id),
        "DYNSYS_DISTRIBUTED_TIMEOUT": "5",
        "DYNSYS_HEARTBEAT_TIMEOUT": "5",
        **extra,
    }
    command = [sys.executable, "-m", "dynsys.cli", "run", str(config)]
    command += ["--distributed", "--no-progress", "--out-root", str(tmp_path / "runs")]
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(process, limit=LIMIT) -> tuple[int, str, str]:
    """`(exit status, stdout, stderr)`, killing the process group after `limit`."""
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"still running after {limit} s:\n{out[-2000:]}\n{err[-2000:]}")
    return process.returncode, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for trace in ("Traceback", "Check failure", "    @ 0x", "terminate called"):
        assert trace not in err, err
    return lines[0]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow  # two JAX processes fitting together
def test_two_processes_from_the_command_line_succeed(tmp_path):
    """The watching process changes nothing for a run that works: exit 0, process 0
    writes one run folder and says so, process 1 prints nothing of dynsys."""
    port = _free_port()
    results = [_finish(p) for p in [_start(tmp_path, i, 2, port) for i in range(2)]]
    assert [code for code, _, _ in results] == [0, 0], [r[2][-2000:] for r in results]
    (folder,) = os.listdir(tmp_path / "runs")
    assert (tmp_path / "runs" / folder / "metrics.json").is_file()
    assert "wrote " in results[0][1]
    # Process 1 prints nothing of its own. Gloo's C++ threads print their
    # connections, and two of them may interleave within a line ("[Gloo] Rank
    # [Gloo] Rank 11 is connected ..."), so its messages are taken out whole and
    # what is left must be pieces of them.
    printed = _GLOO_LINE.sub("", results[1][1])
    assert set(printed) <= set(_GLOO_TEXT + "0123456789 \n"), results[1][1]
    assert not re.search(r"dynsys|fit|wrote|warn|error|trace", printed, re.I), printed


# What gloo prints as it connects, from its C++ (no dynsys text).
_GLOO_TEXT = (
    "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer "
    "ranks is : 0"
)
_GLOO_LINE = re.compile(
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. Expected number of "
    r"connected peer ranks is : \d+"
)


@pytest.mark.slow  # JAX processes that wait for peers that never come
def test_a_wrong_process_count_ends_in_one_line(tmp_path):
    port = _free_port()
    code, _, err = _finish(_start(tmp_path, 0, 2, port))
    assert code == 2
    assert _one_line(err) == (
        f"dynsys run: process 0 of 2: not every process joined 127.0.0.1:{port} "
        "within 5 s; check that all 2 processes were started with the same "
        "DYNSYS_NUM_PROCESSES, each with its own DYNSYS_PROCESS_ID (no two alike), "
        "and that DYNSYS_COORDINATOR is process 0's address "
        "(DYNSYS_DISTRIBUTED_TIMEOUT sets the wait)."
    )
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")


@pytest.mark.slow
def test_a_coordinator_port_in_use_is_named(tmp_path):
    with socket.socket() as other:  # another program's listener on the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        first, second = _start(tmp_path, 0, 2, port), _start(tmp_path, 1, 2, port)
        (code, _, err), (code_1, _, err_1) = _finish(first), _finish(second)
    assert code == 2
    assert _one_line(err) == (
        f"dynsys run: initialize_distributed: process 0 cannot listen on port {port} "
        f"(127.0.0.1:{port}): another program already uses it; choose a free port "
        "in DYNSYS_COORDINATOR (the same in every process) or stop that program."
    )
    # Process 1 reached the foreign listener: it stops after the bounded wait.
    assert code_1 == 2
    assert _one_line(err_1).startswith(
        f"dynsys run: process 1 of 2: not every process joined 127.0.0.1:{port} "
        "within 5 s;"
    )


@pytest.mark.slow
def test_two_processes_with_the_same_id(tmp_path):
    """The coordinator takes the second registration of id 1 for a restart and
    stops the run: every process ends, within the waits, in one line."""
    port = _free_port()
    processes = [_start(tmp_path, i, 2, port) for i in (0, 1, 1)]
    results = [_finish(p) for p in processes]
    codes = [code for code, _, _ in results]
    assert set(codes) <= {0, 2} and 2 in codes, [r[2][-1000:] for r in results]
    lines = [_one_line(err) for code, _, err in results if code == 2]
    assert all(line.startswith("dynsys run: process ") for line in lines), lines
    assert any(
        "each of the 2 processes has its own DYNSYS_PROCESS_ID" in line
        or "(no two alike)" in line
        for line in lines
    ), lines


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_waiting_for_the_peers_ends_promptly(tmp_path, signum):
    port = _free_port()
    waiting = _start(
        tmp_path, 0, 2, port, DYNSYS_DISTRIBUTED_TIMEOUT="300"
    )  # the default wait: the signal must not wait for it
    deadline = time.monotonic() + LIMIT
    while not _listening(port):  # process 0's coordinator is up: it waits
        assert waiting.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    os.kill(waiting.pid, signum)
    sent = time.monotonic()
    code, _, err = _finish(waiting, limit=60)
    seconds = time.monotonic() - sent
    assert code == 128 + signum
    name = signal.Signals(signum).name
    assert _one_line(err) == (
        f"dynsys run: process 0 of 2: interrupted ({name}) while waiting for the "
        "other processes; nothing was written."
    )
    assert seconds < 30, seconds  # a bound on the wait, not a speed goal (300 before)


@pytest.mark.slow
def test_a_lost_peer_ends_the_others_in_one_line(tmp_path):
    port = _free_port()
    long = dict(steps=3000, length=200)
    processes = [_start(tmp_path, i, 2, port, **long) for i in range(2)]
    try:
        first = processes[0].stdout.readline()  # process 0 joined and started
        assert first.startswith("faults:"), first
        time.sleep(2)
        os.killpg(processes[1].pid, signal.SIGKILL)  # the whole of process 1
        code, _, err = _finish(processes[0], limit=120)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert code == 2
    line = _one_line(err)
    assert line.startswith("dynsys run: process 0 of 2: "), line
    assert "another process" in line and "check the other processes' output" in line
    assert not os.listdir(tmp_path / "runs")


# --------------------------------------------------------------- in this process


def test_timeouts_come_from_the_environment_and_are_checked(monkeypatch):
    for name in ("DYNSYS_COORDINATOR", "DYNSYS_NUM_PROCESSES", "DYNSYS_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DYNSYS_DISTRIBUTED_TIMEOUT", "soon")
    with pytest.raises(
        ValueError,
        match=r"initialize_distributed\(initialization_timeout=...\): expected a "
        r"positive number of seconds \(argument or DYNSYS_DISTRIBUTED_TIMEOUT\), "
        r"got 'soon'",
    ):
        dynsys.initialize_distributed("127.0.0.1:1", 2, 1)
    monkeypatch.setenv("DYNSYS_DISTRIBUTED_TIMEOUT", "20")
    monkeypatch.setenv("DYNSYS_HEARTBEAT_TIMEOUT", "0")
    with pytest.raises(ValueError, match=r"heartbeat_timeout=...\): .* got 0\."):
        dynsys.initialize_distributed("127.0.0.1:1", 2, 1)
    with pytest.raises(ValueError, match=r"initialization_timeout=...\): .* got -1\."):
        dynsys.initialize_distributed("127.0.0.1:1", 2, 1, initialization_timeout=-1)


def test_a_port_in_use_is_refused_and_a_free_one_is_not():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(DistributedError, match=f"cannot listen on port {port} "):
            _check_port_free(f"127.0.0.1:{port}")
    _check_port_free(f"127.0.0.1:{_free_port()}")  # free: no error
    _check_port_free("192.0.2.1:1234")  # another host's address: JAX decides


def test_the_messages_name_the_process(monkeypatch):
    monkeypatch.setenv("DYNSYS_PROCESS_ID", "3")
    monkeypatch.setenv("DYNSYS_NUM_PROCESSES", "4")
    monkeypatch.setenv("DYNSYS_HEARTBEAT_TIMEOUT", "7")
    lost = ValueError(
        "UNKNOWN: Gloo AllGather failed: [pair.cc:547] Connection closed by peer"
    )
    assert failure_line(lost).startswith(
        "process 3 of 4: lost contact with another process during a collective "
        "(UNKNOWN: Gloo AllGather failed"
    )
    assert failure_line(ValueError("bad input")) == "bad input"
    crash = (
        "F1201 06:15:16 client.h:80] Terminating process because the JAX distributed "
        "service detected fatal errors. absl::Status: UNAVAILABLE: The following "
        "tasks are unhealthy (stopped sending heartbeats):\n1\n*** Check failure"
    )
    line = crash_line(-6, crash)
    assert line.startswith("process 3 of 4: the distributed runtime stopped this ")
    assert "(for 7 s, DYNSYS_HEARTBEAT_TIMEOUT)" in line and "\n" not in line
    restarted = "E1201 coordination_service.cc:518] 1 unexpectedly tried to connect "
    restarted += "with a different incarnation. It has likely restarted."
    assert crash_line(-6, crash, restarted).startswith(
        "process 3 of 4: two processes joined as the same process (a "
        "DYNSYS_PROCESS_ID given twice, or a process restarted); check that each of "
        "the 4 processes has its own DYNSYS_PROCESS_ID."
    )
    assert crash_line(-9, "") == (
        "process 3 of 4: ended by SIGKILL; check the system's logs (memory?)."
    )


def test_the_child_stderr_keeps_progress_and_holds_back_the_runtime(monkeypatch):
    import io
    import types

    from dynsys._experiments.runtime.supervise import _copy_stderr

    read, write = os.pipe()
    os.write(
        write,
        b"fit:  50%|#####     |\rfit: 100%|##########|\n"
        b"E1201 06:18:41.226114   25073 coordination_service.cc:1549] tasks unhealthy:\n"
        b"1\nThe tasks have crashed.\n"
        b"dynsys run: a warning of dynsys\n"
        b"F1201 06:18:45.1 client.h:80] Terminating process. absl::Status: UNAVAILABLE\n"
        b"*** Check failure stack trace: ***\n    @     0x7f59e9c40634  absl::Flush()\n",
    )
    os.close(write)
    captured = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(buffer=captured))
    crash, log = [], []
    with os.fdopen(read, "rb") as stream:
        _copy_stderr(stream, crash, log)
    assert captured.getvalue() == (
        b"fit:  50%|#####     |\rfit: 100%|##########|\n"
        b"dynsys run: a warning of dynsys\n"
    )
    assert b"".join(log).count(b"\n") == 3 and b"tasks unhealthy" in log[0]
    text = b"".join(crash)
    assert text.startswith(b"F1201") and b"0x7f59e9c40634" in text
