"""`load_dataset`: a `Dataset` from a `.npz` or `.csv` file, column roles by name."""

import os
import pathlib
from collections.abc import Sequence

import numpy as np

from .dataset import Dataset
from .files import check_regular_file, file_error, read_csv, read_npz


def load_dataset(
    path: str | os.PathLike,
    *,
    states: Sequence[str] | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    trajectory: str | None = "trajectory",
    time: str | None = "time",
) -> Dataset:
    """Read a `Dataset` from a `.npz` or `.csv` file.

    **The `.csv` long format.** One header line, then one row per sample:

    ```
    trajectory,time,x0,x1,u0,y0
    0,0.0,1.0,0.0,0.5,1.0
    0,0.1,0.99,-0.1,0.2,0.99
    0,0.2,0.97,-0.19,,
    1,0.0,-1.0,0.3,0.1,-1.0
    ...
    ```

    - `trajectory`: an identifier (any text); rows with the same identifier form one
        trajectory (experiment), in file order. Trajectories may have different
        numbers of rows; they share their times (a shorter one's times are the first
        of the longest one's).
    - `time`: the sample time.
    - Column roles: `states`, `inputs` and `outputs` name their columns, in order.
        A role not given takes the columns named like `x`, `x0`, `x_pos` (states),
        `u...` (inputs) and `y...` (outputs): the letter alone or followed by a digit
        or `_`. Other columns are ignored.
    - With states, a trajectory of `T_i` steps has `T_i + 1` rows; the input and
        output on a row belong to that row's time (they act between that state and
        the next), so the last row has none (leave those cells empty). Without
        states (outputs only), every row has its input and output: `T_i` rows.

    **The `.npz` format** holds the arrays `xs (N, T+1, n)`, `us (N, T, m)`,
    `ys (N, T, p)` (each optional, at least one of `xs`, `ys`), `ts`, `lengths (N,)`
    (each trajectory's `T_i`, the arrays being zero-padded to the longest; absent
    means all `T`), and `state_names`, `input_names`, `output_names`. Other arrays
    are ignored and never decompressed; an array whose declared size is out of
    proportion to the file (a "zip bomb") is refused before it is read. With
    `states`, `inputs` or `outputs`, the named columns of `xs`, `us`, `ys` are kept.

    **Arguments:**

    - `path`: a `.npz` or `.csv` file.
    - `states`, `inputs`, `outputs`: the names of the columns of each role.
    - `trajectory`, `time`: for `.csv`, the names of the trajectory and time columns;
        `None` when the file has no such column (one trajectory; step indices).

    **Returns:**

    A `Dataset`.

    **Raises:**

    `ValueError` (one line, naming the file or the argument) for a missing file, a
    directory, FIFO or device, an unreadable or oversized `.npz`, a cell that is not
    a number (with its line and column), a column named twice in the header, a role
    naming a missing column or a column already in another role, and for every
    `Dataset` check (non-finite values, lengths, no rows).

    **Example:**

    ```python
    data = dynsys.Dataset(jnp.ones((2, 4, 2)), jnp.zeros((2, 3, 1)))
    data.save("data.csv")
    dynsys.load_dataset("data.csv").xs.shape  # (2, 4, 2)
    ```
    """
    path = pathlib.Path(path)
    size = check_regular_file(path)
    parts = _parts(path, size, states, inputs, outputs, trajectory, time)
    return _dataset(path, parts)


def _parts(path, size, states, inputs, outputs, trajectory, time) -> dict:
    """The arrays and names of the file, read by its suffix (`.csv` or `.npz`)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_csv(
            path,
            states=states,
            inputs=inputs,
            outputs=outputs,
            trajectory=trajectory,
            time=time,
        )
    if suffix == ".npz":
        return _npz_parts(path, size, states, inputs, outputs)
    raise ValueError(
        f"load_dataset(path=...): expected a .npz or .csv file, got {str(path)!r}."
    )


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
            f"{arrays['_found'].tolist()}).",
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
                    f"(it has {arrays['_found'].tolist()})."
                )
            available = names or [
                f"{'xuy'[('xs', 'us', 'ys').index(key)]}{j}"
                for j in range(array.shape[-1])
            ]
            missing = [name for name in wanted if name not in available]
            if missing or isinstance(wanted, str):
                raise ValueError(
                    f"load_dataset({argument}=...): no column(s) {missing or wanted!r} "
                    f"in {key!r} of {str(path)!r}; columns found: {available}."
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
