"""Saving and loading models: JSON header plus equinox-serialised leaves, no pickle."""

import dataclasses
import hashlib
import importlib.metadata
import io
import json
import math
import os
import pathlib
import struct
import sys
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from .._atomic_write import write_atomic as _write_atomic
from .._sysid.channel_names import ChannelNames, names_of
from .._systems.innovation import InnovationSystem
from .._systems.stable import StableLinearSystem
from .._systems.system import LinearSystem
from . import tree as _tree
from .file_format import (
    array_spec as _array_spec,
    FORMAT_VERSION as _FORMAT_VERSION,
    header_digest as _header_digest,
    MAGIC as _MAGIC,
    NUMERIC_KINDS as _NUMERIC_KINDS,
    read_model_file as _read,
)


# Classes that load without a template: their __init__ takes their fields by name.
_BUILTIN = {
    "dynsys.LinearSystem": LinearSystem,
    "dynsys.StableLinearSystem": StableLinearSystem,
    "dynsys.InnovationSystem": InnovationSystem,
}


# Where the private modules were before they moved into the layer folders: files
# written then name a non-built-in class by its module path (`dynsys._controller.
# MLPController`), and they still load.
_MOVED_MODULES = {
    "dynsys._systems.system": "dynsys._system",
    "dynsys._systems.stable": "dynsys._stable",
    "dynsys._systems.ode": "dynsys._ode",
    "dynsys._systems.controller": "dynsys._controller",
    "dynsys._systems.layered": "dynsys._layered",
    "dynsys._rollout.adjoint": "dynsys._adjoint",
    "dynsys._rollout.method": "dynsys._method",
    "dynsys._rollout.rollout": "dynsys._rollout",
    "dynsys._rollout.sharding": "dynsys._sharding",
    "dynsys._data.dataset": "dynsys._dataset",
    "dynsys._data.files": "dynsys._data_files",
    "dynsys._data.load": "dynsys._load_dataset",
    "dynsys._data.simulate": "dynsys._simulate",
    "dynsys._fitting.fit": "dynsys._fit",
    "dynsys._fitting.losses": "dynsys._losses",
    "dynsys._fitting.solvers": "dynsys._solvers",
    "dynsys._fitting.transform_key": "dynsys._transform_key",
    "dynsys._fitting.least_squares": "dynsys._least_squares",
    "dynsys._fitting.train": "dynsys._train",
    "dynsys._fitting.metrics": "dynsys._metrics",
    "dynsys._fitting.cost": "dynsys._cost",
    "dynsys._sysid.signals": "dynsys._sysid_data",
    "dynsys._sysid.subspace": "dynsys._subspace",
    "dynsys._sysid.initial_state": "dynsys._x0",
    "dynsys._sysid.validation": "dynsys._validation",
    "dynsys._sysid.response": "dynsys._response",
    "dynsys._sysid.python_control": "dynsys._control",
    "dynsys._experiments.config": "dynsys._config",
    "dynsys._experiments.runtime.interrupt": "dynsys._interrupt",
    "dynsys._experiments.run_folder": "dynsys._run_folder",
    "dynsys._experiments.run": "dynsys._experiment",
    "dynsys._experiments.kinds": "dynsys._experiment_kinds",
    "dynsys._experiments.fit.pipeline": "dynsys._experiment_fit",
}


def _class_name(model: Any) -> str:
    """The name a file gives the model's class: `dynsys.X` for a class that dynsys
    exports (whichever private module defines it), else its module path."""
    for name, cls in _BUILTIN.items():
        if type(model) is cls:
            return name
    cls = type(model)
    package = sys.modules.get("dynsys")  # not imported here: it imports every layer
    if cls.__module__.startswith("dynsys.") and (
        getattr(package, cls.__qualname__, None) is cls
    ):
        return f"dynsys.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _names_of(model: Any) -> set[str]:
    """Every name a file may give the model's class: today's, its module path, and
    the module path it had before the layer folders."""
    cls = type(model)
    names = {_class_name(model), f"{cls.__module__}.{cls.__qualname__}"}
    if cls.__module__ in _MOVED_MODULES:
        names.add(f"{_MOVED_MODULES[cls.__module__]}.{cls.__qualname__}")
    return names


