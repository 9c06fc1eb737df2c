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
from .report import sweep_metrics, sweep_summary, write_report
from .results import _recorded, ExperimentResult
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
    metrics = sweep_metrics(config, runs, interrupts)
    recorded = _recorded(config)
    (folder / "config.toml").write_text(dump_toml(recorded), encoding="utf-8")
    write_report(folder, metrics, sweep_summary(config, runs, labels, interrupts))
    return ExperimentResult(
        folder, recorded, metrics, (folder / "sweep.png",), tuple(runs)
    )


def _summary_label(config: dict) -> str:

    return SUMMARY_LABELS[config["kind"]]
