"""Time to the first answer: the `dynsys` command's start-up, and a cold against a
warm compilation cache for `dynsys fit`. Every figure is a whole command's wall time
(a fresh process each run, as a user meets it), the median of several runs.

    python benchmarks/benchmark_startup.py            # print the section
    python benchmarks/benchmark_startup.py --quick    # fewer runs, the demo only
    python benchmarks/benchmark_startup.py --peers-python /tmp/peers/bin/python

With `--peers-python` (a Python with `sippy_unipi` installed, as
`benchmarks/compare_peers.py` says), the same run also times SIPPY's N4SID on the
heating record as a whole command, for the issue's "report SIPPY on the same record
in the same run".

`benchmarks/benchmark.py` runs it too (its "Start-up and compilation cache" section).
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


ROOT = pathlib.Path(__file__).resolve().parents[1]

HEATING = "heating.csv, 801 samples, SISO"
ARGPARSE = '`python -c "import argparse"`'
HELP = "`dynsys --help`"
# The part of a `dynsys fit` run before its first timed stage (`metrics.json`'s
# `total_seconds` counts from there): the interpreter, the imports, the arguments.
START = "start-up (interpreter, imports, arguments)"
# SIPPY's N4SID as `benchmarks/compare_peers.py --methods` names it, and its row label.
PEERS = {
    "sippy": "SIPPY N4SID (its order rule)",
    "sippy-aic": "SIPPY N4SID (its AIC order scan, 1..10)",
}
# XLA's own settings of the CPU code-generation options that dynsys sets for its
# programs (docs/performance.md, "Compile less"), as `XLA_FLAGS` entries: an option a
# user names in `XLA_FLAGS` keeps the user's setting. An XLA that does not know an
# option refuses to start (the jaxlib versions dynsys does not set them on).
XLA_DEFAULT_FLAGS = (
    "--xla_cpu_use_fusion_emitters=true",
    "--xla_backend_optimization_level=3",
)
# `dynsys fit` workloads: the demo (`python3 dev.py demo`), and a real record as a
# user has it (read only where the single-experiment reader is available).
FITS = {
    "demo (`dynsys fit --measure 0,1`)": ["--measure", "0,1"],
    HEATING: [
        str(ROOT / "data" / "real" / "heating.csv"),
        "--inputs",
        "drive_V",
        "--outputs",
        "temp_C",
    ],
}


def _dynsys_command() -> list[str]:
    script = pathlib.Path(sys.executable).with_name("dynsys")
    if script.exists():
        return [str(script)]
    found = shutil.which("dynsys")
    return [found] if found else [sys.executable, "-m", "dynsys.cli"]


def _wall(
    command: list[str], env=None, cwd=None
) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    return time.perf_counter() - start, result


def startup_rows(repeats: int) -> list[tuple[str, float]]:
    """Median wall seconds of each command, run in turn `repeats` times (interleaved,
    so that a change in the machine's load affects all alike)."""
    dynsys = _dynsys_command()
    # As on a user's machine, Python may write (and then reads) its bytecode cache;
    # the first, untimed run of each command writes it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    commands = {
        ARGPARSE: [sys.executable, "-c", "import argparse"],
        '`python -c "import jax"` (a floor of every fit)': [
            sys.executable,
            "-c",
            "import jax",
        ],
        HELP: [*dynsys, "--help"],
        "`dynsys fit --help`": [*dynsys, "fit", "--help"],
        "`dynsys fit missing.csv` (a refusal)": [*dynsys, "fit", "missing.csv"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        _wall(command, env=env)
    for _ in range(repeats):
        for name, command in commands.items():
            times[name].append(_wall(command, env=env)[0])
    return [(name, statistics.median(values)) for name, values in times.items()]


def run_parts(folder: str, wall: float) -> dict[str, tuple[float, float]]:
    """Where a `dynsys fit` run's `wall` seconds went, from the `metrics.json` in its
    output `folder`: `{part: (seconds, of them compiling)}`, one part per stage of
    `timing.stages` (compiling: tracing, lowering and XLA's backend, or reading
    the compilation cache) and `START`, the wall time before the first stage."""
    with open(os.path.join(folder, "metrics.json")) as file:
        timing = json.load(file)["timing"]
    parts = {START: (wall - timing["total_seconds"], 0.0)}
    for name, stage in timing["stages"].items():
        parts[name] = (stage["seconds"], stage["compile_seconds"])
    return parts


def _median_parts(runs: list[dict]) -> dict[str, tuple[float, float]]:
    """Per part, the median seconds and median compiling seconds over `runs`."""
    names = [name for name in runs[0] if all(name in run for run in runs)]
    return {
        name: tuple(statistics.median(run[name][k] for run in runs) for k in (0, 1))
        for name in names
    }


def parts_lines(parts: dict[str, dict], workload: str) -> list[str]:
    """A markdown table of `workload`'s parts, cold and warm (`parts[kind][part] =
    (seconds, compiling)`), the larger cold parts first, and the time of the warm
    run's parts that no compilation cache shortens (start-up and figures)."""
    cold, warm = parts["cold"], parts["warm"]
    names = sorted((n for n in cold if n in warm), key=lambda n: -cold[n][0])

    def cell(seconds, compiling):
        return f"{seconds:.1f} s" + (
            f" ({compiling:.1f} s)" if compiling >= 0.05 else ""
        )

    floor = sum(warm[n][0] for n in (START, "figures") if n in warm)
    return [
        f"Where the time of `dynsys fit` on {workload} goes (medians of the runs "
        "above; the stages of `metrics.json`'s `timing`, compiling in brackets: "
        "tracing, lowering and XLA, or reading the cache):",
        "",
        "| part | cold | warm |",
        "|---|---:|---:|",
        *(
            f"| {n} | {cell(*cold[n])} | {cell(*warm[n])} |"
            for n in names
            if max(cold[n][0], warm[n][0]) >= 0.05
        ),
        "",
        "The parts of the warm run that no compilation cache shortens, its start-up "
        f"and its figures, take {floor:.1f} s.",
        "",
    ]


def cache_rows(
    repeats: int, quick: bool
) -> tuple[list[tuple[str, str, str, str]], dict[str, dict]]:
    """`(workload, cold, warm, cold with XLA's default options)`: `dynsys fit
    --no-progress` with an empty cache folder, again with the folder the first run
    filled, and with an empty folder and `XLA_FLAGS` naming the options dynsys sets
    (`XLA_DEFAULT_FLAGS`) at XLA's own values, so that XLA's defaults are used
    (medians of `repeats` triples, each with new folders; "not run" where this XLA
    does not know the options). Also, per workload that ran, `{"cold": parts,
    "warm": parts}`: the median `run_parts` of its runs."""
    dynsys = _dynsys_command()
    flags = [os.environ.get("XLA_FLAGS", ""), *XLA_DEFAULT_FLAGS]
    default_flags = " ".join(flags).strip()
    rows, parts = [], {}
    for name, arguments in FITS.items():
        if quick:  # a smoke test: tiny simulated data
            if not name.startswith("demo"):
                continue
            arguments = ["--trajectories", "4", "--length", "20", "--steps", "3"]
        cold, warm, default, failure = [], [], [], None
        split = {"cold": [], "warm": []}
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="dynsys-bench-") as scratch:
                env = {**os.environ, "DYNSYS_CACHE_DIR": os.path.join(scratch, "c")}
                env_default = {
                    **env,
                    "DYNSYS_CACHE_DIR": os.path.join(scratch, "d"),
                    "XLA_FLAGS": default_flags,
                }
                command = [*dynsys, "fit", *arguments, "--no-progress"]
                runs = (
                    ("cold", cold, env),
                    ("warm", warm, env),
                    ("default", default, env_default),
                )
                for kind, times, run_env in runs:
                    out = os.path.join(scratch, kind)
                    seconds, result = _wall(
                        command + ["--out", out], env=run_env, cwd=scratch
                    )
                    if result.returncode != 0 and kind == "default":
                        continue  # an XLA without these options: "not run"
                    if result.returncode != 0:
                        failure = result.stderr.strip().splitlines()[-1]
                        break
                    times.append(seconds)
                    if kind in split:
                        split[kind].append(run_parts(out, seconds))
            if failure:
                break
        if failure:
            rows.append((name, "not run", failure.replace("|", "/")[:120], ""))
        else:
            parts[name] = {kind: _median_parts(runs) for kind, runs in split.items()}
            rows.append(
                (
                    name,
                    f"{statistics.median(cold):.1f} s",
                    f"{statistics.median(warm):.1f} s",
                    f"{statistics.median(default):.1f} s" if default else "not run",
                )
            )
    return rows, parts


def peer_rows(repeats: int, peers_python: str) -> list[tuple[str, str, str, str]]:
    """`(method, order, held-out fit %, wall)`: SIPPY's N4SID on the heating record
    (split and scored as `dynsys fit` does), each a whole command
    (`benchmarks/compare_peers.py` in `peers_python`: interpreter, imports, reading,
    identification, scoring), median of `repeats` runs, interleaved."""
    script = str(ROOT / "benchmarks" / "compare_peers.py")
    commands = {
        method: [peers_python, script, "--files", "heating", "--methods", method]
        for method in PEERS
    }
    times: dict[str, list[float]] = {method: [] for method in commands}
    rows: dict[str, list[str]] = {}
    for _ in range(repeats):
        for method, command in commands.items():
            seconds, result = _wall(command)
            lines = [
                line for line in result.stdout.splitlines() if "| heating |" in line
            ]
            if result.returncode != 0 or not lines or "skipped" in lines[-1]:
                reason = (lines[-1] if lines else result.stderr.strip()[-120:]) or "?"
                return [
                    (
                        PEERS[method],
                        "",
                        reason.replace("|", "/"),
                        "not run",
                    )
                ]
            rows[method] = [cell.strip() for cell in lines[-1].strip("|").split("|")]
            times[method].append(seconds)
    return [
        (
            PEERS[method],
            rows[method][2],
            rows[method][3],
            f"{statistics.median(times[method]):.1f} s",
        )
        for method in PEERS
    ]


def _seconds(cell: str) -> float | None:
    """`12.3` from a table cell `"12.3 s"`; `None` from one that is not a time."""
    number, _, unit = cell.partition(" ")
    try:
        return float(number) if unit == "s" else None
    except ValueError:
        return None


def _fit_targets(fits) -> list[tuple[str, str, bool]]:
    """The issue's targets for `dynsys fit` on a 1,000-sample SISO record (the
    heating record, 801 samples): cold under 10 s, warm under 3 s."""
    rows = []
    for name, cold, warm, _ in fits:
        if name != HEATING:
            continue
        for kind, cell, goal in (("cold", cold, 10.0), ("warm", warm, 3.0)):
            seconds = _seconds(cell)
            if seconds is not None:
                target = f"`dynsys fit` on {name}, {kind} cache, under {goal:.0f} s"
                rows.append((target, cell, seconds < goal))
    return rows


def run(
    quick: bool = False, peers_python: str | None = None
) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """The section's markdown lines, and its `(target, measured, met)` rows; with
    `peers_python`, SIPPY's N4SID on the heating record in the same run."""
    repeats = 3 if quick else 15
    startup = startup_rows(repeats)
    rows = dict(startup)
    base, help_time = rows[ARGPARSE], rows[HELP]
    fits, parts = cache_rows(1 if quick else 3, quick)
    peers = peer_rows(1 if quick else 3, peers_python) if peers_python else []
    lines = [
        "### Start-up and compilation cache",
        "",
        f"Whole-command wall time (a fresh process each run; median of {repeats} "
        "runs, interleaved):",
        "",
        "| command | wall | × `import argparse` |",
        "|---|---|---|",
        *(f"| {name} | {t:.3f} s | {t / base:.2f}× |" for name, t in startup),
        "",
        "`dynsys fit --no-progress` with an empty compilation cache (cold), "
        "again with the cache the first run filled (warm), and cold with XLA's "
        "default CPU code generation (the fusion emitters and LLVM optimisation "
        "level dynsys sets, named in `XLA_FLAGS` at XLA's values); "
        f"median of {1 if quick else 3} triples:",
        "",
        "| data | cold | warm | cold, XLA's defaults |",
        "|---|---|---|---|",
        *(f"| {n} | {cold} | {warm} | {default} |" for n, cold, warm, default in fits),
        "",
    ]
    shown = HEATING if HEATING in parts else next(iter(parts), None)
    if shown is not None:
        lines += parts_lines(parts[shown], shown)
    if peers:
        lines += [
            "SIPPY's N4SID on the heating record in the same run (a whole command: "
            "`benchmarks/compare_peers.py --files heating --methods ...` in a Python "
            "with `sippy_unipi`; held-out fit % scored as `dynsys fit` scores its "
            f"models); median of {1 if quick else 3} runs:",
            "",
            "| method | order | held-out fit % | wall |",
            "|---|---:|---:|---:|",
            *(f"| {m} | {order} | {fit} | {wall} |" for m, order, fit, wall in peers),
            "",
        ]
    target = (
        '`dynsys --help` within 1.5× of `python -c "import argparse"`',
        f"{help_time:.3f} s vs {base:.3f} s ({help_time / base:.2f}×)",
        help_time <= 1.5 * base,
    )
    return lines, [target, *_fit_targets(fits)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, demo only")
    parser.add_argument(
        "--peers-python",
        help="a Python with sippy_unipi: also time SIPPY's N4SID on the heating record",
    )
    args = parser.parse_args(argv)
    lines, rows = run(args.quick, args.peers_python)
    print("\n".join(lines))
    for target, measured, met in rows:
        print(f"{target}: {measured} ({'met' if met else 'not met'})")


if __name__ == "__main__":
    main()
