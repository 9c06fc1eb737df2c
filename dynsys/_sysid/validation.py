"""Model validation on measured data: fit % per output channel (free run or
k-step-ahead prediction) and residual analysis."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._compile.jit import kept_jit
from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .._fitting.metrics import channel_fit_percent
from .._fitting.encoder import StateEncoder
from .._rollout.rollout import rollout
from .._systems.innovation import InnovationSystem
from .._systems.system import AbstractSystem, LinearSystem
from .initial_state import (
    check_initial_states,
    forced_outputs,
    initial_states_of,
    observability_rows,
)
from .neural_start import encoded_states
from .prediction import kalman_prediction
from .signals import (
    arrays_only,
    check_model_matches,
    first_steps,
    in_shared_length,
    linear_of,
    padded_steps,
    Signals,
    signals,
)


class Comparison(eqx.Module):
    """Measured against predicted outputs, from `compare`.

    **Fields:**

    - `fit_percent`: shape `(p,)`, per output channel over all experiments' valid
        steps: $100\\,(1 - \\lVert y - \\hat y\\rVert / \\lVert y - \\bar y\\rVert)$,
        $\\bar y$ the channel's mean over all valid steps (as MATLAB's `compare`).
    - `fit_percent_per_experiment`: shape `(N, p)`, the same per experiment (its own
        mean).
    - `predicted`, `measured`: shape `(N, T, p)`, zero after each experiment's end.
    - `x0`: shape `(N, n)`, the initial states of the free run.
    - `names`: the channels' names; `horizon`: `None` (free run) or `k`;
        `lengths`: each experiment's number of steps; `dt`: the data's sample time
        in s (`None` when unknown).
    """

    fit_percent: Float[Array, " p"]
    fit_percent_per_experiment: Float[Array, "N p"]
    predicted: Float[Array, "N T p"]
    measured: Float[Array, "N T p"]
    x0: Float[Array, "N n"]
    names: tuple[str, ...] = eqx.field(static=True)
    horizon: int | None = eqx.field(static=True)
    lengths: tuple[int, ...] = eqx.field(static=True)
    dt: float | None = eqx.field(static=True, default=None)


@kept_jit
def _scores(predicted, ys, mask):
    """`(predicted, measured, fit % (p,), fit % per experiment (N, p))`, the
    signals zeroed past each experiment's end."""
    inside = mask[..., None]  # (`where`: a diverged run's padded steps are inf)
    predicted = jnp.where(inside, predicted, 0.0)
    measured = jnp.where(inside, ys, 0.0)
    fit = functools.partial(channel_fit_percent, measured, predicted, mask=mask)
    return predicted, measured, fit(axis=(0, 1)), fit(axis=1)


def _check_horizon(call: str, horizon) -> None:
    if horizon is not None and (
        isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1
    ):
        raise ValueError(
            f"{call}(horizon=...): horizon must be a positive int or None, got "
            f"{horizon!r}."
        )


def _check_horizon_length(call: str, horizon: int, s: Signals) -> None:
    """A Kalman prediction's `horizon` must not exceed the longest experiment."""
    T = s.ys.shape[1]
    if horizon > T:
        raise ValueError(
            f"{call}(horizon={horizon}): the horizon is beyond the data (the longest "
            f"experiment has {T} steps); the largest possible is {T}."
        )


def _uses_kalman(model, s: Signals, horizon) -> bool:
    """Whether the prediction runs the model's Kalman predictor: a model with a
    noise model, data with outputs, and a horizon."""
    return (
        horizon is not None
        and isinstance(model, InnovationSystem)
        and not (s.from_states)
    )


def _checked_x0(call: str, model, s: Signals, x0) -> Array | None:
    if x0 is None:
        return None
    N = s.ys.shape[0]
    x0 = jnp.asarray(x0)
    if x0.shape != (N, model.state_size):
        raise ValueError(
            f"{call}(x0=...): x0 must have shape (N, n) = ({N}, {model.state_size}), "
            f"got {tuple(x0.shape)}."
        )
    return x0


