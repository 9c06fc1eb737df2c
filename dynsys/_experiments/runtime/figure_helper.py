"""A run's figures drawn on two cores: the `dynsys` command's helper process.

Drawing is most of a fit run's last seconds (eight PNG files, about 2 s on the
heating record), on one core: matplotlib holds Python's GIL. In the `dynsys`
command (`enable_for_process`), a run starts one helper process (`start`) that
imports matplotlib while the run computes. Figures go to it pickled (`submit`):
the fit sends those that do not wait for the model's uncertainty before computing
it, and the helper draws them meanwhile; at the end (`save_pngs`) it draws about
half of those still to draw while this process draws the rest. A figure the helper
did not draw (it failed, ended, or took longer than `REPLY_SECONDS`) is drawn
here: every file is written either way, with the same pixels. A run started from
Python, or on one core, draws every figure here, in order.

(Importing matplotlib in a background thread of this process instead, during the
structure scan, saved its figures 0.3 s and cost the scan as much or more: the
import holds the GIL, and so does the tracing of a warm run.)
"""

import atexit
import collections
import pathlib
import pickle
import queue
import subprocess
import sys
import threading

from ..._config import usable_cores as _cores


_WORKER = pathlib.Path(__file__).with_name("png_worker.py")
FIGURE_DPI = 100  # the run folder's figures
REPLY_SECONDS = 120.0  # the longest wait for one figure of the helper
_state: dict = {"enabled": False, "helper": None}


class Drawing:
    """A figure sent to the helper process: its PNG file's bytes once drawn."""

    def __init__(self, figure):
        self.figure = figure  # drawn here when the helper did not
        self._done = threading.Event()
        self._png: bytes | None = None

    def _answer(self, png: bytes | None) -> None:
        self._png = png
        self._done.set()

    @property
    def drawn(self) -> bool:
        """Whether the helper has answered (with the PNG or without)."""
        return self._done.is_set()

    def png(self, timeout: float) -> bytes | None:
        """The PNG bytes, or `None` when the helper did not draw it in `timeout`
        seconds (or could not)."""
        return self._png if self._done.wait(timeout) else None


class _Helper:
    """The helper process and its two pipe threads: one writes the requests (a
    write waits while the helper draws), one reads the replies, which come in the
    order of the requests."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.alive = True
        self._requests: queue.Queue = queue.Queue()
        self._pending: collections.deque = collections.deque()
        self._lock = threading.Lock()
        threading.Thread(target=self._write, daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

    def submit(self, figure, dpi: float) -> Drawing | None:
        try:
            pickled = pickle.dumps(figure, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return None  # drawn here
        drawing = Drawing(figure)
        with self._lock:
            if not self.alive:
                return None
            self._pending.append(drawing)
        self._requests.put(pickle.dumps((dpi, pickled)))
        return drawing

    def _write(self) -> None:
        while (request := self._requests.get()) is not None:
            try:
                self.process.stdin.write(request)
                self.process.stdin.flush()
            except (OSError, ValueError):
                self._fail()
                return
        try:
            self.process.stdin.close()
        except OSError:
            pass

    def _read(self) -> None:
        while True:
            try:
                error, png = pickle.load(self.process.stdout)
            except (OSError, EOFError, pickle.UnpicklingError, ValueError):
                self._fail()
                return
            with self._lock:
                drawing = self._pending.popleft() if self._pending else None
            if drawing is not None:
                drawing._answer(png if error is None else None)

    def _fail(self) -> None:
        with self._lock:
            self.alive = False
            pending = list(self._pending)
            self._pending.clear()
        for drawing in pending:
            drawing._answer(None)

    def close(self) -> None:
        """End the helper: close its input (after the requests sent) and wait."""
        self._requests.put(None)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._fail()


def enable_for_process() -> None:
    """Let runs of this process draw their figures with a helper process (the
    `dynsys` command, which owns its process, calls it)."""
    _state["enabled"] = True



def start() -> None:
    """At a run's start: start the helper process when enabled, with two cores or
    more (it imports matplotlib on the other core while the run computes)."""
    if not _state["enabled"] or _state["helper"] is not None or _cores() < 2:
        return
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", str(_WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return  # every figure is drawn here
    _state["helper"] = _Helper(process)
    atexit.register(_stop)


def _stop(failed: bool = False) -> None:
    """End the helper; after a failure, runs of this process no longer start one."""
    helper, _state["helper"] = _state["helper"], None
    _state["enabled"] = _state["enabled"] and not failed
    if helper is not None:
        helper.close()


def _live_helper() -> _Helper | None:
    helper = _state["helper"]
    if helper is not None and (not helper.alive or helper.process.poll() is not None):
        _stop(failed=True)
        return None
    return helper


def submit(figure, dpi: float = FIGURE_DPI):
    """`figure` sent to the helper process to draw (a `Drawing`), or `figure`
    itself when there is no helper (or it cannot be pickled)."""
    helper = _live_helper()
    drawing = None if helper is None else helper.submit(figure, dpi)
    return figure if drawing is None else drawing


def _cost(figure) -> int:
    """A figure's drawing time, in units: its number of panels plus one (the
    eigenvalue figure's three panels took 0.27 s, a one-panel comparison 0.09 s)."""
    return len(figure.axes) + 1


def _helpers_share(figures: list, paths: list, backlog: int = 0) -> list:
    """About half of `paths` by drawing time (`_cost`), for the helper: its figures
    are assigned largest first to whichever process has less to draw, the helper
    starting with `backlog` (what it has still to draw of the figures sent to it
    before: on the heating record it had not finished them when the uncertainty
    was done, and this process waited 0.2-0.45 s for it at the end)."""
    costs = [_cost(figure) for figure in figures]
    loads, share = [0, backlog], []  # this process's, the helper's
    for k in sorted(range(len(paths)), key=lambda k: -costs[k]):
        side = int(loads[1] < loads[0])
        loads[side] += costs[k]
        if side:
            share.append(paths[k])
    return share


def save_pngs(figures: dict, dpi: float = FIGURE_DPI) -> None:
    """Write each figure of `figures` (path → matplotlib `Figure`, or a `Drawing`
    sent at `dpi`) as a PNG file at `dpi`: about half the `Figure`s drawn by the
    helper process when there is one (`_helpers_share`, counting what it has still
    to draw), the rest here; each
    `Drawing` from the helper's bytes (drawn here if it has none)."""
    from ...plot._save import save_png

    figures = dict(figures)
    helper = _live_helper()
    undrawn = [path for path, f in figures.items() if not isinstance(f, Drawing)]
    backlog = sum(
        _cost(f.figure)
        for f in figures.values()
        if isinstance(f, Drawing) and not f.drawn
    )
    if helper is not None and len(undrawn) >= 2:
        helpers = _helpers_share([figures[path] for path in undrawn], undrawn, backlog)
        for path in helpers:
            figures[path] = submit(figures[path], dpi)
    for path, figure in figures.items():
        if not isinstance(figure, Drawing):
            save_png(figure, path, dpi)
    for path, drawing in figures.items():
        if not isinstance(drawing, Drawing):
            continue
        png = drawing.png(REPLY_SECONDS)
        if png is None:
            _stop(failed=True)
            save_png(drawing.figure, path, dpi)
        else:
            pathlib.Path(path).write_bytes(png)
