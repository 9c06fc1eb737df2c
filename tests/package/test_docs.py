"""The Python examples in README.md and docs/ run, so they never rot."""

import pathlib
import re

import matplotlib
import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
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


def test_mkdocs_build_is_strict_clean(tmp_path):
    """The documentation site builds with no warning (broken link, missing API name)."""
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "api" / "index.html").exists()


def _public_names(module) -> set[str]:
    import types

    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and not isinstance(getattr(module, name), types.ModuleType)
        and getattr(getattr(module, name), "__module__", "").startswith("dynsys")
    }


def test_api_reference_lists_every_public_name():
    import dynsys
    import dynsys.plot

    api = (ROOT / "docs" / "api.md").read_text()
    listed = set(re.findall(r"^::: (dynsys\.[\w.]+)$", api, re.MULTILINE))
    wanted = {f"dynsys.{n}" for n in _public_names(dynsys)}
    wanted |= {f"dynsys.plot.{n}" for n in _public_names(dynsys.plot)}
    wanted -= {"dynsys.plot.Trajectory"}  # imported there, documented as dynsys.X
    missing = sorted(wanted - listed)
    assert not missing, f"add to docs/api.md: {', '.join('::: ' + m for m in missing)}"


def test_api_reference_describes_each_name_in_its_section():
    """Each section's `::: dynsys.X` lines have a one-line description of `X` above
    them, so that the page reads in the repository too."""
    api = (ROOT / "docs" / "api.md").read_text()
    for section in re.split(r"^#+ ", api, flags=re.MULTILINE)[1:]:
        described = set(re.findall(r"^- `([\w.]+)`: \S", section, re.MULTILINE))
        for name in re.findall(r"^::: dynsys\.([\w.]+)$", section, re.MULTILINE):
            assert name in described, f"docs/api.md: describe {name} in its section"


def test_experiments_page_documents_every_config_key():
    import dynsys

    page = (ROOT / "docs" / "experiments.md").read_text()
    for kind in ("fit", "train_controller"):
        # Every key of the schema, each set to its default by resolve_config.
        resolved = dynsys.resolve_config({"kind": kind})
        for section, options in resolved.items():
            keys = options if isinstance(options, dict) else [None]
            for key in keys:
                name = section if key is None else f"{section}.{key}"
                assert f"`{name}`" in page, f"docs/experiments.md lacks `{name}`"


def test_figures_exist_and_are_small():
    images = set()
    for page in PAGES:
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page.read_text()):
            base = page.parent
            images.add((base / link).resolve())
    assert images, "no figures linked from the docs"
    for image in sorted(images):
        assert image.exists(), f"{image} is linked but missing"
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert image.stat().st_size < 150_000, f"{image.name} is over 150 KB"
