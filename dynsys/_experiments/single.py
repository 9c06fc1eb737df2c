"""One run of one kind of experiment, written into its (staging) folder:
`config.toml`, `metrics.json`, `history.csv`, the model, figures, `summary.md`."""

import pathlib
import warnings

from .._compile_cache import CacheStatus, current_status
from .._data.checks import DataWarning
from .config import (
    dump_toml,
)
from .fit.data_checks import undefined_fit
from .kinds import RUNNERS
from .outcome import Outcome
from .results import (
    _file_digest,
    _markdown_number,
    _recorded,
    ExperimentResult,
    strict_json,
)
from .runtime.compile_clock import stage, StageClock
from .runtime.heap import earlier_objects_frozen
from .runtime.interrupt import Interrupts


def _status_line(config: dict, metrics: dict) -> str:
    if metrics["status"] == "undefined":
        return (
            f"**Undefined**: {metrics['status_reason']}. This `{config['kind']}` "
            f"experiment (seed {config['seed']}, precision {config['precision']}) "
            "ran in full, but such a channel has nothing to score the model on."
        )
    if metrics["status"] == "complete":
        return (
            f"A `{config['kind']}` experiment, seed {config['seed']}, precision "
            f"{config['precision']}. Rerun it with `dynsys run config.toml` (same "
            "config and seed, same metrics)."
        )
    reason = metrics.get("stop_reason") or "stopped early"
    return (
        f"**Interrupted** ({metrics['signal']}): {reason}. This `{config['kind']}` "
        f"experiment (seed {config['seed']}, precision {config['precision']}) is "
        "incomplete: its metrics are those of the model kept when it stopped; "
        "`dynsys run config.toml` runs it in full."
    )


def _compile_cache_record() -> dict | None:
    """`metrics.json["compile_cache"]`: the folder, or why there is none (`None`
    when `use_compile_cache` was not called, as in a runner called directly)."""
    status = current_status()
    return None if status is None else status.as_dict()


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
        save(folder / "model.dynsys", outcome.model)
        for name, writer in outcome.files.items():
            writer(folder / name)
    figures = [folder / name for name in outcome.figures]
    with stage("figures"), earlier_objects_frozen():  # matplotlib draws them here
        save_pngs(dict(zip(figures, outcome.figures.values())), FIGURE_DPI)
    return figures


def _time_line(timing: dict) -> str:
    """One line for summary.md: each stage's seconds and the compilation in it."""
    parts = []
    for name, entry in timing.get("stages", {}).items():
        part = f"{name} {entry['seconds']:.1f} s"
        if entry["compile_seconds"] >= 0.05:
            part += f" (compiling {entry['compile_seconds']:.1f} s)"
        parts.append(part)
    return f"Time: {timing['total_seconds']:.1f} s; " + ", ".join(parts) + "."


def _write_single(
    config: dict,
    folder: pathlib.Path,
    outcome: Outcome,
    clock: StageClock,
    interrupts: Interrupts,
) -> ExperimentResult:
    recorded = _recorded(config)
    figures = _write_files(config, folder, outcome)
    metrics = dict(outcome.metrics)
    metrics["status"] = "interrupted" if interrupts.interrupted else "complete"
    undefined = undefined_fit(metrics)
    if undefined is not None and not interrupts.interrupted:
        metrics["status"], metrics["status_reason"] = "undefined", undefined
    metrics["signal"] = interrupts.name
    metrics["precision"] = config["precision"]
    if config["kind"] == "fit" and config["data"]["file"] is not None:
        path = pathlib.Path(config["data"]["file"])
        metrics["data_file"] = {"path": str(path), "sha256": _file_digest(path)}
    metrics["compile_cache"] = _compile_cache_record()
    metrics["summary"] = outcome.summary
    stages = clock.as_dict()
    metrics["timing"] = {
        **metrics.get("timing", {}),
        "total_seconds": clock.seconds(),
        "stages": stages,
    }
    (folder / "metrics.json").write_text(strict_json(metrics))
    lines = [f"# {config['name']}", ""]
    if config["description"]:
        lines += [config["description"], ""]
    lines += [_status_line(config, metrics), "", *outcome.notes]
    if "data_file" in metrics:
        lines += [
            "",
            f"Data file: `{metrics['data_file']['path']}` (SHA-256 "
            f"`{metrics['data_file']['sha256']}`).",
        ]
    if metrics["compile_cache"] is not None:
        cache = CacheStatus(**metrics["compile_cache"])
        lines += ["", f"JAX's compilation cache: {cache.describe()}."]
    lines += ["", _time_line(metrics["timing"])]
    lines += [
        "",
        f"Headline ({outcome.summary_label}):",
        "",
        "| metric | value |",
        "| --- | --- |",
        *(f"| {k} | {_markdown_number(v)} |" for k, v in outcome.summary.items()),
        "",
        "Files: `config.toml` (the resolved config), `metrics.json`, `history.csv` "
        "(loss per step), `model.dynsys` (`dynsys.load`), and the figures:",
        "",
        *(f"![{p.stem}]({p.name})" for p in figures),
        "",
    ]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    (folder / "summary.md").write_text(text, encoding="utf-8")
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
