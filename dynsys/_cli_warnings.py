"""The Python warnings raised inside a command, each said once in one `dynsys:` line.

A run records its own warnings (metrics.json `warnings`, printed by the command);
anything else raised while it runs (a NumPy overflow in a diverging candidate's free
run, a library's `UserWarning`) would print as Python's two lines with a file path
inside dynsys. `said_once` collects them instead, and `say` prints each one once, in
the command's words, after the run's own lines. Standard library only: the command
imports this before JAX.
"""

import contextlib
import sys
import warnings


# NumPy's floating-point warnings ("overflow encountered in matmul", "invalid value
# encountered in divide", "divide by zero encountered in log"): they come from a
# model whose free run diverged, whose numbers the run reports as inf or `diverged`.
_FLOATING_POINT = "encountered in"


@contextlib.contextmanager
def said_once():
    """Collect the warnings raised inside; yields the list of
    `warnings.WarningMessage` (filled when the block ends)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def lines(caught, known=(), named=lambda line: line) -> list[str]:
    """One line per distinct warning of `caught` (`warnings.WarningMessage`s),
    without those whose text is among `known` (already said by the run); every
    floating-point warning together in one line."""
    said = {_flat(line) for line in known if line}
    out: list[str] = []
    numeric: list[str] = []
    for item in caught:
        message = _flat(str(item.message))
        if not message or any(message in line or line in message for line in said):
            continue
        if _FLOATING_POINT in message and issubclass(item.category, RuntimeWarning):
            if message not in numeric:
                numeric.append(message)
            continue
        said.add(message)
        line = f"warning: {named(message)}"
        if line not in out:
            out.append(line)
    if numeric:
        out.append(
            "note: a model's free run diverged and its numbers overflowed (NumPy: "
            f"{'; '.join(numeric)}); they are reported as inf or 'diverged' and "
            "no such model is chosen."
        )
    return out


def say(prefix: str, caught, known=(), named=lambda line: line) -> None:
    """Print `lines(...)` on stderr, each after `prefix: `."""
    for line in lines(caught, known, named):
        print(f"{prefix}: {line}", file=sys.stderr)


def _flat(message: str) -> str:
    """`message` on one line, without the caller prefix `fit: ` and the full stop."""
    line = " ".join(message.split()).rstrip(".")
    return line.removeprefix("fit: ")
