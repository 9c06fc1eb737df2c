"""The operating point of input-output data: the means that identification removes
and the identified model keeps (`input_level`, `output_level`)."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .signals import Signals


def data_levels(s: Signals) -> tuple[Float[Array, " m"] | None, Float[Array, " p"]]:
    """The mean input and output over every experiment's valid steps: `(ū (m,) or
    None without inputs, ȳ (p,))`."""
    weight = s.mask.astype(s.ys.dtype)[..., None]
    count = jnp.sum(weight)
    y_bar = jnp.sum(s.ys * weight, axis=(0, 1)) / count
    u_bar = None
    if s.us is not None:
        u_bar = jnp.sum(jnp.asarray(s.us) * weight, axis=(0, 1)) / count
    return u_bar, y_bar


def deviations(s: Signals, u_bar, y_bar) -> Signals:
    """`s` with the levels subtracted (zero past each experiment's end)."""
    weight = s.mask.astype(s.ys.dtype)[..., None]
    ys = (s.ys - y_bar[None, None]) * weight
    us = None if s.us is None else (jnp.asarray(s.us) - u_bar[None, None]) * weight
    return s._replace(ys=ys, us=us)
