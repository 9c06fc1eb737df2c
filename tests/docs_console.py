"""Check a test's run of a documented command against the docs' quoted console block.

The docs mark each quoted console block with `<!-- console: NAME -->`; NAME is an
entry of `docs/scripts/regenerate_docs.py`'s `CONSOLE` table, which also says which
printed lines are quoted. A test that already runs the command passes its printed
console here, so the quoted numbers are checked without a second slow run. After a
deliberate change of the output, `python docs/scripts/regenerate_docs.py --console`
rewrites the blocks.
"""

import importlib.util
import pathlib


ROOT = pathlib.Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location(
    "regenerate_docs", ROOT / "docs" / "scripts" / "regenerate_docs.py"
)
regenerate_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(regenerate_docs)


def assert_console_matches_docs(name: str, printed: str) -> None:
    """The lines of `printed` kept for entry `name` equal the docs' quoted block,
    times and paths aside."""
    norm = regenerate_docs.normalise
    got = [norm(line) for line in regenerate_docs.select(name, printed)]
    want = [norm(line) for line in regenerate_docs.quoted(name)]
    assert got == want, (
        f"the docs' <!-- console: {name} --> block is stale; rerun "
        "`python docs/scripts/regenerate_docs.py --console`\n"
        + "\n".join(f"docs: {w}\nrun:  {g}" for w, g in zip(want, got) if w != g)
    )
