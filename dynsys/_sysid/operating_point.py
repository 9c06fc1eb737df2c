"""The operating point of input-output data: the means that identification removes
and the identified model keeps (`input_level`, `output_level`).

Computed on the host (identification runs outside `jit`): as JAX operations, each
of the few sums and products compiled a program of its own per data shape."""

import jax
import numpy as np
from jaxtyping import Array, Float

from .signals import Signals


def _weights(s: Signals) -> np.ndarray:
    """`(N, T, 1)`: 1 at each experiment's valid steps, 0 past its end."""
    return np.asarray(s.mask).astype(np.asarray(s.ys).dtype)[..., None]


def data_levels(s: Signals) -> tuple[Float[Array, " m"] | None, Float[Array, " p"]]:
    """The mean input and output over every experiment's valid steps: `(ū (m,) or
    None without inputs, ȳ (p,))`."""
    weight = _weights(s)
    count = np.sum(weight)
    y_bar = np.sum(np.asarray(s.ys) * weight, axis=(0, 1)) / count
    u_bar = None
    if s.us is not None:
        u_bar = np.sum(np.asarray(s.us) * weight, axis=(0, 1)) / count
        u_bar = jax.device_put(u_bar)
    return u_bar, jax.device_put(y_bar)


def deviations(s: Signals, u_bar, y_bar) -> Signals:
    """`s` with the levels subtracted (zero past each experiment's end)."""
    weight = _weights(s)
    ys = (np.asarray(s.ys) - np.asarray(y_bar)[None, None]) * weight
    us = None
    if s.us is not None:
        us = (np.asarray(s.us) - np.asarray(u_bar)[None, None]) * weight
        us = jax.device_put(us)
    return s._replace(ys=jax.device_put(ys), us=us)