def _leaf_info(leaf) -> dict[str, Any]:
    if isinstance(leaf, jax.Array | np.ndarray | jax.ShapeDtypeStruct):
        return {"shape": list(leaf.shape), "dtype": str(leaf.dtype)}
    return {"type": type(leaf).__name__}


def _fields(model) -> dict[str, Any]:
    """Enough about a built-in model's fields to rebuild a template of it."""
    fields = {}
    for field in dataclasses.fields(model):
        value = getattr(model, field.name)
        if field.metadata.get("static", False):
            fields[field.name] = {"static": value}
        elif value is None:
            fields[field.name] = None
        else:
            fields[field.name] = {"shape": list(value.shape), "dtype": str(value.dtype)}
    return fields


def _describe(value) -> Any:
    """A JSON-able description of a static setting, equal for equal settings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, np.dtype):
        return str(value)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str) and not isinstance(value, eqx.Module):
        return f"{getattr(value, '__module__', None) or ''}.{name}"
    return type(value).__qualname__


def _static_settings(model: PyTree) -> dict[str, Any]:
    """Every static field (bound, activation, use_time, sizes...) and every
    non-array leaf of `model`, by path (`"layers[0].activation"`)."""
    settings: dict[str, Any] = {}

    def walk(node, path: str) -> None:
        if isinstance(node, eqx.Module):
            for field in dataclasses.fields(node):
                value = getattr(node, field.name, None)
                where = f"{path}.{field.name}" if path else field.name
                if field.metadata.get("static", False):
                    settings[where] = _describe(value)
                else:
                    walk(value, where)
        elif isinstance(node, list | tuple):
            for k, item in enumerate(node):
                walk(item, f"{path}[{k}]")
        elif isinstance(node, dict):
            for k, item in node.items():
                walk(item, f"{path}[{k!r}]")
        elif node is None or eqx.is_array_like(node):
            return
        else:
            settings[path] = _describe(node)

    walk(model, "")
    return settings


def save(path: str | os.PathLike, model: PyTree, *, names=None) -> None:
    """Save `model` (an equinox module or any pytree of arrays) to `path`, with
    its data's channel names when `names` gives them (`dynsys fit` records them
    in its `model.dynsys`; `load_names` reads them back).

    The file is a magic line, a JSON header (class, field shapes and dtypes, the
    static settings such as `bound`, activation or widths, the dynsys version, a
    checksum) and the leaves as written by
    `eqx.tree_serialise_leaves`; nothing is pickled. It is written to a temporary
    file which is then renamed, so `path` never holds half a model. For a model
    built from dynsys's modules (`NeuralStateSpace`, `StateEncoder`,
    `LayeredController`) the header also holds its structure, activation
    functions by name, so `load` rebuilds it without a template; a part only a
    template can rebuild (your own base system, an activation dynsys does not know
    by name) is named in a warning.

    **Arguments:**

    - `path`: the file to write (conventionally `*.dynsys`).
    - `model`: the model.
    - `names`: optional channel names to record: a `Dataset` (its input and
        output names), an `Identified` or a `ChannelNames`.

    **Example:**

    ```python
    dynsys.save("model.dynsys", dynsys.LinearSystem(K=0.5 * jnp.eye(2)))
    dynsys.load("model.dynsys").K  # [[0.5, 0], [0, 0.5]]
    dynsys.save("heating.dynsys", found.model, names=data)  # found = identify(data)
    ```
    """
    if pathlib.Path(path).is_dir():
        raise ValueError(
            f"save(path={str(path)!r}): a folder is there; give a file name such as "
            f"{str(pathlib.Path(path) / 'model.dynsys')!r}."
        )
    channels = None if names is None else names_of("save", names)
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, model)
    payload = buffer.getvalue()
    header: dict[str, Any] = {
        "format": "dynsys-model",
        "format_version": _FORMAT_VERSION,
        "dynsys_version": importlib.metadata.version("dynsys"),
        "class": _class_name(model),
        "leaves": [_leaf_info(leaf) for leaf in jax.tree.leaves(model)],
        "static": _static_settings(model),
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    if channels is not None:
        header["channels"] = {
            "inputs": list(channels.input_names),
            "outputs": list(channels.output_names),
        }
    if header["class"] in _BUILTIN:
        header["fields"] = _fields(model)
    elif _tree.class_name(model) is not None:
        _describe_tree(header, model)
    header["header_sha256"] = _header_digest(header)
    encoded = json.dumps(header).encode()
    content = _MAGIC + struct.pack("<Q", len(encoded)) + encoded + payload
    _write_atomic(pathlib.Path(path), content)


def _describe_tree(header: dict[str, Any], model: Any) -> None:
    """Write the structure of a model built from dynsys's modules (a
    `NeuralStateSpace`, a `StateEncoder`, a layered network) into `header`, so it
    loads without a template; if a part is the user's (a grey-box base, an
    activation dynsys does not know by name), say why in the header and warn."""
    try:
        header["tree"] = _tree.describe(model)
    except _tree.NotRebuildable as reason:
        header["tree_missing"] = str(reason)
        warnings.warn(
            f"save(model=...): {reason}; the file loads only with like= (a template "
            "model).",
            stacklevel=3,
        )


def _template(header: dict[str, Any], fail):
    """A shape-only model of a built-in class, from the header's fields."""
    cls = _BUILTIN[header["class"]]
    names = {field.name for field in dataclasses.fields(cls)}
    fields = header.get("fields")
    if not isinstance(fields, dict):
        raise fail("the header has no 'fields' to rebuild the model from.")
    unknown = sorted(set(fields) - names)
    if unknown:
        raise fail(
            f"the header names a field {unknown[0]!r} that "
            f"{header['class']} does not have."
        )
    arrays, statics = {}, {}
    for name, info in fields.items():
        if info is None:
            statics[name] = None
        elif isinstance(info, dict) and "static" in info:
            statics[name] = info["static"]
        else:
            arrays[name] = _array_spec(info, f"field {name!r}", fail)
    try:
        return eqx.filter_eval_shape(lambda a: cls(**a, **statics), arrays)
    except Exception as error:
        raise fail(
            f"the header's fields do not make a {header['class']} ("
            f"{str(error).strip().splitlines()[0] if str(error).strip() else error})."
        ) from None


