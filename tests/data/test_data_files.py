"""Dataset files: outputs, names and lengths round-trip; CSV column roles; hostile
and broken files fail with one line and little memory."""

import functools
import io
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib

import numpy as np
import pytest

import dynsys


def _ragged_data(with_states=True, ts=True):
    rng = np.random.default_rng(0)
    lengths = (5, 2, 4)
    us = [rng.normal(size=(T, 1)) for T in lengths]
    ys = [rng.normal(size=(T, 2)) for T in lengths]
    xs = [rng.normal(size=(T + 1, 2)) for T in lengths] if with_states else None
    times = None
    if ts:
        times = 0.5 + 0.1 * np.arange(5 + with_states)
    return dynsys.Dataset(xs, us, times, ys=ys, output_names=["y_pos", "y_vel"])


def _assert_same(a, b):
    assert a.lengths == b.lengths
    for name in ("xs", "us", "ys", "ts"):
        left, right = getattr(a, name), getattr(b, name)
        assert (left is None) == (right is None), name
        if left is not None:
            np.testing.assert_array_equal(left, right)
    assert a.state_names == b.state_names
    assert a.input_names == b.input_names
    assert a.output_names == b.output_names


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
@pytest.mark.parametrize("with_states", [True, False])
def test_round_trip_keeps_outputs_names_and_lengths(tmp_path, suffix, with_states):
    data = _ragged_data(with_states)
    path = tmp_path / f"d{suffix}"
    data.save(path)
    back = dynsys.load_dataset(path)
    assert back.is_ragged
    _assert_same(back, data)
    for i in range(data.num_trajectories):
        _assert_same(back.experiment(i), data.experiment(i))


def test_csv_export_refuses_formula_names(tmp_path):
    data = dynsys.Dataset(np.zeros((1, 3, 1)), state_names=['=HYPERLINK("x")'])
    with pytest.raises(ValueError, match="spreadsheets run as a formula"):
        data.save(tmp_path / "d.csv")
    data.save(tmp_path / "d.npz")
    assert dynsys.load_dataset(tmp_path / "d.npz").state_names == data.state_names


