"""Every quoted console block in docs/ names a command the regeneration script knows,
and every command of its table is quoted somewhere (fast: no command runs)."""

import pytest

from tests.docs_console import regenerate_docs


def _markers() -> list[tuple[str, str]]:
    found = []
    for page in sorted(regenerate_docs.DOCS.glob("*.md")):
        found += [(page.name, n) for n, _, _ in regenerate_docs.blocks(page.read_text())]
    return found


def test_every_marker_names_a_known_entry():
    unknown = [(p, n) for p, n in _markers() if n not in regenerate_docs.CONSOLE]
    assert not unknown, f"markers naming no entry of CONSOLE: {unknown}"


def test_every_entry_is_quoted():
    quoted = {n for _, n in _markers()}
    assert set(regenerate_docs.CONSOLE) <= quoted


def test_a_marker_must_precede_a_fenced_block():
    with pytest.raises(ValueError, match="fenced block"):
        regenerate_docs.blocks("<!-- console: heating -->\ntext\n")


def test_select_keeps_the_quoted_lines_and_normalise_drops_times():
    printed = "noise\n  structure scan: 20 candidates, 5.3 s; order 7\n  output-error fit: 39 steps, 0.1 s\n"
    kept = regenerate_docs.select("heating", printed)
    assert kept[-1] == "  ..."
    assert regenerate_docs.normalise(kept[0]).endswith("<t>; order 7")
