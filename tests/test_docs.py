"""The Python examples in README.md and docs/ run, so they never rot."""

import pathlib
import re

import matplotlib
import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(page, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall(page.read_text())
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
