"""Regenerate the docs' quoted console output and figures from today's code.

    python docs/scripts/regenerate_docs.py              # console blocks and figures
    python docs/scripts/regenerate_docs.py --console    # only the quoted console blocks
    python docs/scripts/regenerate_docs.py --figures    # only docs/figures/

A quoted console block is marked in the markdown by `<!-- console: NAME -->` on the
line before its fenced block; NAME is an entry of `CONSOLE` below (the command, and
which printed lines to keep). Only marked blocks are rewritten, each page atomically
(a temporary file, then `os.replace`). `tests/docs_console.py` checks a test's run
of the same command against the quoted block.
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REAL = ROOT / "data" / "real"  # the shared records (../shared/data/real)

# name -> (the `dynsys` arguments, the data file, a predicate on printed lines)
CONSOLE: dict[str, dict] = {
    "heating": {
        "argv": ["fit", "data/real/heating.csv", "--inputs", "drive_V",
                 "--outputs", "temp_C"],  # fmt: skip
        "keep": (
            "input delay:",
            "structure scan:",
            "subspace start:",
            "operating point:",
            "the subspace start is",
            "output-error fit",
            "held-out fit %",
            "channel",
            "temp_C",
        ),
        "gap_after": "output-error fit",  # an "  ..." line follows this one
    },
}

# Every figure in docs/figures/ and the command that writes it (from the repository
# root; `{python}` is this interpreter). Fast ones first.
FIGURES: tuple[tuple[str, ...], ...] = (
    ("{python}", "docs/scripts/continuous_time_example.py", "--write"),
    ("{python}", "docs/scripts/uncertainty_example.py", "--write"),
    ("{python}", "docs/scripts/structure_selection_example.py"),
    ("{python}", "docs/scripts/make_gallery.py", "--write"),
    ("{python}", "examples/fit_system.py", "--figures", "docs/figures"),
    ("{python}", "examples/fit_system.py", "--config",
     "examples/configs/fit_noise_sweep.toml", "--figures", "docs/figures"),  # fmt: skip
    ("{python}", "-m", "dynsys.cli", "run",
     "examples/configs/sysid_mass_spring_damper.toml", "--figures", "docs/figures"),  # fmt: skip
    ("{python}", "examples/train_controller.py", "--figures", "docs/figures"),
)
# control_cascaded_tanks_closed_loop.png (docs/from-data-to-control.md) is written by
# the walkthrough on that page, not by a script here.

MARKER = re.compile(r"^<!-- console: (?P<name>[\w-]+) -->\s*$")
TIME = re.compile(r"\b\d+(\.\d+)? ?(s|ms)\b")


def normalise(line: str) -> str:
    """A printed line without what changes from run to run (times, paths)."""
    line = TIME.sub("<t>", line.rstrip())
    return re.sub(r"/\S*/(data/real/)", r"\1", line)


def select(name: str, printed: str) -> list[str]:
    """The lines of `printed` that the docs quote for entry `name`."""
    entry = CONSOLE[name]
    kept = []
    for line in printed.splitlines():
        if line.strip().startswith(entry["keep"]):
            kept.append(line.rstrip())
            if line.strip().startswith(entry.get("gap_after") or "\0"):
                kept.append("  ...")
    return kept


def blocks(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, end line) of every marked block's body in `text`."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if m is None:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"{m['name']}: the marker must precede a fenced block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        found.append((m["name"], i + 2, end))
    return found


def quoted(name: str) -> list[str]:
    """The docs' quoted lines for entry `name` (the first marked block)."""
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for n, a, b in blocks(text):
            if n == name:
                return text.splitlines()[a:b]
    raise KeyError(f"no <!-- console: {name} --> block in docs/*.md")


def run(name: str) -> str:
    argv = CONSOLE[name]["argv"]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "dynsys.cli", *argv, "--no-progress",
               "--out", out]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: {' '.join(argv)} failed:\n{done.stderr}")
    return done.stdout + done.stderr


def write_atomic(path: pathlib.Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def regenerate_console() -> None:
    outputs = {name: select(name, run(name)) for name in CONSOLE}
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        found = blocks(text)
        if not found:
            continue
        lines = text.splitlines()
        changed = 0
        for name, a, b in reversed(found):
            same = [normalise(x) for x in lines[a:b]] == [
                normalise(x) for x in outputs[name]
            ]
            if not same:  # only timings differ: keep the quoted run's times
                lines[a:b] = outputs[name]
                changed += 1
        if changed:
            write_atomic(page, "\n".join(lines) + "\n")
        print(f"{page.relative_to(ROOT)}: {changed} of {len(found)} block(s) rewritten")


def regenerate_figures() -> None:
    for command in FIGURES:
        cmd = [sys.executable if a == "{python}" else a for a in command]
        print("running " + " ".join(command[1:]), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--console", action="store_true")
    parser.add_argument("--figures", action="store_true")
    args = parser.parse_args()
    both = not (args.console or args.figures)
    if args.console or both:
        regenerate_console()
    if args.figures or both:
        regenerate_figures()


if __name__ == "__main__":
    main()
