"""Type aliases shared across dynsys."""

from typing import TypeAlias

from jaxtyping import Array, ArrayLike, Float, Int, Real


Scalar: TypeAlias = Real[ArrayLike, ""]
"""A time or other scalar: a Python number or a 0-d array."""

# A JAX array in the library's own calls; a NumPy array where a user calls a
# system's or controller's methods directly.
State: TypeAlias = Float[ArrayLike, " n"]
Input: TypeAlias = Float[ArrayLike, " m"] | None
Output: TypeAlias = Float[ArrayLike, " p"]
Time: TypeAlias = Real[Array, ""] | Int[Array, ""] | float | int




__all__ = [
    "Array",
    "ArrayLike",
    "Float",
    "Input",
    "Output",
    "Scalar",
    "State",
    "Time",
]
