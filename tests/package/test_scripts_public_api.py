"""The scripts in `benchmarks/`, `examples/` and `docs/scripts/` (the doc figures) use dynsys's public API only: no
import of a private module (`dynsys._x`, `from dynsys import _x`), no attribute
`dynsys._x`, and no assignment to an attribute of dynsys (monkey-patching), in the
script or in the code it runs in a child process (a string of Python source holding
an import). Whatever they need is public, or is measured through public calls."""

import ast
import pathlib

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    path.relative_to(ROOT).as_posix()
    for folder in ("benchmarks", "examples", "docs/scripts")
    for path in (ROOT / folder).rglob("*.py")
)


def _private(dotted: str) -> bool:
    """Whether `dotted` names a private part of dynsys (`dynsys._fitting.fit`,
    `dynsys.models._x`); `dynsys.__version__` and the like are public."""
    parts = dotted.split(".")
    return parts[0] == "dynsys" and any(
        part.startswith("_") and not part.startswith("__") for part in parts[1:]
    )


def _attribute_chain(node: ast.Attribute) -> str | None:
    """`a.b.c` for an attribute chain rooted at a name, else `None`."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(names)])


def private_uses(source: str) -> list[str]:
    """`line: name` for each use of a private dynsys module in `source`, including
    the Python source held in its string constants (code for child processes)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names = [_attribute_chain(node) or ""]
        elif isinstance(node, ast.Attribute):  # assigned or deleted
            chain = _attribute_chain(node) or ""
            if chain.split(".")[0] == "dynsys":
                found.append(f"{node.lineno}: {chain} patched")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "import" in node.value:
                try:
                    inner = private_uses(node.value)
                except SyntaxError:  # a string that is not Python
                    inner = []
                found += [f"{node.lineno} (in a string): {use}" for use in inner]
        found += [f"{node.lineno}: {name}" for name in names if _private(name)]
    return sorted(set(found), key=lambda use: (int(use.split()[0].strip(":")), use))


def test_the_check_sees_every_form_of_private_use():
    source = '''
import dynsys._fitting.fit
from dynsys._data import fast_csv
from dynsys import _compile, fit
import dynsys
dynsys._sysid.stabilise.stabilised_start
dynsys.__version__
dynsys.fit
dynsys.fit = None
CHILD = """
import sys
from dynsys._compile.jit import compiler_options
"""
'''
    assert private_uses(source) == [
        "2: dynsys._fitting.fit",
        "3: dynsys._data.fast_csv",
        "4: dynsys._compile",
        "6: dynsys._sysid",
        "6: dynsys._sysid.stabilise",
        "6: dynsys._sysid.stabilise.stabilised_start",
        "9: dynsys.fit patched",
        "10 (in a string): 3: dynsys._compile.jit.compiler_options",
    ]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_use_the_public_api_only(script):
    uses = private_uses((ROOT / script).read_text(encoding="utf-8"))
    assert not uses, f"{script} uses private dynsys modules: {uses}"


def test_every_script_folder_is_checked():
    folders = {script.rsplit("/", 1)[0].split("/")[0] for script in SCRIPTS}
    assert {"benchmarks", "examples", "docs"} <= folders
    assert any(script.startswith("docs/scripts/") for script in SCRIPTS)
