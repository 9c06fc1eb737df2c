"""The one writer of a run folder's `metrics.json` and `summary.md`, for a single
run (from its kind's `Outcome`) and for a sweep (from its runs' results).

`run_metrics` adds to the kind's metrics what every run records (status, signal,
precision, data file, compilation cache, timing); `run_summary` and
`sweep_summary` compose the markdown; `write_report` writes both files."""

import math
import pathlib

from .._compile.cache import CacheStatus, current_status
from .outcome import Outcome
from .results import _file_digest, _markdown_number, strict_json


def write_report(folder: pathlib.Path, metrics: dict, summary: str) -> None:
    """Write `metrics.json` (strict JSON) and `summary.md` into `folder`."""
    (folder / "metrics.json").write_text(strict_json(metrics))
    (folder / "summary.md").write_text(summary, encoding="utf-8")


def _compile_cache_record() -> dict | None:
    """`metrics.json["compile_cache"]`: the folder, or why there is none (`None`
    when `use_compile_cache` was not called, as in a runner called directly)."""
    status = current_status()
    return None if status is None else status.as_dict()


def undefined_fit(metrics: dict) -> str | None:
    """Why some fit % in `metrics["fit_percent"]` is undefined (the channels whose
    value is NaN: no variance), or `None` when every one is defined."""
    channels = metrics.get("fit_percent_channels") or []
    undefined = set()

    def visit(value, index):
        if isinstance(value, dict):
            for item in value.values():
                visit(item, None)
        elif isinstance(value, list | tuple):
            for k, item in enumerate(value):
                visit(item, k)
        elif isinstance(value, float) and math.isnan(value):
            undefined.add(
                channels[index]
                if index is not None and index < len(channels)
                else "a channel"
            )

    visit(metrics.get("fit_percent", {}), None)
    if not undefined:
        return None
    return (
        "fit % undefined (no variance) for "
        + ", ".join(repr(c) for c in sorted(undefined))
        + " of the data it is reported on"
    )


def run_metrics(config: dict, outcome: Outcome, clock, interrupts) -> dict:
    """A single run's `metrics.json`: the kind's metrics, then its status and
    what every run records; `clock` a `StageClock`, `interrupts` `Interrupts`."""
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
        "compiled_ahead": clock.ahead_as_dict(),
    }
    return metrics


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


def _time_line(timing: dict) -> str:
    """One line for summary.md: each stage's seconds and the compilation in it."""
    parts = []
    for name, entry in timing.get("stages", {}).items():
        part = f"{name} {entry['seconds']:.1f} s"
        if entry["compile_seconds"] >= 0.05:
            part += f" (compiling {entry['compile_seconds']:.1f} s)"
        parts.append(part)
    return f"Time: {timing['total_seconds']:.1f} s; " + ", ".join(parts) + "."


def run_summary(config: dict, metrics: dict, outcome: Outcome, figures) -> str:
    """A single run's `summary.md` (`metrics` from `run_metrics`, `figures` the
    paths of the PNG files written)."""
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
    return text


def _sweep_shape(config: dict, runs: list):
    """`(values, seeds, seeds per value, (value, run) pairs)` of a sweep."""
    values, seeds = config["sweep"]["values"], config["sweep"].get("seeds")
    per_value = len(seeds) if seeds else 1
    runs_by_value = [(values[k // per_value], r) for k, r in enumerate(runs)]
    return values, seeds, per_value, runs_by_value


def sweep_metrics(config: dict, runs: list, interrupts) -> dict:
    """A sweep's `metrics.json`: its status, and each run's headline numbers
    (`runs`: the runs' `ExperimentResult`s, in order)."""
    key = config["sweep"]["key"]
    values, seeds, per_value, runs_by_value = _sweep_shape(config, runs)
    status = "interrupted" if interrupts.interrupted else "complete"
    return {
        "status": status,
        "signal": interrupts.name,
        "precision": config["precision"],
        "sweep": {"key": key, "values": values} | ({"seeds": seeds} if seeds else {}),
        "runs": [
            {
                "value": v,
                "seed": r.config["seed"],
                "folder": r.path.name,
                "status": r.metrics["status"],
                "summary": r.metrics["summary"],
            }
            for v, r in runs_by_value
        ],
        "not_run": values[-(-len(runs) // per_value) :],
    }


def sweep_summary(config: dict, runs: list, labels: list, interrupts) -> str:
    """A sweep's `summary.md`: one table row per run (its `labels` columns, the
    headline numbers) and one per value not run, and the sweep's figure."""
    key = config["sweep"]["key"]
    values, seeds, per_value, runs_by_value = _sweep_shape(config, runs)
    lines = [f"# {config['name']}: sweep of `{key}`", ""]
    if config["description"]:
        lines += [config["description"], ""]
    if interrupts.interrupted:
        lines += [
            f"**Interrupted** ({interrupts.name}): the sweep stopped after "
            f"{len(runs)} of {len(values) * per_value} runs; the last run below is "
            "marked.",
            "",
        ]
    each = (
        f"seeds {', '.join(map(str, seeds))}; the figure shows their mean and ±1 "
        "standard deviation"
        if seeds
        else f"seed {config['seed']}"
    )
    lines += [
        f"One `{config['kind']}` run per value of `{key}` ({each}, precision "
        f"{config['precision']}); each sub-folder is a run folder.",
        "",
        f"| {key} | seed | " + " | ".join(labels) + " | status | run |",
        "|" + " --- |" * (len(labels) + 4),
    ]
    for value, run in runs_by_value:
        cells = " | ".join(_markdown_number(run.metrics["summary"][k]) for k in labels)
        lines.append(
            f"| {value} | {run.config['seed']} | {cells} | {run.metrics['status']} | "
            f"[{run.path.name}]({run.path.name}/) |"
        )
    for value in values[-(-len(runs) // per_value) :]:
        blanks = " | ".join("" for _ in labels)
        lines.append(f"| {value} | | {blanks} | not run | |")
    lines += ["", "![sweep](sweep.png)", ""]
    return "\n".join(lines)
