"""Adjoints: how the reverse pass through a rollout is computed."""

import abc
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .._systems.controller import AbstractController, LinearFeedback
from .._systems.system import AbstractSystem, LinearSystem
from .._type_checks import checks_own_arguments


def is_linear_case(
    system: AbstractSystem, controller: AbstractController | None
) -> bool:
    """Whether the (closed-loop) rollout is an affine recurrence in the state.

    True for a `LinearSystem` driven by open-loop inputs and/or a `LinearFeedback`.
    """
    return isinstance(system, LinearSystem) and (
        controller is None or isinstance(controller, LinearFeedback)
    )


def linear_case_problem(
    who: str, system: AbstractSystem, controller: AbstractController | None
) -> str | None:
    """Why `who` cannot handle this case (a sentence), or `None` if it can."""
    if not isinstance(system, LinearSystem):
        return (
            f"{who} needs a LinearSystem (an affine recurrence x_{{t+1}} = K x_t + "
            f"B u_t + offset), got {type(system).__name__}; use Sequential() with "
            "Autodiff() or Checkpointed()."
        )
    if controller is not None and not isinstance(controller, LinearFeedback):
        return (
            f"{who} needs open-loop inputs or a LinearFeedback controller (so that "
            f"the closed loop stays linear), got {type(controller).__name__}; use "
            "Sequential() with Autodiff() or Checkpointed()."
        )
    return None


def _scan_length(xs: Any) -> int:
    leaves = jax.tree.leaves(xs)
    if not leaves:
        raise ValueError("scan: xs has no arrays, so the number of steps is unknown.")
    return leaves[0].shape[0]


class AbstractAdjoint(eqx.Module):
    """How gradients flow back through a rollout.

    An adjoint provides `scan(body, init, xs)` with the semantics of `jax.lax.scan`;
    it decides what the forward pass stores and what the reverse pass recomputes.
    `check` rejects the cases it cannot handle with a `ValueError`.
    """

    @abc.abstractmethod
    def scan(
        self, body: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any
    ) -> tuple[Any, Any]:
        """Run `body` over the leading axis of `xs`, like `jax.lax.scan`."""

    def check(
        self,
        system: AbstractSystem,
        controller: AbstractController | None,
        has_inputs: bool,
    ) -> None:
        """Raise `ValueError` if this adjoint cannot differentiate this case."""
        del system, controller, has_inputs


class Autodiff(AbstractAdjoint):
    """Plain reverse-mode autodiff through `jax.lax.scan`.

    The forward pass stores every intermediate of every step; the reverse pass reads
    them back. Fastest for short horizons and small states; memory grows with
    `num_steps` times the size of one step's intermediates.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    traj = dynsys.rollout(system, jnp.ones(2), 20, adjoint=dynsys.Autodiff())
    ```
    """

    def scan(self, body, init, xs):
        return jax.lax.scan(body, init, xs)


@checks_own_arguments  # (__check_init__)
class Checkpointed(AbstractAdjoint):
    """Recompute instead of store: memory $O(\\sqrt{T})$ steps instead of $O(T)$.

    The horizon is cut into segments of `segment_length` steps (a scan of scans).
    The forward pass stores only the state at the start of each segment; the
    reverse pass recomputes one segment at a time (`jax.checkpoint`) and
    differentiates it. This bounds the memory of long horizons and of neural
    controllers, whose per-step intermediates (hidden activations) are many times
    the size of the state, at the price of one extra forward pass. Gradients are
    the same as `Autodiff()`'s (to rounding).

    **Arguments:**

    - `segment_length`: steps per recomputed segment; `None` (default) uses
        $\\lceil\\sqrt{T}\\rceil$, which minimises stored states plus one segment's
        intermediates.

    **Raises:**

    `ValueError` if `segment_length` is not a positive integer.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.1], [0.0, 0.8]]))
    loss = lambda K: jnp.sum(dynsys.rollout(
        dynsys.LinearSystem(K), jnp.ones(2), 100,
        method=dynsys.Sequential(), adjoint=dynsys.Checkpointed()).xs ** 2)
    dK = jax.grad(loss)(system.K)
    ```
    """

    segment_length: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        s = self.segment_length
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 1):
            raise ValueError(
                "Checkpointed(segment_length=...): segment_length must be a positive "
                f"integer or None, got {s!r}."
            )

    def scan(self, body, init, xs):
        num_steps = _scan_length(xs)
        size = self.segment_length
        if size is None:
            size = max(1, math.isqrt(max(num_steps - 1, 0)) + 1)
        size = min(size, max(num_steps, 1))

        @jax.checkpoint
        def segment(carry, xs_segment):
            return jax.lax.scan(body, carry, xs_segment)

        num_segments, rest = divmod(num_steps, size)
        main = num_segments * size
        carry = init
        pieces = []
        if num_segments:
            xs_main = jax.tree.map(
                lambda a: a[:main].reshape((num_segments, size) + a.shape[1:]), xs
            )
            carry, ys_main = jax.lax.scan(segment, carry, xs_main)
            pieces.append(
                jax.tree.map(lambda a: a.reshape((main,) + a.shape[2:]), ys_main)
            )
        if rest or not num_segments:
            carry, ys_rest = segment(carry, jax.tree.map(lambda a: a[main:], xs))
            pieces.append(ys_rest)
        if len(pieces) == 1:
            return carry, pieces[0]
        ys = jax.tree.map(lambda *a: jnp.concatenate(a, axis=0), *pieces)
        return carry, ys


class LinearAdjoint(AbstractAdjoint):
    """A hand-written reverse pass for linear systems.

    For $x_{t+1} = K x_t + B u_t + \\mathrm{offset}$ with open-loop inputs and/or
    linear feedback $u_t = w_t - G x_t$, the forward pass stores only the trajectory.
    The reverse pass solves the adjoint recurrence
    $\\lambda_t = g_t + (K - BG)^\\top \\lambda_{t+1}$ (with the same method as the
    forward pass: `Sequential`, `Parallel` or `Chunked`), returns
    $\\partial L / \\partial x_0 = \\lambda_0$ exactly, and forms every parameter
    gradient as one matrix product over all trajectories and steps at the end:
    $\\partial L / \\partial K = \\sum_t \\lambda_{t+1} x_t^\\top = \\Lambda^\\top X$
    (likewise `B`, `offset`, the inputs and the feedback gain; `C` and `D` through
    the outputs). Gradients equal `Autodiff()`'s.

    **Raises:**

    `ValueError` (at `rollout`) if the system is not a `LinearSystem` or the
    controller is not a `LinearFeedback`.

    **Example:**

    ```python
    K = jnp.array([[0.9, 0.1], [0.0, 0.8]])
    loss = lambda K: jnp.sum(dynsys.rollout(
        dynsys.LinearSystem(K), jnp.ones((4, 2)), 50,
        adjoint=dynsys.LinearAdjoint()).xs ** 2)
    dK = jax.grad(loss)(K)
    ```
    """

    def scan(self, body, init, xs):
        # Used only where nothing is differentiated through the scan itself.
        return jax.lax.scan(body, init, xs)

    def check(self, system, controller, has_inputs):
        del has_inputs
        problem = linear_case_problem("LinearAdjoint()", system, controller)
        if problem is not None:
            raise ValueError(f"rollout(adjoint=LinearAdjoint()): {problem}")
