import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


def _system(getkey, n=3, m=1, p=2):
    K = jax.random.normal(getkey(), (n, n))
    K = 0.9 * K / jnp.max(jnp.abs(jnp.linalg.eigvals(K)))
    return dynsys.LinearSystem(
        K, jax.random.normal(getkey(), (n, m)), jax.random.normal(getkey(), (p, n))
    )


def _data(system, lengths, getkey, noise=0.0):
    N, T = len(lengths), max(lengths)
    us = jax.random.normal(getkey(), (N, T, system.input_size))
    x0s = jax.random.normal(getkey(), (N, system.state_size))
    ys = dynsys.rollout(system, x0s, T, inputs=us).ys
    ys = ys + noise * jax.random.normal(getkey(), ys.shape)
    return dynsys.Dataset(us=us, ys=ys, lengths=lengths), x0s


@pytest.mark.parametrize("horizon", [None, 1, 4])
def test_true_model_fits_noise_free_data_exactly(getkey, horizon):
    system = _system(getkey)
    data, x0s = _data(system, (60, 45, 30), getkey)
    result = dynsys.compare(system, data, horizon=horizon)
    np.testing.assert_allclose(result.fit_percent, 100.0, atol=1e-6)
    np.testing.assert_allclose(result.fit_percent_per_experiment, 100.0, atol=1e-6)
    np.testing.assert_allclose(result.x0, x0s, atol=1e-8)
    assert result.predicted.shape == (3, 60, 2) and result.horizon == horizon
    assert result.names == ("y0", "y1") and result.lengths == (60, 45, 30)


def test_known_perturbation_gives_the_analytic_fit(getkey):
    system = _system(getkey)
    data, x0s = _data(system, (50, 35), getkey)
    delta = 0.1  # outputs scaled by 1.1: y_hat = 1.1 y from the true x0
    scaled = dynsys.LinearSystem(system.K, system.B, (1 + delta) * system.C)
    result = dynsys.compare(scaled, data, x0=x0s)
    y = np.concatenate([np.asarray(data.ys[0, :50]), np.asarray(data.ys[1, :35])])
    expected = 100 * (
        1 - delta * np.linalg.norm(y, axis=0) / np.linalg.norm(y - y.mean(0), axis=0)
    )
    np.testing.assert_allclose(result.fit_percent, expected, rtol=1e-10)
    assert np.all(np.asarray(result.predicted[1, 35:]) == 0.0)


def test_ragged_data_equals_each_experiment_alone(getkey):
    true = _system(getkey)
    data, _ = _data(true, (50, 20, 35), getkey, noise=0.1)
    model = dynsys.LinearSystem(0.9 * true.K, true.B, true.C)
    for horizon, i in ((None, 1), (2, 2)):  # one shorter experiment each (time)
        result = dynsys.compare(model, data, horizon=horizon)
        alone = dynsys.compare(model, data.experiment(i), horizon=horizon)
        T = data.lengths[i]
        np.testing.assert_allclose(
            result.fit_percent_per_experiment[i], alone.fit_percent, rtol=1e-10
        )
        np.testing.assert_allclose(
            result.predicted[i, :T], alone.predicted[0], rtol=1e-9, atol=1e-12
        )


def test_k_step_prediction_against_numpy_definition(getkey):
    true = _system(getkey)
    data, _ = _data(true, (40, 25), getkey, noise=0.05)
    model = dynsys.LinearSystem(0.95 * true.K, true.B, true.C)  # a wrong model
    k, w = 3, 4
    result = dynsys.compare(model, data, horizon=k, window=w)
    free = dynsys.compare(model, data)
    K, B, C = (np.asarray(a) for a in (model.K, model.B, model.C))
    for i, T in enumerate(data.lengths):
        y, u = np.asarray(data.ys[i, :T]), np.asarray(data.us[i, :T])
        for t in range(T):
            tau = t - k - w + 1  # window tau..t-k
            if tau < 0:
                expected = free.predicted[i, t]
            else:
                # Least-squares state at tau from y_tau..y_{t-k}, then simulate.
                rows, target = [], []
                for j in range(w):
                    x, M = np.zeros(3), np.linalg.matrix_power(K, j)
                    for step in range(j):  # forced response from tau
                        x = K @ x + B @ u[tau + step]
                    rows.append(C @ M)
                    target.append(y[tau + j] - C @ x)
                x_tau = np.linalg.lstsq(
                    np.concatenate(rows), np.concatenate(target), rcond=None
                )[0]
                x = x_tau
                for step in range(tau, t):
                    x = K @ x + B @ u[step]
                expected = C @ x
            np.testing.assert_allclose(
                result.predicted[i, t], expected, rtol=1e-7, atol=1e-9
            )
    long = dynsys.compare(model, data, horizon=1000)
    np.testing.assert_allclose(long.predicted, free.predicted, atol=1e-12)
    assert np.all(result.fit_percent > free.fit_percent)


