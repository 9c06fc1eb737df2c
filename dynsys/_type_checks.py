"""The marker for functions that check their own arguments, apart from the type
aliases so that importing it imports no JAX (the command's early refusals load the
file readers before JAX)."""

from typing import TypeVar


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
