"""Adjoints: how the reverse pass through a rollout is computed."""

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax


class AbstractAdjoint(eqx.Module):
    """How gradients flow back through a rollout's scan.

    An adjoint provides `scan(body, init, xs)` with the semantics of `jax.lax.scan`;
    it decides what the forward pass stores and what the reverse pass recomputes.
    """

    @abc.abstractmethod
    def scan(
        self, body: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any
    ) -> tuple[Any, Any]:
        """Run `body` over the leading axis of `xs`, like `jax.lax.scan`."""


class Autodiff(AbstractAdjoint):
    """Plain reverse-mode autodiff through `jax.lax.scan`.

    The forward pass stores every intermediate of every step; the reverse pass reads
    them back. Fastest for short horizons and small states.
    """

    def scan(self, body, init, xs):
        return jax.lax.scan(body, init, xs)
