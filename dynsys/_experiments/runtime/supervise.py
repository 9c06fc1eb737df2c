"""`dynsys run --distributed` on the command line: the run goes in a child process
that this one watches, so that whatever ends it reports in one line, with exit status
2 or the signal's, and never a C++ stack trace.

JAX's distributed runtime ends a process from C++ (`abort`, with a stack trace)
when not every process joins in time (a wrong process count, two processes with the
same id, an unreachable coordinator) or when another process stops answering. A
signal sent while the runtime waits for the other processes is not handled by
Python until the wait ends. The watching process forwards SIGINT and SIGTERM,
ends a child that does not stop within `GRACE_SECONDS`, keeps the child's stderr
from the first fatal runtime line on, and says what happened.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

from ... import _config


SUPERVISED = _config.SUPERVISED  # set in the child: it runs the experiment itself
GRACE_SECONDS = 3.0

# The first line of a crash of the runtime: an absl fatal log line, a failed CHECK,
# an uncaught C++ exception, or a fatal error of the interpreter.
_FATAL = re.compile(
    rb"^(F\d{4} \d\d:\d\d:\d\d|\*\*\* Check failure|terminate called|Fatal Python)"
)


def who() -> str:
    """`"process 1 of 2"` from the variables of dynsys or the launcher, else
    `"this process"`."""
    rank = _config.first_set(_config.PROCESS_ID, *_config.LAUNCHER_RANKS)
    size = _config.first_set(_config.NUM_PROCESSES, *_config.LAUNCHER_SIZES)
    if rank is None:
        return "this process"
    return f"process {rank}" + (f" of {size}" if size else "")


def failure_line(error: BaseException) -> str:
    """One line for an error of a process of a distributed run: a failed collective
    (a peer stopped or cannot be reached) says so and names this process."""
    text = " ".join(str(error).split()) or type(error).__name__
    lost = ("Gloo", "Connection closed by peer", "Connection reset", "NCCL")
    if type(error).__name__ == "JaxRuntimeError" or any(k in text for k in lost):
        return (
            f"{who()}: lost contact with another process during a collective "
            f"({text[:160]}); check the other processes' output: one stopped or "
            "cannot be reached. Nothing was written."
        )
    return text


def crash_line(code: int, crash: str, log: str = "") -> str:
    """What ended the child (exit `code`, negative for a signal) from the runtime's
    fatal lines `crash` and its log lines `log`, in one line."""
    from ..._distributed import (
        DEFAULT_HEARTBEAT_TIMEOUT,
        DEFAULT_TIMEOUT,
        HEARTBEAT_ENVIRONMENT,
        TIMEOUT_ENVIRONMENT,
    )

    address = _config.read(_config.COORDINATOR) or "the coordinator"
    count = _config.read(_config.NUM_PROCESSES) or "the"
    if "incarnation" in log + crash:  # the coordinator saw one id join twice
        return (
            f"{who()}: two processes joined as the same process (a "
            "DYNSYS_PROCESS_ID given twice, or a process restarted); check that each "
            f"of the {count} processes has its own DYNSYS_PROCESS_ID. Nothing was "
            "written."
        )
    if "RegisterTask" in crash or "Barrier" in crash:
        wait = _config.read(TIMEOUT_ENVIRONMENT) or DEFAULT_TIMEOUT
        return (
            f"{who()}: not every process joined {address} within {wait} s; check that "
            f"all {count} processes were started with the same DYNSYS_NUM_PROCESSES, "
            "each with its own DYNSYS_PROCESS_ID (no two alike), and that "
            f"DYNSYS_COORDINATOR is process 0's address ({TIMEOUT_ENVIRONMENT} sets "
            "the wait)."
        )
    if crash:
        wait = _config.read(HEARTBEAT_ENVIRONMENT) or DEFAULT_HEARTBEAT_TIMEOUT
        status = re.search(r"absl::Status: ([^\n]*)", crash)
        why = status.group(1).strip()[:160] if status else crash.splitlines()[0][:160]
        return (
            f"{who()}: the distributed runtime stopped this process: another process "
            f"stopped, was killed or stopped answering (for {wait} s, "
            f"{HEARTBEAT_ENVIRONMENT}) ({why}); check the other processes' output. "
            "Nothing was written."
        )
    name = signal.Signals(-code).name if -code in signal.valid_signals() else code
    return f"{who()}: ended by {name}; check the system's logs (memory?)."


# A log line of JAX's runtime (absl: level, date, time, thread, file:line]); the
# lines after one, up to the next line of dynsys or a progress bar, continue it.
_LOG = re.compile(rb"^[IWE]\d{4} \d\d:\d\d:\d\d")


def _copy_stderr(stream, crash: list[bytes], log: list[bytes]) -> None:
    """Copy the child's stderr to ours as it comes (a progress bar's `\\r` updates
    too), but keep the runtime's log lines in `log`, and everything from the first
    fatal line on in `crash`, for the one line said at the end."""
    out = sys.stderr.buffer
    pending, in_log = b"", False
    while chunk := os.read(stream.fileno(), 65536):
        if crash:
            crash.append(chunk)
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for k, line in enumerate(lines):
            if _FATAL.match(line):
                crash.append(b"\n".join([*lines[k:], pending]))
                pending = b""
                break
            own = line.startswith(b"dynsys") or b"\r" in line
            in_log = bool(_LOG.match(line)) or (in_log and not own)
            (log.append if in_log else out.write)(line + b"\n")
        if not crash and not in_log and b"\r" in pending:  # a progress bar: now
            shown, _, pending = pending.rpartition(b"\r")
            out.write(shown + b"\r")
        out.flush()
    if pending and not crash:
        (crash.append if _FATAL.match(pending) else out.write)(pending)
        out.flush()


def _die_with_parent() -> None:
    """In the child, before it runs: Linux ends it when the watching process dies
    (even by SIGKILL), so a killed process leaves no half of itself running."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the child ends when its collectives fail


