"""Continuing a finished optimisation: a longer run of the same problem picks up
where a shorter one ended, with the steps, histories and result that one run of
the longer length gives.

A structure scan refines each candidate by 30 Levenberg–Marquardt steps, and the
fit of the chosen structure then starts from the same subspace estimate: its
first 30 steps were the scan's, to the digit (on five of the six shared real
records). Continued, they are not run twice.
"""

import dataclasses
from typing import Any

import equinox as eqx
import jax
import numpy as np


class NotResumable(ValueError):
    """`optimise(..., resume=...)` given a run of another problem (or one that ran
    more steps than asked): the caller runs afresh, or says so."""


@dataclasses.dataclass(frozen=True)
class Continuation:
    """A finished run of `optimise` that a longer one continues.

    - `problem`: what the steps depend on (the objective, strategy, initial
        trainable parameters, the rest of the model, the data and its placement,
        the evaluator and the loop's settings), compared whole with the longer
        run's (`same`).
    - `loop`: the loop's state as the run ended; `resumed` copies it.
    """

    problem: tuple
    loop: Any

    def resumed(self, bar) -> Any:
        """A copy of the ended loop, with its own histories and progress `bar`."""
        return dataclasses.replace(
            self.loop,
            bar=bar,
            losses=list(self.loop.losses),
            val_losses=list(self.loop.val_losses),
            full_losses=list(self.loop.full_losses),
        )


def _addressable(array) -> bool:
    """Whether this process holds all of `array` (not so for a global array of a
    run of several processes, which cannot be read whole on the host)."""
    return getattr(array, "is_fully_addressable", True)


def _same_leaf(a, b) -> bool:
    if eqx.is_array(a) or isinstance(a, np.ndarray):
        if not (eqx.is_array(b) or isinstance(b, np.ndarray)):
            return False
        if not (_addressable(a) and _addressable(b)):
            return a is b  # not compared: the same only if it is the same array
        a, b = np.asarray(a), np.asarray(b)  # on the host: nothing compiled
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # no plain equality: only itself
        return a is b


def same(a, b) -> bool:
    """Whether two pytrees are equal: the same structure (node types and static
    fields) and equal leaves, arrays compared value by value on the host."""
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    try:
        if tree_a != tree_b:
            return False
    except (TypeError, ValueError):  # a static field without plain equality
        return False
    return all(_same_leaf(x, y) for x, y in zip(leaves_a, leaves_b))
