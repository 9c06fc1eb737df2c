"""`_sysid/host_response.py`: the responses and bands the figures draw, computed
with numpy, against the JAX functions that define them (`frequency_response`,
`step_response`, their `covariance=` / `step_response_band`) and `jax.jacfwd`."""

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib.figure import Figure

import dynsys
from dynsys import plot
from dynsys._fitting.covariance import ParameterCovariance
from dynsys._sysid import host_response as host
from dynsys._sysid.signals import linear_of


W_SAMPLE = np.array([0.0, 0.05, 0.4, 1.3, 3.0])


def _models(getkey):
    def normal(*shape, scale=1.0):
        return scale * jax.random.normal(getkey(), shape)

    return {
        "linear, C and D": dynsys.LinearSystem(
            0.6 * jnp.eye(3) + normal(3, 3, scale=0.1),
            normal(3, 2),
            normal(2, 3),
            normal(2, 2),
            dt=0.1,
        ),
        "linear, no C or D": dynsys.LinearSystem(
            0.5 * jnp.eye(2) + normal(2, 2, scale=0.2), normal(2, 1)
        ),
        "stable, with levels": dynsys.StableLinearSystem(
            W=normal(3, 3),
            L=normal(3, 3),
            B=normal(3, 2),
            C=normal(1, 3),
            D=normal(1, 2),
            input_level=normal(2),
            output_level=normal(1),
        ),
    }


def _covariance(model, key) -> ParameterCovariance:
    trained = jax.tree.map(eqx.is_inexact_array, model)
    size = sum(x.size for x in jax.tree.leaves(eqx.filter(model, trained)))
    root = np.asarray(jax.random.normal(key, (size, size)))
    matrix = 1e-3 * (root @ root.T + np.eye(size))
    return ParameterCovariance(matrix, model, trained, np.ones(1), size, 100)


@pytest.mark.parametrize("name", ["linear, C and D", "linear, no C or D",
                                  "stable, with levels"])  # fmt: skip
