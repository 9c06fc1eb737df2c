"""Time to the first answer: the `dynsys` command's start-up, and a cold against a
warm compilation cache for `dynsys fit`. Every figure is a whole command's wall time
(a fresh process each run, as a user meets it), the median of several runs.

    python scripts/benchmark_startup.py            # print the section
    python scripts/benchmark_startup.py --quick    # fewer runs, the demo only

`scripts/benchmark.py` runs it too (its "Start-up and compilation cache" section).
"""

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


ROOT = pathlib.Path(__file__).resolve().parents[1]

# `dynsys fit` workloads: the demo (`python3 dev.py demo`), and a real record as a
# user has it (read only where the single-experiment reader is available).
FITS = {
    "demo (`dynsys fit --measure 0,1`)": ["--measure", "0,1"],
    "heating.csv, 801 samples, SISO": [
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
        '`python -c "import argparse"`': [sys.executable, "-c", "import argparse"],
        "`dynsys --help`": [*dynsys, "--help"],
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


def cache_rows(repeats: int, quick: bool) -> list[tuple[str, str, str, str]]:
    """`(workload, cold, warm, cold with XLA's default options)`: `dynsys fit
    --no-progress` with an empty cache folder, again with the folder the first run
    filled, and with an empty folder and `XLA_FLAGS` naming the options dynsys sets
    (`dynsys/_jit.py`) at XLA's own values, so that XLA's defaults are used
    (medians of `repeats` triples, each with new folders)."""
    from dynsys._jit import as_flags, compiler_options, XLA_DEFAULTS

    dynsys = _dynsys_command()
    options = compiler_options("")
    defaults = as_flags({name: XLA_DEFAULTS[name] for name in options})
    default_flags = " ".join([os.environ.get("XLA_FLAGS", ""), *defaults]).strip()
    rows = []
    for name, arguments in FITS.items():
        if quick:  # a smoke test: tiny simulated data
            if not name.startswith("demo"):
                continue
            arguments = ["--trajectories", "4", "--length", "20", "--steps", "3"]
        cold, warm, default, failure = [], [], [], None
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="dynsys-bench-") as scratch:
                env = {**os.environ, "DYNSYS_CACHE_DIR": os.path.join(scratch, "c")}
                env_default = {
                    **env,
                    "DYNSYS_CACHE_DIR": os.path.join(scratch, "d"),
                    "XLA_FLAGS": default_flags,
                }
                command = [*dynsys, "fit", *arguments, "--no-progress"]
                runs = ((cold, env), (warm, env), (default, env_default))
                for times, run_env in runs[: 3 if options else 2]:
                    out = ["--out", os.path.join(scratch, "run")]
                    seconds, result = _wall(command + out, env=run_env, cwd=scratch)
                    if result.returncode != 0:
                        failure = result.stderr.strip().splitlines()[-1]
                        break
                    times.append(seconds)
            if failure:
                break
        if failure:
            rows.append((name, "not run", failure.replace("|", "/")[:120], ""))
        else:
            rows.append(
                (
                    name,
                    f"{statistics.median(cold):.1f} s",
                    f"{statistics.median(warm):.1f} s",
                    f"{statistics.median(default):.1f} s" if default else "not run",
                )
            )
    return rows


def run(quick: bool = False) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """The section's markdown lines, and its `(target, measured, met)` rows."""
    repeats = 3 if quick else 15
    startup = startup_rows(repeats)
    (_, base), (_, help_time) = startup[:2]
    fits = cache_rows(1 if quick else 3, quick)
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
    target = (
        '`dynsys --help` within 1.5× of `python -c "import argparse"`',
        f"{help_time:.3f} s vs {base:.3f} s ({help_time / base:.2f}×)",
        help_time <= 1.5 * base,
    )
    return lines, [target]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, demo only")
    args = parser.parse_args(argv)
    lines, rows = run(args.quick)
    print("\n".join(lines))
    for target, measured, met in rows:
        print(f"{target}: {measured} ({'met' if met else 'not met'})")


if __name__ == "__main__":
    main()
