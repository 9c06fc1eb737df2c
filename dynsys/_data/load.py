"""`load_dataset`: a `Dataset` from a file (`.csv`, `.dat`, `.txt`, `.npz`, `.mat`),
column roles by name."""

import math
import os
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from .._type_checks import checks_own_arguments
from .columns import plan_columns, with_units
from .dataset import Dataset
from .files import check_regular_file, file_error, read_npz
from .quoting import quoted_list
from .reader import read_table
from .table import table_parts
from .text_files import read_header, TEXT_SUFFIXES


@checks_own_arguments
def load_dataset(
    path: str | os.PathLike,
    *,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    trajectory: str | bool | None = None,
    time: str | bool | None = None,
    dt: float | None = None,
    units: Mapping[str, str] | Sequence[str | None] | None = None,
) -> Dataset:
    """Read a `Dataset` from a file as it comes: `.csv`, `.dat`/`.txt`, `.npz`, `.mat`.

    **Text tables** (`.csv` comma-separated; `.dat`/`.txt` separated by commas when
    line 1 has one, else by spaces or tabs). Line 1 names the columns (a first line
    of numbers only means no header: the columns are then named `"1"`, `"2"`, ...);
    then one row per sample. Unnamed empty columns at the end of the header (every
    line ending with a comma) are ignored, and so are blank lines.

    - One experiment per file unless there is a `trajectory` column: rows with the
        same identifier form one experiment, in file order (the long format
        `Dataset.save` writes; see docs/fitting.md, "Reading measured files").
    - The time column, when there is one, gives the sample time `dt` (its step). It
        is the column named by `time=`, else the one column named `t`, `time`,
        `times` or `timestamp`, alone or with a unit (`t_s`, `time_ms`, `Time (s)`,
        `t [min]`; any case). No other name is taken for a time: `k`, `n`, `sample`
        or `index` are sample indices. Times are converted to seconds from the
        unit in the name (s, ms, us/µs, ns, min, h); another unit in parentheses
        or brackets (`t [days]`) is refused. Times must increase, each step within 1 % of
        the median step (the stored times are then the uniform grid of the mean
        step); else the error
        names the line. Without a time column, `dt=` gives the sample time, else
        the times are the step indices (`ts` is `None`).
    - Column roles: `inputs`, `outputs` and `states` name their columns, in order.
        A role not given takes the columns named like `u`, `u0`, `u_force` (inputs),
        `y...` (outputs), `x...` (states): the letter alone or followed by a digit or
        `_`. Other columns are ignored.
    - Units are part of a column's name when written in parentheses or brackets at
        its end: `temp (°C)`, `v [m/s]` (not `temp_C`); figures show them. `units=`
        adds them for a file whose header has none.
    - With states, an experiment of `T_i` steps has `T_i + 1` rows; the input and
        output on a row belong to that row's time, so the last row has none (leave
        those cells empty). Without states, every row has its input and output.

    **`.npz`** files hold `xs`, `us`, `ys` (zero-padded), `ts`, `lengths` and the
    channel names, as `Dataset.save` writes them; **MATLAB `.mat`** files (needs
    `pip install dynsys[mat]`) name one vector or matrix variable per role. Both are
    described in docs/fitting.md.

    **Arguments:**

    - `path`: the file.
    - `inputs`, `outputs`, `states`: the names of the columns of each role.
    - `trajectory`, `time`: the name of the trajectory or time column; `None` (the
        default) to recognise it by name as above, `False` for none.
    - `dt`: the sample time when the file has no time column (with one, it must
        agree with it).
    - `units`: a mapping column -> unit (`{"temp": "°C"}`) or one unit (or `None`)
        per used column in the order inputs, outputs, states; each becomes part of
        the channel's name (`"temp (°C)"`).

    **Returns:**

    A `Dataset`.

    **Raises:**

    `ValueError` (one line, naming the file or the argument, and what to pass) for
    a missing file, a directory, FIFO or device, an unreadable or oversized `.npz`,
    a cell that is not a number (with its line and column), a column named twice
    in the header, roles that cannot be inferred (pass `inputs=`/`outputs=`), a
    role naming a missing column or a column already in another role, a time column
    that does not increase uniformly, and for every `Dataset` check (non-finite
    values, lengths, no rows).

    **Example:**

    ```python
    data = dynsys.load_dataset(
        "data/real/heating.csv", inputs=["drive_V"], outputs=["temp_C"]
    )
    data.dt, data.lengths  # (2.0, (801,)): the time column t_s steps by 2 s
    ```
    """
    path = pathlib.Path(path)
    size = check_regular_file(path)
    dt = _checked_dt(dt)
    roles = {"states": states, "inputs": inputs, "outputs": outputs}
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        header = read_header(path)
        plan = plan_columns(
            "load_dataset", repr(str(path)), header.names,
            trajectory=trajectory, time=time, units=units, **roles,
        )  # fmt: skip
        table = read_table(path, header, plan)
        parts = table_parts(f"load_dataset(path={str(path)!r}): ", plan, table, dt)
    elif suffix == ".mat":
        from .matfile import read_mat

        parts = read_mat(path, size, roles, time=time, dt=dt, units=units)
    elif suffix == ".npz":
        parts = _npz_parts(path, size, states, inputs, outputs)
        parts = _npz_units_and_dt(path, parts, units, dt)
    else:
        raise ValueError(
            "load_dataset(path=...): expected a .csv, .dat, .txt, .npz or .mat file, "
            f"got {str(path)!r}."
        )
    return _dataset(path, parts)


