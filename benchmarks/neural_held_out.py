"""The neural default on a real record's held-out last third, as
docs/nonlinear-models.md#benchmarks measures it: the record's first two thirds go
to `dynsys fit FIRST.csv --inputs … --outputs … --model neural` (which splits
them again: two thirds to train, the last third for early stopping), then
`dynsys compare` scores the saved neural model (its encoder on the first 20
held-out samples, the free run on the rest) and the linear model it started from
on the last third, which the fit never saw.

Prints the two commands' lines of interest, the RMS of each model on the held-out
third (output units) and the wall time of the whole `dynsys fit` run.

Run: `python benchmarks/neural_held_out.py [tanks|silverbox ...] [--out DIR]`
"""

import argparse
import csv
import pathlib
import subprocess
import sys
import tempfile
import time

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared/data/real"
RECORDS = {
    "tanks": ("cascaded_tanks_estimation.csv", "pump_V", "level_V"),
    "silverbox": ("silverbox_estimation.csv", "u_V", "y_V"),
}


def split_thirds(source: pathlib.Path, folder: pathlib.Path):
    """`(first, last)`: the record's first two thirds and its last third (rows
    `T - T // 3` on), as CSV files in `folder`, the header kept."""
    with open(source, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    cut = len(body) - len(body) // 3
    paths = []
    for name, part in (("first", body[:cut]), ("last", body[cut:])):
        path = folder / f"{source.stem}_{name}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(part)
        paths.append(path)
    return paths


def _dynsys(*args) -> str:
    command = [sys.executable, "-c", "from dynsys.cli import command; command()"]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def _rms(output: str) -> str:
    """The RMS column of `dynsys compare`'s last table line."""
    return output.strip().splitlines()[-1].split()[-1]


def measure(name: str, out: pathlib.Path) -> None:
    file, inputs, outputs = RECORDS[name]
    first, last = split_thirds(DATA / file, out)
    run = out / f"run_{name}"
    columns = ["--inputs", inputs, "--outputs", outputs]
    start = time.perf_counter()
    log = _dynsys("fit", str(first), *columns, "--model", "neural", "--out",
                  str(run), "--no-progress")  # fmt: skip
    wall = time.perf_counter() - start
    for line in log.splitlines():
        if any(
            mark in line
            for mark in ("neural state-space model", "validation gain", "final neural")
        ):
            print(f"{name}: {line.strip()}")
    neural = _dynsys("compare", str(run / "neural_model.dynsys"), str(last), *columns)
    linear = _dynsys(
        "compare", str(run / "neural_linear_model.dynsys"), str(last), *columns
    )
    print(
        f"{name}: held-out last third RMS: neural {_rms(neural)}, linear "
        f"{_rms(linear)}; dynsys fit wall time {wall:.1f} s",
        flush=True,
    )


def check_records(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """`parser.error` (one line) for a name that is not one of `RECORDS`."""
    for name in names:
        if name not in RECORDS:
            parser.error(f"records: expected tanks or silverbox, got {name!r}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", default=["tanks", "silverbox"])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    check_records(parser, args.records)
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="neural_held_out_"))
    out.mkdir(parents=True, exist_ok=True)
    for name in args.records:
        measure(name, out)


if __name__ == "__main__":
    main()
