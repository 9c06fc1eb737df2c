"""k-step-ahead prediction of measured outputs by the Kalman predictor of a model
with a noise model (`InnovationSystem`), its initial state estimated."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._systems.innovation import (
    InnovationSystem,
    kalman_predictions,
    prediction_free_response,
)
from .signals import Signals


def predictor_x0(
    model: InnovationSystem, s: Signals, horizon: int
) -> Float[Array, "N n"]:
    """The predictor's initial state $\\hat x_0$ of each experiment that minimises
    the squared `horizon`-step prediction errors over its valid steps (the
    predictions are affine in it; a pseudo-inverse, so a direction they do not see
    gets 0)."""
    N, T, p = s.ys.shape
    n = model.state_size
    weight = s.mask.astype(s.ys.dtype)
    ys = s.ys * weight[..., None]
    us = None if s.us is None else s.us * weight[..., None]
    G = prediction_free_response(model, T, horizon)  # (T, p, n)
    forced = kalman_predictions(model, jnp.zeros((N, n), ys.dtype), ys, us, horizon)
    residual = ((ys - forced) * weight[..., None]).reshape(N, T * p)
    A = (G[None] * weight[:, :, None, None]).reshape(N, T * p, n)
    return jnp.einsum("nij,nj->ni", jnp.linalg.pinv(A), residual)


def kalman_prediction(
    model: InnovationSystem, s: Signals, x0: Array | None, horizon: int
) -> tuple[Float[Array, "N T p"], Float[Array, "N n"]]:
    """`(predictions, x0)`: the `horizon`-step predictions of `model`'s Kalman
    predictor on the data `s` from `x0` (default `predictor_x0`)."""
    arrays = (s.ys, s.us, s.mask)
    return _kalman_prediction(model, arrays, x0, horizon)


@eqx.filter_jit
def _kalman_prediction(model, arrays, x0, horizon: int):
    ys, us, mask = arrays
    s = Signals(ys, us, mask, (), None, False, (), None)
    if x0 is None:
        x0 = predictor_x0(model, s, horizon)
    weight = s.mask.astype(s.ys.dtype)[..., None]
    us = None if s.us is None else s.us * weight
    return kalman_predictions(model, x0, s.ys * weight, us, horizon), x0
