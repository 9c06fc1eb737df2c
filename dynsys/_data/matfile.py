"""MATLAB `.mat` files through `scipy.io` (an optional extra: scipy), read with
bounded memory: the variables are listed from their headers (`mat_v5`, or `whosmat`
for a v4 file, which holds no compressed data), their sizes checked against the
budget `.npz` files have, and only the variables the roles use are read
(`loadmat(variable_names=...)`) and converted to float64."""

import math
import pathlib

import numpy as np

from .columns import plan_columns
from .files import expansion_limit, file_error
from .mat_v5 import check_expansion, list_variables, Variable
from .quoting import quoted, quoted_list
from .table import Table, table_parts


# The MATLAB classes of numbers (whosmat's names); others (text, cells, structs,
# sparse matrices, objects) give no column.
_NUMBER_CLASSES = (
    "double", "single", "logical", "int8", "uint8", "int16", "uint16",
    "int32", "uint32", "int64", "uint64",
)  # fmt: skip
# What a damaged file raises while scipy reads it (wrapped into one-line errors).
_READ_ERRORS = (ValueError, OSError, NotImplementedError, TypeError, EOFError)


def _scipy_io():
    try:
        import scipy.io
    except ImportError:
        raise ValueError(
            "load_dataset(path=...): reading .mat files needs scipy: "
            "pip install dynsys[mat]."
        ) from None
    return scipy.io


def _listing(path, size: int, scipy_io) -> list[Variable]:
    """The variables, from their headers alone."""
    variables = list_variables(path, size)
    if variables is not None:
        return variables
    try:
        return [
            Variable(str(name), tuple(int(n) for n in shape), str(kind), False)
            for name, shape, kind in scipy_io.whosmat(path)
        ]
    except _READ_ERRORS as error:
        raise file_error(path, f"not a readable .mat file ({error}).") from None


def _layout(path, listing) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    """The columns the variables give, each as `(variable, column of it)`: a vector
    is one column named like the variable, a matrix `u` with one row per sample
    gives `u1`, `u2`, ...; and why each other variable gives none."""
    columns, skipped = {}, {}
    for name, shape, kind, _ in listing:
        if name.startswith("__"):
            continue
        if kind not in _NUMBER_CLASSES:
            skipped[name] = f"holds {kind} data, not numbers"
        elif len(shape) != 2:
            skipped[name] = f"is a {len(shape)}-D array (shape {shape})"
        elif 0 in shape:
            skipped[name] = f"is empty (shape {shape})"
        else:
            width = 1 if shape[0] == 1 else shape[1]  # a row vector is one column
            for j in range(width):
                columns[name if width == 1 else f"{name}{j + 1}"] = (name, j)
    if not columns:
        raise file_error(path, "the .mat file holds no numeric vector or matrix.")
    return columns, skipped


def _refuse_skipped(path, wanted: dict, time, skipped: dict) -> None:
    """A role or `time=` naming a variable that gives no column: say why."""
    named = [(a, n) for a, names in wanted.items() if names for n in names]
    if isinstance(time, str):
        named.append(("time", time))
    for argument, name in named:
        if name in skipped:
            raise ValueError(
                f"load_dataset({argument}=...): variable {quoted(name)} of "
                f"{str(path)!r} {skipped[name]}; dynsys reads vectors and matrices "
                "of numbers, one row per sample."
            )


def _complex(path, name: str) -> ValueError:
    return file_error(
        path,
        f"variable {quoted(name)} holds complex values; dynsys takes real signals: "
        f"save real({name}) or abs({name}) in the file instead.",
    )


def _check_sizes(path, listing, variables: list[str], limit: int) -> None:
    """The used variables, as float64, take at most `limit` bytes in all (from their
    headers, before anything is read)."""
    shapes = {v.name: v.shape for v in listing if v.name in variables}
    sizes = {name: 8 * math.prod(shape) for name, shape in shapes.items()}
    total = sum(sizes.values())
    if total > limit:
        largest = max(sizes, key=sizes.__getitem__)
        raise file_error(
            path,
            f"its variables {quoted_list(sorted(sizes))} would take {total} bytes in "
            f"all as float64 (largest {quoted(largest)}, shape {shapes[largest]}), "
            f"more than the {limit} allowed for this file; refused (a damaged or "
            "hostile file).",
        )


def _read_variables(path, scipy_io, listing, variables: list[str]) -> dict:
    """The used variables as arrays of real numbers, each of its listed shape."""
    try:
        loaded = scipy_io.loadmat(path, variable_names=variables)
    except _READ_ERRORS as error:
        raise file_error(path, f"not a readable .mat file ({error}).") from None
    shapes = {v.name: v.shape for v in listing}
    arrays = {}
    for name in variables:
        value = loaded.get(name)
        if not isinstance(value, np.ndarray) or value.shape != shapes[name]:
            raise file_error(
                path, f"variable {quoted(name)} does not match its header; refused."
            )
        if value.dtype.kind == "c":
            raise _complex(path, name)
        if value.dtype.kind not in "fiub":
            raise file_error(
                path,
                f"variable {quoted(name)} holds {value.dtype} values, not numbers.",
            )
        arrays[name] = value.T if value.shape[0] == 1 else value
    return arrays


def read_mat(path: pathlib.Path, size: int, roles: dict, *, time, dt, units) -> dict:
    """The `Dataset` arguments of one experiment stored as `.mat` variables."""
    scipy_io = _scipy_io()
    listing = _listing(path, size, scipy_io)
    columns, skipped = _layout(path, listing)
    wanted = {
        a: list(v) if isinstance(v, list | tuple) else v for a, v in roles.items()
    }
    for argument, names in wanted.items():  # a matrix variable named for a role
        if names is not None and not isinstance(names, str):
            wanted[argument] = [
                c
                for name in names
                for c in ([name] if name in columns else _expanded(columns, name))
            ]
    _refuse_skipped(path, wanted, time, skipped)
    plan = plan_columns(
        "load_dataset", repr(str(path)), list(columns), trajectory=False,
        time=time, units=units, **wanted,
    )  # fmt: skip
    used = [*plan.roles["states"], *plan.roles["inputs"], *plan.roles["outputs"]]
    read = [*used, *([plan.time] if plan.time is not None else [])]
    variables = list(dict.fromkeys(columns[column][0] for column in read))
    for variable in listing:
        if variable.name in variables and variable.is_complex:
            raise _complex(path, variable.name)
    limit = expansion_limit(size)
    _check_sizes(path, listing, variables, limit)
    check_expansion(path, set(variables), limit)
    arrays = _read_variables(path, scipy_io, listing, variables)

    def column(name: str) -> np.ndarray:
        variable, j = columns[name]
        return arrays[variable][:, j].astype(np.float64)

    counts = {name: arrays[columns[name][0]].shape[0] for name in used}
    if len(set(counts.values())) > 1:
        raise file_error(
            path,
            f"the variables have different numbers of samples ({counts}); one "
            "experiment's variables must have one row per sample each.",
        )
    values = np.column_stack([column(name) for name in used])
    times = None if plan.time is None else column(plan.time)
    rows = values.shape[0]
    table = Table(values, np.arange(rows), None, [""], times, [], row_word="row")
    return table_parts(f"load_dataset(path={str(path)!r}): ", plan, table, dt)


def _expanded(columns: dict, name: str) -> list[str]:
    """The columns `name1`, `name2`, ... of a matrix variable `name` (or `[name]`
    when there are none, for the error to name it)."""
    found, j = [], 1
    while f"{name}{j}" in columns:
        found.append(f"{name}{j}")
        j += 1
    return found or [name]
