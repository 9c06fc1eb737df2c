"""Layered controllers: every layer sees the context $(t, x, r)$ besides its input.

Two forms with one interface: `LayeredController` (a tuple of possibly different
layers, unrolled) and `StackedController` (identical hidden layers whose parameters
are stacked along a leading axis and scanned over, so compile time does not depend
on depth).
"""

import abc
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, Real

from .._custom_types import State, Time
from .._type_checks import checks_own_arguments
from .controller import (
    AbstractController,
    as_bound,
    check_state,
    saturate,
    time_feature,
)


def _positive_int(value, name: str, where: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(
            f"{where}({name}=...): expected an integer >= {low}, got {value!r}."
        )
    return value


class AbstractContextLayer(eqx.Module):
    """One layer of a layered controller: `h_next = layer(h, context)`.

    `h` is the previous layer's output (shape `(in_size,)`; empty, `(0,)`, for the
    first layer) and `context` is $[x; t; r]$ (shape `(context_size,)`). Subclass it
    for your own layers (e.g. residual ones) and use them in `LayeredController`.
    """

    in_size: eqx.AbstractVar[int]
    out_size: eqx.AbstractVar[int]
    context_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def __call__(
        self, h: Float[Array, " in_size"], context: Float[Array, " c"]
    ) -> Float[Array, " out_size"]:
        """The layer's output, shape `(out_size,)`."""


class ContextLayer(AbstractContextLayer):
    """An affine layer fed the previous output and the context:
    $h' = \\sigma(W h + V c + b)$.

    **Arguments:**

    - `in_size`: the size of the previous layer's output `h` (`0` for a first layer).
    - `out_size`: the size of `h'`.
    - `context_size`: the size of the context `c` = $[x; t; r]$.
    - `activation`: $\\sigma$ (default `jax.nn.tanh`; `None` for the identity).
    - `dtype`: parameter dtype (default: JAX's default float).
    - `key`: a `jax.random` key. $W$, $V$, $b$ are drawn uniformly from
        $\\pm 1/\\sqrt{\\text{in\\_size} + \\text{context\\_size}}$, as `eqx.nn.Linear`
        does for the concatenated input.

    **Example:**

    ```python
    layer = dynsys.ContextLayer(0, 8, context_size=3, key=jax.random.key(0))
    h = layer(jnp.zeros(0), jnp.array([0.1, 0.0, 0.0]))  # shape (8,)
    ```
    """

    weight: Float[Array, "out_size in_size"]
    context_weight: Float[Array, "out_size c"]
    bias: Float[Array, " out_size"]
    activation: Callable[[Array], Array] | None = eqx.field(static=True)
    in_size: int = eqx.field(static=True)
    out_size: int = eqx.field(static=True)
    context_size: int = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        in_size: int,
        out_size: int,
        context_size: int,
        *,
        activation: Callable[[Array], Array] | None = jax.nn.tanh,
        dtype=None,
        key: PRNGKeyArray,
    ):
        _positive_int(in_size, "in_size", "ContextLayer", low=0)
        _positive_int(out_size, "out_size", "ContextLayer")
        _positive_int(context_size, "context_size", "ContextLayer", low=0)
        if in_size + context_size == 0:
            raise ValueError(
                "ContextLayer(in_size=..., context_size=...): the layer needs an "
                "input, got in_size=0 and context_size=0."
            )
        dtype = jnp.result_type(float) if dtype is None else dtype
        limit = 1.0 / (in_size + context_size) ** 0.5
        kw, kv, kb = jax.random.split(key, 3)

        def uniform(k, shape):
            return jax.random.uniform(k, shape, dtype, -limit, limit)

        self.weight = uniform(kw, (out_size, in_size))
        self.context_weight = uniform(kv, (out_size, context_size))
        self.bias = uniform(kb, (out_size,))
        self.activation = activation
        self.in_size, self.out_size = in_size, out_size
        self.context_size = context_size

    def __call__(
        self, h: Float[Array, " in_size"], context: Float[Array, " c"]
    ) -> Float[Array, " out_size"]:
        z = self.weight @ h + self.context_weight @ context + self.bias
        return z if self.activation is None else self.activation(z)


