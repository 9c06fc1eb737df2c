"""What the identification and validation functions read from a `Dataset`: the
measured signals (outputs, or states when there are none), inputs and valid steps."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from .._fitting.encoder import StateEncoder
from .._systems.system import AbstractSystem, LinearSystem
from .._type_checks import checks_own_arguments


class Signals(NamedTuple):
    """The arrays of a dataset as identification uses them (padded to `T`).

    - `ys (N, T, p)`: the measured outputs $y_0 \\dots y_{T-1}$; when the data has no
        outputs, its states $x_0 \\dots x_{T-1}$ (then `from_states` is True).
    - `us (N, T, m) | None`, `mask (N, T)` (True where `t < lengths[i]`), `lengths`.
    - `xs (N, T+1, n) | None`: the states when the data has them.
    """

    ys: Float[Array, "N T p"]
    us: Float[Array, "N T m"] | None
    mask: Bool[Array, "N T"]
    lengths: tuple[int, ...]
    xs: Float[Array, "N T+1 n"] | None
    from_states: bool
    names: tuple[str, ...]
    dt: float | None


def signals(data, call: str) -> Signals:
    """The `Signals` of `data` (a `Dataset`); `ValueError` naming `call` when it has
    neither outputs nor states."""
    ys = getattr(data, "ys", None)
    xs = getattr(data, "xs", None)
    us = getattr(data, "us", None)
    if ys is None and xs is None:
        raise ValueError(f"{call}(data=...): the data has neither outputs nor states.")
    from_states = ys is None
    if from_states:
        ys = xs[:, :-1]
        names = tuple(getattr(data, "state_names", ()))
    else:
        names = tuple(getattr(data, "output_names", ()))
    # `device_put`, not `jnp.asarray`: the latter compiles a program per shape
    # for a numpy array (jax 0.10); both convert to JAX's default dtypes.
    ys = jax.device_put(ys)
    N, T, p = ys.shape
    if len(names) != p:
        names = tuple(f"{'x' if from_states else 'y'}{j}" for j in range(p))
    lengths = tuple(int(t) for t in getattr(data, "lengths", None) or (T,) * N)
    mask = jax.device_put(np.arange(T)[None, :] < np.asarray(lengths)[:, None])
    dt = getattr(data, "dt", None)
    return Signals(ys, us, mask, lengths, xs, from_states, names, dt)


def arrays_only(s: Signals) -> Signals:
    """`s` without the names, lengths and dt, which do not enter the arithmetic:
    passed to a compiled function, one program serves every dataset of its
    shapes."""
    return s._replace(lengths=(), names=(), dt=None)


def in_shared_length(s: Signals, program: str) -> Signals:
    """`s` with its time axis padded to the length that records of nearby lengths
    share for the compiled program `program` (`shared_length`), so that a file of
    another length runs the programs a first file compiled. The padded steps are
    zero and masked: they lie past every experiment's end (`lengths` unchanged),
    so they enter no sum and no window, and only the order of summation changes.
    Padded on the host (`jnp.pad` would compile a program per shape)."""
    from .._fitting.length_buckets import shared_length

    if _traced(s.ys, s.us, s.xs):  # inside the user's jit or grad: as it is
        return s
    N, T, p = s.ys.shape
    m = 0 if s.us is None else s.us.shape[-1]
    length = shared_length(T, f"{program}/{N}x{m}x{p}:{s.ys.dtype}")
    if length == T:
        return s
    return s._replace(
        ys=padded_steps(s.ys, length),
        us=padded_steps(s.us, length),
        mask=padded_steps(s.mask, length),
        xs=padded_steps(s.xs, length + 1),
    )


def padded_steps(a: Array | None, steps: int) -> Array | None:
    """`a (N, T, ...)` with zeros (False) after its `T` steps up to `steps`
    (padded on the host: `jnp.pad` compiles a program per shape)."""
    if a is None or a.shape[1] == steps:
        return a
    widths = [(0, 0)] * a.ndim
    widths[1] = (0, steps - a.shape[1])
    if _traced(a):
        return jnp.pad(a, widths)
    return jax.device_put(np.pad(np.asarray(a), widths))


def first_steps(a: Array | None, steps: int) -> Array | None:
    """The first `steps` steps of `a (N, T, ...)` (sliced on the host: a slice of
    a JAX array compiles a program per shape)."""
    if a is None or a.shape[1] == steps:
        return a
    if _traced(a):
        return a[:, :steps]
    return jax.device_put(np.asarray(a)[:, :steps])


def _traced(*arrays) -> bool:
    """Whether any of `arrays` is traced (no values to pad on the host)."""
    return any(isinstance(a, jax.core.Tracer) for a in arrays)


def linear_of(model: object) -> LinearSystem | None:
    """`model` (any object) as a `LinearSystem` (itself, or its `to_linear()`), else
    `None`."""
    if isinstance(model, LinearSystem):
        return model
    to_linear = getattr(model, "to_linear", None)
    if callable(to_linear):
        linear = to_linear()
        if isinstance(linear, LinearSystem):
            return linear
    return None


def kind_of(obj: object) -> str:
    """What `obj` is, as a user who loaded it from a file knows it: `"a StateEncoder
    (an initial-state encoder)"`, `"a NeuralStateSpace (a model)"`, `"a dict"`."""
    name = type(obj).__name__
    if isinstance(obj, StateEncoder):
        return f"a {name} (an initial-state encoder)"
    if isinstance(obj, AbstractSystem):
        return f"a {name} (a model)"
    return f"a {name}"


def check_is_system(call: str, model: object) -> None:
    """One-line `TypeError` when `model` is not a system: an encoder (the other
    file `fit_neural` saves) or any other object."""
    if not isinstance(model, AbstractSystem):
        raise TypeError(
            f"{call}(model=...): expected a model (a dynsys.AbstractSystem, such as "
            f"a NeuralStateSpace or a LinearSystem), got {kind_of(model)}."
        )


@checks_own_arguments
def check_model_matches(call: str, model: AbstractSystem, s: Signals) -> None:
    """One-line `TypeError` when `model` is not a system (`check_is_system`), and
    `ValueError` when its outputs (or states) or inputs do not match the data's
    columns."""
    check_is_system(call, model)
    p = s.ys.shape[-1]
    m = 0 if s.us is None else s.us.shape[-1]
    if s.from_states:
        if model.state_size != p:
            raise ValueError(
                f"{call}(model=..., data=...): the data has states only, so the model "
                f"must have state_size {p}, got {model.state_size}."
            )
    elif model.output_size != p:
        raise ValueError(
            f"{call}(model=..., data=...): the data has {p} output channels, but the "
            f"model's output_size is {model.output_size}."
        )
    if model.input_size != m:
        raise ValueError(
            f"{call}(model=..., data=...): the data has {m} input channels, but the "
            f"model's input_size is {model.input_size}."
        )
