"""Time to the answer of `dynsys fit` against SIPPY's N4SID with its AIC order scan
(issue 45's targets), side by side in one run: each a whole command in a fresh
process, as a user meets it, rounds interleaved so that the machine's load falls
on both alike.

For each record of `data/real/`:

- `sippy`: `benchmarks/compare_peers.py --files NAME --methods sippy-aic` in the
  peers' Python (interpreter, imports, reading, the AIC scan over orders 1..10 and
  scoring);
- `cold`: `dynsys fit FILE --inputs … --outputs … --no-progress` with an empty
  `DYNSYS_CACHE_DIR`; `warm`: the same again with the cache the cold run filled;
- `answer`: when the run printed its held-out fit % table ("held-out fit % vs
  measurements"), read from its output as it arrives;
- `other length`: after the record's warm run, the same channels cut to their
  first 90 % (a file of another length, same cache).

    python benchmarks/time_to_answer.py --peers-python /tmp/peers/bin/python \\
        [--files heating,cd_player_arm,evaporator] [--rounds 3]

`/tmp/peers` is a virtual environment with `sippy_unipi` (`benchmarks/
compare_peers.py` says how to make one). Prints a markdown table of medians and
the ratios to SIPPY's median.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from compare_peers import ROLES  # noqa: E402


ANSWER_MARKS = ("held-out fit % vs measurements",)


def _dynsys() -> str:
    found = shutil.which("dynsys", path=str(pathlib.Path(sys.executable).parent))
    return found or "dynsys"


def timed(command: list[str], env: dict, mark: tuple[str, ...] = ()) -> tuple:
    """`(wall seconds, seconds until a line holding one of `mark` appeared)` of
    `command`; the second is `None` without `mark` or where no line matched."""
    started = time.perf_counter()
    first = None
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        for line in process.stdout:
            if first is None and mark and any(m in line for m in mark):
                first = time.perf_counter() - started
        code = process.wait()
    if code != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit status {code}")
    return time.perf_counter() - started, first


def cut(name: str, folder: pathlib.Path, fraction: float) -> pathlib.Path:
    """The record's first `fraction` of rows, header kept, as a new file."""
    lines = (ROOT / "data" / "real" / f"{name}.csv").read_text().splitlines()
    keep = 1 + int((len(lines) - 1) * fraction)
    path = folder / f"{name}_first_{round(100 * fraction)}.csv"
    path.write_text("\n".join(lines[:keep]) + "\n")
    return path


def measure(name: str, peers_python: str | None, rounds: int, scratch) -> dict:
    inputs, outputs = ROLES[name]
    roles = ["--inputs", ",".join(inputs), "--outputs", ",".join(outputs)]
    shorter = cut(name, scratch, 0.9)
    times: dict[str, list[float]] = {}

    def add(key, value):
        if value is not None:
            times.setdefault(key, []).append(value)

    for round_ in range(rounds):
        cache = scratch / f"cache-{name}-{round_}"
        env = dict(os.environ, DYNSYS_CACHE_DIR=str(cache))
        fit = [_dynsys(), "fit", str(ROOT / "data" / "real" / f"{name}.csv"), *roles]
        fit += ["--no-progress", "--out", str(scratch / f"run-{name}")]
        if peers_python:
            peer = [peers_python, str(ROOT / "benchmarks" / "compare_peers.py")]
            add("sippy", timed([*peer, "--files", name, "--methods", "sippy-aic"],
                               dict(os.environ))[0])
        cold, cold_answer = timed(fit, env, ANSWER_MARKS)
        warm, warm_answer = timed(fit, env, ANSWER_MARKS)
        other = [_dynsys(), "fit", str(shorter), *roles, "--no-progress"]
        other += ["--out", str(scratch / f"run-{name}-short")]
        add("cold", cold)
        add("cold answer", cold_answer)
        add("warm", warm)
        add("warm answer", warm_answer)
        add("other length", timed(other, env)[0])
        shutil.rmtree(cache, ignore_errors=True)
    return {key: statistics.median(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", help="a Python with sippy_unipi installed")
    parser.add_argument("--files", default="heating,cd_player_arm,evaporator")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    columns = ("sippy", "cold", "cold answer", "warm", "warm answer", "other length")
    print("| record | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    with tempfile.TemporaryDirectory() as folder:
        for name in args.files.split(","):
            medians = measure(name, args.peers_python, args.rounds, pathlib.Path(folder))
            sippy = medians.get("sippy")
            cells = []
            for key in columns:
                value = medians.get(key)
                if value is None:
                    cells.append("–")
                elif sippy and key != "sippy":
                    cells.append(f"{value:.1f} s ({value / sippy:.1f}×)")
                else:
                    cells.append(f"{value:.1f} s")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
