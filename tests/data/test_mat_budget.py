""".mat files: the variables used are sized from their headers against the budget
`.npz` files have (200 x the file's size, at least 256 MiB) before anything is read,
their compressed data streamed to measure it, and only they are read and converted
(peak RSS measured in a child process); complex, 3-D and other variables that give no
column are named in one line."""

import struct
import zlib

import numpy as np
import pytest

import dynsys

from ..helpers import load_in_child


scipy_io = pytest.importorskip("scipy.io")

_MATRIX, _COMPRESSED = 14, 15
_CLASSES = {"double": (6, 9, 8), "uint8": (9, 2, 1)}  # class, data type, item size


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


def _zeros_stream(prefix: bytes, zero_bytes: int) -> bytes:
    """A zlib stream of `prefix` then `zero_bytes` zeros (a whole number of MiB),
    about 1 KB per MiB, made without holding the zeros."""
    assert zero_bytes % 2**20 == 0
    chunk = bytes(2**20)
    compress = zlib.compressobj(9)
    first = compress.compress(prefix) + compress.flush(zlib.Z_FULL_FLUSH)
    block = compress.compress(chunk) + compress.flush(zlib.Z_FULL_FLUSH)
    tail = compress.flush()  # the last block and a check of what it saw ...
    check = zlib.adler32(prefix)
    for _ in range(zero_bytes // 2**20):
        check = zlib.adler32(chunk, check)
    # ... replaced by the check of the whole data.
    tail = tail[:-4] + struct.pack(">I", check)
    return first + block * (zero_bytes // 2**20) + tail


def _variable(name: str, dims, kind: str, data_bytes: int) -> bytes:
    """One compressed v5 variable of zeros: its header declares `dims` of class
    `kind`; its data element holds `data_bytes` zero bytes (a whole number of MiB
    beyond the 8-byte aligned start, which may disagree with `dims`)."""
    mclass, data_type, _ = _CLASSES[kind]
    flags = struct.pack("<IIII", 6, 8, mclass, 0)
    shape = struct.pack("<II", 5, 4 * len(dims)) + _padded(
        struct.pack(f"<{len(dims)}i", *dims)
    )
    label = struct.pack("<II", 1, len(name)) + _padded(name.encode())
    body_start = flags + shape + label + struct.pack("<II", data_type, data_bytes)
    length = len(body_start) + data_bytes + (-data_bytes % 8)
    stream = _zeros_stream(struct.pack("<II", _MATRIX, length) + body_start, 0)
    if data_bytes:
        assert data_bytes % 2**20 == 0
        stream = _zeros_stream(
            struct.pack("<II", _MATRIX, length) + body_start, data_bytes
        )
    return struct.pack("<II", _COMPRESSED, len(stream)) + stream


def _write_mat(path, variables: list[bytes]) -> None:
    text = b"MATLAB 5.0 MAT-file, written by dynsys's tests"
    header = text.ljust(116, b" ") + bytes(8) + struct.pack("<H", 0x0100) + b"IM"
    path.write_bytes(header + b"".join(variables))


def test_the_hand_written_file_is_a_valid_mat_file(tmp_path):
    path = tmp_path / "zeros.mat"
    _write_mat(path, [_variable("u", (2**20, 1), "uint8", 2**20)])
    assert scipy_io.whosmat(path) == [("u", (2**20, 1), "uint8")]
    u = scipy_io.loadmat(path)["u"]
    assert u.shape == (2**20, 1) and u.dtype == np.uint8 and not u.any()
    data = dynsys.load_dataset(path, outputs=["u"])
    assert data.ys.shape == (1, 2**20, 1)


@pytest.mark.slow  # three child processes that import JAX
def test_a_compressed_mat_bomb_is_refused_before_reading(tmp_path):
    # The probe's file: u and y of 10**8 uint8 zeros, 5.1 GB once read as float64.
    bomb = tmp_path / "bomb.mat"
    rows = 100 * 2**20
    _write_mat(
        bomb,
        [_variable(n, (rows, 1), "uint8", rows) for n in ("u", "y")],
    )
    assert bomb.stat().st_size < 2**20
    # A header that declares 10 samples over 300 MiB of data.
    liar = tmp_path / "liar.mat"
    _write_mat(
        liar,
        [
            _variable("u", (10, 1), "uint8", 300 * 2**20),
            _variable("y", (10, 1), "uint8", 0),
        ],
    )
    plain = tmp_path / "plain.mat"
    scipy_io.savemat(plain, {"u": np.ones((2000, 1)), "y": np.arange(2000.0)[:, None]})

    columns = {"inputs": ["u"], "outputs": ["y"]}
    refused, lying, normal = (load_in_child(p, **columns) for p in (bomb, liar, plain))
    assert normal["error"] is None and normal["steps"] == 2000
    assert refused["error"] == (
        f"load_dataset(path={str(bomb)!r}): its variables ['u', 'y'] would take "
        f"{2 * 8 * rows} bytes in all as float64 (largest 'u', shape ({rows}, 1)), "
        f"more than the {256 * 2**20} allowed for this file; refused (a damaged or "
        "hostile file)."
    )
    assert lying["error"] == (
        f"load_dataset(path={str(liar)!r}): its variables ['u', 'y'] decompress to "
        f"more than the {256 * 2**20} bytes allowed for this file (variable 'u'); "
        "refused (a damaged or hostile file)."
    )
    # Reading would take 1.6 GB and 300 MiB; refusing costs what a small load costs.
    for outcome in (refused, lying):
        assert outcome["peak_kib"] < normal["peak_kib"] + 64 * 1024, (outcome, normal)


@pytest.fixture
def small_budget(monkeypatch):
    """The budget of a small file lowered from 256 MiB to 1 MiB."""
    from dynsys._data import files

    monkeypatch.setattr(files, "_MIN_ALLOWANCE", 2**20)
    return 2**20


def test_used_variables_share_one_budget(tmp_path, small_budget):
    path = tmp_path / "x.mat"
    rows = 5 * 2**14  # 640 KiB each as float64: one fits, two do not
    scipy_io.savemat(
        path, {"a": np.zeros((rows, 1)), "y": np.zeros((rows, 1))}, do_compression=True
    )
    assert 200 * path.stat().st_size < small_budget
    assert dynsys.load_dataset(path, outputs=["y"]).lengths == (rows,)
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path, inputs=["a"], outputs=["y"])
    assert str(info.value) == (
        f"load_dataset(path={str(path)!r}): its variables ['a', 'y'] would take "
        f"{16 * rows} bytes in all as float64 (largest 'a', shape ({rows}, 1)), more "
        f"than the {small_budget} allowed for this file; refused (a damaged or "
        "hostile file)."
    )


def test_unused_variables_are_never_read(tmp_path, monkeypatch):
    path = tmp_path / "x.mat"
    rows = 100 * 2**20  # declared 100 MiB of uint8, 800 MiB as float64: never read
    _write_mat(
        path,
        [
            _variable("big", (rows, 1), "uint8", rows),
            _variable("u", (2**20, 1), "uint8", 2**20),
            _variable("y", (2**20, 1), "uint8", 2**20),
        ],
    )
    read = []
    original = scipy_io.loadmat

    def recording(*args, **kwargs):
        read.append(kwargs.get("variable_names"))
        return original(*args, **kwargs)

    monkeypatch.setattr(scipy_io, "loadmat", recording)
    data = dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    assert data.lengths == (2**20,) and read == [["u", "y"]]
    with pytest.raises(ValueError, match=r"its variables \['big', 'u'\] would take"):
        dynsys.load_dataset(path, outputs=["big"])


def test_complex_variables_are_refused_naming_them(tmp_path):
    path = tmp_path / "x.mat"
    u = np.arange(6.0)[:, None]
    scipy_io.savemat(path, {"u": u * (1 + 2j), "y": u, "v": u})
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    assert str(info.value) == (
        f"load_dataset(path={str(path)!r}): variable 'u' holds complex values; "
        "dynsys takes real signals: save real(u) or abs(u) in the file instead."
    )
    # An unused complex variable is never read.
    assert dynsys.load_dataset(path, inputs=["v"], outputs=["y"]).lengths == (6,)


@pytest.mark.parametrize(
    "value, reason",
    [
        (np.ones((6, 2, 2)), "is a 3-D array (shape (6, 2, 2))"),
        ({"a": 1.0}, "holds struct data, not numbers"),
        ("text", "holds char data, not numbers"),
        (np.zeros((0, 0)), "is empty (shape (0, 0))"),
    ],
)
def test_variables_that_give_no_column_are_named(tmp_path, value, reason):
    path = tmp_path / "x.mat"
    scipy_io.savemat(path, {"u": value, "y": np.ones((6, 1))})
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    assert str(info.value) == (
        f"load_dataset(inputs=...): variable 'u' of {str(path)!r} {reason}; dynsys "
        "reads vectors and matrices of numbers, one row per sample."
    )


def test_a_truncated_file_is_refused_not_read_short(tmp_path):
    path = tmp_path / "x.mat"
    scipy_io.savemat(path, {"u": np.ones((50, 1)), "y": np.ones((50, 1))})
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 100])
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path, inputs=["u"], outputs=["y"])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"load_dataset(path={str(path)!r}): not a readable .mat file (truncated: a "
        "variable at byte "
    )
