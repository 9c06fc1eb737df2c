"""save / load: round trips, templates, and clear errors for bad files."""

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def test_linear_system_round_trip_without_template(tmp_path):
    model = dynsys.LinearSystem(
        np.array([[0.9, 0.1], [0.0, 0.8]]),
        np.array([[0.0], [1.0]]),
        offset=np.array([0.1, -0.1]),
        dt=0.05,
    )
    path = tmp_path / "model.dynsys"
    dynsys.save(path, model)
    back = dynsys.load(path)
    assert type(back) is dynsys.LinearSystem and back.dt == 0.05 and back.C is None
    for name in ("K", "B", "offset"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
        assert getattr(back, name).dtype == getattr(model, name).dtype
    assert os.listdir(tmp_path) == ["model.dynsys"]


def test_stable_system_round_trip(tmp_path):
    model = dynsys.StableLinearSystem(3 * np.eye(2), np.eye(2), bound=0.9)
    dynsys.save(tmp_path / "s.dynsys", model)
    back = dynsys.load(tmp_path / "s.dynsys")
    assert type(back) is dynsys.StableLinearSystem and back.bound == 0.9
    np.testing.assert_array_equal(back.K, model.K)


class _Gain(eqx.Module):
    k: jax.Array
    name: str = eqx.field(static=True, default="g")


def test_user_class_needs_a_template(tmp_path):
    path = tmp_path / "g.dynsys"
    dynsys.save(path, _Gain(jnp.arange(3.0)))
    with pytest.raises(
        ValueError,
        match=r"holds a tests\.io\.test_io\._Gain, which is not built into dynsys; pass a template",
    ):
        dynsys.load(path)
    back = dynsys.load(path, like=_Gain(jnp.zeros(3)))
    np.testing.assert_array_equal(back.k, [0.0, 1.0, 2.0])
    with pytest.raises(
        ValueError, match=r"leaf 0 has shape \(3,\) in the file but \(4,\) in like"
    ):
        dynsys.load(path, like=_Gain(jnp.zeros(4)))
    with pytest.raises(
        ValueError,
        match=r"the file holds a tests\.io\.test_io\._Gain, but like is a dynsys\.LinearSystem",
    ):
        dynsys.load(path, like=dynsys.LinearSystem(np.eye(3)))


def test_truncated_foreign_and_damaged_files(tmp_path):
    path = tmp_path / "m.dynsys"
    dynsys.save(path, dynsys.LinearSystem(np.eye(3)))
    content = path.read_bytes()
    bad = tmp_path / "bad.dynsys"
    bad.write_bytes(content[:-5])
    with pytest.raises(ValueError, match="truncated or damaged"):
        dynsys.load(bad)
    bad.write_bytes(content[:20])
    with pytest.raises(ValueError, match="truncated"):
        dynsys.load(bad)
    bad.write_bytes(content[:-1] + bytes([content[-1] ^ 0xFF]))
    with pytest.raises(ValueError, match="checksum"):
        dynsys.load(bad)
    np.save(tmp_path / "foreign.npy", np.eye(3))
    with pytest.raises(ValueError, match="not a dynsys model file"):
        dynsys.load(tmp_path / "foreign.npy")
    with pytest.raises(ValueError, match="no such file"):
        dynsys.load(tmp_path / "missing.dynsys")


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "m.dynsys"
    dynsys.save(path, dynsys.LinearSystem(np.eye(2)))
    before = path.read_bytes()

    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        dynsys.save(path, dynsys.LinearSystem(2 * np.eye(2)))
    assert path.read_bytes() == before  # the old model is intact
    assert os.listdir(tmp_path) == ["m.dynsys"]  # and no temporary file is left


def test_saved_files_get_the_usual_permissions(tmp_path):
    """Atomic writes go through a 0600 temporary file; the result follows the umask."""
    import os
    import stat

    import jax.numpy as jnp

    import dynsys

    path = tmp_path / "model.dynsys"
    dynsys.save(path, dynsys.LinearSystem(jnp.eye(2)))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_save_onto_a_folder_is_one_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"save\(path=.*\): a folder is there"):
        dynsys.save(tmp_path, dynsys.LinearSystem(np.eye(2)))
    assert os.listdir(tmp_path) == []


