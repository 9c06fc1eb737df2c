"""The initial-state encoder: the state at step `t` from the `past` inputs and
outputs before it, $x_t = E(u_{t-k} \\dots u_{t-1}, y_{t-k} \\dots y_{t-1})$."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._systems.layered import LayeredController
from .._systems.neural_state_space import residual_mlp


class StateEncoder(eqx.Module):
    """An initial-state encoder: an affine map of the normalised past samples plus a
    layered MLP correction (zero until trained).

    $x_t = W z + b + s_x \\odot E(z)$ with $z = (f - \\mu_f) / s_f$ and $f$ the
    flattened past inputs and outputs $[u_{t-k:t}; y_{t-k:t}]$, `k = past`. Build
    one with `StateEncoder.from_states` (the affine part by least squares).

    **Fields:** `weight (n, k (m + p))`, `bias (n,)`, `net` (a `LayeredController`),
    `feature_mean`, `feature_scale (k (m + p),)`, `state_scale (n,)` (not
    trained: their gradient is stopped), `past` (`k`, static).
    """

    weight: Float[Array, "n f"]
    bias: Float[Array, " n"]
    net: LayeredController
    feature_mean: Float[Array, " f"]
    feature_scale: Float[Array, " f"]
    state_scale: Float[Array, " n"]
    past: int = eqx.field(static=True)

    @property
    def state_size(self) -> int:
        return self.bias.shape[0]

    def features(
        self, past_us: Float[Array, "k m"] | None, past_ys: Float[Array, "k p"]
    ) -> Float[Array, " f"]:
        """The normalised flattened past, shape `(k (m + p),)`."""
        parts = [past_ys.reshape(-1)] if past_us is None else [
            past_us.reshape(-1), past_ys.reshape(-1)
        ]  # fmt: skip
        f = jnp.concatenate(parts)
        stop = jax.lax.stop_gradient
        return (f - stop(self.feature_mean)) / stop(self.feature_scale)

    def __call__(
        self, past_us: Float[Array, "k m"] | None, past_ys: Float[Array, "k p"]
    ) -> Float[Array, " n"]:
        """The state after the `k` past samples, shape `(n,)`."""
        z = self.features(past_us, past_ys)
        correction = jax.lax.stop_gradient(self.state_scale) * self.net(0, z)
        return self.weight @ z + self.bias + correction

    @classmethod
    def from_states(
        cls,
        past_us: Float[Array, "W k m"] | None,
        past_ys: Float[Array, "W k p"],
        states: Float[Array, "W n"],
        *,
        width_size: int = 32,
        depth: int = 2,
        ridge: float = 1e-6,
        key: PRNGKeyArray,
    ) -> "StateEncoder":
        """The encoder whose affine part best maps `W` examples of the past to their
        `states` (ridge least squares, relative `ridge`); the MLP part starts at 0.

        **Arguments:**

        - `past_us (W, k, m)` or `None`, `past_ys (W, k, p)`: the past samples of
            `W` windows; `states (W, n)`: the state at each window's end (e.g. from
            a linear model's simulation).
        - `width_size`, `depth`: the MLP's width and number of layers.
        - `ridge`: Tikhonov weight relative to the mean squared feature (1).
        - `key`: a `jax.random` key.
        """
        W, k, _ = past_ys.shape
        parts = [past_ys.reshape(W, -1)]
        if past_us is not None:
            parts.insert(0, past_us.reshape(W, -1))
        f = np.concatenate([np.asarray(a, np.float64) for a in parts], axis=1)
        mean, scale = f.mean(axis=0), f.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        z = np.concatenate([(f - mean) / scale, np.ones((W, 1))], axis=1)
        x = np.asarray(states, np.float64)
        # Past outputs are affine in the past inputs and one state: the features
        # are collinear, so a minimum-norm least-squares solution (with the ridge
        # rows appended), not the normal equations.
        rows = np.sqrt(ridge * W) * np.eye(z.shape[1])
        solution = np.linalg.lstsq(
            np.concatenate([z, rows]),
            np.concatenate([x, np.zeros((z.shape[1], x.shape[1]))]),
            rcond=None,
        )[0]  # (f + 1, n)
        dtype = jnp.asarray(states).dtype
        state_scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
        n = x.shape[1]
        return cls(
            weight=jnp.asarray(solution[:-1].T, dtype),
            bias=jnp.asarray(solution[-1], dtype),
            net=residual_mlp(f.shape[1], n, width_size, depth, dtype=dtype, key=key),
            feature_mean=jnp.asarray(mean, dtype),
            feature_scale=jnp.asarray(scale, dtype),
            state_scale=jnp.asarray(state_scale, dtype),
            past=k,
        )
