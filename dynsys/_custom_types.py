"""Type aliases shared across dynsys."""

from typing import TypeAlias, TypeVar

from jaxtyping import Array, ArrayLike, Float, Int, Real


Scalar: TypeAlias = Real[ArrayLike, ""]
"""A time or other scalar: a Python number or a 0-d array."""

# A JAX array in the library's own calls; a NumPy array where a user calls a
# system's or controller's methods directly.
State: TypeAlias = Float[ArrayLike, " n"]
Input: TypeAlias = Float[ArrayLike, " m"] | None
Output: TypeAlias = Float[ArrayLike, " p"]
Time: TypeAlias = Real[Array, ""] | Int[Array, ""] | float | int


_Checked = TypeVar("_Checked")


def checks_own_arguments(obj: _Checked) -> _Checked:
    """Mark a function, or a dataclass's generated `__init__`, that checks its
    arguments itself, raising the one-line errors its docs promise (wrong shape,
    a list converted to an array, a value out of range): the run-time type check of
    the test suite (`pytest --jaxtyping-packages=dynsys,beartype.beartype`) leaves it
    alone, as it would raise its own `TypeError` first. The annotations stay, for the
    reader and for static checkers; everything it calls is still checked."""
    obj.__no_type_check__ = True  # read by jaxtyping.jaxtyped
    return obj


__all__ = [
    "Array",
    "ArrayLike",
    "Float",
    "Input",
    "Output",
    "Scalar",
    "State",
    "Time",
    "checks_own_arguments",
]