def test_host_responses_and_bands_equal_the_jax_functions(getkey, name):
    model = _models(getkey)[name]
    cov = _covariance(model, getkey())
    dt = model.dt or 1.0
    sensitivity = host.matrix_sensitivity(cov)

    flat, rebuild = cov.split()
    for field in ("K", "B"):
        expected = jax.jacfwd(lambda v, f=field: getattr(linear_of(rebuild(v)), f))
        np.testing.assert_allclose(
            getattr(sensitivity.derivatives, field), expected(flat), atol=1e-12
        )

    response, std = dynsys.frequency_response(model, W_SAMPLE / dt, covariance=cov)
    band = host.frequency_band(sensitivity, W_SAMPLE)
    np.testing.assert_allclose(band[0], response, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(band[1], std, rtol=1e-8, atol=1e-12)
    matrices = host.matrices_of(model, "test")
    np.testing.assert_allclose(
        host.frequency_response_from_matrices(matrices, W_SAMPLE),
        response,
        rtol=1e-10,
        atol=1e-12,
    )

    response, std = dynsys.step_response_band(cov, 20)
    band = host.step_band(sensitivity, 20)
    np.testing.assert_allclose(band[0], response, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(band[1], std, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(
        host.step_response_from_matrices(matrices, 20),
        dynsys.step_response(model, 20),
        atol=1e-12,
    )


def test_figures_draw_the_jax_functions_values(getkey):
    """The lines and bands of `plot.bode` and `plot.step_response` are the values of
    `dynsys.frequency_response` and `dynsys.step_response_band`."""
    model = _models(getkey)["linear, C and D"]
    cov = _covariance(model, getkey())
    w = np.array([0.5, 2.0, 10.0])  # rad/s (dt = 0.1)
    fig = plot.bode({"fitted": model}, w, confidence={"fitted": cov}, fig=Figure())
    response, std = dynsys.frequency_response(model, w, covariance=cov)
    magnitude, phase = fig.get_axes()[:2]  # u0 -> y0
    line = [ln for ln in magnitude.get_lines() if ln.get_label() == "fitted"][0]
    np.testing.assert_allclose(
        line.get_ydata(), 20 * np.log10(np.abs(response[:, 0, 0])), rtol=1e-10
    )
    band = [c for c in magnitude.collections if "confidence" in c.get_label()][0]
    z = 2.5758293035489004  # 99 %
    top = band.get_paths()[0].vertices[:, 1]
    upper = 20 * np.log10(np.abs(response[:, 0, 0]) + z * std[:, 0, 0])
    np.testing.assert_allclose(np.max(top), np.max(upper), rtol=1e-10)

    fig = plot.step_response({"fitted": model}, 15, confidence={"fitted": cov})
    response, std = dynsys.step_response_band(cov, 15)
    axes = fig.get_axes()[1]  # u1 -> y0
    line = [ln for ln in axes.get_lines() if ln.get_label() == "fitted"][0]
    np.testing.assert_allclose(line.get_ydata(), response[:, 0, 1], atol=1e-12)
    band = [c for c in axes.collections if "confidence" in c.get_label()][0]
    top = band.get_paths()[0].vertices[:, 1]
    np.testing.assert_allclose(
        np.max(top), np.max(response[:, 0, 1] + z * std[:, 0, 1]), rtol=1e-10
    )


def test_poles_of_a_model_without_inputs_and_band_errors(getkey):
    model = dynsys.LinearSystem(jnp.array([[0.5, 0.2], [-0.2, 0.5]]))
    cov = _covariance(model, getkey())
    poles = dynsys.pole_uncertainty(cov)
    assert np.all(np.asarray(poles.natural_frequency_std) > 0)
    sensitivity = host.matrix_sensitivity(cov)
    with pytest.raises(ValueError, match=r"frequency_response\(system=...\): the sys"):
        host.frequency_band(sensitivity, W_SAMPLE)
    with pytest.raises(ValueError, match=r"step_response_band\(system=...\): the sys"):
        host.step_band(sensitivity, 5)
    with pytest.raises(TypeError, match=r"matrix_sensitivity\(covariance=...\)"):
        host.matrix_sensitivity(np.eye(4))
    with pytest.raises(TypeError, match=r"matrix_sensitivity\(system=...\): expec"):
        host.matrix_sensitivity(cov, zoo.Pendulum())


@pytest.mark.parametrize("name", ["linear, C and D", "linear, no C or D",
                                  "stable, with levels"])  # fmt: skip
def test_static_gain_uncertainty_equals_the_propagated_jax_gain(getkey, name):
    """`static_gain_uncertainty` (now on the host) against the gain by JAX's
    frequency response at zero frequency, its std by `propagate_std` (a Jacobian
    of that function)."""
    from dynsys._sysid.propagate import propagate_std
    from dynsys._sysid.response import _frequency_response

    model = _models(getkey)[name]
    cov = _covariance(model, getkey())
    zero = np.zeros(1)

    def gain(system):
        return jnp.real(_frequency_response(system, zero)[0])

    value, std = dynsys.static_gain_uncertainty(cov)
    np.testing.assert_allclose(value, gain(model), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        std, propagate_std(gain, cov, model), rtol=1e-8, atol=1e-12
    )
    assert value.shape == std.shape == (model.output_size, model.input_size)


@pytest.mark.parametrize("a, b, c, d", [(0.5, 2.0, 1.0, 0.0), (-0.8, 1.0, 0.3, 1.5),
                                        (0.99, 0.1, -2.0, 0.2)])  # fmt: skip
def test_host_and_jax_responses_equal_the_closed_forms(a, b, c, d):
    """$x_{t+1} = a x_t + b u_t$, $y_t = c x_t + d u_t$: step response $d + cb(1 -
    a^t)/(1 - a)$, frequency response $cb/(e^{iw} - a) + d$; and two such channels
    side by side (a diagonal `K`) give each its own."""
    t, w = np.arange(30), W_SAMPLE
    step = d + c * b * (1 - a**t) / (1 - a)
    freq = c * b / (np.exp(1j * w) - a) + d
    model = dynsys.LinearSystem(*(jnp.array([[v]]) for v in (a, b, c, d)))
    matrices = host.matrices_of(model, "test")
    for values in (host.step_response_from_matrices(matrices, 30),
                   dynsys.step_response(model, 30)):  # fmt: skip
        np.testing.assert_allclose(np.asarray(values)[:, 0, 0], step, rtol=1e-12)
    for values in (host.frequency_response_from_matrices(matrices, w),
                   dynsys.frequency_response(model, w)):  # fmt: skip
        np.testing.assert_allclose(np.asarray(values)[:, 0, 0], freq, rtol=1e-12)
    pair = dynsys.LinearSystem(
        jnp.diag(jnp.array([a, 0.3])), jnp.diag(jnp.array([b, 1.0])),
        jnp.diag(jnp.array([c, 1.0])), jnp.diag(jnp.array([d, 0.0])),
    )  # fmt: skip
    matrices = host.matrices_of(pair, "test")
    other = (1 - 0.3**t) / 0.7
    for values in (host.step_response_from_matrices(matrices, 30),
                   dynsys.step_response(pair, 30)):  # fmt: skip
        values = np.asarray(values)
        np.testing.assert_allclose(values[:, 0, 0], step, rtol=1e-12)
        np.testing.assert_allclose(values[:, 1, 1], other, rtol=1e-12)
        np.testing.assert_allclose(values[:, 0, 1], 0.0, atol=1e-15)
