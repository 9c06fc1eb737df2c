"""Sweeps: one run per value of a config key, each in a sub-folder, and the
sweep's figure and table. A signal stops the sweep after the run it hit."""

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """The `[sweep]` table as a typed, frozen config, each field one argument of the
    call it feeds:

    - each run is the config with `overrides()`, as `run_experiment(config,
        overrides=...)` takes them: `key` set to each of `values`, and `seed` to
        each of `seeds` (`None`: the config's own seed);
    - the sweep's figure is `plot.sweep(**figure_arguments(...))`: `key`, the
        values run, their metrics, `xlabel` (the quantity swept, with its unit),
        `ylabel` (the kind's headline metric) and `title` (the config's
        `description`, or `None`).

    The TOML a user writes is unchanged (`config.py` validates it); this is built
    from the resolved config.
    """

    key: str
    values: tuple
    seeds: tuple | None
    xlabel: str
    ylabel: str
    title: str | None

    @classmethod
    def from_config(cls, config: dict) -> "SweepConfig":
        """From a resolved config with a `[sweep]` table."""
        table = config["sweep"]
        seeds = table.get("seeds")
        return cls(
            key=table["key"],
            values=tuple(table["values"]),
            seeds=None if seeds is None else tuple(seeds),
            xlabel=sweep_label(config, table["key"]),
            ylabel=SUMMARY_LABELS[config["kind"]],
            title=config["description"] or None,
        )

    @property
    def per_value(self) -> int:
        """The number of runs of each value (one per seed)."""
        return len(self.seeds) if self.seeds else 1

    def overrides(self) -> list[dict]:
        """`run_experiment`'s `overrides` of each run, value by value (and seed by
        seed within a value): `{key: value}`, with `"seed"` when the sweep lists
        seeds."""
        seeds = self.seeds or (None,)
        return [
            {self.key: value} | ({} if seed is None else {"seed": seed})
            for value in self.values
            for seed in seeds
        ]

    def figure_arguments(self, runs: list) -> dict:
        """`plot.sweep`'s arguments for the finished `runs` (`ExperimentResult`s,
        in order): the values whose every seed has run, and each headline metric
        per value, shape `(V,)`, or `(seeds, V)` with seeds (error bars)."""
        complete = len(runs) // self.per_value  # values whose every seed has run
        table = {}
        for label in runs[0].metrics["summary"]:
            done = runs[: complete * self.per_value]
            column = [run.metrics["summary"][label] for run in done]
            table[label] = (
                np.asarray(column).reshape(complete, self.per_value).T
                if self.seeds
                else column
            )
        return dict(
            key=self.key,
            values=list(self.values[:complete]),
            metrics=table,
            xlabel=self.xlabel,
            ylabel=self.ylabel,
            roles=ROLES,
            title=self.title,
        )


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
    sweep = SweepConfig.from_config(config)
    key = sweep.key
    runs: list[ExperimentResult] = []
    taken: set[str] = set()
    for (label, single), overrides in zip(expand_sweep(config), sweep.overrides()):
        sub = None
        try:
            label = _folder_label(label, taken)
            seed = f" (seed {overrides['seed']})" if sweep.seeds else ""
            echo(f"sweep {key} = {overrides[key]!r}{seed} -> {label}/")
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
        return _write_sweep(config, sweep, folder, runs, interrupts)


def _write_sweep(
    config: dict,
    sweep: SweepConfig,
    folder: pathlib.Path,
    runs: list,
    interrupts: Interrupts,
) -> ExperimentResult:
    from .. import plot
    from ..plot._save import save_png

    figure = plot.sweep(**sweep.figure_arguments(runs))
    save_png(figure, folder / "sweep.png", dpi=100)
    metrics = sweep_metrics(config, runs, interrupts)
    recorded = _recorded(config)
    (folder / "config.toml").write_text(dump_toml(recorded), encoding="utf-8")
    labels = list(runs[0].metrics["summary"])
    write_report(folder, metrics, sweep_summary(config, runs, labels, interrupts))
    return ExperimentResult(
        folder, recorded, metrics, (folder / "sweep.png",), tuple(runs)
    )
