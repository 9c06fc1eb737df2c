"""The channel names a model is shown with (`present`, `to_control`, `plot.bode`,
`plot.step_response`): given, taken from a `Dataset` (`names=data`), or carried by
an identified model (`dynsys.Identified`, whose `input_names` and `output_names`
are its data's).

A model's own pytree holds no names (they would change its compiled programs and
its file); what carries the data's context (a `Dataset`, an `Identified`) does.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple


class ChannelNames(NamedTuple):
    """The channel names of a model's data, as a model file records them
    (`dynsys.load_names`); pass it as `names=` to `present`, `to_control`,
    `plot.bode` or `plot.step_response`.

    **Fields:**

    - `input_names`: `(m,)` strings, units included as the data name them.
    - `output_names`: `(p,)` strings.
    """

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


def names_of(call: str, value) -> ChannelNames:
    """The `ChannelNames` of `value` (a `Dataset`, an `Identified`, a
    `ChannelNames`).

    **Raises:** `ValueError` naming `call`'s `names` argument otherwise."""
    if not carries_names(value):
        raise ValueError(
            f"{call}(names=...): expected a Dataset or an Identified (with "
            f"input_names and output_names), got {type(value).__name__}."
        )
    return ChannelNames(
        tuple(str(name) for name in value.input_names),
        tuple(str(name) for name in value.output_names),
    )


def carries_names(value) -> bool:
    """Whether `value` holds channel names: `input_names` and `output_names`
    (a `Dataset`, an `Identified`)."""
    return hasattr(value, "input_names") and hasattr(value, "output_names")


def is_identified(value) -> bool:
    """Whether `value` is an identified model with its names (`dynsys.Identified`:
    `.model`, `.input_names`, `.output_names`) rather than a system."""
    return hasattr(value, "model") and carries_names(value) and not hasattr(value, "K")


def unwrapped(value) -> tuple[Any, tuple[str, ...] | None, tuple[str, ...] | None]:
    """`(model, input names or None, output names or None)`: an `Identified` as its
    model and its data's names; anything else as itself, without names."""
    if is_identified(value):
        return value.model, _tuple(value.input_names), _tuple(value.output_names)
    return value, None, None


def chosen_names(
    call: str,
    names,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    carried: tuple = (None, None),
) -> tuple[Sequence[str] | None, Sequence[str] | None]:
    """`(input names, output names)`, each `None` where nothing names it: the
    given `input_names` / `output_names` first, then those of `names` (a `Dataset`,
    an `Identified` or a model file's `ChannelNames`), then `carried` (the
    identified model's own).

    **Raises:** `ValueError` when `names` holds no channel names."""
    from_names: tuple = (None, None)
    if names is not None:
        given = names_of(call, names)
        from_names = (_tuple(given.input_names), _tuple(given.output_names))
    inputs = _first(input_names, from_names[0], carried[0])
    outputs = _first(output_names, from_names[1], carried[1])
    return inputs, outputs


def _first(*candidates):
    return next((c for c in candidates if c is not None), None)


def _tuple(names) -> tuple[str, ...] | None:
    """Names as a tuple of strings; `None` for none (an empty tuple: a dataset
    without that role)."""
    if names is None:
        return None
    names = tuple(str(name) for name in names)
    return names or None