def _compare_static(header: dict[str, Any], like: PyTree) -> None:
    """A template whose static settings differ from the file's is refused."""
    saved = header.get("static")
    if saved is None:  # a file from before static settings were recorded
        return
    have = _static_settings(like)
    depth = lambda where: (where.count(".") + where.count("["), where)  # noqa: E731
    for where in sorted(set(saved) | set(have), key=depth):
        want, got = saved.get(where, "<missing>"), have.get(where, "<missing>")
        if want != got:
            raise ValueError(
                f"load(like=...): like.{where} is {got!r}, but the model in the file "
                f"has {want!r}; build like with the same settings."
            )


def _reader(fail, conversions: list[tuple[str, str]]):
    """An `eqx.tree_deserialise_leaves` filter: read each array after checking its
    own npy header against the template (shape, dtype, bytes left), so a payload
    cannot make numpy allocate more than it holds. A floating (or complex) leaf of
    another precision than the template's is converted to the template's, and the
    pair of dtypes appended to `conversions`."""

    def read(f, like):
        if not eqx.is_array_like(like) and not isinstance(like, jax.ShapeDtypeStruct):
            return like
        want_shape = tuple(np.shape(like)) if not hasattr(like, "shape") else like.shape
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except ValueError as error:
            raise fail(f"could not read the leaves ({error}).") from None
        if dtype.hasobject or dtype.kind not in _NUMERIC_KINDS:
            raise fail(f"a leaf has dtype {dtype} on disk, not a numeric dtype.")
        if tuple(shape) != tuple(want_shape):
            raise fail(
                f"a leaf has shape {tuple(shape)} on disk but {tuple(want_shape)} in "
                "the template."
            )
        want_dtype = getattr(like, "dtype", None)
        if want_dtype is not None and np.dtype(want_dtype) != dtype:
            want_kind = np.dtype(want_dtype).kind
            if not (dtype.kind == want_kind and want_kind in "fc"):
                raise ValueError(
                    f"load(like=...): a leaf has dtype {dtype} on disk but "
                    f"{want_dtype} in like."
                )
            conversions.append((str(dtype), str(np.dtype(want_dtype))))
        count = math.prod(shape)
        data = f.read(count * dtype.itemsize)
        if len(data) != count * dtype.itemsize:
            raise fail("could not read the leaves (the payload ends inside a leaf).")
        array = np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C")
        if want_dtype is not None and np.dtype(want_dtype) != dtype:
            array = array.astype(want_dtype)
        if isinstance(like, np.ndarray):
            return array.copy()
        if isinstance(like, jax.Array | jax.ShapeDtypeStruct):
            return jnp.asarray(array)
        return type(like)(array.item())

    return read