def supervise(argv: list[str], out_root: str | None = None) -> int:
    """Run `dynsys ARGV` in a child process and watch it; its exit status, or 2
    with one line for a crash of the runtime, or 128 + the signal's number. A child
    that could not clean up (ended by the runtime or by a signal) leaves its staging
    folder in `out_root`: it is removed here."""
    child = subprocess.Popen(
        [sys.executable, "-m", "dynsys.cli", *argv],
        # The runtime's error logs (many lines each) would come before the line
        # this process prints; its fatal lines, read below, still come.
        env={"TF_CPP_MIN_LOG_LEVEL": "3", **os.environ, SUPERVISED: "1"},
        stderr=subprocess.PIPE,
        start_new_session=True,  # signals reach it through this process only
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    received: list[tuple[int, float]] = []

    def forward(signum, frame):
        received.append((signum, time.monotonic()))
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    crash: list[bytes] = []
    log: list[bytes] = []
    reader = threading.Thread(target=_copy_stderr, args=(child.stderr, crash, log))
    reader.start()
    try:
        while child.poll() is None:
            if received and time.monotonic() - received[0][1] > GRACE_SECONDS:
                child.kill()  # still waiting inside the runtime: end it
            try:
                child.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        reader.join(timeout=10)
    text = b"".join(crash).decode("utf-8", "replace")
    if out_root is not None and (crash or child.returncode < 0):
        from ..run_folder import clean_stale

        clean_stale(pathlib.Path(out_root).absolute())
    return _outcome(
        child.returncode, received, text, b"".join(log).decode("utf-8", "replace")
    )


def _outcome(code: int, received, crash: str, log: str = "") -> int:
    """The exit status for the child's `code`, printing one line where the child
    could not say itself what happened."""
    if received:
        signum = received[0][0]
        if code != 128 + signum:  # it did not report the interrupt itself
            name = signal.Signals(signum).name
            print(
                f"dynsys run: {who()}: interrupted ({name}) while waiting for the "
                "other processes; nothing was written.",
                file=sys.stderr,
            )
        return 128 + signum
    if code == 0 or (code > 0 and not crash):
        return code  # a success, or an error the child reported in one line
    print(f"dynsys run: {crash_line(code, crash, log)}", file=sys.stderr)
    return 2
