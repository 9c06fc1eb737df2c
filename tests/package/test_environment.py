"""Process-wide switches (`dynsys/_config.py`): every environment variable dynsys
reads is read there, when asked, and nowhere else in the package."""

import ast
import pathlib

import dynsys
from dynsys import _config


PACKAGE = pathlib.Path(dynsys.__file__).resolve().parent


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read a variable: `os.environ.get(...)`, `os.environ[...]`,
    `... in os.environ`, `os.getenv(...)`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            function = node.func
            if function.attr == "get" and _is_os_environ(function.value):
                lines.append(node.lineno)
            if function.attr == "getenv" and getattr(function.value, "id", "") == "os":
                lines.append(node.lineno)
        if isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            if isinstance(node.ctx, ast.Load):
                lines.append(node.lineno)
        if isinstance(node, ast.Compare) and any(map(_is_os_environ, node.comparators)):
            lines.append(node.lineno)
    return lines


def test_only_the_config_module_reads_the_environment():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_config.py" and path.parent == PACKAGE:
            continue
        lines = _environment_reads(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(PACKAGE))] = lines
    assert not found, f"read these through dynsys/_config.py: {found}"


def test_a_variable_is_read_when_asked(monkeypatch):
    monkeypatch.delenv(_config.CACHE_DIR, raising=False)
    assert _config.read(_config.CACHE_DIR) is None
    monkeypatch.setenv(_config.CACHE_DIR, "off")
    assert _config.read(_config.CACHE_DIR) == "off"
    assert _config.read(_config.CACHE_DIR, {}) is None  # another mapping
    assert _config.read("XLA_FLAGS", {"XLA_FLAGS": "--x"}) == "--x"


def test_the_first_set_variable_wins(monkeypatch):
    for name in (_config.PROCESS_ID, *_config.LAUNCHER_RANKS):
        monkeypatch.delenv(name, raising=False)
    assert _config.first_set(_config.PROCESS_ID, *_config.LAUNCHER_RANKS) is None
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv(_config.PROCESS_ID, "")  # empty: as if not set
    assert _config.first_set(_config.PROCESS_ID, *_config.LAUNCHER_RANKS) == "3"
    monkeypatch.setenv(_config.PROCESS_ID, "1")
    assert _config.first_set(_config.PROCESS_ID, *_config.LAUNCHER_RANKS) == "1"