def load(path: str | os.PathLike, like: PyTree | None = None) -> PyTree:
    """Load a model written by `save`.

    The built-in models (`LinearSystem`, `StableLinearSystem`, `InnovationSystem`)
    and the models built from dynsys's modules (`NeuralStateSpace` on a built-in
    base, `StateEncoder`, `LayeredController`, `ContextLayer`) load without a
    template. For any other class pass `like`, a model of the same class and
    structure (its values are ignored): its leaves' shapes and dtypes, and its
    static settings (e.g. a controller's `bound`, activation, `use_time`), must
    match the file's. A file saved in another precision loads in this session's
    (a float64 model in a session without JAX's 64-bit mode comes back float32, a
    float32 leaf into a float64 `like` comes back float64), with a warning saying so.

    Untrusted files fail small: only a regular file is read (never a FIFO or a
    device, even through a link), at most the bytes its header accounts for, and
    the shapes the header claims are checked against the bytes present before
    anything is allocated. Nothing is unpickled or imported: a class or an
    activation function that a file names is looked up in dynsys's own short list.

    **Arguments:**

    - `path`: a file written by `dynsys.save`.
    - `like`: a template model; required for classes that are not built in.

    **Returns:**

    The model.

    **Raises:**

    `ValueError` (one line) for a missing, foreign, truncated, damaged or hostile
    file (an unknown class or activation named in it), a path that is not a
    regular file, a file written from another class than
    `like`, or shapes, dtypes or static settings that do not match `like` (naming
    the field).

    **Example:**

    ```python
    class Gain(eqx.Module):
        k: jax.Array

    dynsys.save("gain.dynsys", Gain(jnp.array(2.0)))
    dynsys.load("gain.dynsys", like=Gain(jnp.array(0.0))).k  # 2.0
    ```
    """
    path = pathlib.Path(path)
    built = False

    def fail(why: str) -> ValueError:
        return ValueError(f"load(path={str(path)!r}): {why}")

    header, payload = _read(path)
    name = header["class"]
    if like is None:
        like = _built_template(header, fail)
        built = True
    elif name not in _names_of(like):
        raise ValueError(
            f"load(like=...): the file holds a {name}, but like is a "
            f"{_class_name(like)}."
        )
    else:
        _compare_static(header, like)
    _check_leaf_shapes(header["leaves"], like, built, fail)
    stream = io.BytesIO(payload)
    conversions: list[tuple[str, str]] = []
    try:
        model = eqx.tree_deserialise_leaves(
            stream, like, filter_spec=_reader(fail, conversions)
        )
    except Exception as error:  # equinox wraps the reader's errors with the leaf path
        cause = error
        while cause.__cause__ is not None:
            cause = cause.__cause__
        if isinstance(cause, ValueError) and str(cause).startswith("load("):
            raise cause from None
        raise fail(f"could not read the leaves ({cause}).") from None
    if stream.tell() != len(payload):
        raise fail(
            f"the leaves end at byte {stream.tell()} of {len(payload)} (the file holds "
            "more than the model)."
        )
    if built and "tree" in header:
        _check_tree_model(header, model, fail)
    if conversions:
        _warn_converted(path, conversions, built)
    return model