def _linear_prediction(
    linear: LinearSystem, s: Signals, x0: Array, horizon: int | None, window: int
) -> Array:
    """Free run from `x0`, or `horizon`-step-ahead prediction (see `compare`)."""
    N, T, p = s.ys.shape
    n = linear.state_size
    C = jnp.eye(n, dtype=linear.K.dtype) if linear.C is None else linear.C
    rows = observability_rows(linear.K, C, T)  # (T, p, n): C K^t
    forced = forced_outputs(linear, s.us, T, N)  # (N, T, p): from x_0 = 0
    free = jnp.einsum("tpn,in->itp", rows, x0) + forced
    if horizon is None or horizon + window - 1 >= T:
        return free
    lead = horizon + window - 1  # steps from a window's start to the predicted step
    # y_t - forced_t = C K^(t - tau) d_tau for every t >= tau, where d_tau is the
    # state at tau minus the forced state: least squares over each window
    # tau .. tau + window - 1 (the normal matrix is the same for every window).
    residual = (s.ys - forced) * s.mask.astype(s.ys.dtype)[..., None]
    starts = T - window + 1
    index = np.arange(starts)[:, None] + np.arange(window)[None, :]
    moment = jnp.einsum("jpn,isjp->isn", rows[:window], residual[:, index])
    gram = jnp.einsum("jpa,jpb->ab", rows[:window], rows[:window])
    d = moment @ jnp.linalg.pinv(gram).T  # (N, starts, n)
    ahead = jnp.einsum("pn,isn->isp", rows[lead], d[:, : T - lead]) + forced[:, lead:]
    return jnp.concatenate([free[:, :lead], ahead], axis=1)


def _state_prediction(model, s: Signals, x0: Array, horizon: int | None) -> Array:
    """Free run, or from each measured state `horizon` steps back (states data)."""
    N, T, n = s.ys.shape
    free = rollout(model, x0, T, inputs=s.us).xs[:, :T]
    if horizon is None or horizon >= T:
        return free
    starts = s.xs[:, : T - horizon + 1]  # x_tau for tau = 0..T-horizon
    inputs = None
    if s.us is not None:
        index = np.arange(T - horizon + 1)[:, None] + np.arange(horizon)[None, :]
        inputs = s.us[:, index]  # (N, T-horizon+1, horizon, m)
    ahead = rollout(model, starts, horizon, inputs=inputs).xs[..., -1, :]
    return jnp.concatenate([free[:, :horizon], ahead[:, : T - horizon]], axis=1)


def _window(call: str, model, window) -> int:
    """The k-step prediction's window `w` (default `2 n`), checked."""
    if window is None:
        window = 2 * model.state_size
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(
            f"{call}(window=...): window must be a positive int or None, got "
            f"{window!r}."
        )
    return window


def _prediction(model, s: Signals, x0: Array, horizon, window) -> Array:
    """The predicted outputs (states, for data without outputs), `(N, T, p)`: free
    run or `horizon`-step-ahead prediction, by the kind of data and model (k-step
    prediction of output data needs a linear model: `compare` checks)."""
    linear = linear_of(model)
    if s.from_states:
        if linear is not None:
            model = LinearSystem(
                linear.K,
                linear.B,
                offset=linear.offset,
                input_level=linear.input_level,
            )
        return _state_prediction(model, s, x0, horizon)
    if linear is not None:
        return _linear_prediction(linear, s, x0, horizon, window)
    return rollout(model, x0, s.ys.shape[1], inputs=s.us).ys


