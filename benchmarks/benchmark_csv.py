"""CSV reading: `dynsys.load_dataset` (fast path, built-in path) against plain pandas.

Each reader runs in its own child process on the same file (a plain measured
record: `t,u0,y0,y1`, full-precision numbers), which reports the seconds of the
read and the peak resident memory above what the imports took
(`resource.getrusage`). dynsys's built-in reader is the one it uses where pandas is
not installed: its child process runs as if pandas were not. The figures go to
stdout; `benchmarks/benchmark.py --csv-only` runs the same.

    python benchmarks/benchmark_csv.py                 # 1e6 rows
    python benchmarks/benchmark_csv.py --rows 10000000
    python benchmarks/benchmark_csv.py --dynsys-path /tmp/old   # another dynsys tree
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np


_CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    sys.path.insert(0, sys.argv[3])
if mode == "pandas":
    import pandas as pd
    read = lambda: pd.read_csv(path)
else:
    if mode == "built-in":
        # As in an environment without pandas (an optional extra of dynsys's): its
        # fast path needs pandas, so dynsys reads the file with its built-in reader.
        sys.modules["pandas"] = None
    import dynsys
    try:  # imported by the first read anyway; timed apart, like pandas' own import
        import pandas
    except ImportError:
        pass
    read = lambda: dynsys.load_dataset(
        path, inputs=["u0"], outputs=["y0", "y1"], trajectory=None, time="t"
    )
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
result = read()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
where = sys.modules.get("dynsys")
where = where.__file__ if where else None
print(json.dumps({"seconds": seconds, "peak_kib": peak - before, "dynsys": where}))
"""

MODES = ("dynsys", "built-in", "pandas")


def write_file(path: pathlib.Path, rows: int, seed: int = 0) -> None:
    """A plain record: a time column and three channels, 17 significant digits."""
    rng = np.random.default_rng(seed)
    chunk = 1_000_000
    with open(path, "w") as file:
        file.write("t,u0,y0,y1\n")
        for start in range(0, rows, chunk):
            count = min(chunk, rows - start)
            block = np.column_stack(
                [0.01 * np.arange(start, start + count), rng.normal(size=(count, 3))]
            )
            np.savetxt(file, block, delimiter=",", fmt="%.17g")


def measure(mode: str, path: pathlib.Path, dynsys_path: str | None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            mode,
            str(path),
            *([dynsys_path] if dynsys_path else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(rows: int, modes=MODES, dynsys_path: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "record.csv"
        write_file(path, rows)
        size = path.stat().st_size
        results = {mode: measure(mode, path, dynsys_path) for mode in modes}
    print(f"CSV reading: {rows:,} rows x 4 columns, {size / 2**20:.0f} MiB")
    dynsys_file = next((r["dynsys"] for r in results.values() if r["dynsys"]), None)
    print(f"dynsys from {dynsys_file}")
    print(
        f"{'reader':<24}{'seconds':>10}{'peak MiB':>10}{'bytes/row':>11}{'/pandas':>9}"
    )
    for mode, result in results.items():
        kib = result["peak_kib"]
        ratio = result["seconds"] / results["pandas"]["seconds"]
        label = {"dynsys": "dynsys (fast path)", "built-in": "dynsys (built-in)"}
        print(
            f"{label.get(mode, 'pandas read_csv'):<24}{result['seconds']:>10.2f}"
            f"{kib / 1024:>10.0f}{kib * 1024 / rows:>11.0f}{ratio:>9.2f}"
        )
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--dynsys-path", default=None, help="PYTHONPATH for dynsys")
    args = parser.parse_args(argv)
    run(args.rows, args.modes.split(","), args.dynsys_path)


if __name__ == "__main__":
    main()
