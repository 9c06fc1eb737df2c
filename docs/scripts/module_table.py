"""The table of every module of the package for docs/architecture.md, from each
module's docstring (its first sentence), between the markers
`<!-- modules:begin -->` and `<!-- modules:end -->`.

    python docs/scripts/module_table.py          # rewrite the table in place
    python docs/scripts/module_table.py --check  # exit 1 if the table is stale

tests/package/test_architecture_doc.py runs the check, so a module added, moved or
removed without the architecture page following it fails the suite.
"""

import ast
import pathlib
import sys


ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- modules:begin -->", "<!-- modules:end -->"


def first_sentence(path: pathlib.Path) -> str:
    """The first sentence of a module's docstring, on one line ('' when none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    sentence = paragraph if end < 0 else paragraph[: end + 1]
    return sentence.replace("|", "\\|")


def modules() -> list[pathlib.Path]:
    """Every module of the package, in folder order (a folder's `__init__.py`
    first)."""
    package = ROOT / "dynsys"
    return sorted(
        package.rglob("*.py"),
        key=lambda p: (p.parent.relative_to(package).parts, p.name != "__init__.py", p.name),
    )


def table() -> str:
    rows = ["| module | what it is |", "| --- | --- |"]
    for path in modules():
        name = path.relative_to(ROOT / "dynsys").as_posix()
        rows.append(f"| `{name}` | {first_sentence(path) or '(no docstring)'} |")
    return "\n".join(rows)


def rewritten(page: str) -> str:
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    new = rewritten(page)
    if "--check" in argv:
        if new != page:
            print(f"{PAGE}: the module table is stale; run {pathlib.Path(__file__).relative_to(ROOT)}")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
