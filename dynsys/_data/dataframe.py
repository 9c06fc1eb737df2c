"""pandas DataFrames in and out of a `Dataset` (long format: one row per sample).

pandas is an optional extra (`pip install dynsys[dataframe]`), imported only here and
only when a DataFrame is made: `import dynsys` never imports it.
"""

import numpy as np

from .columns import plan_columns
from .quoting import quoted
from .table import Table, table_parts


_CALL = "Dataset.from_dataframe"


def frame_values(value, names):
    """`(array, names)` for a pandas DataFrame or Series (names from its columns
    unless given), else `(value, names)` unchanged. Duck-typed: no pandas import."""
    if not (hasattr(value, "to_numpy") and hasattr(value, "index")):
        return value, names
    columns = getattr(value, "columns", None)
    array = value.to_numpy()
    if columns is None:  # a Series: one channel
        array = array.reshape(-1, 1)
        columns = [value.name if value.name is not None else None]
    if names is None and all(column is not None for column in columns):
        names = [str(column) for column in columns]
    return array, names


def _is_dates(series) -> bool:
    """Whether a column holds datetimes (with or without a time zone) or durations."""
    return getattr(series.dtype, "kind", "O") in "mM"


def _numbers(frame, column, word: str) -> np.ndarray:
    """A column as float64: numbers as they are, datetimes (with a time zone or
    without) and durations as seconds from the first. Complex numbers are refused:
    casting them would drop their imaginary part."""
    series = frame[column]
    if _is_dates(series):
        # Differences of zone-aware datetimes are absolute (a daylight-saving change
        # is no jump); naive ones count as written.
        seconds = (series - series.iloc[0]) / np.timedelta64(1, "s")
        return np.asarray(seconds.to_numpy(dtype=np.float64, na_value=np.nan))
    values = series.to_numpy()
    if values.dtype.kind == "c":
        raise ValueError(
            f"{_CALL}(df=...): the {word} column {quoted(str(column))} holds complex "
            "values; dynsys takes real signals: pass .real or abs() of it explicitly."
        )
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{_CALL}(df=...): the {word} column {quoted(str(column))} holds "
            f"{values.dtype} values, not numbers."
        ) from None


def parts_from_dataframe(frame, *, inputs, outputs, states, time, trajectory, dt):
    """The arguments of `Dataset` for a DataFrame in long or plain format."""
    if not (hasattr(frame, "columns") and hasattr(frame, "iloc")):
        raise ValueError(
            f"{_CALL}(df=...): expected a pandas DataFrame, got {type(frame).__name__}."
        )
    labels = {str(column): column for column in frame.columns}
    header = list(labels)
    plan = plan_columns(
        _CALL, "the DataFrame", header, states=states, inputs=inputs,
        outputs=outputs, trajectory=trajectory, time=time,
        datetime_columns=[c for c in header if _is_dates(frame[labels[c]])],
    )  # fmt: skip
    roles = plan.roles
    columns = [*roles["states"], *roles["inputs"], *roles["outputs"]]
    values = np.column_stack(
        [_numbers(frame, labels[c], "data") for c in columns]
    ).reshape(len(frame), len(columns))
    lines = np.arange(len(frame), dtype=np.int64)
    states_count = len(roles["states"])
    blank = np.isnan(values)
    if blank[:, :states_count].any():
        row, j = (int(k) for k in np.argwhere(blank[:, :states_count])[0])
        raise ValueError(
            f"{_CALL}(df=...): row {row}: the state column {columns[j]!r} is empty "
            "(NaN); every state needs a value."
        )
    bad = [
        (int(row), header.index(columns[j]), columns[j], "nan")
        for row, j in np.argwhere(blank)
        if j >= states_count
    ]
    codes, idents = None, [""]
    if plan.trajectory is not None:
        import pandas as pd

        codes, uniques = pd.factorize(frame[labels[plan.trajectory]], sort=False)
        if (codes < 0).any():
            raise ValueError(
                f"{_CALL}(df=...): row {int(np.argmax(codes < 0))}: the trajectory "
                f"column {plan.trajectory!r} is empty."
            )
        codes, idents = codes.astype(np.int64), [str(u) for u in uniques]
    times = None
    if plan.time is not None:
        times = _numbers(frame, labels[plan.time], "time")
    table = Table(values, lines, codes, idents, times, bad, row_word="row")
    return table_parts(f"{_CALL}(df=...): ", plan, table, dt)


def dataframe_of(data):
    """The long-format DataFrame of a `Dataset`: `trajectory`, `time` (when the
    dataset has times), then the states, inputs and outputs under their names; with
    states, a trajectory's last row has NaN inputs and outputs."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            "Dataset.to_dataframe needs pandas: pip install dynsys[dataframe]"
        ) from None
    extra = data.xs is not None
    columns: dict = {"trajectory": [], "time": []}
    names = (*data.state_names, *data.input_names, *data.output_names)
    blocks = []
    ts = None if data.ts is None else np.asarray(data.ts, dtype=np.float64)
    for i, T in enumerate(data.lengths):
        rows = T + extra
        parts = []
        if data.xs is not None:
            parts.append(np.asarray(data.xs[i, :rows], dtype=np.float64))
        for field in (data.us, data.ys):
            if field is not None:
                block = np.full((rows, field.shape[2]), np.nan)
                block[:T] = np.asarray(field[i, :T], dtype=np.float64)
                parts.append(block)
        blocks.append(np.concatenate(parts, axis=1))
        columns["trajectory"].append(np.full(rows, i))
        columns["time"].append(ts[:rows] if ts is not None else None)
    values = np.concatenate(blocks)
    frame = {"trajectory": np.concatenate(columns["trajectory"])}
    if ts is not None:
        frame["time"] = np.concatenate(columns["time"])
    for j, name in enumerate(names):
        frame[name] = values[:, j]
    return pd.DataFrame(frame)
