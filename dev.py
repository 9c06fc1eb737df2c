#!/usr/bin/env python3
"""Set-up and tasks for dynsys, with nothing but Python 3.11+.

    python3 dev.py demo   # create .venv, install dynsys, run `dynsys fit`: identify
                          # a linear model from the input and two noisy measured
                          # outputs of a simulated zoo model, print true vs fitted,
                          # write runs/fit/
    python3 dev.py demo DATA.csv --inputs u1 --outputs y1,y2
                          # the same on your own input-output data
    python3 dev.py test   # create .venv, install dynsys with test extras, check the
                          # import contract (lint-imports), run pytest

Extra arguments after the task go to the command it runs, e.g.
`python3 dev.py test -k rollout` or `python3 dev.py demo my.csv --outputs y1,y2`
(`demo` with no arguments is `dynsys fit --measure 0,1`: the built-in example).
The virtual environment is (re)installed only when pyproject.toml changes.
"""

import hashlib
import os
import pathlib
import subprocess
import sys
import venv


ROOT = pathlib.Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".dev-install-stamp"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
EXTRAS = "test"


def _python() -> str:
    return str(BIN / ("python.exe" if os.name == "nt" else "python"))


def _test_workers() -> int:
    """pytest-xdist workers: one per core, at most 4 (each holds a JAX runtime)."""
    return max(1, min(os.cpu_count() or 1, 4))


def ensure_environment() -> None:
    """Create `.venv` and install dynsys (editable, with test extras) if needed."""
    if sys.version_info < (3, 11):  # noqa: UP036 (dev.py runs before the check of pip)
        sys.exit(
            f"dynsys needs Python 3.11 or newer, this is {sys.version.split()[0]}."
        )
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if (
        STAMP.exists()
        and STAMP.read_text() == wanted
        and pathlib.Path(_python()).exists()
    ):
        return
    if not pathlib.Path(_python()).exists():
        print(f"dev.py: creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    print("dev.py: installing dynsys and its dependencies (first run only)", flush=True)
    subprocess.run(
        [_python(), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True
    )
    subprocess.run(
        [_python(), "-m", "pip", "install", "--quiet", "-e", f".[{EXTRAS}]"],
        cwd=ROOT,
        check=True,
    )
    STAMP.write_text(wanted)


def main(argv: list[str]) -> int:
    tasks = {
        "demo": [str(BIN / "dynsys"), "fit"],
        "test": [_python(), "-m", "pytest", "-n", str(_test_workers())],
        "setup": None,
    }
    if not argv or argv[0] not in tasks:
        print(__doc__)
        return 2
    task, extra = argv[0], argv[1:]
    if task == "demo" and not extra:  # the built-in example: outputs measured
        extra = ["--measure", "0,1"]
    ensure_environment()
    if tasks[task] is None:
        return 0
    if task == "test":  # the layering (pyproject.toml, [tool.importlinter]) first
        contract = subprocess.run([str(BIN / "lint-imports")], cwd=ROOT)
        if contract.returncode != 0:
            return contract.returncode
    environment = dict(os.environ)
    if task == "test":  # each worker beside the others: one OpenBLAS thread each,
        # as the `dynsys` command runs (dynsys/_fitting/host_blas.py says why)
        environment.setdefault("OPENBLAS_NUM_THREADS", "1")
    return subprocess.run(tasks[task] + extra, cwd=ROOT, env=environment).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
