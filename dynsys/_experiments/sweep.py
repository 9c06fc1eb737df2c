"""Sweeps: one run per value of a config key, each in a sub-folder, and the
sweep's figure and table. A signal stops the sweep after the run it hit."""

import pathlib
import shutil

import numpy as np

from .config import (
    dump_toml,
    expand_sweep,
)
from .kinds import ROLES, SUMMARY_LABELS, sweep_label
from .results import _markdown_number, _recorded, ExperimentResult, strict_json
from .run_folder import (
    write_marker,
)
from .runtime.interrupt import Interrupts
from .single import _run_single


def _folder_label(label: str, taken: set[str]) -> str:
    """A sweep sub-run's folder name: `key=value`, made safe and unique."""
    safe = "".join(c if c.isalnum() or c in "_.=+-" else "_" for c in label)
    safe = safe[:100]
    candidate, k = safe, 2
    while candidate in taken:
        candidate, k = f"{safe}-{k}", k + 1
    taken.add(candidate)
    return candidate


def _run_sweep(
    config: dict,
    folder: pathlib.Path,
    progress: bool,
    echo,
    interrupts: Interrupts | None = None,
) -> ExperimentResult:
    """One run per value; a signal stops the sweep after the sub-run it hit.

    Every finished sub-run is kept, whatever the moment of the signal: a sub-run it
    hit while training keeps its best model, marked interrupted; one it hit before
    there was anything to keep (making its data, compiling) is removed, as is one
    that failed because of the signal; one it hit while writing is written whole.
    The values not run are listed in the sweep's `metrics.json` and table.
    """
    interrupts = Interrupts() if interrupts is None else interrupts
    key = config["sweep"]["key"]
    runs: list[ExperimentResult] = []
    taken: set[str] = set()
    for label, single in expand_sweep(config):
        sub = None
        try:
            label = _folder_label(label, taken)
            value = _swept_value(single, key)
            seed = f" (seed {single['seed']})" if "seeds" in config["sweep"] else ""
            echo(f"sweep {key} = {value!r}{seed} -> {label}/")
            sub = folder / label
            sub.mkdir()
            write_marker(sub, "a sweep's sub-run")
            runs.append(_run_single(single, sub, progress, echo, interrupts))
        except BaseException:
            if sub is not None:
                shutil.rmtree(sub, ignore_errors=True)
            if not runs or not interrupts.interrupted:
                raise  # a real failure, or nothing finished to keep
        if interrupts.interrupted:
            echo(f"sweep {key}: interrupted ({interrupts.name}); stopping the sweep")
            break
    with interrupts.deferred():
        return _write_sweep(config, folder, runs, interrupts)


def _swept_value(single: dict, key: str):
    section, name = key.split(".", 1)
    return single[section][name]


def _write_sweep(
    config: dict, folder: pathlib.Path, runs: list, interrupts: Interrupts
) -> ExperimentResult:
    from .. import plot
    from ..plot._save import save_png

    key, values = config["sweep"]["key"], config["sweep"]["values"]
    seeds = config["sweep"].get("seeds")
    per_value = len(seeds) if seeds else 1
    complete = len(runs) // per_value  # values whose every seed has run
    done = values[:complete]
    runs_by_value = [(values[k // per_value], r) for k, r in enumerate(runs)]
    labels = list(runs[0].metrics["summary"])
    table = {}
    for label in labels:
        column = [r.metrics["summary"][label] for r in runs[: complete * per_value]]
        # (seeds, values) when several seeds are run: plot.sweep draws error bars.
        table[label] = (
            np.asarray(column).reshape(complete, per_value).T if seeds else column
        )

    figure = plot.sweep(
        key,
        done,
        table,
        xlabel=sweep_label(config, key),
        ylabel=_summary_label(config),
        roles=ROLES,
        title=config["description"] or None,
    )
    save_png(figure, folder / "sweep.png", dpi=100)
    status = "interrupted" if interrupts.interrupted else "complete"
    metrics = {
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
    recorded = _recorded(config)
    (folder / "config.toml").write_text(dump_toml(recorded), encoding="utf-8")
    (folder / "metrics.json").write_text(strict_json(metrics))
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
    (folder / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return ExperimentResult(
        folder, recorded, metrics, (folder / "sweep.png",), tuple(runs)
    )


def _summary_label(config: dict) -> str:

    return SUMMARY_LABELS[config["kind"]]