def test_ragged_csv_by_hand_equals_the_sequence_form(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text(
        "run,t,force,pos,note\n"
        "a,0,0.5,1.0,x\n"
        "a,1,0.25,2.0,\n"
        "a,2,1.0,3.0,\n"
        "b,0,-1,-1.0,\n"
        "b,1,-2,-2.0,\n"
    )
    data = dynsys.load_dataset(
        path, inputs=["force"], outputs=["pos"], trajectory="run", time="t"
    )
    expected = dynsys.Dataset(
        us=[[[0.5], [0.25], [1.0]], [[-1.0], [-2.0]]],
        ys=[[[1.0], [2.0], [3.0]], [[-1.0], [-2.0]]],
        ts=[0.0, 1.0, 2.0],
        input_names=["force"],
        output_names=["pos"],
    )
    _assert_same(data, expected)
    with pytest.raises(ValueError, match="line 5: trajectory 'b' has time 9.0"):
        path.write_text("run,t,pos\na,0,1\na,1,2\nb,0,1\nb,9,2\n")
        dynsys.load_dataset(path, trajectory="run", time="t", outputs=["pos"])


def test_csv_default_roles_and_one_trajectory_without_time(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("x0,x_vel,u0,y0,yaw,user_id\n1,2,3,4,5,6\n2,3,4,5,6,7\n3,4,,,7,8\n")
    data = dynsys.load_dataset(path, trajectory=None, time=None)
    assert data.state_names == ("x0", "x_vel") and data.input_names == ("u0",)
    assert data.output_names == ("y0",)  # 'yaw' and 'user_id' take no role
    assert data.lengths == (2,) and data.ts is None
    np.testing.assert_array_equal(data.ys[0, :, 0], [4, 5])


def test_csv_column_role_errors(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("trajectory,time,x0,x0\n0,0,1,100\n0,1,3,300\n")
    with pytest.raises(
        ValueError, match=r"column 'x0' appears twice in the header \(columns 3 and 4"
    ):
        dynsys.load_dataset(path)
    path.write_text("trajectory,time,x0,x1,u0\n0,0,1,2,3\n0,1,3,4,\n")
    with pytest.raises(
        ValueError,
        match=r"load_dataset\(outputs=...\): column 'x1' is named also in states",
    ):
        dynsys.load_dataset(path, states=["x0", "x1"], outputs=["x1"])
    with pytest.raises(
        ValueError,
        match=r"load_dataset\(outputs=...\): no column 'y9' .*columns found: "
        r"\['trajectory', 'time', 'x0', 'x1', 'u0'\]",
    ):
        dynsys.load_dataset(path, outputs=["y9"])
    with pytest.raises(
        ValueError, match=r"load_dataset\(trajectory='run'\): .* has no 'run' column"
    ):
        dynsys.load_dataset(path, trajectory="run")
    with pytest.raises(ValueError, match="named twice"):
        dynsys.load_dataset(path, states=["x0", "x0"])
    path.write_text("trajectory,time,a,b\n0,0,1,2\n0,1,3,4\n")
    with pytest.raises(
        ValueError, match=r"has no state or output column: pass outputs="
    ):
        dynsys.load_dataset(path)


def test_csv_text_problems(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("trajectory;time;x0\n0;0;1\n")
    with pytest.raises(ValueError, match=r"separate columns with ';'"):
        dynsys.load_dataset(path)
    path.write_text("trajectory,time,x0\n0,0," + "1" * 200_000 + "\n")
    with pytest.raises(ValueError, match="not a readable CSV file .*field larger"):
        dynsys.load_dataset(path)
    # Input cells: required on every row but the last of a trajectory with states.
    path.write_text("trajectory,time,x0,u0\n0,0,1,2\n0,1,2,\n0,2,3,\n")
    with pytest.raises(ValueError, match=r"line 3: column 4 \('u0'\): '' is not a"):
        dynsys.load_dataset(path)
    path.write_text("trajectory,time,x0,u0\n0,0,1,2\n0,1,2,abc\n1,0,1,2\n0,2,3,\n")
    with pytest.raises(ValueError, match=r"line 3: column 4 \('u0'\): 'abc' is not"):
        dynsys.load_dataset(path, inputs=["u0"])
    path.write_text("trajectory,time,x0,u0\n0,0,1,2\n0,1,2,ignored\n")
    assert dynsys.load_dataset(path).us.tolist() == [[[2.0]]]
    path.write_bytes(b"\xef\xbb\xbftrajectory,time,x0\n0,0,1\n0,1,2\n")  # UTF-8 BOM
    assert dynsys.load_dataset(path).num_steps == 1
    path.write_bytes(b"trajectory,time,x0\n0,0,\xff\xfe\n")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        dynsys.load_dataset(path)


def test_npz_selects_columns_by_name_and_checks_names(tmp_path):
    data = _ragged_data()
    path = tmp_path / "d.npz"
    data.save(path)
    picked = dynsys.load_dataset(path, outputs=["y_vel"])
    assert picked.output_names == ("y_vel",)
    np.testing.assert_array_equal(picked.ys[..., 0], data.ys[..., 1])
    with pytest.raises(
        ValueError,
        match=r"load_dataset\(outputs=...\): no column\(s\) \['speed'\] .*columns "
        r"found: \['y_pos', 'y_vel'\]",
    ):
        dynsys.load_dataset(path, outputs=["speed"])
    np.savez(path, us=np.zeros((2, 3, 1)))
    with pytest.raises(ValueError, match=r"no 'xs' \(states\) or 'ys' \(outputs\)"):
        dynsys.load_dataset(path)


def test_broken_npz_and_special_files_give_one_line(tmp_path):
    good = tmp_path / "good.npz"
    _ragged_data().save(good)
    cases = {}
    (tmp_path / "empty.npz").write_bytes(b"")
    cases["empty.npz"] = "not a readable .npz file"
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04" + os.urandom(200))
    cases["garbage.npz"] = "not a readable .npz file"
    (tmp_path / "cut.npz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    cases["cut.npz"] = "not a readable .npz file"
    packed = tmp_path / "packed.npz"
    np.savez_compressed(packed, xs=np.random.default_rng(0).normal(size=(4, 50, 3)))
    damaged = bytearray(packed.read_bytes())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = bytes(64)
    (tmp_path / "damaged.npz").write_bytes(bytes(damaged))
    cases["damaged.npz"] = "not a readable .npz file"
    (tmp_path / "folder.npz").mkdir()
    cases["folder.npz"] = "is a directory"
    os.mkfifo(tmp_path / "fifo.npz")
    cases["fifo.npz"] = "is a FIFO"
    (tmp_path / "zero.npz").symlink_to("/dev/zero")
    cases["zero.npz"] = "is a device"
    for name, message in cases.items():
        with pytest.raises(ValueError, match=message) as info:
            dynsys.load_dataset(tmp_path / name)
        assert "\n" not in str(info.value), name


def test_npz_array_header_larger_than_its_member_is_refused(tmp_path):
    path = tmp_path / "lie.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**10, 1, 1)}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("xs.npy", header.getvalue() + bytes(64))
    with pytest.raises(ValueError, match=r"array 'xs' claims shape \(10000000000, 1"):
        dynsys.load_dataset(path)


@functools.cache
def _deflated_zeros(gib: int) -> tuple[bytes, int, int]:
    """A `.npy` of `gib` GiB of float64 zeros, shape `(1, T, 2)`, as a raw deflate
    stream of about 1 MB per GiB (identical deflate blocks after each full flush),
    with its CRC-32 and uncompressed size."""
    chunk = bytes(1 << 20)
    header = io.BytesIO()
    shape = (1, gib * 2**30 // 16, 2)
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    compress = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = compress.compress(header.getvalue()) + compress.flush(zlib.Z_FULL_FLUSH)
    block = compress.compress(chunk) + compress.flush(zlib.Z_FULL_FLUSH)
    stream = first + block * (gib * 1024) + compress.flush()
    crc = zlib.crc32(header.getvalue())
    for _ in range(gib * 1024):
        crc = zlib.crc32(chunk, crc)
    return stream, crc, len(header.getvalue()) + gib * 2**30


def _zip_bomb(path, key: str, gib: int, extra=None) -> None:
    """A valid `.npz` whose member `key` is `gib` GiB of zeros in about `gib` MB,
    plus small stored members `extra`."""
    stream, crc, size = _deflated_zeros(gib)
    members = [(f"{key}.npy", 8, crc, size, stream)]
    for name, array in (extra or {}).items():
        buffer = io.BytesIO()
        np.save(buffer, array)
        raw = buffer.getvalue()
        members.append((f"{name}.npy", 0, zlib.crc32(raw), len(raw), raw))
    out, central = io.BytesIO(), io.BytesIO()
    for name, method, crc, usize, data in members:
        offset = out.tell()
        fields = (20, 0, method, 0, 0x21, crc, len(data), usize, len(name))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0))
        out.write(name.encode() + data)
        central.write(struct.pack("<IH", 0x02014B50, 20))
        central.write(struct.pack("<HHHHHIIIHHHHHII", *fields, 0, 0, 0, 0, 0, offset))
        central.write(name.encode())
    start = out.tell()
    out.write(central.getvalue())
    count, length = len(members), len(central.getvalue())
    out.write(
        struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, length, start, 0)
    )
    path.write_bytes(out.getvalue())


# One child process: the peak RSS (KiB) after a normal small load, then after each
# hostile file (ru_maxrss only grows, so each later value bounds that file's cost).
_PEAKS = textwrap.dedent(
    """
    import resource, sys
    import dynsys
    for path in sys.argv[1:]:
        try:
            outcome = f"loaded {dynsys.load_dataset(path).xs.shape}"
        except ValueError as error:
            outcome = f"refused {error}"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(peak, outcome.replace(chr(10), " | "))
    """
)


def peak_rss_kib(*paths) -> list[tuple[int, str]]:
    """`(peak RSS in KiB, outcome)` after loading each of `paths` in turn."""
    result = subprocess.run(
        [sys.executable, "-c", _PEAKS, *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    lines = result.stdout.strip().splitlines()
    return [(int(line.split(" ", 1)[0]), line.split(" ", 1)[1]) for line in lines]


def test_zip_bomb_is_refused_before_decompressing(tmp_path):
    small = np.zeros((3, 11, 2))
    normal = tmp_path / "normal.npz"
    np.savez(normal, xs=small)
    bomb = tmp_path / "bomb.npz"  # 'xs' itself: 1 GiB of zeros in ~1 MB
    _zip_bomb(bomb, "xs", 1)
    junk = tmp_path / "junk.npz"  # a 1 GiB member dynsys does not use
    _zip_bomb(junk, "junk", 1, extra={"xs": small})
    for path in (bomb, junk):
        assert path.stat().st_size < 2 * 2**20
        with zipfile.ZipFile(path) as archive:
            info = archive.infolist()[0]
            assert info.file_size > 2**30  # it really declares (and holds) a GiB
            with archive.open(info) as member:
                assert member.read(1 << 20)[200:] == bytes((1 << 20) - 200)
    with pytest.raises(ValueError, match="array 'xs' declares 1073741952 bytes"):
        dynsys.load_dataset(bomb)
    np.testing.assert_array_equal(dynsys.load_dataset(junk).xs, small)
    (base, first), (peak_bomb, second), (peak_junk, third) = peak_rss_kib(
        normal, bomb, junk
    )
    assert first.startswith("loaded") and third.startswith("loaded")
    assert second.startswith("refused") and "declares" in second
    # Peak memory (KiB) within 100 MB of a normal small load.
    assert peak_bomb - base < 100 * 1024, (base, peak_bomb)
    assert peak_junk - base < 100 * 1024, (base, peak_junk)


def test_npz_object_arrays_are_refused_or_never_read(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, xs=np.array([[[object()]]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="array 'xs' holds Python objects"):
        dynsys.load_dataset(path)
    # An unused pickled member is never unpickled (nor decompressed).
    np.savez(
        path, xs=np.zeros((1, 3, 1)), extra=np.array([object()]), allow_pickle=True
    )
    assert dynsys.load_dataset(path).num_steps == 2
