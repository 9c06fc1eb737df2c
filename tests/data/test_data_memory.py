"""Memory of ragged data: padding that would multiply memory is refused before any
padded array is allocated (peak RSS measured in a child process)."""


import numpy as np
import pytest

import dynsys

from ..helpers import load_in_child


def _write(path, lengths):
    with open(path, "w") as file:
        file.write("trajectory,u0,y0\n")
        for i, T in enumerate(lengths):
            rows = np.column_stack([np.full(T, i), np.arange(T) % 7, np.arange(T) % 5])
            np.savetxt(file, rows, delimiter=",", fmt="%d")


@pytest.mark.slow  # two child processes that import JAX
def test_padding_blow_up_is_refused_before_allocating(tmp_path):
    ragged, plain = tmp_path / "ragged.csv", tmp_path / "plain.csv"
    _write(ragged, [100_000] + [2] * 4_000)  # ~1 MB; padded: 4001 x 100000 x 2
    _write(plain, [108_000])  # as many rows in one experiment
    refused, normal = load_in_child(ragged), load_in_child(plain)
    assert normal["error"] is None
    assert refused["error"] is not None and "\n" not in refused["error"]
    assert (
        "padding 4001 experiments to the longest (experiment 0, 100000 steps)"
        in (refused["error"])
    )
    assert "allowed: 50x" in refused["error"]
    # Padded float32 arrays would take 3 GB; the refusal costs what a normal load of
    # the same rows costs (both are tens of MiB).
    assert refused["peak_kib"] < 2 * normal["peak_kib"] + 64 * 1024


def test_moderate_padding_is_kept():
    lengths = [50, 2, 3]
    data = dynsys.Dataset(ys=[np.ones((T, 1)) for T in lengths])
    assert data.lengths == (50, 2, 3) and data.ys.shape == (3, 50, 1)


def test_padding_limit_counts_bytes_not_only_the_factor():
    from dynsys._data import construction

    assert construction.MAX_PADDING_FACTOR == 50
    ys = [np.ones((1000, 1))] + [np.ones((1, 1))] * 200  # 200x, but only 0.8 MB
    assert dynsys.Dataset(ys=ys).num_trajectories == 201
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(construction, "PADDING_ALLOWANCE", 2**16)
        with pytest.raises(
            ValueError, match=r"Dataset\(lengths=...\): padding 201 exp"
        ):
            dynsys.Dataset(ys=ys)
