"""One run of one kind of experiment, written into its (staging) folder:
`config.toml`, `history.csv`, the model, figures, and (by `report.py`)
`metrics.json` and `summary.md`."""

import pathlib
import warnings

from .._data.checks import DataWarning
from .config import (
    dump_toml,
)
from .kinds import RUNNERS
from .outcome import Outcome
from .report import run_metrics, run_summary, write_report
from .results import (
    _recorded,
    ExperimentResult,
)
from .runtime.compile_clock import stage, StageClock
from .runtime.heap import earlier_objects_frozen
from .runtime.interrupt import Interrupts


def _write_files(config, folder: pathlib.Path, outcome: Outcome) -> list:
    """Everything but `metrics.json` and `summary.md`: the config, the loss
    history, the model, the kind's own files and the figures (their paths)."""
    from .._io import save
    from .runtime.figure_helper import FIGURE_DPI, save_pngs

    with stage("writing"):
        (folder / "config.toml").write_text(
            dump_toml(_recorded(config)), encoding="utf-8"
        )
        (folder / "history.csv").write_text("\n".join(outcome.history) + "\n")
        save(folder / "model.dynsys", outcome.model, names=outcome.names)
        for name, writer in outcome.files.items():
            writer(folder / name)
    figures = [folder / name for name in outcome.figures]
    with stage("figures"), earlier_objects_frozen():  # matplotlib draws them here
        save_pngs(dict(zip(figures, outcome.figures.values())), FIGURE_DPI)
    return figures


def _write_single(
    config: dict,
    folder: pathlib.Path,
    outcome: Outcome,
    clock: StageClock,
    interrupts: Interrupts,
) -> ExperimentResult:
    recorded = _recorded(config)
    figures = _write_files(config, folder, outcome)
    metrics = run_metrics(config, outcome, clock, interrupts)
    write_report(folder, metrics, run_summary(config, metrics, outcome, figures))
    return ExperimentResult(folder, recorded, metrics, tuple(figures))


def _run_single(
    config: dict,
    folder: pathlib.Path,
    progress: bool,
    echo,
    interrupts: Interrupts | None = None,
) -> ExperimentResult:

    interrupts = Interrupts() if interrupts is None else interrupts
    clock = StageClock()
    with clock.running():
        with warnings.catch_warnings():  # the experiment reports the data checks
            warnings.filterwarnings("ignore", category=DataWarning)
            outcome = RUNNERS[config["kind"]](config, progress=progress, echo=echo)
        with interrupts.deferred():  # a finished run is written whole
            result = _write_single(config, folder, outcome, clock, interrupts)
    if result.metrics["status"] == "undefined":
        echo(f"  status: undefined ({result.metrics['status_reason']})")
    return result