class AbstractLayeredController(AbstractController):
    """A controller $u = \\mathrm{sat}(f_L(\\dots f_2(f_1(\\varnothing, c), c) \\dots,
    c))$ whose every layer receives the context $c = [x; t; r]$.

    The context is the state `x`, the time `t` (if `use_time`) and the reference `r`
    (if one is held). The reference is a fixed array: it is not trained (its
    gradient is stopped); replace it with `eqx.tree_at(lambda c: c.reference,
    controller, new_reference)`. The optional `bound` saturates the output,
    $u = b \\odot \\tanh(z / b)$.
    """

    state_size: eqx.AbstractVar[int]
    input_size: eqx.AbstractVar[int]
    use_time: eqx.AbstractVar[bool]
    reference: eqx.AbstractVar[Float[Array, " r"] | None]
    bound: eqx.AbstractVar[tuple[float, ...] | None]

    @property
    def context_size(self) -> int:
        """`n + use_time + r`: the size of the context fed to every layer."""
        r = 0 if self.reference is None else self.reference.shape[0]
        return self.state_size + int(self.use_time) + r

    @abc.abstractmethod
    def apply(self, context: Float[Array, " c"]) -> Float[Array, " m"]:
        """Run the layers on the context; the unsaturated output, shape `(m,)`."""

    @abc.abstractmethod
    def _dtype(self):
        """The parameter dtype."""

    def context(self, t: Time, x: State) -> Float[Array, " c"]:
        """The context $[x; t; r]$ every layer receives."""
        dtype = self._dtype()
        parts = [x.astype(dtype)]
        if self.use_time:
            parts.append(time_feature(t, dtype))
        if self.reference is not None:
            parts.append(jax.lax.stop_gradient(self.reference).astype(dtype))
        return jnp.concatenate(parts)

    def __call__(self, t: Time, x: State) -> Float[Array, " m"]:
        check_state(x, self.state_size, type(self).__name__)
        return saturate(self.apply(self.context(t, x)), self.bound)


def _check_reference(reference, where: str) -> Array | None:
    if reference is None:
        return None
    reference = jnp.asarray(reference)
    if not jnp.issubdtype(reference.dtype, jnp.inexact):
        reference = reference.astype(jnp.result_type(float))
    if reference.ndim != 1:
        raise ValueError(
            f"{where}(reference=...): reference must have shape (r,), got "
            f"{tuple(reference.shape)}."
        )
    return reference


def _context_size(state_size, use_time, reference) -> int:
    r = 0 if reference is None else reference.shape[0]
    return state_size + int(use_time) + r


