"""A run's figures drawn on two cores: the `dynsys` command's helper process.

Drawing is most of a fit run's last seconds (eight PNG files, about 2 s on the
heating record), on one core: matplotlib holds Python's GIL. In the `dynsys`
command (`enable_for_process`), a run starts one helper process (`start`) that
imports matplotlib while the run computes; at the end (`save_pngs`) it draws every
other figure, sent to it pickled, while this process draws the rest. A figure the
helper did not draw (it failed, ended, or took longer than `REPLY_SECONDS`) is
drawn here: every file is written either way, with the same pixels. A run started
from Python, or on one core, draws every figure here, in order.

(Importing matplotlib in a background thread of this process instead, during the
structure scan, saved its figures 0.3 s and cost the scan as much or more: the
import holds the GIL, and so does the tracing of a warm run.)
"""

import atexit
import os
import pathlib
import pickle
import queue
import subprocess
import sys
import threading


_WORKER = pathlib.Path(__file__).with_name("png_worker.py")
REPLY_SECONDS = 120.0  # the longest wait for one figure of the helper
_state: dict = {"enabled": False, "helper": None}


def enable_for_process() -> None:
    """Let runs of this process draw their figures with a helper process (the
    `dynsys` command, which owns its process, calls it)."""
    _state["enabled"] = True


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def start() -> None:
    """At a run's start: start the helper process when enabled, with two cores or
    more (it imports matplotlib on the other core while the run computes)."""
    if not _state["enabled"] or _state["helper"] is not None or _cores() < 2:
        return
    try:
        _state["helper"] = subprocess.Popen(
            [sys.executable, "-I", str(_WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return  # every figure is drawn here
    atexit.register(_stop)


def _stop(failed: bool = False) -> None:
    """End the helper (close its input, wait for it); after a failure, runs of this
    process no longer start one."""
    helper, _state["helper"] = _state["helper"], None
    _state["enabled"] = _state["enabled"] and not failed
    if helper is None:
        return
    try:
        helper.stdin.close()
        helper.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        helper.kill()


def _exchange(helper, requests: list, replies: queue.Queue) -> None:
    """Write `requests` to the helper, then put its replies on `replies`; `None`
    when it stops answering."""
    try:
        for request in requests:
            helper.stdin.write(request)
        helper.stdin.flush()
        for _ in requests:
            replies.put(pickle.load(helper.stdout))
    except (OSError, EOFError, pickle.UnpicklingError, ValueError):
        replies.put(None)


def _drawn_by_helper(helper, jobs: list, dpi: float, draw_ours) -> set[str]:
    """Send `jobs` (`(path, figure)`) to the helper, call `draw_ours()`, and return
    the paths the helper wrote."""
    requests = []
    for path, figure in jobs:
        try:
            pickled = pickle.dumps(figure, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            continue  # drawn here
        requests.append(pickle.dumps((str(path), dpi, pickled)))
    replies: queue.Queue = queue.Queue()
    threading.Thread(
        target=_exchange, args=(helper, requests, replies), daemon=True
    ).start()
    draw_ours()
    written = set()
    for _ in requests:
        try:
            reply = replies.get(timeout=REPLY_SECONDS)
        except queue.Empty:
            reply = None
        if reply is None:
            _stop(failed=True)
            break
        path, error = reply
        if error is None:
            written.add(path)
    return written


def save_pngs(figures: dict, dpi: float) -> None:
    """Write each matplotlib `Figure` of `figures` (path → figure) as a PNG file
    at `dpi`: every other one by the helper process when there is one, the rest
    (and any it did not write) here."""
    from ..plot._save import save_png

    jobs = list(figures.items())
    helper = _state["helper"]
    if helper is None or helper.poll() is not None or len(jobs) < 2:
        for path, figure in jobs:
            save_png(figure, path, dpi)
        return
    theirs, ours = jobs[1::2], jobs[0::2]

    def draw_ours():
        for path, figure in ours:
            save_png(figure, path, dpi)

    written = _drawn_by_helper(helper, theirs, dpi, draw_ours)
    for path, figure in theirs:
        if str(path) not in written:
            save_png(figure, path, dpi)
