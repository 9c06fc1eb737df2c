"""`dynsys fit` on every record of `data/real/` as received, this tree against
another checkout, side by side in one run: per record a cold run (empty cache
folder) and a warm one (the folder the cold run filled) of each version, the
versions alternated, each a whole process.

"Before" is another checkout of dynsys (e.g. `git archive HEAD~3 | tar -x -C
DIR`), run with `PYTHONPATH=DIR` in this environment; "after" is this tree.

    python benchmarks/benchmark_real_records.py --before DIR [--records heating,dryer]

Prints a Markdown table: the chosen structure, Levenberg–Marquardt steps (best
step), mean held-out fit %, and cold and warm wall time, before -> after.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from compare_peers import ROLES


ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTRA = {"dryer": ["--dt", "10"]}  # the dryer's file has no time column


def _run(
    record: str, tree: pathlib.Path | None, cache: pathlib.Path, out: pathlib.Path
):
    """One `dynsys fit` of `record`: wall seconds and `metrics.json`."""
    inputs, outputs = ROLES[record]
    env = dict(os.environ, DYNSYS_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's run keeps its bytecode
    env.pop("PYTHONPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-m", "dynsys.cli", "fit"]
    command += [str(ROOT / "data" / "real" / f"{record}.csv")]
    command += ["--inputs", ",".join(inputs), "--outputs", ",".join(outputs)]
    command += [*EXTRA.get(record, []), "--no-progress", "--out", str(out)]
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=out.parent, check=True, capture_output=True)
    wall = time.perf_counter() - start
    return wall, json.loads((out / "metrics.json").read_text())


def _row(record: str, runs: dict) -> str:
    def side(version):
        metrics = runs[version, "cold"][1]
        fits = metrics["fit_percent"]["held-out fit % vs measurements"]["fitted"]
        structure = f"{metrics['order']}" + (", D" if metrics["feedthrough"] else "")
        steps = f"{metrics['steps_run']} ({metrics['best_step']})"
        return structure, steps, f"{sum(fits) / len(fits):.2f}"

    before, after = side("before"), side("after")
    walls = [
        f"{runs['before', p][0]:.1f} -> {runs['after', p][0]:.1f} s"
        for p in ("cold", "warm")
    ]
    steps = " -> ".join([before[1], after[1]])
    fit = " -> ".join([before[2], after[2]])
    return f"| {record} | {after[0]} | {steps} | {fit} | {walls[0]} | {walls[1]} |"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=pathlib.Path, required=True)
    parser.add_argument("--records", default=",".join(ROLES))
    args = parser.parse_args()
    lines = [
        "| record | structure | LM steps (best), before -> after | mean held-out "
        "fit %, before -> after | cold | warm |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        folder = pathlib.Path(folder)
        for record in args.records.split(","):
            runs = {}
            for version in ("before", "after"):
                (folder / version).mkdir(exist_ok=True)
            versions = (("before", args.before.resolve()), ("after", None))
            for when in ("cold", "warm"):
                for version, tree in versions:
                    cache = folder / f"cache-{version}-{record}"
                    out = folder / version / f"{record}-{when}"
                    runs[version, when] = _run(record, tree, cache, out)
            lines.append(_row(record, runs))
            print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