class _Logistic(dynsys.AbstractSystem):
    r: jax.Array
    state_size: int = eqx.field(static=True, default=1)
    input_size: int = eqx.field(static=True, default=0)

    def step(self, t, x, u):
        return self.r * x * (1 - x)


def test_nonlinear_model_on_states_data():
    xs = dynsys.rollout(_Logistic(jnp.array(3.3)), jnp.array([[0.2], [0.6]]), 20).xs
    data = dynsys.Dataset(xs)
    wrong = _Logistic(jnp.array(3.2))
    np.testing.assert_allclose(
        dynsys.compare(_Logistic(jnp.array(3.3)), data).fit_percent, 100.0, atol=1e-8
    )
    result = dynsys.compare(wrong, data, horizon=2)
    x = np.asarray(xs)[..., 0]
    expected = x[:, :20].copy()
    expected[:, 2:] = x[:, :18]
    for _ in range(2):
        expected[:, 2:] = 3.2 * expected[:, 2:] * (1 - expected[:, 2:])
    free = dynsys.compare(wrong, data).predicted
    expected[:, :2] = np.asarray(free)[:, :2, 0]
    np.testing.assert_allclose(result.predicted[..., 0], expected, rtol=1e-10)



def test_compare_of_a_neural_model_names_its_encoder_and_the_call_works(getkey):
    true = _system(getkey)
    data, x0s = _data(true, (40, 40), getkey)  # noise-free
    model = dynsys.NeuralStateSpace(true, width_size=4, depth=2, key=getkey())
    with pytest.raises(ValueError) as error:
        dynsys.compare(model, data)
    message = str(error.value)
    assert "\n" not in message and message.startswith("compare(model=...): ")
    assert message.endswith("compare(model, data, encoder=encoder).")
    # The call it names, with an encoder of the true states after 6 samples: the
    # model (still equal to its linear base) fits its own noise-free data.
    past = 6
    xs = np.asarray(dynsys.rollout(true, x0s, 40, inputs=data.us).xs)
    us, ys = np.asarray(data.us), np.asarray(data.ys)
    starts = range(0, 40 - past)
    encoder = dynsys.StateEncoder.from_states(
        jnp.asarray(np.concatenate([us[:, t : t + past] for t in starts])),
        jnp.asarray(np.concatenate([ys[:, t : t + past] for t in starts])),
        jnp.asarray(np.concatenate([xs[:, t + past] for t in starts])),
        width_size=4,
        key=getkey(),
    )
    result = dynsys.compare(
        model,
        data.window(encoder.past, None),
        x0=dynsys.neural_initial_state(encoder, data),
    )
    np.testing.assert_allclose(result.x0, xs[:, past], atol=1e-3)
    assert np.all(result.fit_percent > 99.9)
    # The call the message names: the same free run, on samples past, past + 1, ...
    by_encoder = dynsys.compare(model, data, encoder=encoder)
    assert by_encoder.lengths == (40 - past, 40 - past)
    for field in ("fit_percent", "predicted", "measured", "x0"):
        np.testing.assert_allclose(
            getattr(by_encoder, field), getattr(result, field), rtol=1e-12
        )


def _encoder_of(data, state_size, past, getkey):
    """An encoder reading `past` samples of the data's channels (affine part from
    random states: only its sizes matter here)."""
    us, ys = np.asarray(data.us), np.asarray(data.ys)
    W = us.shape[0]
    return dynsys.StateEncoder.from_states(
        jnp.asarray(us[:, :past]), jnp.asarray(ys[:, :past]),
        jnp.asarray(np.random.default_rng(0).standard_normal((W, state_size))),
        width_size=4, key=getkey(),
    )  # fmt: skip


