"""Start-up without JAX: `import dynsys` and the `dynsys` command's help and refusals
import no `jax` module (checked in `sys.modules` of a fresh interpreter), while every
public name stays reachable from the lazy `dynsys/__init__.py`."""

import ast
import importlib
import json
import pathlib
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]

# The public API as `dynsys/__init__.py` listed it when it imported everything
# (before it became lazy): each must still be reachable as `dynsys.<name>`.
FORMER_PUBLIC_NAMES = frozenset(
    """
    Dataset load_dataset simulate global_dataset initialize_distributed
    is_main_process ConfigError ExperimentResult run_experiment resolve_config
    quadratic_cost tracking_cost fit FitResult fit_least_squares MultipleShooting
    fit_percent nrmse spectral_radius train TrainResult load save AbstractAdjoint
    Autodiff Checkpointed LinearAdjoint AbstractMethod Chunked Parallel Sequential
    rollout Trajectory batch_sharding shard_batch estimate_x0 from_control
    to_control frequency_response impulse_response Modes modes step_response
    fit_subspace subspace_singular_values compare Comparison residual_analysis
    Residuals AbstractController LinearFeedback MLPController AbstractContextLayer
    AbstractLayeredController ContextLayer LayeredController StackedController
    AbstractODE discretize Discretized LinearODE Sampled StableLinearSystem
    AbstractSystem LinearSystem
    """.split()
)

# Run in a fresh interpreter: each command line through `dynsys.cli.main`, then
# whether any `jax` module was imported, as one JSON line per command.
_PROBE = """
import json, sys
from dynsys import cli

def jax_loaded():
    return sorted(m for m in sys.modules if m == "jax" or m.startswith("jax."))

for argv in json.loads(sys.argv[1]):
    try:
        code = cli.main(argv)
    except SystemExit as exit:
        code = exit.code
    print(json.dumps({"argv": argv, "code": code, "jax": jax_loaded()[:3]}))
"""


def _probe(commands: list[list[str]], cwd: pathlib.Path) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if "argv" in line]
    return lines


def test_help_and_version_import_no_jax(tmp_path):
    commands = [
        ["--help"],
        ["--version"],
        ["fit", "--help"],
        ["run", "--help"],
        ["simulate", "--help"],
        [],
    ]
    reports = _probe(commands, tmp_path)
    assert [report["argv"] for report in reports] == commands
    for report in reports:
        assert report["code"] == 0, report
        assert report["jax"] == [], f"{report['argv']} imported {report['jax']}"


def test_refusals_import_no_jax(tmp_path):
    (tmp_path / "bad.toml").write_text("kind = \n")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("not dynsys's")
    commands = [
        ["fit", "missing.csv"],  # a file that is not there
        ["fit", "--steps", "0"],  # an option out of its range
        # a real record as received, with an option out of range
        ["fit", str(ROOT / "data" / "real" / "heating.csv"), "--validation", "1.5"],
        ["fit", "--validation", "2"],
        ["fit", "--out", "foreign"],  # a folder dynsys did not write
        ["fit", "--model", "nope"],  # argparse's own refusal
        ["run", "missing.toml"],
        ["run", "bad.toml"],
        ["simulate", "pendulum", "--steps", "0"],
        ["simulate", "pendulum", "--out", "foreign"],
    ]
    reports = _probe(commands, tmp_path)
    assert [report["argv"] for report in reports] == commands
    for report in reports:
        assert report["code"] == 2, report
        assert report["jax"] == [], f"{report['argv']} imported {report['jax']}"
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "not dynsys's"


def test_import_dynsys_imports_no_jax_until_a_name_is_used():
    code = (
        "import sys, dynsys\n"
        "before = any(m.split('.')[0] == 'jax' for m in sys.modules)\n"
        "fit = dynsys.fit\n"
        "after = any(m.split('.')[0] == 'jax' for m in sys.modules)\n"
        "print(before, after, fit.__module__)\n"
    )
    assert _printed_by(code) == ["False", "True", "dynsys._fitting.fit"]


