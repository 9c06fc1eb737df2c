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


def _top_level_parts() -> set[str]:
    """The package's top-level folders and modules (`_fitting`, `cli`, ...), as
    import-linter names them."""
    package = ROOT / "dynsys"
    return {
        path.stem
        for path in package.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__init__.py")
    }


def test_every_top_level_folder_and_module_is_a_layer_of_the_contract():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    package = next(c for c in contracts if c.get("containers") == ["dynsys"])
    layers = {name.strip() for layer in package["layers"] for name in layer.split("|")}
    assert _top_level_parts() == layers, "pyproject.toml: the layers contract"
    below = next(c for c in contracts if c.get("type") == "forbidden")
    named = {module.removeprefix("dynsys.") for module in below["source_modules"]}
    assert named == _top_level_parts() - {"cli", "_experiments"}


def test_every_folder_has_its_sentence():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## One sentence per folder", 1)[1].split("\n## ", 1)[0]
    package = ROOT / "dynsys"
    folders = {
        path.parent.relative_to(package).as_posix() + "/"
        for path in package.rglob("__init__.py")
        if path.parent != package
    }
    modules = {f"{name}.py" for name in _top_level_parts()} & {
        path.name for path in package.glob("*.py")
    }
    for name in sorted(folders | modules):
        if name == "models/":  # the zoo: the paragraph below the table
            assert "`dynsys/models/`" in section
            continue
        assert f"| `{name}` |" in section, f"docs/architecture.md: a row for {name}"
