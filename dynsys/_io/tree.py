"""Model files that load without a template: the structure of a model built from
dynsys's own modules (a `NeuralStateSpace`, its `StateEncoder`, layered networks
and the linear systems under them) written into the file's header as a tree of
class names, static settings, activations by name and array shapes, and rebuilt
from it. Only the classes named here are rebuilt; nothing is imported by name."""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._fitting.encoder import StateEncoder
from .._systems.innovation import InnovationSystem
from .._systems.layered import ContextLayer, LayeredController
from .._systems.neural_state_space import NeuralStateSpace
from .._systems.stable import StableLinearSystem
from .._systems.system import LinearSystem


# Activations a file names (the first name of a function wins: `jax.nn.tanh` is
# also `jax.numpy.tanh`, `jax.nn.swish` is `jax.nn.silu`).
_JAX_NN = (
    "tanh relu sigmoid softplus silu gelu elu selu celu leaky_relu log_sigmoid "
    "soft_sign hard_tanh relu6"
).split()
ACTIVATIONS: dict[str, Callable] = {f"jax.nn.{n}": getattr(jax.nn, n) for n in _JAX_NN}
ACTIVATIONS["jax.numpy.sin"] = jnp.sin

# Classes whose `__init__` takes their fields by name (rebuilt through it, so it
# checks the shapes), and classes rebuilt field by field as JAX unflattens them.
BY_FIELDS = {
    "dynsys.LinearSystem": LinearSystem,
    "dynsys.StableLinearSystem": StableLinearSystem,
    "dynsys.InnovationSystem": InnovationSystem,
}
COMPOSITE = {
    "dynsys.NeuralStateSpace": NeuralStateSpace,
    "dynsys.StateEncoder": StateEncoder,
    "dynsys.LayeredController": LayeredController,
    "dynsys.ContextLayer": ContextLayer,
}


class NotRebuildable(Exception):
    """A part of the model that the tree cannot describe (the message says which)."""


def class_name(value: Any) -> str | None:
    """`dynsys.X` for a class the tree rebuilds, else `None`."""
    for table in (BY_FIELDS, COMPOSITE):
        for name, cls in table.items():
            if type(value) is cls:
                return name
    return None


def activation_name(function: Any) -> str | None:
    for name, known in ACTIVATIONS.items():
        if function is known:
            return name
    return None


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    return isinstance(value, tuple) and all(_plain(v) for v in value)


def _static(value: Any, where: str) -> dict[str, Any]:
    if _plain(value):
        return {"static": value}
    if callable(value):
        name = activation_name(value)
        if name is None:
            shown = getattr(value, "__qualname__", None) or type(value).__name__
            module = getattr(value, "__module__", None)
            full = f"{module}.{shown}" if module else shown
            raise NotRebuildable(
                f"{where} is {full}, not an activation dynsys knows by name "
                f"({', '.join(ACTIVATIONS)})"
            )
        return {"activation": name}
    raise NotRebuildable(f"{where} is a {type(value).__name__}, not a plain setting")


def _node(value: Any, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, jax.Array | np.ndarray):
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {"tuple": [_node(v, f"{where}[{k}]") for k, v in enumerate(value)]}
    name = class_name(value)
    if name is None:
        what = type(value)
        raise NotRebuildable(
            f"{where or 'the model'} is a {what.__module__}.{what.__qualname__}, which "
            "dynsys does not rebuild without a template"
        )
    fields = {}
    for field in dataclasses.fields(value):
        at = f"{where}.{field.name}" if where else field.name
        item = getattr(value, field.name)
        static = field.metadata.get("static", False)
        fields[field.name] = _static(item, at) if static else _node(item, at)
    return {"class": name, "fields": fields}


def describe(model: Any) -> dict[str, Any]:
    """The tree of `model` (a `COMPOSITE` class): nested `{"class", "fields"}`
    tables whose entries are `null`, `{"shape", "dtype"}`, `{"static": value}`,
    `{"activation": name}`, `{"tuple": [...]}` or another class's table.

    **Raises:** `NotRebuildable` naming the part (a user class, an unknown
    activation) that only a template can rebuild.
    """
    return _node(model, "")


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples they were (`bound`, ...)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _setting(node: dict, where: str, fail) -> Any:
    if "activation" in node:
        name = node["activation"]
        if not isinstance(name, str) or name not in ACTIVATIONS:
            raise fail(
                f"{where} names the activation {name!r}, which dynsys does not know "
                f"(known: {', '.join(ACTIVATIONS)})."
            )
        return ACTIVATIONS[name]
    value = _tuples(node["static"])
    if not _plain(value):
        raise fail(f"{where} has the setting {value!r}, not a plain value.")
    return value