def _comparison(s: Signals, predicted: Array, x0: Array, horizon) -> Comparison:
    """The `Comparison` of the predictions `(N, T, p)` (or padded as
    `in_shared_length(s, "compare")`) with the measurements, both zeroed past each
    experiment's end."""
    T = s.ys.shape[1]
    padded = in_shared_length(s, "compare")
    predicted = padded_steps(predicted, padded.ys.shape[1])
    predicted, measured, fit, fit_per_experiment = _scores(
        predicted, padded.ys, padded.mask
    )
    return Comparison(
        fit_percent=fit,
        fit_percent_per_experiment=fit_per_experiment,
        predicted=first_steps(predicted, T),
        measured=first_steps(measured, T),
        x0=x0,
        names=s.names,
        horizon=horizon,
        lengths=s.lengths,
        dt=s.dt,
    )


@on_one_blas_thread
@checks_own_arguments
def compare(
    model: AbstractSystem,
    data,
    *,
    horizon: int | None = None,
    x0: Float[ArrayLike, "N n"] | None = None,
    window: int | None = None,
    encoder: StateEncoder | None = None,
) -> Comparison:
    """Predict the data with `model` and report the fit % of each output channel, as
    MATLAB's `compare` does.

    **Free run** (`horizon=None`): the model is simulated over each experiment from
    its initial state (`x0`, or `estimate_x0(model, data)`: closed-form least
    squares for linear models; the measured first state for other models when the
    data has states) with the measured inputs.

    **`horizon`-step-ahead prediction** (`horizon=k`): $\\hat y_t$ uses the
    measurements up to step $t-k$ and the inputs up to $t$:

    - data with outputs, linear model: the state at the start of the `window`
      samples $y_{t-k-w+1} \\dots y_{t-k}$ is the one that best explains them
      (least squares, the model's own dynamics and the measured inputs); the model
      then runs from there with the measured inputs to step $t$. The first
      $k + w - 1$ steps of each experiment (no full window yet) are the free run;
      so is everything when $k + w - 1 \\ge T$.
    - data with states only (any model): the model runs $k$ steps from the measured
      state $x_{t-k}$; the first $k$ steps are the free run.

    - data with outputs, a model with a noise model (`InnovationSystem`): its
      Kalman predictor (`predict`), as MATLAB's `compare` for a model with a
      disturbance model; `x0` is then the predictor's initial state, estimated by
      least squares on the predictions by default, and `horizon` at most the
      longest experiment.

    **With an `encoder`** (a neural model's `StateEncoder`, from `fit_neural` or
    `neural_encoder.dynsys`): the encoder reads each experiment's first
    `encoder.past` samples, and the model runs freely from that state on the rest;
    the `Comparison` covers samples `past, past + 1, ...` only (its `lengths` are
    the records' less `past`), as the nonlinear benchmarks score a model. It equals
    `compare(model, data.window(past, None), x0=neural_initial_state(encoder,
    data))` and what `dynsys compare` prints.

    On noise-free data of the model itself all are exact (100 %).

    **Arguments:**

    - `model`: an `AbstractSystem` whose `output_size` equals the data's output
        channels (or whose `state_size` equals its states when it has no outputs)
        and whose `input_size` equals its inputs. k-step prediction on output data
        needs a linear model (a `LinearSystem` or one with `to_linear()`).
    - `data`: a `Dataset` (outputs `ys`, or states `xs` when it has none); only each
        experiment's first `lengths[i]` steps count.
    - `horizon`: `None` (free run) or a positive int `k`.
    - `x0`: the free run's initial states `(N, n)`; default `estimate_x0`.
    - `window`: `w`, the number of outputs the k-step prediction re-estimates each
        state from (data with outputs); default `2 n`. It must be at least the
        model's observability index (`n` always suffices) for the prediction to be
        exact on noise-free data; longer windows average out more noise.
    - `encoder`: a `StateEncoder` that starts the free run (a neural model needs
        one on data without states); not with `x0` or `horizon`.

    **Returns:**

    A `Comparison` with `fit_percent (p,)`, `fit_percent_per_experiment (N, p)`,
    `predicted`, `measured (N, T, p)`, `x0 (N, n)`, `names`, `horizon`, `lengths`,
    `dt`.

    **Raises:**

    `ValueError` (one line) when the model's sizes do not match the data, `x0` has
    the wrong shape, `horizon` or `window` is not a positive int, k-step
    prediction is asked of a nonlinear model on data without states, a neural
    model comes without its `encoder`, or the `encoder` does not read the data's
    channels, gives another state size than the model's or leaves no samples.

    **Example:**

    ```python
    result = dynsys.compare(model, data)              # free run
    result.fit_percent                                # one number per channel
    dynsys.compare(model, data, horizon=5).fit_percent
    dynsys.compare(neural_model, data, encoder=encoder)   # from sample past on
    ```
    """
    call = "compare"
    s = signals(data, call)
    check_model_matches(call, model, s)
    if encoder is not None:
        return _compare_from_encoder(call, model, data, encoder, horizon, x0)
    _check_horizon(call, horizon)
    window = _window(call, model, window)
    if _uses_kalman(model, s, horizon):
        _check_horizon_length(call, horizon, s)
        x0 = _checked_x0(call, model, s, x0)
        predicted, x0 = kalman_prediction(model, s, x0, horizon)
        return _comparison(s, predicted, x0, horizon)
    if x0 is None:
        check_initial_states(call, model, s)
    else:
        x0 = _checked_x0(call, model, s, x0)
    if linear_of(model) is None and horizon is not None and not s.from_states:
        raise ValueError(
            f"{call}(horizon=...): k-step-ahead prediction on output data needs a "
            f"linear model (it re-estimates the state), got "
            f"{type(model).__name__}; use horizon=None or data with states."
        )
    # Padded: a record of another length runs the same program (the run is causal,
    # and the padded steps enter no least squares).
    padded = arrays_only(in_shared_length(s, "compare"))
    predicted, x0 = _free_run_or_ahead(model, padded, x0, horizon, window)
    return _comparison(s, predicted, x0, horizon)


