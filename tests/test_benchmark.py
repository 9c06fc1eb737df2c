"""The benchmark script runs (quick mode) and writes its table; no timing asserted."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "benchmark.py"


@pytest.mark.slow
def test_quick_run_writes_the_table(tmp_path):
    output = tmp_path / "benchmarks.md"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = output.read_text()
    for workload in ["W0", "W1", "W2", "W3", "W4"]:
        assert f"| {workload} | dynsys |" in text
        assert f"| {workload} | bare scan |" in text
    assert "| W0 | concat loop |" in text
    assert "| W4 | dynsys Checkpointed |" in text
    # With inputs: the default against Sequential() and the bare scan.
    for candidate in ["dynsys", "dynsys Sequential()", "bare scan"]:
        assert f"| U1 | {candidate} |" in text
    assert "default rollout gradient with inputs at most 1.05×" in text
    # The fitting section: one iteration against a bare step, time to the target.
    assert "### Fitting" in text and "One iteration of `fit`" in text
    assert "Time to reach 1.1× the true model's loss" in text
    assert "| P6: 6 states, 2 inputs" in text
    assert "### Targets" in text and "compile time" in text
    # Start-up and the compilation cache: whole commands, side by side.
    assert "### Start-up and compilation cache" in text
    assert "| `dynsys --help` |" in text and '| `python -c "import argparse"` |' in text
    assert "`dynsys --help` within 1.5×" in text
    assert re.search(
        r"\| demo \(`dynsys fit --measure 0,1`\) \| [\d.]+ s \| [\d.]+ s \|", text
    )
    assert "<!-- cpu begin -->" in text and "<!-- gpu begin -->" in text
    assert "| W0 | dynsys |" in result.stdout


def test_unknown_workload_is_an_error(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--workloads", "W9", "--no-write"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "unknown workloads ['W9']" in result.stderr


def test_a_backend_section_replaces_only_itself(tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "benchmarks.md"
    module.write_report(str(path), "cpu", "## CPU\n\nfirst")
    assert "still to be measured" in path.read_text()
    module.write_report(str(path), "gpu", "## GPU\n\ngpu figures")
    module.write_report(str(path), "cpu", "## CPU\n\nsecond")
    text = path.read_text()
    assert "second" in text and "first" not in text and "gpu figures" in text
    assert "still to be measured" not in text
