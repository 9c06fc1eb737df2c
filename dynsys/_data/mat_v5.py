"""The top-level layout of a MATLAB v5 `.mat` file, checked before `scipy.io` reads
it: every variable's element complete (a truncated file is refused, not read as
holding fewer variables), and how far the compressed variables expand, measured by
streaming them through zlib (a variable whose header declares a small array may still
hold a data element of gigabytes).

A v5 file is a 128-byte header, then one element per variable: an 8-byte tag (type,
byte count) and its bytes; a compressed element (type 15) is a zlib stream of an
uncompressed one (type 14), whose third sub-element is the variable's name.
"""

import struct
import zlib

from .files import file_error
from .quoting import quoted, quoted_list


_COMPRESSED = 15
_CHUNK = 1 << 16  # compressed bytes read at a time
_PIECE = 1 << 20  # most bytes decompressed at a time (kept only to find the name)
_NAME_WITHIN = 1 << 16  # the name must lie in the first bytes of a variable


def _sub_element(buffer: bytes, start: int, order: str):
    """`(data, next start)` of the sub-element at `start`, or `None` when `buffer`
    ends before it. A small element packs its byte count and type in 4 bytes."""
    if len(buffer) < start + 8:
        return None
    first, second = struct.unpack_from(order + "II", buffer, start)
    if first >> 16:  # small data element: count, type, then up to 4 bytes of data
        return buffer[start + 4 : start + 4 + (first >> 16)], start + 8
    end = start + 8 + second
    if len(buffer) < end:
        return None
    return buffer[start + 8 : end], start + 8 + -(-second // 8) * 8


def _name(head: bytes, order: str) -> str | None:
    """The variable's name from the start of an uncompressed variable element (its
    tag, then the flags, dimensions and name sub-elements), or `None` when `head`
    is too short to hold it."""
    start = 8
    for _ in range(2):  # the array flags, then the dimensions
        element = _sub_element(head, start, order)
        if element is None:
            return None
        start = element[1]
    element = _sub_element(head, start, order)
    return None if element is None else element[0].decode("latin-1")


class _Overflow(Exception):
    """A variable expanded past the room left (`args[0]`: its name, or `None`)."""


def _expanded_size(file, count: int, names, room: int, order: str) -> int:
    """The bytes one compressed variable of `count` bytes expands to when its name
    is in `names` (0 otherwise); `_Overflow` once they exceed `room`."""
    stream = zlib.decompressobj()
    head, name, produced = b"", None, 0
    while count > 0:
        chunk = file.read(min(count, _CHUNK))
        if not chunk:
            break
        count -= len(chunk)
        while chunk:
            try:
                piece = stream.decompress(chunk, _PIECE)
            except zlib.error:
                return produced  # damaged: scipy refuses it when reading
            chunk = stream.unconsumed_tail
            produced += len(piece)
            if name is None and len(head) < _NAME_WITHIN:
                head += piece[: _NAME_WITHIN - len(head)]
                name = _name(head, order)
                if name is not None and name not in names:
                    return 0
            if produced > room:
                raise _Overflow(name)
            if stream.eof:
                return produced
    return produced


def _elements(file):
    """`(type, byte count, start)` of each top-level element of a v5 file (the
    file positioned after its 128-byte header), and its byte order; nothing for a
    file that is not v5."""
    header = file.read(128)
    if len(header) < 128 or header[126:128] not in (b"IM", b"MI"):
        return "<", iter(())
    order = "<" if header[126:128] == b"IM" else ">"

    def walk():
        while len(tag := file.read(8)) == 8:
            kind, count = struct.unpack(order + "II", tag)
            start = file.tell()
            yield kind, count, start
            file.seek(start + count)

    return order, walk()


def check_complete(path, size: int) -> None:
    """Refuse a v5 file whose last variable's element runs past the end of the
    file (a truncated file)."""
    with open(path, "rb") as file:
        for _, count, start in _elements(file)[1]:
            if start + count > size:
                raise file_error(
                    path,
                    f"not a readable .mat file (truncated: a variable at byte "
                    f"{start - 8} declares {count} bytes, the file ends at byte "
                    f"{size}).",
                )


def check_expansion(path, names, limit: int) -> None:
    """Refuse a v5 `.mat` file whose compressed variables named in `names`
    decompress to more than `limit` bytes in all; nothing is kept but a few bytes
    of each variable's start. Other formats are left to `scipy.io.loadmat` (an
    uncompressed variable takes no more than its bytes in the file)."""
    used = 0
    with open(path, "rb") as file:
        order, elements = _elements(file)
        for kind, count, _ in elements:
            if kind != _COMPRESSED:
                continue
            try:
                used += _expanded_size(file, count, names, limit - used, order)
            except _Overflow as overflow:
                raise file_error(
                    path,
                    f"its variables {quoted_list(sorted(names))} decompress to more "
                    f"than the {limit} bytes allowed for this file (variable "
                    f"{quoted(str(overflow.args[0]))}); refused (a damaged or "
                    "hostile file).",
                ) from None
