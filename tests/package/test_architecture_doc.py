"""docs/architecture.md names every module of the package, as it is today."""

import importlib.util
import pathlib


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _module_table():
    spec = importlib.util.spec_from_file_location(
        "module_table", ROOT / "docs" / "scripts" / "module_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_architecture_page_names_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for path in (ROOT / "dynsys").rglob("*.py"):
        name = path.relative_to(ROOT / "dynsys").as_posix()
        assert f"| `{name}` |" in page, f"docs/architecture.md does not name {name}"


def test_the_module_table_is_current():
    table = _module_table()
    page = table.PAGE.read_text(encoding="utf-8")
    assert table.rewritten(page) == page, "run docs/scripts/module_table.py"


def test_a_table_missing_a_module_is_stale():
    table = _module_table()
    page = table.PAGE.read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `_fitting/fit.py` |"))
    damaged = page.replace(row + "\n", "")
    assert damaged != page
    assert table.rewritten(damaged) == page
