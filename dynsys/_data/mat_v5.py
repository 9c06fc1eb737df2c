"""The top-level layout of a MATLAB v5 `.mat` file, read before `scipy.io` reads
it, in bounded memory: each variable's name, shape, class and whether it is complex,
from the first bytes of its element (a truncated file is refused, not read as holding
fewer variables); and how far the compressed variables expand, measured by streaming
them through zlib (a variable whose header declares a small array may still hold a
data element of gigabytes).

A v5 file is a 128-byte header, then one element per variable: an 8-byte tag (type,
byte count) and its bytes; a compressed element (type 15) is a zlib stream of an
uncompressed one (type 14), whose third sub-element is the variable's name.
"""

import struct
import zlib
from typing import NamedTuple

from .files import file_error
from .quoting import quoted, quoted_list


_MATRIX, _COMPRESSED = 14, 15
# MATLAB's array classes, by the number in a variable's flags (as scipy's whosmat
# names them).
_CLASSES = {
    1: "cell", 2: "struct", 3: "object", 4: "char", 5: "sparse", 6: "double",
    7: "single", 8: "int8", 9: "uint8", 10: "int16", 11: "uint16", 12: "int32",
    13: "uint32", 14: "int64", 15: "uint64", 16: "function", 17: "opaque",
}  # fmt: skip
_COMPLEX_FLAG, _LOGICAL_FLAG = 0x0800, 0x0200
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


class Variable(NamedTuple):
    """A variable as its header describes it: `shape`, MATLAB class (`"double"`,
    `"logical"`, `"struct"`, ...) and whether its numbers are complex."""

    name: str
    shape: tuple[int, ...]
    kind: str
    is_complex: bool


def _header(body: bytes, order: str) -> Variable | None:
    """The variable whose element's body starts with `body` (after its tag): its
    flags, dimensions and name sub-elements; `None` when they are not all there."""
    parts, start = [], 0
    for _ in range(3):
        element = _sub_element(body, start, order)
        if element is None:
            return None
        parts.append(element[0])
        start = element[1]
    flags, dims, name = parts
    if len(flags) < 4:
        return None
    (flag,) = struct.unpack_from(order + "I", flags)
    kind = _CLASSES.get(flag & 0xFF, "unknown")
    if flag & _LOGICAL_FLAG:
        kind = "logical"
    shape = struct.unpack(f"{order}{len(dims) // 4}i", dims[: len(dims) // 4 * 4])
    return Variable(name.decode("latin-1"), shape, kind, bool(flag & _COMPLEX_FLAG))


def _name(head: bytes, order: str) -> str | None:
    """The name of the variable whose uncompressed element (tag included) starts
    with `head`, or `None` when `head` is too short to hold it."""
    variable = _header(head[8:], order)
    return None if variable is None else variable.name


def _decompressed_start(file, count: int) -> bytes:
    """The first bytes (at most `_NAME_WITHIN`) of a compressed element of `count`
    bytes, decompressed."""
    stream, head = zlib.decompressobj(), b""
    while count > 0 and len(head) < _NAME_WITHIN and not stream.eof:
        chunk = file.read(min(count, 4096))
        if not chunk:
            break
        count -= len(chunk)
        try:
            head += stream.decompress(chunk, _NAME_WITHIN - len(head))
        except zlib.error:
            break
    return head


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
    """The byte order (`"<"` or `">"`) of a v5 file, and an iterator over `(type,
    byte count, start)` of its top-level elements; `None` and nothing for a file
    that is not v5."""
    header = file.read(128)
    if len(header) < 128 or header[126:128] not in (b"IM", b"MI"):
        return None, iter(())
    order = "<" if header[126:128] == b"IM" else ">"
    if struct.unpack_from(order + "H", header, 124)[0] != 0x0100:  # 7.3: HDF5
        return None, iter(())

    def walk():
        while len(tag := file.read(8)) == 8:
            kind, count = struct.unpack(order + "II", tag)
            start = file.tell()
            yield kind, count, start
            file.seek(start + count)

    return order, walk()


def list_variables(path, size: int) -> list[Variable] | None:
    """The variables of a v5 file of `size` bytes from their headers, `None` for a
    file that is not v5. A variable running past the end of the file, or whose
    header cannot be read, is refused in one line."""
    variables = []
    with open(path, "rb") as file:
        order, elements = _elements(file)
        if order is None:
            return None
        for kind, count, start in elements:
            if start + count > size:
                raise file_error(
                    path,
                    f"not a readable .mat file (truncated: a variable at byte "
                    f"{start - 8} declares {count} bytes, the file ends at byte "
                    f"{size}).",
                )
            if kind == _COMPRESSED:
                head = _decompressed_start(file, count)
                if len(head) < 8 or struct.unpack_from(order + "I", head)[0] != _MATRIX:
                    head = b""
                variable = _header(head[8:], order)
            elif kind == _MATRIX:
                variable = _header(file.read(min(count, _NAME_WITHIN)), order)
            else:
                variable = None
            if variable is None:
                raise file_error(
                    path,
                    f"not a readable .mat file (the variable at byte {start - 8} has "
                    "no readable header).",
                )
            variables.append(variable)
    return variables


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
