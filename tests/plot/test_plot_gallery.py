"""docs/scripts/make_gallery.py writes into docs/figures only when asked, and the zoo
models' channel names (with units) match their sizes."""

import importlib.util
import pathlib

import dynsys.models as zoo
import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _gallery():
    path = ROOT / "docs" / "scripts" / "make_gallery.py"
    spec = importlib.util.spec_from_file_location("make_gallery", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gallery_writes_only_where_asked(tmp_path):
    gallery = _gallery()
    docs = ROOT / "docs" / "figures"
    before = {p: p.stat().st_mtime_ns for p in docs.iterdir()}
    written = gallery.main(["--out", str(tmp_path), "--only", "singular_values"])
    assert written == [tmp_path / "gallery_singular_values.png"]
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (default,) = gallery.main(["--only", "singular_values"])
    assert docs not in default.parents
    default.unlink()
    assert {p: p.stat().st_mtime_ns for p in docs.iterdir()} == before


def test_gallery_page_shows_every_kind():
    page = (ROOT / "docs" / "gallery.md").read_text()
    for kind in _gallery().KINDS:
        assert f"(figures/gallery_{kind}.png)" in page, f"gallery.md lacks {kind}"


@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_every_zoo_model_has_names_with_units(name):
    system = zoo.get(name)
    names = zoo.names(name)
    assert len(names.states) == system.state_size
    assert len(names.inputs) == system.input_size
    assert len(names.outputs) == system.output_size
    for label in names.states + names.inputs + names.outputs:
        assert label.endswith(")") and " (" in label, f"{label!r} has no unit"


def test_names_follow_the_parameters_and_refuse_unknown_models():
    chain = zoo.names("mass_spring_damper", num_masses=3, dt=0.2)
    assert chain.states == ("p1 (m)", "p2 (m)", "p3 (m)", "v1 (m/s)", "v2 (m/s)",
                            "v3 (m/s)")  # fmt: skip
    assert zoo.names("pendulum").inputs == ("torque (N m)",)
    assert zoo.names("lotka_volterra").states[0].startswith("prey")
    with pytest.raises(ValueError, match=r"names\(name=...\): unknown model 'x'"):
        zoo.names("x")