class LayeredController(AbstractLayeredController):
    """A layered controller from a tuple of layers, possibly all different.

    The layers run in order, unrolled: layer 1 gets an empty `h`, layer `k` gets
    layer `k-1`'s output, and every layer also gets the context $[x; t; r]$.
    The last layer's output (size `m`) is the input, saturated if `bound` is given.

    **Arguments:**

    - `layers`: a sequence of `AbstractContextLayer`s (e.g. `ContextLayer`s), with
        `layers[0].in_size == 0`, `layers[k].in_size == layers[k-1].out_size`, and
        each `context_size` equal to that of the context.
    - `state_size`: the state size `n`.
    - `use_time`: feed `t` in the context (default `True`).
    - `reference`: optional fixed reference `r`, shape `(r,)`, fed in the context.
    - `bound`: optional actuator limit, a positive scalar or shape `(m,)`.

    Build one from a key with `LayeredController.mlp(...)`.

    **Raises:**

    `ValueError` naming the layer whose sizes do not chain.

    **Example:**

    ```python
    keys = jax.random.split(jax.random.key(0), 2)
    layers = (dynsys.ContextLayer(0, 8, 3, key=keys[0]),
              dynsys.ContextLayer(8, 1, 3, activation=None, key=keys[1]))
    controller = dynsys.LayeredController(layers, state_size=2)  # context [x; t]
    u = controller(0.0, jnp.array([0.1, 0.0]))  # shape (1,)
    ```
    """

    layers: tuple[AbstractContextLayer, ...]
    reference: Float[Array, " r"] | None
    state_size: int = eqx.field(static=True)
    input_size: int = eqx.field(static=True)
    use_time: bool = eqx.field(static=True)
    bound: tuple[float, ...] | None = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        layers: Sequence[AbstractContextLayer],
        *,
        state_size: int,
        use_time: bool = True,
        reference: Real[ArrayLike, " r"] | None = None,
        bound: Real[ArrayLike, "..."] | None = None,
    ):
        where = "LayeredController"
        layers = tuple(layers)
        if not layers or not all(
            isinstance(layer, AbstractContextLayer) for layer in layers
        ):
            raise ValueError(
                f"{where}(layers=...): expected a non-empty sequence of "
                f"AbstractContextLayer, got {[type(la).__name__ for la in layers]}."
            )
        self.layers = layers
        self.state_size = _positive_int(state_size, "state_size", where)
        self.use_time = bool(use_time)
        self.reference = _check_reference(reference, where)
        self.input_size = layers[-1].out_size
        self.bound = as_bound(bound, self.input_size, where)
        _check_chain(layers, self.context_size, where)

    @classmethod
    @checks_own_arguments
    def mlp(
        cls,
        state_size: int,
        input_size: int,
        width_size: int,
        depth: int,
        *,
        use_time: bool = True,
        reference: Real[ArrayLike, " r"] | None = None,
        bound: Real[ArrayLike, "..."] | None = None,
        activation: Callable[[Array], Array] = jax.nn.tanh,
        dtype=None,
        key: PRNGKeyArray,
    ) -> "LayeredController":
        """`depth` `ContextLayer`s: `0 -> width`, `width -> width` (`depth - 2`
        times), `width -> m`; `activation` on all but the last (affine) one.

        `key` is split into `depth` keys, one per layer in order (the same keys
        as `StackedController.mlp`, so both build the same weights).
        """
        where = "LayeredController.mlp"
        layers = _mlp_layers(
            state_size, input_size, width_size, depth, use_time, reference,
            activation, dtype, key, where,
        )  # fmt: skip
        return cls(
            layers,
            state_size=state_size,
            use_time=use_time,
            reference=reference,
            bound=bound,
        )

    @property
    def depth(self) -> int:
        """The number of layers."""
        return len(self.layers)

    def _dtype(self):
        arrays = [a for a in jax.tree.leaves(self.layers) if eqx.is_inexact_array(a)]
        return arrays[0].dtype if arrays else jnp.result_type(float)

    def apply(self, context: Float[Array, " c"]) -> Float[Array, " m"]:
        h = jnp.zeros((0,), context.dtype)
        for layer in self.layers:
            h = layer(h, context)
        return h


def _check_chain(layers, context_size: int, where: str) -> None:
    previous = 0
    for k, layer in enumerate(layers):
        if layer.in_size != previous:
            expected = "0 (the first layer gets no h)" if k == 0 else str(previous)
            raise ValueError(
                f"{where}(layers=...): layers[{k}].in_size must be {expected}, got "
                f"{layer.in_size}."
            )
        if layer.context_size != context_size:
            raise ValueError(
                f"{where}(layers=...): layers[{k}].context_size must be the context "
                f"size n + use_time + r = {context_size}, got {layer.context_size}."
            )
        previous = layer.out_size


