"""User content quoted in error messages, bounded: a header of a million columns, or
a cell or name of a megabyte, gives a message of a few hundred characters."""

from collections.abc import Sequence


# At most this many names are listed, each cut to this many characters.
_MOST_NAMES = 20
_WIDTH = 60


def quoted(text: str, width: int = _WIDTH) -> str:
    """`repr(text)`, or the repr of its first `width` characters followed by `…`
    when it is longer."""
    text = str(text)
    return repr(text) if len(text) <= width else repr(text[:width] + "…")


def quoted_list(names: Sequence, most: int = _MOST_NAMES) -> str:
    """`"['a', 'b']"` (as `str(list)` writes a short list of text), or the first
    `most` names then `… and K more`."""
    names = list(names)
    shown = ", ".join(quoted(name) for name in names[:most])
    rest = len(names) - most
    return f"[{shown}, … and {rest} more]" if rest > 0 else f"[{shown}]"
