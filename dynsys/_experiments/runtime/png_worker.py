"""The helper process of `figure_helper.py`: it reads pickled matplotlib figures
from stdin and draws each as a PNG file's bytes, which it writes on stdout.

Run as a script (`python -I png_worker.py`), not imported: it needs only the
standard library and matplotlib, and starts without JAX or dynsys. Each request
is one pickle, `(dpi, pickled figure)`; each reply one pickle, `(error, png)`:
`error` None and the bytes, or the one-line reason it was not drawn and None.
Replies come in the order of the requests. The process ends at the end of its
input (its parent closed the pipe, or ended)."""

import pickle
import signal
import sys


def _png(figure, dpi: float) -> bytes:
    """`dynsys.plot._save.save_png`'s drawing: the Agg canvas's `print_png`, which
    lays the figure out in the draw that renders it."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure.dpi = dpi
    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return buffer.getvalue()


def serve(requests, replies) -> None:
    """Answer each request of the binary stream `requests` on `replies`."""
    while True:
        try:
            dpi, pickled = pickle.load(requests)
        except EOFError:
            return
        png = None
        try:
            png, error = _png(pickle.loads(pickled), dpi), None
        except Exception as failure:  # the parent draws this figure itself
            error = f"{type(failure).__name__}: {failure}".splitlines()[0]
        pickle.dump((error, png), replies)
        replies.flush()


def main() -> None:
    # Ctrl-C reaches every process of the terminal's group: the parent decides
    # what an interrupt means; this process ends when its input does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import matplotlib.figure  # noqa: F401 (imported before the first request)

    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
