"""The layering contract of `pyproject.toml` ([tool.importlinter]) holds for the
package, and fails for a copy of it with one upward import or one circle, so the
check in `python3 dev.py test` can catch them."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
LINT = pathlib.Path(sys.executable).with_name("lint-imports")


def _lint(tree: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )


@pytest.fixture
def copy(tmp_path):
    if not LINT.exists():
        pytest.skip("lint-imports is not installed (the test extra installs it)")
    shutil.copytree(ROOT / "dynsys", tmp_path / "dynsys")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_keeps_its_layers(copy):
    result = _lint(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    "module, line, named",
    [
        # a system importing the fitting layer: upward
        (
            "_systems/stable.py",
            "from .._fitting import fit as _up",
            "dynsys._systems.stable -> dynsys._fitting.fit",
        ),
        # identification importing the experiments: upward and forbidden
        (
            "_sysid/response.py",
            "from .._experiments import run as _up",
            "dynsys._sysid.response -> dynsys._experiments.run",
        ),
        # the experiments' process plumbing importing a kind: upward inside them
        (
            "_experiments/runtime/heap.py",
            "from ..fit import pipeline as _up",
            "dynsys._experiments.runtime.heap -> dynsys._experiments.fit.pipeline",
        ),
        # two modules of one folder importing each other
        ("_data/files.py", "from . import dataset as _circle", ".files -> .dataset"),
    ],
)
def test_an_upward_import_or_a_circle_breaks_the_contract(copy, module, line, named):
    path = copy / "dynsys" / module
    path.write_text(path.read_text() + f"\n{line}\n")
    result = _lint(copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert named in result.stdout, result.stdout
