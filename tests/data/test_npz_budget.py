""".npz files: one memory budget for all the arrays, from their headers, before any
data is read (peak RSS measured in a child process), and data arrays of numbers only."""

import io
import zipfile
import zlib

import numpy as np
import pytest

import dynsys

from ..helpers import load_in_child


def _zeros_member(name: str, shape: tuple[int, ...]) -> tuple:
    """A deflated `.npy` member of float64 zeros of `shape` (a whole number of MiB of
    data), about 1 KB per MiB: `(name, crc, size, stream)`."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    mib = int(np.prod(shape)) * 8 // 2**20
    assert mib * 2**20 == int(np.prod(shape)) * 8
    chunk = bytes(1 << 20)
    compress = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = compress.compress(header.getvalue()) + compress.flush(zlib.Z_FULL_FLUSH)
    block = compress.compress(chunk) + compress.flush(zlib.Z_FULL_FLUSH)
    stream = first + block * mib + compress.flush()
    crc = zlib.crc32(header.getvalue())
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    return f"{name}.npy", crc, len(header.getvalue()) + mib * 2**20, stream


def _write_zip(path, members) -> None:
    """A valid zip of already deflated members (method 8), as `np.savez` would
    write them with compression."""
    import struct

    out, central = io.BytesIO(), io.BytesIO()
    for name, crc, size, data in members:
        offset = out.tell()
        fields = (20, 0, 8, 0, 0x21, crc, len(data), size, len(name))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0))
        out.write(name.encode() + data)
        central.write(struct.pack("<IH", 0x02014B50, 20))
        central.write(struct.pack("<HHHHHIIIHHHHHII", *fields, 0, 0, 0, 0, 0, offset))
        central.write(name.encode())
    start, length = out.tell(), len(central.getvalue())
    out.write(central.getvalue())
    count = len(members)
    out.write(
        struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, length, start, 0)
    )
    path.write_bytes(out.getvalue())


# Each member 96 MiB of float64 zeros: under the 256 MiB a member may take alone,
# 384 MiB (xs, us, ys, ts) together: over the budget for the whole file.
_STEPS = 96 * 2**20 // 8


@pytest.mark.slow  # two child processes that import JAX
def test_npz_members_share_one_budget_checked_before_reading(tmp_path):
    hostile = tmp_path / "hostile.npz"
    members = [
        _zeros_member("xs", (1, _STEPS, 1)),
        _zeros_member("us", (1, _STEPS, 1)),
        _zeros_member("ys", (1, _STEPS, 1)),
        _zeros_member("ts", (_STEPS,)),
    ]
    _write_zip(hostile, members)
    assert hostile.stat().st_size < 2**20  # 384 MiB of zeros in under 1 MB
    with zipfile.ZipFile(hostile) as archive:  # a valid archive that holds them
        assert sum(info.file_size for info in archive.infolist()) > 384 * 2**20
        with archive.open("ts.npy") as member:  # header and data as declared
            np.lib.format.read_magic(member)
            assert np.lib.format.read_array_header_1_0(member)[0] == (_STEPS,)
            assert member.read(1 << 20) == bytes(1 << 20)
    normal = tmp_path / "normal.npz"
    np.savez(normal, ys=np.random.default_rng(0).normal(size=(4, 2000, 2)))

    refused, plain = load_in_child(hostile), load_in_child(normal)
    assert plain["error"] is None and plain["steps"] == 2000
    message = refused["error"]
    assert message is not None and "\n" not in message
    assert message.startswith(f"load_dataset(path={str(hostile)!r}): its arrays ")
    assert f"would take {4 * 96 * 2**20} bytes in all" in message  # 4 x 96 MiB
    assert f"more than the {256 * 2**20} allowed for this file" in message
    # Loading the four arrays would take 384 MiB at least; refusing them costs what
    # a normal small load costs (both tens of MiB, mostly the imports' arrays).
    assert refused["peak_kib"] < plain["peak_kib"] + 64 * 1024, (refused, plain)


def test_members_within_the_budget_together_still_load(tmp_path):
    path = tmp_path / "two.npz"
    steps = 2 * 2**20 // 8
    _write_zip(
        path, [_zeros_member("ys", (1, steps, 1)), _zeros_member("us", (1, steps, 1))]
    )
    data = dynsys.load_dataset(path)
    assert data.ys.shape == (1, steps, 1) and not np.any(np.asarray(data.ys))


@pytest.mark.parametrize(
    "array, dtype",
    [
        (np.arange(6, dtype="timedelta64[s]").reshape(1, 6, 1), "timedelta64[s]"),
        (np.arange(6).astype("datetime64[D]").reshape(1, 6, 1), "datetime64[D]"),
        (np.ones((1, 6, 1), dtype=complex), "complex128"),
    ],
)
def test_npz_arrays_that_are_not_numbers_are_refused(tmp_path, array, dtype):
    path = tmp_path / "odd.npz"
    np.savez(path, ys=array)
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path)
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        f"load_dataset(path={str(path)!r}): array 'ys' has dtype {dtype}; only "
        "integer, float or boolean arrays load (save the values as numbers)."
    )


def test_npz_object_array_is_refused_in_one_line(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, ts=np.array([object()] * 3), ys=np.ones((1, 3, 1)))
    with pytest.raises(ValueError, match="array 'ts' holds Python objects") as info:
        dynsys.load_dataset(path)
    assert "\n" not in str(info.value)
