"""`Dataset`: experiments of states, inputs and measured outputs, possibly of
different lengths (stored zero-padded, with their lengths)."""

import os
import pathlib
from collections.abc import Sequence

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, Real

from .._type_checks import checks_own_arguments
from .construction import (
    _cast_finite,
    _check_lengths,
    _check_padding,
    _check_unique,
    _error,
    _experiments,
    _lengths,
    _NAME_ARGUMENT,
    _names,
    _pad,
    _ROLES,
    _times,
)
from .dataframe import dataframe_of, frame_values, parts_from_dataframe
from .files import write_npz
from .slicing import cut, join_parts, split_bounds, window_bounds
from .text_files import write_csv


class Dataset(eqx.Module):
    """Experiments on one system: states, inputs, measured outputs and their times.

    Experiments may have different lengths. They are stored padded with zeros to the
    longest one, `T = max T_i`; `lengths` holds each `T_i` and `step_mask` says which
    steps are real. The values are checked on construction (finite, consistent
    shapes). A `Dataset` is a pytree, so it can be passed through `jax.jit`.

    **Arguments:**

    - `xs`: states $x_0 \\dots x_{T_i}$, shape `(N, T+1, n)`, one trajectory
        `(T+1, n)`, or a sequence of `N` arrays `(T_i+1, n)`; `None` for data with
        measured outputs only.
    - `us`: inputs $u_0 \\dots u_{T_i-1}$, shape `(N, T, m)`, `(T, m)` or a sequence
        of arrays `(T_i, m)`; `None` for data without input.
    - `ts`: the sample times, strictly increasing, shared by all experiments (a
        shorter one uses the first of them). With states, shape `(T+1,)`: `ts[t]` is
        the time of $x_t$ (and of $u_t$, $y_t$). Without states, shape `(T,)`: the
        times of $u_t$, $y_t$. `None` means the step indices.
    - `ys`: measured outputs $y_0 \\dots y_{T_i-1}$, aligned with the inputs (the
        convention of `Trajectory.ys`), shape `(N, T, p)`, `(T, p)` or a sequence of
        arrays `(T_i, p)`; `None` when the states are measured.
    - `state_names`, `input_names`, `output_names`: column names (default `x0, ...`,
        `u0, ...`, `y0, ...`), all different; used by the `.csv` format and in error
        messages.
    - `lengths`: only for arrays that are already padded: each experiment's number
        of steps `T_i`; values past it are ignored (stored as zeros).

    At least one of `xs` and `ys` is needed.

    **Raises:**

    `ValueError` naming the argument and, for a bad value, its trajectory, time index
    and column; also for an empty dataset, widths that differ between trajectories,
    and lengths that differ between the states, inputs and outputs of one trajectory.

    **Example:**

    ```python
    us = [jnp.ones((10, 1)), jnp.ones((7, 1))]          # two experiments
    ys = [jnp.zeros((10, 2)), jnp.zeros((7, 2))]
    data = dynsys.Dataset(us=us, ys=ys)
    data.lengths, data.num_steps, data.output_size       # (10, 7), 10, 2
    data.step_mask.shape                                 # (2, 10)
    ```
    """

    # T1 stands for T+1 (a field cannot use a symbolic axis).
    xs: Float[Array, "N T1 n"] | None
    us: Float[Array, "N T m"] | None
    ys: Float[Array, "N T p"] | None
    ts: Real[Array, " S"] | None
    lengths: tuple[int, ...] = eqx.field(static=True)
    state_names: tuple[str, ...] = eqx.field(static=True)
    input_names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)

    @checks_own_arguments
    def __init__(
        self,
        xs: Float[ArrayLike, "N T1 n"]
        | Sequence[Float[ArrayLike, "_ n"]]
        | None = None,
        us: Float[ArrayLike, "N T m"] | Sequence[Float[ArrayLike, "_ m"]] | None = None,
        ts: Real[ArrayLike, " S"] | None = None,
        *,
        ys: Float[ArrayLike, "N T p"] | Sequence[Float[ArrayLike, "_ p"]] | None = None,
        state_names: Sequence[str] | None = None,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        lengths: Sequence[int] | None = None,
    ):
        if xs is None and ys is None:
            raise _error(
                "xs",
                "need states xs or measured outputs ys (or both); got neither.",
            )
        if lengths is not None:
            lengths = _check_lengths(lengths)
        # pandas DataFrames or Series: their values, and their column names.
        xs, state_names = frame_values(xs, state_names)
        us, input_names = frame_values(us, input_names)
        ys, output_names = frame_values(ys, output_names)
        given = {"xs": xs, "us": us, "ys": ys}
        roles, whole = {}, {}
        for name, value in given.items():
            if value is not None:
                roles[name], whole[name] = _experiments(name, value, lengths)
        self.lengths = _lengths(roles, whole)
        _check_padding(roles, self.lengths)
        names_given = {"xs": state_names, "us": input_names, "ys": output_names}
        names = {}
        for name, given_names in names_given.items():
            if name not in roles:
                if given_names:
                    raise _error(
                        _NAME_ARGUMENT[name], f"names given but {name} is None."
                    )
                names[name] = ()
            else:
                names[name] = _names(given_names, name, roles[name][0].shape[1])
        _check_unique({_NAME_ARGUMENT[k]: v for k, v in names.items()})
        self.state_names = names["xs"]
        self.input_names = names["us"]
        self.output_names = names["ys"]
        T = max(self.lengths)
        stored = {}
        for name in ("xs", "us", "ys"):
            if name in roles:
                cast = _cast_finite(name, roles[name], names[name])
                # device_put: no per-shape compilation, unlike jnp.asarray.
                stored[name] = jax.device_put(_pad(cast, T + _ROLES[name][1]))
            else:
                stored[name] = None
        self.xs, self.us, self.ys = stored["xs"], stored["us"], stored["ys"]
        has_states = "xs" in roles
        self.ts = (
            None
            if ts is None
            else jax.device_put(_times(ts, T + has_states, has_states))
        )

    @property
    def num_trajectories(self) -> int:
        """The number of trajectories (experiments) `N`."""
        return len(self.lengths)

    @property
    def num_steps(self) -> int:
        """The number of steps `T` of the longest trajectory (the padded length)."""
        return max(self.lengths)

    @property
    def state_size(self) -> int:
        """The number of state columns `n` (0 without states)."""
        return 0 if self.xs is None else self.xs.shape[2]

    @property
    def input_size(self) -> int:
        """The number of input columns `m` (0 without inputs)."""
        return 0 if self.us is None else self.us.shape[2]

    @property
    def output_size(self) -> int:
        """The number of measured output columns `p` (0 without outputs)."""
        return 0 if self.ys is None else self.ys.shape[2]

    @property
    def is_ragged(self) -> bool:
        """Whether the trajectories have different lengths."""
        return len(set(self.lengths)) > 1

    @property
    def step_mask(self) -> Bool[Array, "N T"]:
        """`True` where step `t` is real, `t < T_i`: a valid $u_t$, $y_t$ and
        prediction target $x_{t+1}$; `False` in the padding."""
        lengths = np.asarray(self.lengths)
        return jax.device_put(np.arange(self.num_steps)[None, :] < lengths[:, None])

    @property
    def dt(self) -> float | None:
        """The sampling period when `ts` is given and uniformly spaced (up to the
        rounding of the stored times), else `None`."""
        if self.ts is None or self.ts.shape[0] < 2:
            return None
        ts = np.asarray(self.ts, dtype=np.float64)
        steps = np.diff(ts)
        rounding = 4 * np.finfo(self.ts.dtype).eps * np.abs(ts).max()
        if np.allclose(steps, steps[0], rtol=1e-9, atol=rounding):
            return float((ts[-1] - ts[0]) / (len(ts) - 1))
        return None

    def _names_kwargs(self) -> dict:
        return dict(
            state_names=self.state_names or None,
            input_names=self.input_names or None,
            output_names=self.output_names or None,
        )

    @checks_own_arguments
    def experiment(self, i: int) -> "Dataset":
        """Trajectory `i` alone, without padding, as a one-trajectory `Dataset`."""
        N = self.num_trajectories
        if (
            isinstance(i, bool)
            or not isinstance(i, int | np.integer)
            or not -N <= i < N
        ):
            raise ValueError(
                f"Dataset.experiment(i=...): expected an integer in [0, {N - 1}], "
                f"got {i!r}."
            )
        i = int(i) % N
        T_i = self.lengths[i]
        extra = 0 if self.xs is None else 1
        return Dataset(
            None if self.xs is None else self.xs[i, : T_i + 1],
            None if self.us is None else self.us[i, :T_i],
            None if self.ts is None else self.ts[: T_i + extra],
            ys=None if self.ys is None else self.ys[i, :T_i],
            **self._names_kwargs(),
        )

    def __getitem__(self, index) -> "Dataset":
        """The trajectories `index` (an int, slice or index array) as a `Dataset`,
        padded to the longest of them."""
        index = np.atleast_1d(np.arange(self.num_trajectories)[index])
        lengths = [self.lengths[k] for k in index]
        T = max(lengths) if lengths else 0
        extra = 0 if self.xs is None else 1

        def cut(array, steps):
            return None if array is None else array[index, :steps]

        return Dataset(
            cut(self.xs, T + 1),
            cut(self.us, T),
            None if self.ts is None else self.ts[: T + extra],
            ys=cut(self.ys, T),
            lengths=lengths,
            **self._names_kwargs(),
        )

    @checks_own_arguments
    def split(
        self, validation: float | int = 0.2, *, key: PRNGKeyArray | None = None
    ) -> tuple["Dataset", "Dataset"]:
        """Split the trajectories into a training and a validation dataset.

        **Arguments:**

        - `validation`: the fraction (a float in `(0, 1)`) or the number (an int) of
            trajectories to hold out; at least one trajectory goes to each side.
        - `key`: a PRNG key to shuffle the trajectories first; `None` holds out the
            last ones.

        **Returns:**

        `(train, validation)` datasets (outputs, names and lengths kept).

        **Raises:**

        `ValueError` if the dataset has fewer than 2 trajectories or `validation` is
        out of range.
        """
        N = self.num_trajectories
        if N < 2:
            raise ValueError(
                f"Dataset.split: need at least 2 trajectories to split, got {N}."
            )
        if isinstance(validation, bool) or not isinstance(validation, int | float):
            raise ValueError(
                "Dataset.split(validation=...): expected a fraction or a count, got "
                f"{validation!r}."
            )
        if isinstance(validation, float):
            if not 0.0 < validation < 1.0:
                raise ValueError(
                    "Dataset.split(validation=...): a fraction must be in (0, 1), "
                    f"got {validation}."
                )
            count = min(max(round(validation * N), 1), N - 1)
        else:
            if not 1 <= validation <= N - 1:
                raise ValueError(
                    "Dataset.split(validation=...): a count must be in "
                    f"[1, {N - 1}] for {N} trajectories, got {validation}."
                )
            count = validation
        order = np.arange(N)
        if key is not None:
            order = np.asarray(jax.random.permutation(key, N))
        return self[order[: N - count]], self[order[N - count :]]

    @checks_own_arguments
    def window(self, start: int | None = None, stop: int | None = None) -> "Dataset":
        """Samples `[start, stop)` of every experiment, as a `Dataset`.

        Indices count samples (steps) as Python slices do, in each experiment
        separately: `data.window(-200, None)` is the last 200 samples of each, of
        whatever length. With states, the window of steps `[a, b)` keeps the states
        $x_a \\dots x_b$. Names, units and the sample time are kept; the times are
        those of the window when every experiment's window starts at the same
        sample, else the uniform grid from the first time.

        **Arguments:**

        - `start`, `stop`: sample indices (negative: from the end; `None`: the
            start or end of each experiment).

        **Returns:**

        A `Dataset` with the same channels.

        **Raises:**

        `ValueError` naming the experiment when the window keeps none of its
        samples, or for an index that is not an integer.

        **Example:**

        ```python
        data = dynsys.Dataset(us=jnp.ones((2, 10, 1)), ys=jnp.zeros((2, 10, 1)))
        data.window(2, -3).lengths   # (5, 5)
        ```
        """
        return Dataset(**cut(self, window_bounds(self, start, stop)))

    @checks_own_arguments
    def split_time(
        self, fraction: float = 0.33, *, min_samples: int = 2
    ) -> tuple["Dataset", "Dataset"]:
        """Split every experiment in time: its first part for estimation, its last
        `fraction` (rounded to whole samples) for validation, as engineers do with
        a single record.

        **Arguments:**

        - `fraction`: the share of each experiment held out, in `(0, 1)`.
        - `min_samples`: the fewest samples each side of each experiment may keep.

        **Returns:**

        `(estimation, validation)` datasets with the same experiments, channels,
        names and sample time.

        **Raises:**

        `ValueError` naming the fraction and the experiment when a side would keep
        fewer than `min_samples` samples.

        **Example:**

        ```python
        record = dynsys.Dataset(us=jnp.ones((300, 1)), ys=jnp.zeros((300, 1)))
        estimation, validation = record.split_time(1 / 3)
        estimation.lengths, validation.lengths   # (200,), (100,)
        ```
        """
        estimation, validation = split_bounds(self, fraction, min_samples)
        return Dataset(**cut(self, estimation)), Dataset(**cut(self, validation))

    @staticmethod
    @checks_own_arguments
    def join(*datasets: "Dataset") -> "Dataset":
        """The experiments of several datasets in one, in order.

        **Arguments:**

        - `*datasets`: datasets with the same state, input and output names (units
            included) and the same sample time.

        **Returns:**

        A `Dataset` of all their experiments (lengths may differ).

        **Raises:**

        `ValueError` naming the dataset and what differs (channels, sample time).

        **Example:**

        ```python
        a = dynsys.Dataset(us=jnp.ones((10, 1)), ys=jnp.zeros((10, 1)))
        b = dynsys.Dataset(us=jnp.ones((6, 1)), ys=jnp.zeros((6, 1)))
        dynsys.Dataset.join(a, b).lengths   # (10, 6)
        ```
        """
        return Dataset(**join_parts(datasets))

    @classmethod
    @checks_own_arguments
    def from_dataframe(
        cls,
        df,
        *,
        inputs: Sequence[str] | None,
        outputs: Sequence[str] | None,
        states: Sequence[str] | None = None,
        time: str | bool | None = None,
        trajectory: str | bool | None = None,
        dt: float | None = None,
    ) -> "Dataset":
        """A `Dataset` from a pandas DataFrame, one row per sample, columns by name.

        The columns play the roles of `load_dataset`'s (same rules, same errors): a
        `trajectory` column, if any, groups the rows into experiments; a time column
        (named by `time=`, or recognised by name: `t`, `time`, `t_s`, ...; datetimes
        count in seconds) gives the sample time, else `dt=`. Column names become the
        channel names, units included (`"temp (°C)"`).

        **Arguments:**

        - `df`: the DataFrame.
        - `inputs`, `outputs`, `states`: the columns of each role (`None`: the
            columns named like `u0`, `y0`, `x0`).
        - `time`, `trajectory`: a column name, `None` to recognise it by name, or
            `False` for none.
        - `dt`: the sample time when there is no time column.

        **Returns:**

        A `Dataset`; `data.to_dataframe()` gives the DataFrame back.

        **Raises:**

        `ValueError` naming the argument, the column and the row.

        **Example:**

        ```python
        import pandas as pd
        df = pd.DataFrame({"t": [0.0, 0.5, 1.0], "drive (V)": [1.0, 2, 3],
                           "temp (°C)": [20.0, 21, 23]})
        data = dynsys.Dataset.from_dataframe(df, inputs=["drive (V)"],
                                             outputs=["temp (°C)"])
        data.dt, data.output_names   # 0.5, ('temp (°C)',)
        ```
        """
        parts = parts_from_dataframe(
            df, inputs=inputs, outputs=outputs, states=states, time=time,
            trajectory=trajectory, dt=dt,
        )  # fmt: skip
        return cls(
            parts["xs"],
            parts["us"],
            parts["ts"],
            ys=parts["ys"],
            state_names=parts["state_names"],
            input_names=parts["input_names"],
            output_names=parts["output_names"],
        )

    def to_dataframe(self):
        """The dataset as a long-format pandas DataFrame.

        Columns: `trajectory` (the experiment's index), `time` (when the dataset
        has times), then the states, inputs and outputs under their names (units
        included). One row per sample of each experiment, so lengths are kept; with
        states, an experiment's last row has NaN inputs and outputs.
        `Dataset.from_dataframe(df, inputs=..., outputs=..., states=...)` reads it
        back.

        **Raises:**

        `ImportError` without pandas (`pip install dynsys[dataframe]`).
        """
        return dataframe_of(self)

    def save(self, path: str | os.PathLike) -> None:
        """Write the dataset to `path`, a `.npz` or `.csv` file, atomically.

        Both formats keep the outputs, the names and each trajectory's length; they
        are described in `load_dataset`.

        **Raises:**

        `ValueError` for another suffix.
        """
        path = pathlib.Path(path)
        suffix = path.suffix.lower()
        if suffix == ".npz":
            write_npz(path, self)
        elif suffix == ".csv":
            write_csv(path, self)
        else:
            raise ValueError(
                f"Dataset.save(path=...): expected a .npz or .csv file, got {path}."
            )