def _compare_from_encoder(call, model, data, encoder, horizon, x0) -> Comparison:
    """`compare`'s free run from the state `encoder` reads off each experiment's
    first `encoder.past` samples, scored on the rest."""
    for name, value in (("horizon", horizon), ("x0", x0)):
        if value is not None:
            raise ValueError(
                f"{call}({name}=...): with an encoder the model runs freely from "
                f"the state the encoder reads; give encoder or {name}, not both."
            )
    x0 = encoded_states(call, encoder, data)
    if x0.shape[-1] != model.state_size:
        raise ValueError(
            f"{call}(encoder=...): the encoder gives states of size {x0.shape[-1]}, "
            f"the model's state_size is {model.state_size}: the encoder of "
            "another model."
        )
    return compare(model, data.window(encoder.past, None), x0=x0)


@kept_jit
def _free_run_or_ahead(model, s: Signals, x0, horizon: int | None, window: int):
    """`(predicted (N, T, p), x0 (N, n))` of `compare` without a Kalman predictor,
    one compiled program per model structure and data shape."""
    if x0 is None:
        x0 = initial_states_of(model, s)
    return _prediction(model, s, x0, horizon, window), x0


@on_one_blas_thread
@checks_own_arguments
def predict(
    model: AbstractSystem,
    data,
    *,
    horizon: int | None = 1,
    x0: Float[ArrayLike, "N n"] | None = None,
    window: int | None = None,
) -> Float[Array, "N T p"]:
    """The `horizon`-step-ahead predictions $\\hat y_{t|t-k}$ of the data's outputs.

    For a model with a noise model (`InnovationSystem`, e.g. from
    `fit_subspace(..., noise_model=True)` or `fit(..., loss=Prediction())`) they are
    its Kalman predictor's: $\\hat x_{t+1} = (K - L C) \\hat x_t + (B - L D) u_t +
    L y_t$ runs on the measurements up to $y_{t-k}$, then the model runs the last
    $k - 1$ steps with the measured inputs (the first $k - 1$ steps of each
    experiment are the free run). For other models they are `compare`'s (the state
    re-estimated from a window of past outputs); `horizon=None` is the free run.

    **Arguments:**

    - `model`, `data`, `window`: as for `compare`.
    - `horizon`: `k`, from 1 to the longest experiment's length (default 1: the
        one-step prediction), or `None` (free run).
    - `x0`: the initial states `(N, n)` (of the predictor, for an
        `InnovationSystem`); default: least squares on the predictions.

    **Returns:**

    The predicted outputs, shape `(N, T, p)`, zero after each experiment's end.

    **Raises:**

    As `compare`; `ValueError` when `horizon` is beyond the data.

    **Example:**

    ```python
    model = dynsys.fit_subspace(data, order=2, noise_model=True)
    y_hat = dynsys.predict(model, data, horizon=5)   # (N, T, p)
    ```
    """
    call = "predict"
    _check_horizon(call, horizon)
    if horizon is not None:
        _check_horizon_length(call, horizon, signals(data, call))
    return compare(model, data, horizon=horizon, x0=x0, window=window).predicted


