"""`fit_padded`: an output-error fit in a padded model (`padded.py`), so that the
fits of a structure scan's candidates and the final fit share one compiled
program."""

import dataclasses

import jax
import numpy as np

from .._systems.system import AbstractSystem, LinearSystem
from .fit import fit
from .padded import frozen_padding, NotPaddable, pad, unpad


def fit_padded(start: AbstractSystem, data, size: int, feedthrough: bool, **options):
    """`fit(start, data, **options)` (output data, the default optimiser) in a model
    padded to order `size` (with a feedthrough when `feedthrough`), so that fits of
    every structure up to that size share one compiled program. Returns `fit`'s
    `FitResult` with the model, initial states and covariance of `start`'s
    structure. The unpadded fit where padding does not apply: a `callback` or
    `filter_spec` given, `start` not a `LinearSystem` with outputs, larger than
    the size (or with a `D` the size has not), or an optimiser other than
    Levenberg–Marquardt (`NotPaddable`). A `start` of the size itself is fitted
    with its mask too (all free), in the program the smaller ones use."""
    # A callback or filter_spec would see, or have to describe, the padded model.
    unpadded = any(options.get(k) is not None for k in ("callback", "filter_spec"))
    if unpadded or type(start) is not LinearSystem or start.C is None:
        return fit(start, data, **options)
    order, has_d = start.state_size, start.D is not None
    if order > size or (has_d and not feedthrough):
        return fit(start, data, **options)
    padded, mask = pad(start, size, feedthrough)
    try:
        with frozen_padding(mask):
            result = fit(padded, data, **options)
    except NotPaddable:
        return fit(start, data, **options)
    model = unpad(result.model, order, has_d)
    x0s = None if result.x0s is None else _leading_states(result.x0s, order)
    uncertainty = None
    if result.uncertainty is not None:
        uncertainty = result.uncertainty.at((model, None))
    return dataclasses.replace(result, model=model, x0s=x0s, uncertainty=uncertainty)


def _leading_states(x0s, order: int):
    """`x0s[..., :order]`, cut on the host where this process holds the whole array
    (an eager slice compiles a program per shape), in its placement."""
    if not x0s.is_fully_addressable:
        return x0s[..., :order]
    return jax.device_put(np.asarray(x0s)[..., :order], x0s.sharding)
