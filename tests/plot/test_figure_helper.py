"""The `dynsys` command's figures drawn on two cores
(`dynsys/_experiments/runtime/figure_helper.py`): the same files, byte for byte, as drawn
in one process, and every file written when the helper cannot draw its share."""

import numpy as np
import pytest
from matplotlib.figure import Figure

import dynsys.plot._save
from dynsys._experiments.runtime import figure_helper


def _figures(count: int) -> list:
    figures = []
    t = np.linspace(0.0, 1.0, 50)
    for k in range(count):
        figure = Figure(figsize=(4, 3), layout="constrained")
        axes = figure.subplots()
        axes.plot(t, np.sin((k + 1) * 6 * t), label=f"channel {k}")
        axes.set_xlabel("time (s)")
        axes.legend()
        figures.append(figure)
    return figures


@pytest.fixture
def drawn_here(monkeypatch) -> list:
    """The paths this process draws (the helper's share is not among them)."""
    paths = []
    save_png = dynsys.plot._save.save_png

    def counted(figure, path, dpi):
        paths.append(path)
        save_png(figure, path, dpi)

    monkeypatch.setattr(dynsys.plot._save, "save_png", counted)
    return paths


@pytest.fixture
def enabled(monkeypatch):
    monkeypatch.setattr(figure_helper, "_state", {"enabled": True, "helper": None})
    monkeypatch.setattr(figure_helper, "_cores", lambda: 2)
    yield
    figure_helper._stop()


def _references(figures, folder) -> list[bytes]:
    for k, figure in enumerate(figures):
        dynsys.plot._save.save_png(figure, folder / f"reference{k}.png", 100)
    return [(folder / f"reference{k}.png").read_bytes() for k in range(len(figures))]


def _case(count: int, folder, drawn_here) -> tuple[list, list[bytes], list]:
    """`count` figures, their files drawn in this process (not counted in
    `drawn_here`), and the paths to write them to."""
    figures = _figures(count)
    references = _references(figures, folder)
    drawn_here.clear()
    return figures, references, [folder / f"figure{k}.png" for k in range(count)]


def test_the_helper_draws_half_the_figures_with_the_same_bytes(
    tmp_path, enabled, drawn_here
):
    figures, references, paths = _case(5, tmp_path, drawn_here)
    figure_helper.start()
    helper = figure_helper._state["helper"]
    assert helper is not None and helper.process.poll() is None
    figure_helper.save_pngs(dict(zip(paths, figures)), dpi=100)
    assert drawn_here == paths[0::2]  # the helper wrote the others
    assert [p.read_bytes() for p in paths] == references
    assert figure_helper._state["helper"] is helper  # still serving
    figure_helper._stop()
    assert helper.process.wait(timeout=5) == 0  # it ended with its input


def test_figures_submitted_early_are_written_from_the_helpers_bytes(
    tmp_path, enabled, drawn_here
):
    figures, references, paths = _case(4, tmp_path, drawn_here)
    figure_helper.start()
    early = [figure_helper.submit(f, 100) for f in figures[:3]]
    assert all(isinstance(d, figure_helper.Drawing) for d in early)
    assert early[0].png(30) == references[0]  # drawn while this process waits
    figure_helper.save_pngs(dict(zip(paths, [*early, figures[3]])), dpi=100)
    assert drawn_here == [paths[3]]  # the only one not sent: one left to draw
    assert [p.read_bytes() for p in paths] == references


def test_what_the_helper_does_not_draw_is_drawn_here(
    tmp_path, enabled, drawn_here, monkeypatch
):
    # A helper that reads one request and ends without answering.
    worker = tmp_path / "ends.py"
    worker.write_text("import pickle, sys\npickle.load(sys.stdin.buffer)\n")
    monkeypatch.setattr(figure_helper, "_WORKER", worker)
    figures, references, paths = _case(4, tmp_path, drawn_here)
    figures[1].unpicklable = lambda: None  # would be sent; cannot be: drawn here
    figure_helper.start()
    figure_helper.save_pngs(dict(zip(paths, figures)), dpi=100)
    assert sorted(drawn_here) == sorted(paths)
    assert [p.read_bytes() for p in paths] == references
    # After a failure no helper is started again in this process, and nothing
    # is sent.
    assert figure_helper._state == {"enabled": False, "helper": None}
    figure_helper.start()
    assert figure_helper._state["helper"] is None
    assert figure_helper.submit(figures[0]) is figures[0]


def test_without_the_command_every_figure_is_drawn_here(tmp_path, monkeypatch):
    monkeypatch.setattr(figure_helper, "_state", {"enabled": False, "helper": None})
    figure_helper.start()
    assert figure_helper._state["helper"] is None
    figures = _figures(3)
    references = _references(figures, tmp_path)
    paths = [tmp_path / f"figure{k}.png" for k in range(3)]
    figure_helper.save_pngs(dict(zip(paths, figures)), dpi=100)
    assert [p.read_bytes() for p in paths] == references


def test_the_helpers_share_balances_the_panels():
    panels = [1, 3, 1, 2]
    figures = []
    for count in panels:
        figure = Figure()
        figure.subplots(count, 1)
        figures.append(figure)
    paths = ["a.png", "b.png", "c.png", "d.png"]
    share = figure_helper._helpers_share(figures, paths)
    # Costs 2, 4, 2, 3 (panels + 1), largest first to the less loaded side:
    # b here, d there, a there, c here: 6 here against 5 there.
    assert sorted(share) == ["a.png", "d.png"]


def test_the_helper_s_share_counts_what_it_has_still_to_draw():
    """The final figures are split by drawing time with the helper's backlog (the
    figures sent to it earlier and not yet drawn) counted on its side."""
    figures = _figures(4)
    paths = [f"figure{k}.png" for k in range(4)]  # each costs 2 (one panel)
    assert len(figure_helper._helpers_share(figures, paths)) == 2
    assert len(figure_helper._helpers_share(figures, paths, backlog=2)) == 1
    assert len(figure_helper._helpers_share(figures, paths, backlog=4)) == 1
    assert len(figure_helper._helpers_share(figures, paths, backlog=6)) == 0
