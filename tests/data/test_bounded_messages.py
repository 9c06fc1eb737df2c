"""Hostile text tables: a header line of megabytes is refused after reading at most
1 MiB of it, and errors that quote the file's content (column names, cells, array
names) stay short: the first names, then how many more."""

import numpy as np
import pytest

import dynsys
from dynsys._data.text_files import MAX_HEADER_CHARS


def _one_line_of(path, size: int) -> None:
    """A file of one line of `size` bytes of short column names and no newline,
    written a MiB at a time."""
    piece = ("a," * (2**19)).encode()
    with open(path, "wb") as file:
        for _ in range(size // len(piece)):
            file.write(piece)


@pytest.mark.parametrize("suffix", [".csv", ".dat"])
@pytest.mark.parametrize("mib", [2, 20])
def test_a_header_line_of_megabytes_is_refused(tmp_path, suffix, mib):
    path = tmp_path / f"wide{suffix}"
    _one_line_of(path, mib * 2**20)
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path)
    assert str(info.value) == (
        f"load_dataset(path={str(path)!r}): line 1 (the header) is longer than "
        f"{MAX_HEADER_CHARS} characters; refused (a damaged file, or not a table of "
        "a few columns per line)."
    )


def test_a_quoted_header_running_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "quoted.csv"
    # Quoted names that each hold a line break: the first row runs over 2 MiB of
    # lines, none of them long.
    names = ",".join(f'"x{j}\n"' for j in range(2 * MAX_HEADER_CHARS // 8))
    path.write_text(f"{names}\n1,2\n")
    with pytest.raises(ValueError, match=r"line 1 \(the header\) is longer than"):
        dynsys.load_dataset(path)


def test_a_quoted_header_with_a_line_break_still_loads(tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text('u,"y\nsecond line"\n1,2\n3,4\n')
    data = dynsys.load_dataset(path, inputs=["u"], outputs=["y\nsecond line"])
    np.testing.assert_array_equal(data.ys[0, :, 0], [2.0, 4.0])


def test_a_list_of_many_columns_is_cut(tmp_path):
    path = tmp_path / "many.csv"
    names = [f"c{j}" for j in range(50_000)]
    path.write_text(",".join(names) + "\n" + ",".join("1" * len(names)) + "\n")
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path, outputs=["zz"])
    message = str(info.value)
    first = ", ".join(repr(name) for name in names[:20])
    assert message == (
        f"load_dataset(outputs=...): no column 'zz' in {str(path)!r}; columns found: "
        f"[{first}, … and 49980 more]."
    )


def test_long_names_and_cells_are_cut(tmp_path):
    name = "n" * 100_000
    path = tmp_path / "long.csv"
    path.write_text(f"u,{name},{name}\n1,2,3\n")
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path)
    assert len(str(info.value)) < 2000
    assert f"column {'n' * 60 + '…'!r} appears twice" in str(info.value)
    cell = "z" * 100_000
    path.write_text(f"u,y\n1,2\n3,{cell}\n")
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path)
    assert str(info.value) == (
        f"load_dataset(path={str(path)!r}): line 3: column 2 ('y'): "
        f"{'z' * 60 + '…'!r} is not a number."
    )


def test_npz_member_lists_are_cut(tmp_path):
    path = tmp_path / "many.npz"
    np.savez(path, **{f"a{j:03d}": np.zeros(1) for j in range(100)})
    with pytest.raises(ValueError) as info:
        dynsys.load_dataset(path)
    assert str(info.value).endswith("'a019', … and 80 more]).")