def _with_class(path, name: str) -> None:
    """Rewrite the class named in a model file's header (as an older dynsys wrote)."""
    import json
    import struct

    raw = path.read_bytes()
    magic_end = raw.index(b"\n") + 1
    (length,) = struct.unpack("<Q", raw[magic_end : magic_end + 8])
    header = json.loads(raw[magic_end + 8 : magic_end + 8 + length])
    header["class"] = name
    header.pop("header_sha256", None)  # older files have no checksum of the header
    encoded = json.dumps(header).encode()
    rest = raw[magic_end + 8 + length :]
    path.write_bytes(raw[:magic_end] + struct.pack("<Q", len(encoded)) + encoded + rest)


@pytest.mark.parametrize(
    "make, old_name",
    [
        (
            lambda: dynsys.MLPController(2, 1, 4, 1, bound=2.0, key=jax.random.key(0)),
            "dynsys._controller.MLPController",
        ),
        (
            lambda: dynsys.StackedController.mlp(
                2, 1, width_size=4, depth=3, key=jax.random.key(1)
            ),
            "dynsys._layered.StackedController",
        ),
        (
            lambda: dynsys.Discretized(dynsys.LinearODE(-jnp.eye(2)), 0.1),
            "dynsys._ode.Discretized",
        ),
    ],
)
def test_files_from_before_the_layer_folders_load(tmp_path, make, old_name):
    """Public classes are named `dynsys.X` in new files; a file that names the class
    by the private module it had before the package was split into layer folders
    loads into the same model, and a wrong template is still refused."""

    model = make()
    path = tmp_path / "model.dynsys"
    dynsys.save(path, model)
    header = path.read_bytes().split(b"\n", 1)[1][8:]
    assert f'"class": "dynsys.{type(model).__name__}"' in header.decode(errors="ignore")
    _with_class(path, old_name)
    back = dynsys.load(path, like=make())
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(model), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="the file holds a dynsys._"):
        dynsys.load(path, like=dynsys.LinearFeedback(jnp.ones((1, 2))))


def test_a_float64_file_loads_in_a_float32_session_with_a_warning(tmp_path):
    """A model the CLI wrote in float64 loads in a fresh Python session (64-bit mode
    off): converted to float32, and said once."""
    import subprocess
    import sys

    K = np.array([[0.9, 0.1], [0.0, 0.8]])
    with jax.enable_x64(True):
        model = dynsys.LinearSystem(jnp.asarray(K), jnp.ones((2, 1)), dt=0.5)
        assert model.K.dtype == jnp.float64
        dynsys.save(tmp_path / "model.dynsys", model)
    script = (
        "import warnings, numpy as np, dynsys\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    m = dynsys.load({str(tmp_path / 'model.dynsys')!r})\n"
        "print(m.K.dtype, m.dt, len(caught))\n"
        "print(caught[0].message)\n"
        "np.save('K.npy', np.asarray(m.K))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"},
    )
    assert done.returncode == 0, done.stderr
    first, message = done.stdout.splitlines()[:2]
    assert first == "float32 0.5 1"  # one warning, in one line
    assert "float64 -> float32" in message and "jax_enable_x64" in message
    path = str(tmp_path / "model.dynsys")
    assert message.startswith(f"load(path={path!r}): 2 arrays ")
    assert len(done.stdout.splitlines()) == 2
    np.testing.assert_array_equal(np.load(tmp_path / "K.npy"), K.astype(np.float32))