class Residuals(eqx.Module):
    """Residual analysis of a model on data, from `residual_analysis`.

    **Fields:**

    - `autocorrelation`: shape `(L+1, p)`, the normalised auto-correlation of each
        channel's residual at lags `0..L` (1 at lag 0).
    - `cross_correlation`: shape `(2L+1, p, m)`, the normalised correlation of
        residual `i` at time `t + lag` with input `j` at time `t`, lags `-L..L`;
        `None` for data without inputs.
    - `lags`: `0..L`; `cross_lags`: `-L..L`.
    - `bound`: the 99 % confidence bound $2.58/\\sqrt{N_s}$ ($N_s$ the number of
        valid samples): white residuals independent of the inputs stay within
        $\\pm$`bound` at 99 % of the lags (other than lag 0 of the auto-correlation).
    - `residuals`: shape `(N, T, p)`, measured minus predicted (zero after each
        experiment's end); `num_samples`: $N_s$.
    - `names`, `input_names`: channel names.
    """

    # L1 stands for L+1 and L2 for 2L+1 (a field cannot use a symbolic axis).
    autocorrelation: Float[Array, "L1 p"]
    cross_correlation: Float[Array, "L2 p m"] | None
    lags: Int[Array, " L1"]
    cross_lags: Int[Array, " L2"]
    bound: float = eqx.field(static=True)
    residuals: Float[Array, "N T p"]
    num_samples: int = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    input_names: tuple[str, ...] = eqx.field(static=True)


def _lagged_sums(a: Array, b: Array, max_lag: int, negative: bool) -> Array:
    """`sum_{i,t} a[i, t + lag, :, None] * b[i, t, None, :]` for `lag = 0..max_lag`
    (or `-max_lag..max_lag` when `negative`), zero outside, shape `(lags, p, m)`."""
    T = a.shape[1]
    lags = np.arange(-max_lag if negative else 0, max_lag + 1)
    padded = jnp.pad(a, ((0, 0), (max_lag, max_lag), (0, 0)))
    shifted = padded[:, lags[:, None] + max_lag + np.arange(T)[None, :]]
    return jnp.einsum("iltp,itm->lpm", shifted, b)


@kept_jit
def _correlations(difference, us, mask, max_lag: int):
    """`(residuals (N, T, p), auto-correlation (L+1, p), cross-correlation
    (2L+1, p, m) or None)` of `residual_analysis`, from `(measured, predicted)`."""
    measured, predicted = difference
    e = measured - predicted
    energy = jnp.sum(e**2, axis=(0, 1))  # (p,)
    auto = (
        jnp.einsum("lpp->lp", _lagged_sums(e, e, max_lag, negative=False))
        / energy[None]
    )
    cross = None
    if us is not None:
        u = us * mask.astype(us.dtype)[..., None]
        scale = jnp.sqrt(energy[:, None] * jnp.sum(u**2, axis=(0, 1))[None, :])
        cross = _lagged_sums(e, u, max_lag, negative=True) / scale[None]
    return e, auto, cross