def _mlp_layers(
    state_size, input_size, width_size, depth, use_time, reference, activation,
    dtype, key, where,
) -> list[ContextLayer]:  # fmt: skip
    _positive_int(state_size, "state_size", where)
    _positive_int(input_size, "input_size", where)
    _positive_int(width_size, "width_size", where)
    _positive_int(depth, "depth", where, low=2)
    c = _context_size(state_size, use_time, _check_reference(reference, where))
    keys = jax.random.split(key, depth)
    sizes = [0] + [width_size] * (depth - 1) + [input_size]
    return [
        ContextLayer(
            sizes[k],
            sizes[k + 1],
            c,
            activation=activation if k < depth - 1 else None,
            dtype=dtype,
            key=keys[k],
        )
        for k in range(depth)
    ]


def _stack(layers: Sequence[eqx.Module]) -> eqx.Module:
    arrays = [eqx.filter(layer, eqx.is_array) for layer in layers]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)
    return eqx.combine(stacked, eqx.filter(layers[0], eqx.is_array, inverse=True))


class StackedController(AbstractLayeredController):
    """A layered controller whose hidden layers are identical and scanned over.

    Same function as a `LayeredController` with layers `(first, *hidden, last)`,
    where the `depth - 2` hidden layers have the same structure: their parameters
    are stacked along a leading axis (`stack`) and applied by one `jax.lax.scan`, so
    compile time does not depend on the depth. Every layer gets the context
    $[x; t; r]$ as in `LayeredController`.

    **Arguments:**

    - `first`: the first layer (`in_size == 0`), an `AbstractContextLayer`.
    - `stack`: one layer whose every array has a leading axis of size `depth - 2`
        (`in_size == out_size == first.out_size`); may be of size 0.
    - `last`: the last layer (`in_size == first.out_size`, `out_size == m`).
    - `state_size`, `use_time`, `reference`, `bound`: as for `LayeredController`.

    Build one from a key with `StackedController.mlp(...)`, or from a
    `LayeredController` with `StackedController.from_layered(...)`;
    `to_layered()` goes back.

    **Example:**

    ```python
    controller = dynsys.StackedController.mlp(2, 1, width_size=8, depth=16,
                                              bound=2.0, key=jax.random.key(0))
    u = controller(0.0, jnp.array([0.1, 0.0]))  # shape (1,)
    ```
    """

    first: AbstractContextLayer
    stack: AbstractContextLayer
    last: AbstractContextLayer
    reference: Float[Array, " r"] | None
    state_size: int = eqx.field(static=True)
    input_size: int = eqx.field(static=True)
    use_time: bool = eqx.field(static=True)
    bound: tuple[float, ...] | None = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        first: AbstractContextLayer,
        stack: AbstractContextLayer,
        last: AbstractContextLayer,
        *,
        state_size: int,
        use_time: bool = True,
        reference: Real[ArrayLike, " r"] | None = None,
        bound: Real[ArrayLike, "..."] | None = None,
    ):
        where = "StackedController"
        for name, layer in [("first", first), ("stack", stack), ("last", last)]:
            if not isinstance(layer, AbstractContextLayer):
                raise ValueError(
                    f"{where}({name}=...): expected an AbstractContextLayer, got "
                    f"{type(layer).__name__}."
                )
        self.first, self.stack, self.last = first, stack, last
        self.state_size = _positive_int(state_size, "state_size", where)
        self.use_time = bool(use_time)
        self.reference = _check_reference(reference, where)
        self.input_size = last.out_size
        self.bound = as_bound(bound, self.input_size, where)
        width = first.out_size
        if stack.in_size != width or stack.out_size != width:
            raise ValueError(
                f"{where}(stack=...): the stacked layer must map width -> width = "
                f"{width} -> {width} (first.out_size), got {stack.in_size} -> "
                f"{stack.out_size}."
            )
        leading = {a.shape[0] if a.ndim else None for a in self._stack_arrays()}
        if len(leading) != 1 or None in leading:
            raise ValueError(
                f"{where}(stack=...): every array of the stacked layer must have "
                "the same leading (depth) axis, got shapes "
                f"{[tuple(a.shape) for a in self._stack_arrays()]}."
            )
        _check_chain((first, last), self.context_size, where)

    def _stack_arrays(self) -> list[Array]:
        return [a for a in jax.tree.leaves(self.stack) if eqx.is_array(a)]

    @classmethod
    @checks_own_arguments
    def mlp(
        cls,
        state_size: int,
        input_size: int,
        width_size: int,
        depth: int,
        *,
        use_time: bool = True,
        reference: Real[ArrayLike, " r"] | None = None,
        bound: Real[ArrayLike, "..."] | None = None,
        activation: Callable[[Array], Array] = jax.nn.tanh,
        dtype=None,
        key: PRNGKeyArray,
    ) -> "StackedController":
        """The stacked form of `LayeredController.mlp` with the same arguments:
        the same weights for the same `key`, `depth` layers in all (`depth >= 2`)."""
        layered = LayeredController.mlp(
            state_size, input_size, width_size, depth, use_time=use_time,
            reference=reference, bound=bound, activation=activation, dtype=dtype,
            key=key,
        )  # fmt: skip
        return cls.from_layered(layered)

    @classmethod
    @checks_own_arguments
    def from_layered(cls, layered: LayeredController) -> "StackedController":
        """Stack the middle layers of a `LayeredController` (at least 2 layers, the
        middle ones of one structure: same class, static fields and shapes).

        **Raises:**

        `ValueError` if the middle layers differ in structure.
        """
        where = "StackedController.from_layered"
        if not isinstance(layered, LayeredController) or layered.depth < 2:
            raise ValueError(
                f"{where}(layered=...): expected a LayeredController with at least 2 "
                f"layers, got {type(layered).__name__}."
            )
        first, *middle, last = layered.layers
        if middle:
            reference = jax.tree.structure(middle[0])
            shapes = [a.shape for a in jax.tree.leaves(middle[0])]
            for k, layer in enumerate(middle, start=1):
                if (
                    jax.tree.structure(layer) != reference
                    or [a.shape for a in jax.tree.leaves(layer)] != shapes
                ):
                    raise ValueError(
                        f"{where}(layered=...): layers[{k}] differs in structure from "
                        "layers[1]; only identical middle layers can be stacked."
                    )
            stack = _stack(middle)
        else:
            # No hidden layer: an empty stack of width -> width layers.
            width = first.out_size
            template = ContextLayer(
                width,
                width,
                first.context_size,
                dtype=layered._dtype(),
                key=jax.random.key(0),
            )
            stack = jax.tree.map(
                lambda a: a[None][:0] if eqx.is_array(a) else a, template
            )
        return cls(
            first,
            stack,
            last,
            state_size=layered.state_size,
            use_time=layered.use_time,
            reference=layered.reference,
            bound=layered.bound,
        )

    def to_layered(self) -> LayeredController:
        """The same controller as a `LayeredController` (the stack unrolled)."""

        def layer(k):
            return jax.tree.map(lambda a: a[k] if eqx.is_array(a) else a, self.stack)

        hidden = [layer(k) for k in range(self.depth - 2)]
        return LayeredController(
            (self.first, *hidden, self.last),
            state_size=self.state_size,
            use_time=self.use_time,
            reference=self.reference,
            bound=self.bound,
        )

    @property
    def depth(self) -> int:
        """The number of layers, `first` and `last` included."""
        return self._stack_arrays()[0].shape[0] + 2

    def _dtype(self):
        arrays = [a for a in jax.tree.leaves(self.first) if eqx.is_inexact_array(a)]
        return arrays[0].dtype if arrays else jnp.result_type(float)

    def apply(self, context: Float[Array, " c"]) -> Float[Array, " m"]:
        h = self.first(jnp.zeros((0,), context.dtype), context)
        dynamic, static = eqx.partition(self.stack, eqx.is_array)

        def body(h, layer_arrays):
            return eqx.combine(layer_arrays, static)(h, context), None

        h, _ = jax.lax.scan(body, h, dynamic)
        return self.last(h, context)