def _fields_of(cls, node: dict, where: str, fail) -> dict[str, Any]:
    fields = node.get("fields")
    if not isinstance(fields, dict):
        raise fail(f"{where or 'the model'} has no table of fields in the header.")
    names = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise fail(
            f"the header gives {where or 'the model'} a field {unknown[0]!r} that "
            f"{node['class']} does not have."
        )
    missing = sorted(names - set(fields))
    if missing and cls in COMPOSITE.values():
        raise fail(f"the header lacks the field {missing[0]!r} of {node['class']}.")
    return fields


def rebuild(tree: Any, spec: Callable, fail: Callable) -> Any:
    """A shape-only model (`jax.ShapeDtypeStruct` leaves, in this session's
    precision) from a tree written by `describe`; `spec(info, where)` checks one
    array entry, `fail(why)` makes the one-line error."""

    def build(node: Any, where: str) -> Any:
        at = where or "the model"
        if node is None:
            return None
        if not isinstance(node, dict):
            raise fail(f"{at} is not a table in the header's tree.")
        if "tuple" in node and isinstance(node["tuple"], list):
            return tuple(build(v, f"{where}[{k}]") for k, v in enumerate(node["tuple"]))
        if "shape" in node:
            array = spec(node, at)
            return jax.ShapeDtypeStruct(
                array.shape, jax.dtypes.canonicalize_dtype(array.dtype)
            )
        name = node.get("class")
        known = isinstance(name, str)
        cls = (BY_FIELDS.get(name) or COMPOSITE.get(name)) if known else None
        if cls is None:
            raise fail(
                f"the header's tree names a class {name!r} at {at}, which dynsys does "
                "not rebuild without a template."
            )
        values = {}
        for field, item in _fields_of(cls, node, where, fail).items():
            sub = f"{where}.{field}" if where else field
            if isinstance(item, dict) and ("static" in item or "activation" in item):
                values[field] = _setting(item, sub, fail)
            else:
                values[field] = build(item, sub)
        return _instance(cls, name, values, at, fail)

    return build(tree, "")


def _instance(cls, name: str, values: dict, where: str, fail) -> Any:
    if cls in BY_FIELDS.values():
        arrays = {
            k: v for k, v in values.items() if isinstance(v, jax.ShapeDtypeStruct)
        }
        others = {k: v for k, v in values.items() if k not in arrays}
        try:
            return eqx.filter_eval_shape(lambda a: cls(**a, **others), arrays)
        except Exception as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else error
            raise fail(
                f"the header's fields of {where} do not make a {name} ({first})."
            ) from None
    # As JAX unflattens a module: a bare instance, its fields set one by one.
    module = object.__new__(cls)
    for field, value in values.items():
        object.__setattr__(module, field, value)
    return module


def check_rebuilt(model: Any, fail: Callable) -> None:
    """Trace one call of a rebuilt model (shapes only): a header whose fields do
    not fit together fails here, in one line, not at the user's first call."""
    name = class_name(model)
    if isinstance(model, StateEncoder):
        _check_past(model, name, fail)
    try:
        if isinstance(model, NeuralStateSpace):
            x = jnp.zeros(model.state_size, model.state_mean.dtype)
            u = jnp.zeros(model.input_size, x.dtype) if model.input_size else None
            shapes = eqx.filter_eval_shape(
                lambda m: (m.step(0, x, u), m.output(0, x, u)), model
            )
            wanted = ((model.state_size,), (model.output_size,))
        elif isinstance(model, StateEncoder):
            z = jnp.zeros(model.feature_mean.shape, model.feature_mean.dtype)
            shapes = eqx.filter_eval_shape(
                lambda m: (m.weight @ z + m.bias + m.net(0, z),), model
            )
            wanted = ((model.state_size,),)
        else:
            return
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else error
        raise fail(
            f"the header's tree does not make a working {name} ({first})."
        ) from None
    if tuple(s.shape for s in shapes) != wanted:
        raise fail(f"the header's tree does not make a working {name} (shapes).")


def _check_past(encoder: StateEncoder, name: str, fail: Callable) -> None:
    """An encoder reads `past` samples of each channel: `past` a positive int that
    divides its number of features (`past * channels`)."""
    past, features = encoder.past, encoder.feature_mean.shape[-1]
    if type(past) is not int or past < 1 or features % past:
        raise fail(
            f"the header's tree does not make a working {name} (past = {past!r} "
            f"samples: expected a positive int dividing its {features} features, "
            "past times the channels it reads)."
        )