def load_names(path: str | os.PathLike) -> ChannelNames | None:
    """The channel names a model file records (`save(..., names=...)`; every
    `model.dynsys` that `dynsys fit` writes), or `None` for a file without them.

    **Arguments:**

    - `path`: a file written by `dynsys.save`.

    **Returns:**

    A `ChannelNames` (`.input_names`, `.output_names`), which `present`,
    `to_control`, `plot.bode` and `plot.step_response` take as `names=`; or `None`.

    **Raises:**

    `ValueError` (one line) for a file `load` refuses.

    **Example:**

    ```python
    model = dynsys.load("runs/heating/model.dynsys")
    names = dynsys.load_names("runs/heating/model.dynsys")  # drive_V, temp_C
    dynsys.plot.bode(model, names=names)                    # "drive_V → temp_C"
    ```
    """
    header, _ = _read(pathlib.Path(path))
    channels = header.get("channels")
    if channels is None:
        return None
    return ChannelNames(tuple(channels["inputs"]), tuple(channels["outputs"]))


def _built_template(header: dict[str, Any], fail) -> PyTree:
    """The shape-only model that `load` without `like` reads the leaves into: a
    built-in linear class from the header's fields, a model of dynsys's modules
    (`NeuralStateSpace`, `StateEncoder`, layered networks) from its tree."""
    name = header["class"]
    if name in _BUILTIN:
        return _template(header, fail)
    tree = header.get("tree")
    if tree is not None:
        if not isinstance(tree, dict) or tree.get("class") != name:
            raise fail(f"the header's tree does not describe a {name}.")
        try:
            return _tree.rebuild(
                tree, lambda info, where: _array_spec(info, where, fail), fail
            )
        except RecursionError:
            raise fail("the header's tree is nested too deeply.") from None
    missing = header.get("tree_missing")
    if isinstance(missing, str):
        raise fail(
            f"the file holds a {name} that only a template rebuilds ({missing}); "
            "pass a template model of that class as like=."
        )
    raise fail(
        f"the file holds a {name}, which is not built into dynsys; pass a template "
        "model of that class as like=."
    )


def _check_tree_model(header: dict[str, Any], model: PyTree, fail) -> None:
    """A model rebuilt from the header's tree has the static settings the header
    records, and one traced call of it works (a damaged header fails here)."""
    saved, have = header.get("static") or {}, _static_settings(model)
    for where in sorted(set(saved) | set(have)):
        if saved.get(where, "<missing>") != have.get(where, "<missing>"):
            raise fail(
                f"the header's tree and static settings disagree at {where} (the "
                "file is damaged)."
            )
    _tree.check_rebuilt(model, fail)


def _check_leaf_shapes(expected: list, like: PyTree, built: bool, fail) -> None:
    """The header's leaves against the template's: same count, same shapes."""
    actual = [_leaf_info(leaf) for leaf in jax.tree.leaves(like)]
    if built and [e.get("shape") if isinstance(e, dict) else e for e in expected] != [
        a.get("shape") for a in actual
    ]:
        raise fail("the header's fields and leaves disagree (the file is damaged).")
    if len(expected) != len(actual):
        raise ValueError(
            f"load(like=...): the file has {len(expected)} leaves, like has "
            f"{len(actual)}."
        )
    for k, (want, have) in enumerate(zip(expected, actual)):
        if not isinstance(want, dict) or want.get("shape") != have.get("shape"):
            want_shape = want.get("shape", ()) if isinstance(want, dict) else want
            raise ValueError(
                f"load(like=...): leaf {k} has shape {tuple(want_shape or ())} in "
                f"the file but {tuple(have.get('shape', ()))} in like."
            )


def _warn_converted(path: pathlib.Path, conversions, built: bool) -> None:
    """Say once, in one line, that leaves were read in another precision than they
    were saved (and, in a float32 session, how to keep float64)."""
    pairs = sorted(set(conversions))
    what = ", ".join(f"{disk} -> {want}" for disk, want in pairs)
    count = f"{len(conversions)} array{'s' * (len(conversions) != 1)}"
    if built:
        said = (
            f"{count} read in this session's precision ({what}): JAX's 64-bit mode "
            "is off; to keep the file's float64 (as the dynsys command computes), "
            'run jax.config.update("jax_enable_x64", True) first, before any array '
            "is made."
        )
    else:
        said = f"{count} converted ({what}) to match the dtypes of like."
    warnings.warn(f"load(path={str(path)!r}): {said}", stacklevel=3)
