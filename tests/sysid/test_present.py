"""Issue 50, item 7: `present` (a readable summary of a linear model) against SciPy
and closed forms; channel names through `plot.bode` and `to_control`, and the
operating point `to_control` leaves out said."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.signal

import dynsys
from dynsys._sysid import present as present_module


def _model(levels: bool = False):
    K = jnp.array([[0.9, 0.2], [-0.1, 0.7]])
    B = jnp.array([[1.0, 0.0], [0.5, 1.0]])
    C = jnp.array([[1.0, 0.0]])
    D = jnp.array([[0.3, 0.0]])
    extra = {}
    if levels:
        extra = dict(input_level=jnp.array([6.5, 1.0]), output_level=jnp.array([97.13]))
    return dynsys.LinearSystem(K, B, C, D, dt=2.0, **extra)


@pytest.mark.filterwarnings("ignore::scipy.signal.BadCoefficients")
def test_zeros_gain_and_transfer_function_match_scipy():
    model = _model()
    K, B, C, D = (np.asarray(a) for a in (model.K, model.B, model.C, model.D))
    for j in range(2):
        num, den = scipy.signal.ss2tf(K, B, C, D, input=j)
        zeros, _, _ = scipy.signal.ss2zpk(K, B, C, D, input=j)
        ours_num, ours_den = present_module.transfer_function(K, B[:, j], C[0], D[0, j])
        np.testing.assert_allclose(ours_num, num[0], atol=1e-12)
        np.testing.assert_allclose(ours_den, den, atol=1e-12)
        ours_zeros = present_module.siso_zeros(K, B[:, j], C[0], D[0, j])
        np.testing.assert_allclose(np.sort_complex(ours_zeros), np.sort_complex(zeros))
        gain = present_module.static_gain(K, B[:, j], C[0], D[0, j])
        assert gain == pytest.approx(np.polyval(num[0], 1.0) / np.polyval(den, 1.0))


def test_present_names_poles_levels_and_gains():
    model = _model(levels=True)
    text = dynsys.present(
        model, input_names=["drive_V", "fan"], output_names=["temp_C"]
    )
    assert "2 states, 2 inputs, 1 outputs; dt = 2 s" in text
    assert "operating point, inputs: drive_V 6.5, fan 1" in text
    assert "operating point, outputs: temp_C 97.13" in text
    for z in np.linalg.eigvals(np.asarray(model.K)):
        assert present_module._complex(z) in text
    assert "drive_V → temp_C:" in text and "fan → temp_C:" in text
    K, B, C, D = (np.asarray(a) for a in (model.K, model.B, model.C, model.D))
    gain = C @ np.linalg.solve(np.eye(2) - K, B) + D
    assert f"static gain {gain[0, 0]:.6g}" in text
    with pytest.raises(ValueError, match="present\\(input_names=...\\): expected 2"):
        dynsys.present(model, input_names=["one"])
    with pytest.raises(TypeError, match="present\\(model=...\\)"):
        dynsys.present(np.eye(2))


def test_present_with_a_covariance_gives_the_std():
    rng = np.random.default_rng(0)
    true = dynsys.LinearSystem(
        jnp.array([[0.8]]), jnp.array([[0.5]]), jnp.array([[1.0]])
    )
    u = rng.normal(size=(1, 300, 1))
    ys = np.asarray(dynsys.compare(true, dynsys.Dataset(
        us=jnp.asarray(u), ys=jnp.zeros((1, 300, 1)))).predicted)  # fmt: skip
    ys = ys + 0.05 * rng.normal(size=ys.shape)
    data = dynsys.Dataset(us=jnp.asarray(u), ys=jnp.asarray(ys))
    result = dynsys.fit(dynsys.fit_subspace(data, 1), data, progress=False)
    lazy = repr(result.uncertainty)
    assert "computed when FitResult.covariance is first read" in lazy
    text = dynsys.present(result.model, result.covariance)
    _, std = dynsys.static_gain_uncertainty(result.covariance)
    assert f"± {float(np.asarray(std)[0, 0]):.2g}" in text
    poles = dynsys.pole_uncertainty(result.covariance)
    assert f"± {float(np.asarray(poles.natural_frequency_std)[0]):.2g}" in text
    covariance = result.covariance  # its repr: short, and how to read it
    short = repr(covariance)
    assert short == repr(result.uncertainty)  # once computed, the same
    assert (
        f"{covariance.num_parameters} parameters, {covariance.rank} identifiable"
        in short
    )
    assert f"[{float(np.asarray(covariance.channel_variance)[0]):.3g}]" in short
    assert "present(" in short and "\n" not in short and len(short) < 300


def test_names_through_plot_bode():
    import matplotlib

    matplotlib.use("Agg")
    fig = dynsys.plot.bode(
        {"fitted": _model()}, input_names=["drive_V", "fan"], output_names=["temp_C"]
    )
    titles = [a.get_title() for a in fig.axes]
    assert any("drive_V" in t and "temp_C" in t for t in titles), titles
    assert not any("u0" in t or "y0" in t for t in titles), titles


def test_names_through_to_control_and_the_operating_point_said():
    control = pytest.importorskip("control")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no levels: nothing to say
        plain = dynsys.to_control(
            _model(), input_names=["drive_V", "fan"], output_names=["temp_C"]
        )
    assert plain.input_labels == ["drive_V", "fan"]
    assert plain.output_labels == ["temp_C"]
    with pytest.warns(UserWarning, match="operating point .* is left out"):
        leveled = dynsys.to_control(_model(levels=True))
    np.testing.assert_allclose(control.dcgain(leveled), control.dcgain(plain))


def test_the_operating_point_warning_points_at_the_callers_line():
    pytest.importorskip("control")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dynsys.to_control(_model(levels=True))
    (warning,) = caught
    assert warning.filename == __file__


def _identified(model, covariance=None) -> dynsys.Identified:
    """An `Identified` of `model` with the heating record's channel names (as
    `dynsys.identify` returns it, without running it)."""
    return dynsys.Identified(
        model=model, order=model.state_size, feedthrough=model.D is not None,
        held_out_fit_percent=(85.94,), test_fit_percent=None, first_part=model,
        scan=None, held_out="the last 33% held out", warnings=(),
        input_names=("drive_V", "fan"), output_names=("temp_C",),
        covariance=covariance,
    )  # fmt: skip


def _titles(fig) -> list[str]:
    return [a.get_title() for a in fig.axes if a.get_title()]


def test_names_travel_with_an_identified_model_into_the_plots():
    import matplotlib

    matplotlib.use("Agg")
    found = _identified(_model())
    for draw in (dynsys.plot.bode, dynsys.plot.step_response):
        titles = _titles(draw(found))
        assert titles == ["drive_V → temp_C", "fan → temp_C"], (draw, titles)
        titles = _titles(draw({"fitted": found, "start": _model()}))
        assert titles == ["drive_V → temp_C", "fan → temp_C"], (draw, titles)
    data = dynsys.Dataset(us=jnp.zeros((1, 5, 2)), ys=jnp.zeros((1, 5, 1)),
                          input_names=["a (V)", "b (V)"],
                          output_names=["c (K)"])  # fmt: skip
    assert _titles(dynsys.plot.bode(_model(), names=data)) == [
        "a (V) → c (K)", "b (V) → c (K)"
    ]  # fmt: skip
    given = dynsys.plot.bode(found, names=data, input_names=["p", "q"])
    assert _titles(given) == ["p → c (K)", "q → c (K)"]  # given names come first
    with pytest.raises(ValueError, match=r"bode\(names=...\): expected a Dataset"):
        dynsys.plot.bode(_model(), names=["drive_V"])


def test_names_travel_with_an_identified_model_into_python_control():
    pytest.importorskip("control")
    found = _identified(_model())
    sys = dynsys.to_control(found)
    assert sys.input_labels == ["drive_V", "fan"]
    assert sys.output_labels == ["temp_C"]
    assert dynsys.to_control(_model(), names=found).input_labels == ["drive_V", "fan"]
    text = dynsys.present(found)
    assert "drive_V → temp_C:" in text and "fan → temp_C:" in text


def _physical_outputs(model, us) -> np.ndarray:
    """The model's outputs in physical units from x0 = 0, by a plain loop of
    $x_{t+1} = K x + B (u - \\bar u) + \\mathrm{offset}$,
    $y = C x + D (u - \\bar u) + \\bar y$."""
    K, B, C, D = (np.asarray(getattr(model, name), np.float64) for name in "KBCD")
    u_bar, y_bar = np.asarray(model.input_level), np.asarray(model.output_level)
    offset = 0.0 if model.offset is None else np.asarray(model.offset)
    x, ys = np.zeros(K.shape[0]), []
    for u in us:
        ys.append(C @ x + D @ (u - u_bar) + y_bar)
        x = K @ x + B @ (u - u_bar) + offset
    return np.array(ys)


@pytest.mark.parametrize("offset", [None, (0.2, -0.1)])
def test_to_control_keeps_the_operating_point_as_a_constant_input(offset):
    control = pytest.importorskip("control")
    model = _model(levels=True)
    if offset is not None:
        model = dynsys.LinearSystem(model.K, model.B, model.C, model.D,
                                    offset=jnp.array(offset), dt=2.0,
                                    input_level=model.input_level,
                                    output_level=model.output_level)  # fmt: skip
    us = np.random.default_rng(1).normal(6.0, 1.0, size=(30, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is left out: nothing to say
        sys = dynsys.to_control(model, input_names=["drive_V", "fan"],
                                operating_point="as_input")  # fmt: skip
    assert sys.input_labels == ["drive_V", "fan", "1 (operating point)"]
    U = np.vstack([us.T, np.ones(len(us))])
    response = control.forced_response(sys, T=2.0 * np.arange(len(us)), U=U)
    np.testing.assert_allclose(
        np.asarray(response.outputs).reshape(len(us), -1),
        _physical_outputs(model, us),
        rtol=1e-9,
    )
    if offset is not None:
        with pytest.raises(ValueError, match="operating_point='as_input'"):
            dynsys.to_control(model)
    with pytest.raises(ValueError, match=r"to_control\(operating_point=...\)"):
        dynsys.to_control(model, operating_point="keep")