def test_like_decides_the_precision_and_integers_are_not_converted(tmp_path):
    path = tmp_path / "model.dynsys"
    dynsys.save(path, {"w": np.arange(3, dtype=np.float32), "n": np.arange(2)})
    like = {"w": np.zeros(3, np.float64), "n": np.zeros(2, np.int64)}
    with pytest.warns(UserWarning, match=r"float32 -> float64.*the dtypes of like"):
        back = dynsys.load(path, like=like)
    assert back["w"].dtype == np.float64
    np.testing.assert_array_equal(back["w"], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="dtype int64 on disk but int32 in like"):
        dynsys.load(
            path, like={"w": np.zeros(3, np.float32), "n": np.zeros(2, np.int32)}
        )


def _edit_header(path, edit) -> None:
    """Apply `edit` to the JSON header of a model file, as a hand edit would."""
    import json
    import struct

    raw = path.read_bytes()
    magic_end = raw.index(b"\n") + 1
    (length,) = struct.unpack("<Q", raw[magic_end : magic_end + 8])
    header = json.loads(raw[magic_end + 8 : magic_end + 8 + length])
    edit(header)
    encoded = json.dumps(header).encode()
    rest = raw[magic_end + 8 + length :]
    path.write_bytes(raw[:magic_end] + struct.pack("<Q", len(encoded)) + encoded + rest)


def test_an_edited_static_field_is_refused(tmp_path):
    """The checksum covers the header's static fields: `dt` edited from 0.1 to 0.7
    (leaves untouched, so their own checksum still matches) is refused."""
    path = tmp_path / "m.dynsys"
    dynsys.save(path, dynsys.LinearSystem(0.5 * np.eye(2), dt=0.1))
    assert dynsys.load(path).dt == 0.1

    def set_dt(header):
        assert header["fields"]["dt"] == {"static": 0.1}
        header["fields"]["dt"] = {"static": 0.7}
        header["static"]["dt"] = 0.7

    _edit_header(path, set_dt)
    with pytest.raises(
        ValueError,
        match=r"load\(path=.*\): the file is damaged or was edited: the checksum of the header",
    ) as info:
        dynsys.load(path)
    assert "\n" not in str(info.value)


def test_files_without_a_header_checksum_still_load(tmp_path):
    """Files written before the header had a checksum load as before."""
    path = tmp_path / "m.dynsys"
    dynsys.save(path, dynsys.LinearSystem(0.5 * np.eye(2), dt=0.1))
    _edit_header(path, lambda header: header.pop("header_sha256"))
    back = dynsys.load(path)
    assert back.dt == 0.1
    np.testing.assert_array_equal(back.K, 0.5 * np.eye(2))


def test_a_model_file_records_the_datas_channel_names(tmp_path):
    """`save(names=data)` records the data's input and output names; `load_names`
    gives them back (a `ChannelNames` that the plots and `present` take as
    `names=`); a file without them gives `None`; a damaged entry is refused."""
    model = dynsys.LinearSystem(0.5 * np.eye(2), np.ones((2, 1)), np.ones((1, 2)))
    data = dynsys.Dataset(us=np.zeros((1, 4, 1)), ys=np.zeros((1, 4, 1)),
                          input_names=["drive (V)"],
                          output_names=["temp (°C)"])  # fmt: skip
    path = tmp_path / "m.dynsys"
    dynsys.save(path, model, names=data)
    names = dynsys.load_names(path)
    assert names == dynsys.ChannelNames(("drive (V)",), ("temp (°C)",))
    assert "drive (V) → temp (°C):" in dynsys.present(dynsys.load(path), names=names)
    dynsys.save(tmp_path / "plain.dynsys", model)
    assert dynsys.load_names(tmp_path / "plain.dynsys") is None
    with pytest.raises(ValueError, match=r"save\(names=...\): expected a Dataset"):
        dynsys.save(path, model, names=["drive (V)"])
    _edit_header(path, lambda header: header.update(channels={"inputs": [1]}))
    with pytest.raises(ValueError, match="the header's 'channels' is not a table"):
        dynsys.load_names(path)