def test_a_discrete_time_fit_of_a_file_imports_no_diffrax():
    # diffrax (0.7 s to import) is for sampled ODEs only: loading a file, the zoo's
    # names and a linear fit's building blocks do not need it; a `Sampled` does.
    code = (
        "import sys, dynsys, dynsys.models, dynsys._fitting.fit\n"
        f"dynsys.load_dataset({str(ROOT / 'data' / 'real' / 'heating.csv')!r}, "
        "inputs=['drive_V'], outputs=['temp_C'])\n"
        "before = 'diffrax' in sys.modules\n"
        "dynsys.models.pendulum_ode()\n"
        "print(before, 'diffrax' in sys.modules)\n"
    )
    assert _printed_by(code) == ["False", "True"]


def _printed_by(code: str) -> list[str]:
    """The words `code` prints, run in a fresh interpreter (which must succeed)."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _type_checking_imports() -> dict[str, str]:
    """`{name: module}` of the imports in `dynsys/__init__.py`'s `TYPE_CHECKING`
    block, read with `ast` here (independently of the module's own reading)."""
    tree = ast.parse((ROOT / "dynsys" / "__init__.py").read_text())
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
                for alias in statement.names:
                    assert alias.asname == alias.name, "re-export as `X as X`"
                    names[alias.name] = "dynsys." + statement.module
    return names


def test_every_public_name_is_reachable_and_listed():
    import dynsys

    listed = _type_checking_imports()
    assert FORMER_PUBLIC_NAMES <= set(listed), FORMER_PUBLIC_NAMES - set(listed)
    assert set(listed) <= set(dir(dynsys))
    for name, module in listed.items():
        value = getattr(dynsys, name)
        assert value is getattr(importlib.import_module(module), name), name
    namespace: dict = {}
    exec("from dynsys import *", namespace)
    assert set(listed) <= set(namespace)


def test_submodules_and_version_are_attributes():
    import importlib
    import importlib.metadata

    import dynsys

    assert dynsys.__version__ == importlib.metadata.version("dynsys")
    assert dynsys.plot.trajectory.__module__ == "dynsys.plot._trajectory"
    assert "mass_spring_damper" in dynsys.models.ZOO
    # A private submodule, once imported (by whatever test ran before, or here), is
    # an attribute of its package, as without the lazy loading.
    solvers = importlib.import_module("dynsys._fitting.solvers")
    assert dynsys._fitting.solvers is solvers and solvers.PARAMETER_LIMIT > 0


def test_an_unknown_name_is_an_attribute_error():
    import dynsys

    with pytest.raises(AttributeError, match="module 'dynsys' has no attribute 'fitt'"):
        dynsys.fitt  # noqa: B018
    assert not hasattr(dynsys, "jax")


def test_the_command_collects_garbage_less_often_and_a_library_call_does_not():
    # Process-wide settings are the command's (argv None), never a library call's.
    missing = str(ROOT / "no-such-file.csv")
    code = (
        "import gc, sys\n"
        "from dynsys import cli\n"
        "default = gc.get_threshold()\n"
        f"cli.main(['fit', {missing!r}])\n"
        "print(gc.get_threshold() == default)\n"
        f"sys.argv = ['dynsys', 'fit', {missing!r}]\n"
        "cli.main()\n"
        "print(gc.get_threshold() == cli.COMMAND_GC_THRESHOLDS)\n"
    )
    assert _printed_by(code) == ["True", "True"]


def test_the_command_ends_after_what_a_normal_exit_does_that_matters(tmp_path):
    # `command()` (the console script) skips the interpreter's teardown; before it,
    # the run's threads are joined, `atexit` functions run and stdout is flushed,
    # and the exit status is `main`'s.
    marks = tmp_path / "marks"
    code = (
        "import atexit, sys, threading, time\n"
        f"marks = open({str(marks)!r}, 'a')\n"
        "atexit.register(lambda: (marks.write('atexit\\n'), marks.flush()))\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    marks.write('thread\\n'); marks.flush()\n"
        "threading.Thread(target=late).start()\n"
        "print('before the command', end='')\n"  # in the buffer, unflushed
        "sys.argv = ['dynsys', 'fit', 'no-such-file.csv']\n"
        "from dynsys.cli import command\n"
        "command()\n"
        "print('never here')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == "before the command"
    assert "dynsys fit: DATA: no such file" in result.stderr
    assert marks.read_text().split() == ["thread", "atexit"]