def _checked_dt(dt) -> float | None:
    if dt is None:
        return None
    if isinstance(dt, bool) or not isinstance(dt, int | float | np.number):
        raise ValueError(f"load_dataset(dt=...): expected a number, got {dt!r}.")
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(
            f"load_dataset(dt=...): the sample time must be positive and finite, "
            f"got {dt!r}."
        )
    return float(dt)


def _npz_units_and_dt(path, parts: dict, units, dt) -> dict:
    """Add `units` to the names and make `ts` from `dt` when the file has none."""
    keys = {"states": ("xs", "state_names"), "inputs": ("us", "input_names")}
    keys["outputs"] = ("ys", "output_names")
    names = {}
    for argument, (key, names_key) in keys.items():
        array = parts.get(key)
        width = 0 if array is None else array.shape[-1]
        default = [f"{'xuy'[list(keys).index(argument)]}{j}" for j in range(width)]
        names[argument] = parts.get(names_key) or default
    if units is not None:
        for argument, named in with_units("load_dataset", names, units).items():
            parts[keys[argument][1]] = named or None
    if dt is not None:
        has_states = parts.get("xs") is not None
        padded = parts["xs"] if has_states else parts["ys"]
        lengths = parts.get("lengths")
        points = max(lengths) + has_states if lengths else padded.shape[1]
        if parts.get("ts") is None:
            parts["ts"] = dt * np.arange(points, dtype=np.float64)
        else:
            steps = np.diff(np.asarray(parts["ts"], dtype=np.float64))
            if steps.size and not np.allclose(steps, dt, rtol=1e-6):
                raise file_error(
                    path,
                    f"dt={dt:g} disagrees with the file's times 'ts' (steps "
                    f"{steps.min():g} to {steps.max():g}); leave out dt.",
                )
    return parts


def _dataset(path, parts: dict) -> Dataset:
    """The `Dataset` of the parts; its errors name the file."""
    try:
        return Dataset(
            parts["xs"],
            parts["us"],
            parts["ts"],
            ys=parts["ys"],
            state_names=parts["state_names"],
            input_names=parts["input_names"],
            output_names=parts["output_names"],
            lengths=parts.get("lengths"),
        )
    except ValueError as error:
        raise file_error(path, str(error)) from None


def _npz_parts(path, size, states, inputs, outputs) -> dict:
    arrays = read_npz(path, size)
    if "xs" not in arrays and "ys" not in arrays:
        raise file_error(
            path,
            "the file has no 'xs' (states) or 'ys' (outputs) array (it has "
            f"{quoted_list(arrays['_found'].tolist())}).",
        )
    parts: dict = {"ts": arrays.get("ts"), "lengths": None}
    if "lengths" in arrays:
        lengths = arrays["lengths"]
        if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
            raise file_error(
                path,
                f"'lengths' must be 1-D integers, got {lengths.dtype} {lengths.shape}.",
            )
        parts["lengths"] = lengths.tolist()
    for key, names_key, argument, wanted in (
        ("xs", "state_names", "states", states),
        ("us", "input_names", "inputs", inputs),
        ("ys", "output_names", "outputs", outputs),
    ):
        array = arrays.get(key)
        names = arrays.get(names_key)
        if names is not None:
            if names.dtype.kind not in "US" or names.ndim != 1:
                raise file_error(
                    path,
                    f"{names_key!r} must be a 1-D array of text, got {names.dtype} "
                    f"{names.shape}.",
                )
            names = [str(name) for name in names.tolist()]
        if wanted is not None:
            if array is None:
                raise ValueError(
                    f"load_dataset({argument}=...): {str(path)!r} has no {key!r} array "
                    f"(it has {quoted_list(arrays['_found'].tolist())})."
                )
            available = names or [
                f"{'xuy'[('xs', 'us', 'ys').index(key)]}{j}"
                for j in range(array.shape[-1])
            ]
            missing = [name for name in wanted if name not in available]
            if missing or isinstance(wanted, str):
                raise ValueError(
                    f"load_dataset({argument}=...): no column(s) {missing or wanted!r} "
                    f"in {key!r} of {str(path)!r}; columns found: "
                    f"{quoted_list(available)}."
                )
            if len(set(wanted)) != len(wanted):
                raise ValueError(
                    f"load_dataset({argument}=...): a column is named twice in "
                    f"{list(wanted)}."
                )
            index = [available.index(name) for name in wanted]
            array, names = array[..., index], list(wanted)
        parts[key], parts[names_key] = array, names
    return parts
