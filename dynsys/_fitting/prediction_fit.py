"""`fit`'s parts for prediction-error fitting: the checks of the `Prediction` loss
and its `horizon` and of a stable Kalman predictor, the warning on output error of
unstable models, and the fitted predictor's outputs and innovation covariance."""

import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._compile.jit import top_level_jit
from .._systems.innovation import InnovationSystem
from .losses import (
    FitObjective,
    is_linear,
    masked_signals,
    materialise,
    PredictionError,
)


def predictor_radius(model: InnovationSystem) -> float:
    """The spectral radius of the Kalman predictor's transition matrix $K - L C$
    (`nan` when it is not finite)."""
    A = np.asarray(model.K - model.kalman_gain @ model.C, dtype=np.float64)
    if not np.all(np.isfinite(A)):
        return float("nan")
    return float(np.max(np.abs(np.linalg.eigvals(A))))


def prediction_loss(model, data, loss):
    """`loss` (`FitObjective.kind`) checked where it is a `PredictionError`
    (`Prediction(horizon)`): output data, an `InnovationSystem` with a finite,
    stable predictor, `horizon <= T`."""
    if not isinstance(loss, PredictionError):
        return loss
    horizon = loss.horizon
    if getattr(data, "ys", None) is None:
        raise ValueError(
            f"fit(loss=Prediction(horizon={horizon})): the prediction-error loss "
            "compares predicted with measured outputs, but the data have no "
            "outputs (ys)."
        )
    if not isinstance(model, InnovationSystem):
        raise ValueError(
            f"fit(loss=Prediction(horizon={horizon})): expected an InnovationSystem "
            f"(a model with a Kalman gain), got {type(model).__name__}; start from "
            "fit_subspace(data, noise_model=True) or InnovationSystem.from_linear."
        )
    if horizon > data.num_steps:
        raise ValueError(
            f"fit(loss=Prediction(horizon={horizon})): the horizon is longer than "
            f"the data ({data.num_steps} steps); the largest possible is "
            f"{data.num_steps}."
        )
    radius = predictor_radius(model)
    if not radius < 1.0:
        raise ValueError(
            "fit(model=...): the model's Kalman predictor K - L C must be stable "
            f"(spectral radius < 1), got {radius:.4g}; start from "
            "fit_subspace(data, noise_model=True)."
        )
    return loss


_MARGINAL = 0.999  # a spectral radius this close to 1 counts as marginal


def _radius(model) -> float:
    K = np.asarray(materialise(model).K, dtype=np.float64)
    if not np.all(np.isfinite(K)):
        return float("nan")
    return float(np.max(np.abs(np.linalg.eigvals(K))))


def warn_after_fit(start, model, loss, outputs: bool) -> None:
    """Warn when a fitted model is not to be trusted for its loss: a prediction-error
    fit whose predictor became unstable, or an output-error fit (free-run
    simulation) of a model that is unstable or marginal, which free-run simulation
    cannot fit reliably (the start's or the result's spectral radius at least
    0.999)."""
    if isinstance(loss, PredictionError):
        radius = predictor_radius(model)
        if not radius < 1.0:
            warnings.warn(
                f"fit: the fitted Kalman predictor is unstable (spectral radius of "
                f"K - L C: {radius:.4g}); its predictions diverge.",
                stacklevel=3,
            )
        return
    if loss != "simulation" or not outputs or not is_linear(model):
        return
    radii = {"the start": _radius(start), "the fitted model": _radius(model)}
    if np.nanmax(list(radii.values())) >= _MARGINAL:
        named = ", ".join(f"{k} {r:.4g}" for k, r in radii.items() if np.isfinite(r))
        warnings.warn(
            f"fit: the model is unstable or marginal (spectral radius of K: "
            f"{named}), which an output-error (free-run) fit cannot identify "
            "reliably; fit the Kalman predictor instead: "
            "fit(fit_subspace(data, noise_model=True), data, loss=Prediction()).",
            stacklevel=3,
        )


@top_level_jit
def kalman_outputs(objective: FitObjective, model, batch):
    """The Kalman predictor's `horizon`-step predictions `(N, T, p)` (initial state
    estimated)."""
    ys, us, mask = masked_signals(batch)
    return objective._prediction_closed_form(model, ys, us, mask)[0]


def with_innovation_covariance(objective: FitObjective, model, batch):
    """`model` with `innovation_covariance` the sample covariance of its one-step
    prediction errors (its innovations) over the valid steps."""
    errors = batch["ys"] - kalman_outputs(objective, model, batch)
    valid = batch["mask"][..., None]
    errors = jnp.where(valid, errors, 0.0).reshape(-1, errors.shape[-1])
    count = jnp.maximum(jnp.sum(batch["mask"]), 1)
    covariance = errors.T @ errors / count
    return eqx.tree_at(
        lambda m: m.innovation_covariance,
        model,
        covariance.astype(model.K.dtype),
        is_leaf=lambda leaf: leaf is None,
    )