@pytest.mark.parametrize(
    "case, error, message",
    [
        ("horizon", ValueError, "compare(horizon=...): with an encoder the model"),
        ("x0", ValueError, "compare(x0=...): with an encoder the model"),
        ("state size", ValueError, "compare(encoder=...): the encoder gives states "
         "of size 2, the model's state_size is 3"),
        ("channels", ValueError, "compare(encoder=..., data=...): the encoder reads"),
        ("past", ValueError, "compare(data=...): the encoder reads the first past "
         "= 30 samples and the model runs on the rest, but the shortest experiment "
         "has 25 samples."),
        ("not an encoder", TypeError, "compare(encoder=...): expected a StateEncoder"),
    ],
)  # fmt: skip
def test_compare_with_an_encoder_refuses_in_one_line(getkey, case, error, message):
    true = _system(getkey)
    data, _ = _data(true, (40, 25), getkey)
    model = dynsys.NeuralStateSpace(true, width_size=4, depth=2, key=getkey())
    kwargs = {"encoder": _encoder_of(data, true.state_size, 6, getkey)}
    if case == "horizon":
        kwargs["horizon"] = 3
    elif case == "x0":
        kwargs["x0"] = jnp.zeros((2, 3))
    elif case == "state size":
        kwargs["encoder"] = _encoder_of(data, 2, 6, getkey)
    elif case == "channels":
        kwargs["encoder"] = dynsys.StateEncoder.from_states(
            None, jnp.asarray(np.asarray(data.ys)[:, :6]), jnp.zeros((2, 3)),
            width_size=4, key=getkey(),
        )  # fmt: skip
    elif case == "past":
        kwargs["encoder"] = _encoder_of(data, 3, 30, getkey)
    else:
        kwargs["encoder"] = model
    with pytest.raises(error) as raised:
        dynsys.compare(model, data, **kwargs)
    assert "\n" not in str(raised.value) and str(raised.value).startswith(message)

def test_residual_analysis_against_numpy(getkey):
    true = _system(getkey)
    data, _ = _data(true, (80, 50, 64), getkey, noise=0.1)
    model = dynsys.LinearSystem(true.K, 1.05 * true.B, true.C)
    L = 6
    result = dynsys.residual_analysis(model, data, max_lag=L)
    e_all = np.asarray(
        dynsys.compare(model, data).measured - dynsys.compare(model, data).predicted
    )
    Ns = 80 + 50 + 64
    assert result.num_samples == Ns
    np.testing.assert_allclose(result.bound, 2.58 / np.sqrt(Ns))
    auto = np.zeros((L + 1, 2))
    cross = np.zeros((2 * L + 1, 2, 1))
    energy, input_energy = np.zeros(2), np.zeros(1)
    for i, T in enumerate(data.lengths):
        e, u = e_all[i, :T], np.asarray(data.us[i, :T])
        energy += (e**2).sum(0)
        input_energy += (u**2).sum(0)
        for lag in range(L + 1):
            auto[lag] += (e[lag:] * e[: T - lag]).sum(0)
        for lag in range(-L, L + 1):
            for t in range(T):
                if 0 <= t + lag < T:
                    cross[lag + L] += np.outer(e[t + lag], u[t])
    np.testing.assert_allclose(result.autocorrelation, auto / energy, rtol=1e-10)
    np.testing.assert_allclose(
        result.cross_correlation,
        cross / np.sqrt(energy[:, None] * input_energy[None, :]),
        rtol=1e-9,
        atol=1e-14,
    )
    np.testing.assert_allclose(result.autocorrelation[0], 1.0)
    assert result.lags.shape == (L + 1,) and result.cross_lags[0] == -L


def test_white_residuals_stay_within_the_bound(getkey):
    true = _system(getkey)
    data, _ = _data(true, (400, 400), getkey, noise=0.5)
    result = dynsys.residual_analysis(true, data, max_lag=20)
    outside = np.mean(np.abs(np.asarray(result.autocorrelation[1:])) > result.bound)
    assert outside < 0.1
    # A wrong model leaves correlated residuals.
    wrong = dynsys.LinearSystem(true.K, 1.5 * true.B, true.C)
    bad = dynsys.residual_analysis(wrong, data, max_lag=20)
    assert np.max(np.abs(bad.cross_correlation)) > 5 * bad.bound


def test_bad_input(getkey):
    system = _system(getkey)
    data, _ = _data(system, (20, 20), getkey)
    with pytest.raises(ValueError, match=r"x0 must have shape \(N, n\) = \(2, 3\)"):
        dynsys.compare(system, data, x0=jnp.zeros((3,)))
    with pytest.raises(ValueError, match="horizon must be a positive int"):
        dynsys.compare(system, data, horizon=0)
    with pytest.raises(ValueError, match="max_lag must be a positive int below"):
        dynsys.residual_analysis(system, data, max_lag=20)
    other = _system(getkey, p=1)
    with pytest.raises(
        ValueError, match="2 output channels, but the model's output_size is 1"
    ):
        dynsys.compare(other, data)
    logistic_data = dynsys.Dataset(ys=jnp.zeros((2, 5, 1)))
    with pytest.raises(ValueError, match="needs a linear model"):
        dynsys.compare(
            _Logistic(jnp.array(3.0)), logistic_data, horizon=2, x0=jnp.zeros((2, 1))
        )
