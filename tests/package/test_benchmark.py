"""The benchmark script runs (quick mode) and writes its table; no timing asserted."""

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "benchmark.py"


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


def _startup_module():
    path = SCRIPT.with_name("benchmark_startup.py")
    spec = importlib.util.spec_from_file_location("benchmark_startup", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_python(tmp_path, row):
    """An executable standing in for a peers' Python: it prints `row` for any
    script it is given, as `compare_peers.py` prints its table."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\necho '| file | method |'\necho '{row}'\n")
    path.chmod(0o755)
    return str(path)


def test_sippy_rows_read_the_peer_script_s_order_and_fit(tmp_path):
    module = _startup_module()
    fake = _fake_python(
        tmp_path, "| heating | SIPPY N4SID (its rule) | 3 | 64.6 | 1.5 |"
    )
    rows = module.peer_rows(2, fake)
    assert [(order, fit) for _, order, fit, _ in rows] == [("3", "64.6")] * 2
    assert [method for method, *_ in rows] == list(module.PEERS.values())
    assert all(wall.endswith(" s") for *_, wall in rows)


def test_a_missing_peer_is_reported_not_run(tmp_path):
    module = _startup_module()
    fake = _fake_python(
        tmp_path, "| heating | SIPPY N4SID (its rule) | | skipped: no sippy_unipi | |"
    )
    [(method, _, reason, wall)] = module.peer_rows(1, fake)
    assert wall == "not run" and "no sippy_unipi" in reason


def test_fit_targets_compare_the_heating_times_with_10_and_3_seconds():
    module = _startup_module()
    fits = [
        ("demo", "1.0 s", "0.5 s", "2.0 s"),
        (module.HEATING, "9.5 s", "3.2 s", "20.0 s"),
    ]
    rows = module._fit_targets(fits)
    assert [(cell, met) for _, cell, met in rows] == [("9.5 s", True), ("3.2 s", False)]
    assert module._fit_targets([(module.HEATING, "not run", "boom", "")]) == []


def _metrics(folder, total, stages):
    folder.mkdir()
    timing = {
        "total_seconds": total,
        "stages": {
            name: {"seconds": seconds, "compile_seconds": compiling}
            for name, (seconds, compiling) in stages.items()
        },
    }
    (folder / "metrics.json").write_text(json.dumps({"timing": timing}))
    return str(folder)


def test_run_parts_split_a_fit_s_wall_time_into_start_up_and_its_stages(tmp_path):
    module = _startup_module()
    stages = {"structure scan": (4.0, 2.5), "figures": (2.0, 0.0)}
    parts = module.run_parts(_metrics(tmp_path / "run", 6.5, stages), 9.0)
    assert parts == {module.START: (2.5, 0.0), **stages}


def test_parts_table_shows_medians_and_the_warm_run_s_uncached_time(tmp_path):
    module = _startup_module()
    runs = {
        kind: [
            module.run_parts(
                _metrics(tmp_path / f"{kind}{k}", total, {"figures": (figures, 0.0)}),
                wall,
            )
            for k, (total, figures, wall) in enumerate(values)
        ]
        for kind, values in {
            "cold": [(10.0, 2.0, 12.0), (11.0, 2.2, 14.0), (30.0, 9.0, 31.0)],
            "warm": [(5.0, 1.0, 6.0), (6.0, 1.5, 8.0), (7.0, 2.0, 9.0)],
        }.items()
    }
    parts = {kind: module._median_parts(values) for kind, values in runs.items()}
    # Medians of the start-ups 2, 3, 1 (cold) and 1, 2, 2 (warm); figures likewise.
    assert parts["cold"][module.START] == (2.0, 0.0)
    assert parts["warm"]["figures"] == (1.5, 0.0)
    lines = module.parts_lines(parts, "heating")
    assert "| figures | 2.2 s | 1.5 s |" in lines
    assert lines[-2].endswith("take 3.5 s.")  # warm start-up 2.0 s + figures 1.5 s
