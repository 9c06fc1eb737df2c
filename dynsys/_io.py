"""Saving and loading models: JSON header plus equinox-serialised leaves, no pickle."""

import dataclasses
import hashlib
import importlib.metadata
import io
import json
import os
import pathlib
import struct
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from ._data import _write_atomic
from ._stable import StableLinearSystem
from ._system import LinearSystem


_MAGIC = b"DYNSYS-MODEL\n"
_FORMAT_VERSION = 1
# Classes that load without a template: their __init__ takes their fields by name.
_BUILTIN = {
    "dynsys.LinearSystem": LinearSystem,
    "dynsys.StableLinearSystem": StableLinearSystem,
}


def _class_name(model: Any) -> str:
    for name, cls in _BUILTIN.items():
        if type(model) is cls:
            return name
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


def _leaf_info(leaf) -> dict[str, Any]:
    if isinstance(leaf, jax.Array | np.ndarray):
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


def save(path: str | os.PathLike, model: PyTree) -> None:
    """Save `model` (an equinox module or any pytree of arrays) to `path`.

    The file is a magic line, a JSON header (class, field shapes and dtypes, the
    dynsys version, a checksum) and the leaves as written by
    `eqx.tree_serialise_leaves`; nothing is pickled. It is written to a temporary
    file which is then renamed, so `path` never holds half a model.

    **Arguments:**

    - `path`: the file to write (conventionally `*.dynsys`).
    - `model`: the model.

    **Example:**

    ```python
    dynsys.save("model.dynsys", dynsys.LinearSystem(K=0.5 * jnp.eye(2)))
    dynsys.load("model.dynsys").K  # [[0.5, 0], [0, 0.5]]
    ```
    """
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, model)
    payload = buffer.getvalue()
    header: dict[str, Any] = {
        "format": "dynsys-model",
        "format_version": _FORMAT_VERSION,
        "dynsys_version": importlib.metadata.version("dynsys"),
        "class": _class_name(model),
        "leaves": [_leaf_info(leaf) for leaf in jax.tree.leaves(model)],
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    if header["class"] in _BUILTIN:
        header["fields"] = _fields(model)
    encoded = json.dumps(header).encode()
    content = _MAGIC + struct.pack("<Q", len(encoded)) + encoded + payload
    _write_atomic(pathlib.Path(path), content)


def _read(path: pathlib.Path) -> tuple[dict[str, Any], bytes]:
    def fail(why: str) -> ValueError:
        return ValueError(f"load(path={str(path)!r}): {why}")

    if not path.exists():
        raise fail("no such file.")
    content = path.read_bytes()
    if not content.startswith(_MAGIC):
        raise fail(
            "not a dynsys model file (it does not start with the dynsys header); "
            "models are written by dynsys.save."
        )
    start = len(_MAGIC) + 8
    if len(content) < start:
        raise fail("the file is truncated (it ends inside the header).")
    (length,) = struct.unpack("<Q", content[len(_MAGIC) : start])
    if len(content) < start + length:
        raise fail("the file is truncated (it ends inside the header).")
    try:
        header = json.loads(content[start : start + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise fail(f"the header is not valid JSON ({error}).") from None
    if header.get("format") != "dynsys-model":
        raise fail("not a dynsys model file (wrong format in the header).")
    if header.get("format_version", 0) > _FORMAT_VERSION:
        raise fail(
            f"the file has format version {header['format_version']}, newer than "
            f"this dynsys understands ({_FORMAT_VERSION}); upgrade dynsys."
        )
    payload = content[start + length :]
    if len(payload) != header["payload_bytes"]:
        raise fail(
            f"the file is truncated or damaged: {len(payload)} bytes of leaves, "
            f"the header says {header['payload_bytes']}."
        )
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise fail("the file is damaged: the checksum of the leaves does not match.")
    return header, payload


def _template(header: dict[str, Any]):
    cls = _BUILTIN[header["class"]]
    kwargs = {}
    for name, info in header["fields"].items():
        if info is None:
            kwargs[name] = None
        elif "static" in info:
            kwargs[name] = info["static"]
        else:
            dtype = jax.dtypes.canonicalize_dtype(np.dtype(info["dtype"]))
            kwargs[name] = jnp.zeros(info["shape"], dtype)
    return cls(**kwargs)


def load(path: str | os.PathLike, like: PyTree | None = None) -> PyTree:
    """Load a model written by `save`.

    The built-in models (`LinearSystem`, `StableLinearSystem`) load without a
    template. For any other class pass `like`, a model of the same class and
    structure (its values are ignored); its leaves' shapes and dtypes must match the
    file's.

    **Arguments:**

    - `path`: a file written by `dynsys.save`.
    - `like`: a template model; required for classes that are not built in.

    **Returns:**

    The model.

    **Raises:**

    `ValueError` for a missing, foreign, truncated or damaged file, a file written
    from another class than `like`, or shapes that do not match `like`.

    **Example:**

    ```python
    class Gain(eqx.Module):
        k: jax.Array

    dynsys.save("gain.dynsys", Gain(jnp.array(2.0)))
    dynsys.load("gain.dynsys", like=Gain(jnp.array(0.0))).k  # 2.0
    ```
    """
    path = pathlib.Path(path)
    header, payload = _read(path)
    name = header["class"]
    if like is None:
        if name not in _BUILTIN:
            raise ValueError(
                f"load(path={str(path)!r}): the file holds a {name}, which is not "
                "built into dynsys; pass a template model of that class as like=."
            )
        like = _template(header)
    elif _class_name(like) != name:
        raise ValueError(
            f"load(like=...): the file holds a {name}, but like is a "
            f"{_class_name(like)}."
        )
    expected = header["leaves"]
    actual = [_leaf_info(leaf) for leaf in jax.tree.leaves(like)]
    if len(expected) != len(actual):
        raise ValueError(
            f"load(like=...): the file has {len(expected)} leaves, like has "
            f"{len(actual)}."
        )
    for k, (want, have) in enumerate(zip(expected, actual)):
        if want.get("shape") != have.get("shape"):
            raise ValueError(
                f"load(like=...): leaf {k} has shape {tuple(want.get('shape', ()))} in "
                f"the file but {tuple(have.get('shape', ()))} in like."
            )
    try:
        return eqx.tree_deserialise_leaves(io.BytesIO(payload), like)
    except Exception as error:  # a damaged payload that passed the checksum
        raise ValueError(
            f"load(path={str(path)!r}): could not read the leaves ({error})."
        ) from None