@on_one_blas_thread
@checks_own_arguments
def residual_analysis(
    model: AbstractSystem,
    data,
    *,
    max_lag: int = 25,
    horizon: int | None = None,
    x0: Float[ArrayLike, "N n"] | None = None,
    window: int | None = None,
) -> Residuals:
    """Whiteness and independence tests of the residuals $e_t = y_t - \\hat y_t$.

    The predictions are `compare(model, data, horizon=horizon, x0=x0,
    window=window)`'s: free run by default, but for a model with a noise model (an
    `InnovationSystem`) the Kalman predictor's one-step predictions (`horizon=1`),
    so the residuals are its innovations, white when the model and its noise model
    are right (pass `model.to_linear()` for its free-run residuals). Sums run over
    every experiment's valid steps, pairs never crossing from one experiment to
    another; no mean is removed.
    With $N_s$ the number of valid samples:

    - auto-correlation of channel $i$: $r_i(\\tau) = \\sum_t e_{i,t+\\tau}
      e_{i,t} / \\sum_t e_{i,t}^2$, $\\tau = 0 \\dots L$;
    - cross-correlation with input $j$: $r_{ij}(\\tau) = \\sum_t e_{i,t+\\tau}
      u_{j,t} / \\sqrt{\\sum_t e_{i,t}^2 \\sum_t u_{j,t}^2}$, $\\tau = -L \\dots L$
      (positive lags: the input comes first; correlation there means dynamics from
      $u$ to $y$ the model misses; at negative lags it suggests feedback);
    - `bound` $= 2.58 / \\sqrt{N_s}$: under the hypothesis of white residuals
      independent of the inputs, each value lies within $\\pm$`bound` with
      probability 99 %.

    **Arguments:**

    - `model`, `data`, `horizon`, `x0`, `window`: as for `compare`.
    - `max_lag`: `L`, a positive int smaller than the longest experiment.

    **Returns:**

    A `Residuals` with `autocorrelation (L+1, p)`, `cross_correlation (2L+1, p, m)`
    or `None`, `lags`, `cross_lags`, `bound`, `residuals (N, T, p)`, `num_samples`,
    `names`, `input_names`.

    **Raises:**

    As `compare`; `ValueError` for a bad `max_lag`.

    **Example:**

    ```python
    result = dynsys.residual_analysis(model, data, max_lag=20)
    bool(jnp.all(jnp.abs(result.autocorrelation[1:]) < result.bound))  # white?
    ```
    """
    call = "residual_analysis"
    if horizon is None and isinstance(model, InnovationSystem):
        horizon = 1  # the innovations: white for a right model and noise model
    comparison = compare(model, data, horizon=horizon, x0=x0, window=window)
    T = comparison.measured.shape[1]
    if (
        isinstance(max_lag, bool)
        or not isinstance(max_lag, int)
        or not (0 < max_lag < T)
    ):
        raise ValueError(
            f"{call}(max_lag=...): max_lag must be a positive int below the longest "
            f"experiment's {T} steps, got {max_lag!r}."
        )
    s = signals(data, call)
    padded = in_shared_length(s, "compare")  # (zeros enter no lagged sum)
    length = padded.ys.shape[1]
    difference = tuple(
        padded_steps(a, length) for a in (comparison.measured, comparison.predicted)
    )
    e, auto, cross = _correlations(difference, padded.us, padded.mask, max_lag)
    e = first_steps(e, T)
    num_samples = int(sum(comparison.lengths))
    return Residuals(
        autocorrelation=auto,
        cross_correlation=cross,
        lags=jax.device_put(np.arange(max_lag + 1)),
        cross_lags=jax.device_put(np.arange(-max_lag, max_lag + 1)),
        bound=2.58 / float(np.sqrt(num_samples)),
        residuals=e,
        num_samples=num_samples,
        names=comparison.names,
        input_names=tuple(getattr(data, "input_names", ()) or ()),
    )
