"""Type aliases shared across dynsys."""

from typing import TypeAlias

from jaxtyping import Array, ArrayLike, Float, Int, Real


Scalar: TypeAlias = Real[ArrayLike, ""]
"""A time or other scalar: a Python number or a 0-d array."""

State: TypeAlias = Float[Array, " n"]
Input: TypeAlias = Float[Array, " m"] | None
Output: TypeAlias = Float[Array, " p"]
Time: TypeAlias = Real[Array, ""] | Int[Array, ""] | float | int

__all__ = ["Array", "ArrayLike", "Float", "Input", "Output", "Scalar", "State", "Time"]
