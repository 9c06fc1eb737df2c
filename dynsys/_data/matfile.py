"""MATLAB `.mat` files through `scipy.io.loadmat` (an optional extra: scipy)."""

import pathlib

import numpy as np

from .columns import plan_columns
from .files import file_error
from .table import Table, table_parts


def _columns(path, variables: dict) -> dict[str, np.ndarray]:
    """Each numeric variable as columns: a vector is one column named like the
    variable, a matrix `u` with one row per sample gives `u1`, `u2`, ..."""
    columns = {}
    for name, value in variables.items():
        if name.startswith("__") or not isinstance(value, np.ndarray):
            continue
        if value.dtype.kind not in "fiub" or value.ndim != 2 or 0 in value.shape:
            continue
        if value.shape[0] == 1:  # a row vector
            value = value.T
        if value.shape[1] == 1:
            columns[name] = value[:, 0].astype(np.float64)
        else:
            for j in range(value.shape[1]):
                columns[f"{name}{j + 1}"] = value[:, j].astype(np.float64)
    if not columns:
        raise file_error(path, "the .mat file holds no numeric vector or matrix.")
    return columns


def read_mat(path: pathlib.Path, roles: dict, *, time, dt, units) -> dict:
    """The `Dataset` arguments of one experiment stored as `.mat` variables."""
    try:
        import scipy.io
    except ImportError:
        raise ValueError(
            f"load_dataset(path={str(path)!r}): reading .mat files needs scipy: "
            "pip install dynsys[mat]."
        ) from None
    try:
        variables = scipy.io.loadmat(path)
    except (ValueError, OSError, NotImplementedError, TypeError) as error:
        raise file_error(path, f"not a readable .mat file ({error}).") from None
    columns = _columns(path, variables)
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
    plan = plan_columns(
        "load_dataset", repr(str(path)), list(columns), trajectory=False,
        time=time, units=units, **wanted,
    )  # fmt: skip
    used = [*plan.roles["states"], *plan.roles["inputs"], *plan.roles["outputs"]]
    counts = {name: columns[name].shape[0] for name in used}
    if len(set(counts.values())) > 1:
        raise file_error(
            path,
            f"the variables have different numbers of samples ({counts}); one "
            "experiment's variables must have one row per sample each.",
        )
    values = np.column_stack([columns[name] for name in used])
    times = None if plan.time is None else columns[plan.time]
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
