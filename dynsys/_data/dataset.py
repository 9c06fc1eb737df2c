"""`Dataset`: experiments of states, inputs and measured outputs, possibly of
different lengths (stored zero-padded, with their lengths)."""

import os
import pathlib
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, Real

from .files import write_npz
from .text_files import write_csv


# Each role: (argument name, word for its columns, extra time points beyond T_i).
_ROLES = {
    "xs": ("state", 1),
    "us": ("input", 0),
    "ys": ("output", 0),
}
_NAME_ARGUMENT = {"xs": "state_names", "us": "input_names", "ys": "output_names"}
_DEFAULT_PREFIX = {"xs": "x", "us": "u", "ys": "y"}
_SHAPE = {"xs": "(N, T+1, n)", "us": "(N, T, m)", "ys": "(N, T, p)"}


def _float_dtype() -> np.dtype:
    return np.dtype(jnp.result_type(float))


def _error(argument: str, message: str) -> ValueError:
    return ValueError(f"Dataset({argument}=...): {message}")


def _check_real(name: str, array: np.ndarray) -> None:
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_) or (
        np.issubdtype(array.dtype, np.complexfloating)
    ):
        raise _error(name, f"expected real numbers, got dtype {array.dtype}.")


def _experiments(name: str, value, lengths) -> tuple[list[np.ndarray], bool]:
    """The experiments of one role as 2-D arrays, and whether `value` was one array.

    `value` is an array `(N, T(+1), k)`, one experiment `(T(+1), k)`, or a sequence
    of 2-D arrays; with `lengths` (padded arrays), each is cut to its length.
    """
    word, extra = _ROLES[name]
    if isinstance(value, np.ndarray | jax.Array):
        array = np.asarray(value)
        _check_real(name, array)
        if array.ndim == 2:
            array = array[None]
        if array.ndim != 3:
            raise _error(
                name,
                f"{name} must have shape {_SHAPE[name]} (or one trajectory "
                f"{_SHAPE[name][4:]}), got {array.shape}.",
            )
        items, whole = list(array), True
    else:
        items, whole = [np.asarray(item) for item in value], False
        for i, item in enumerate(items):
            _check_real(name, item)
            if item.ndim != 2:
                raise _error(
                    name,
                    f"trajectory {i} must be 2-D (time, {word} columns), got shape "
                    f"{item.shape}.",
                )
    if not items:
        raise _error(name, "the dataset is empty (no trajectories).")
    if lengths is not None:
        if len(lengths) != len(items):
            raise _error(
                "lengths",
                f"expected {len(items)} lengths (one per trajectory of {name}), got "
                f"{len(lengths)}.",
            )
        for i, (item, T_i) in enumerate(zip(items, lengths)):
            if T_i + extra > item.shape[0]:
                raise _error(
                    "lengths",
                    f"lengths[{i}] = {T_i} needs {T_i + extra} time points of {name}, "
                    f"but {name} has {item.shape[0]}.",
                )
        items = [item[: T_i + extra] for item, T_i in zip(items, lengths)]
    for i, item in enumerate(items):
        if item.shape[1] != items[0].shape[1]:
            raise _error(
                name,
                f"trajectory {i} has {item.shape[1]} {word} columns, but trajectory 0 "
                f"has {items[0].shape[1]}; every trajectory must have the same width.",
            )
        if item.shape[0] < 1 + extra:
            raise _error(
                name,
                f"trajectory {i} needs at least {1 + extra} time points "
                f"({'one step' if extra else 'one sample'}), got {item.shape[0]}.",
            )
    if items[0].shape[1] == 0:
        hint = "" if name == "xs" else f"; pass {name}=None for data without {word}s"
        raise _error(name, f"the {word}s have no columns (width 0){hint}.")
    return items, whole and lengths is None


def _lengths(roles: dict, whole: dict) -> tuple[int, ...]:
    """Each trajectory's number of steps `T_i`, checked to agree across the roles."""
    names = list(roles)
    ref = names[0]
    ref_extra = _ROLES[ref][1]
    lengths = tuple(item.shape[0] - ref_extra for item in roles[ref])
    N = len(lengths)
    for name in names[1:]:
        items, extra = roles[name], _ROLES[name][1]
        if len(items) != N:
            raise _error(
                name,
                f"{name} has {len(items)} trajectories, but {ref} has {N}.",
            )
        if whole[name] and whole[ref]:
            expected = (N, lengths[0] + extra)
            shape = (len(items), *items[0].shape)
            if shape[:2] != expected:
                ref_shape = (N, *roles[ref][0].shape)
                letter = _SHAPE[name][-2]
                raise _error(
                    name,
                    f"{name} must have shape {_SHAPE[name]} = ({expected[0]}, "
                    f"{expected[1]}, {letter}) to match {ref} {ref_shape}, got "
                    f"{shape}.",
                )
        for i, (item, T_i) in enumerate(zip(items, lengths)):
            if item.shape[0] != T_i + extra:
                raise _error(
                    name,
                    f"trajectory {i} has {name} of shape {item.shape}, but {ref} of "
                    f"shape {roles[ref][i].shape}: expected {T_i + extra} time points "
                    f"of {name} for {T_i} steps.",
                )
    return lengths


def _names(given, name: str, width: int) -> tuple[str, ...]:
    argument = _NAME_ARGUMENT[name]
    if given is None:
        return tuple(f"{_DEFAULT_PREFIX[name]}{j}" for j in range(width))
    if isinstance(given, str):
        raise _error(
            argument, f"expected a sequence of names, got the string {given!r}."
        )
    given = tuple(str(item) for item in given)
    if len(given) != width:
        raise _error(argument, f"expected {width} names, got {len(given)}.")
    return given


def _check_unique(names: dict[str, tuple[str, ...]]) -> None:
    seen: dict[str, str] = {}
    for argument, group in names.items():
        for item in group:
            if item in seen:
                where = "twice" if seen[item] == argument else f"also in {seen[item]}"
                raise _error(
                    argument,
                    f"the name {item!r} appears {where}; every state, input and "
                    "output needs its own name.",
                )
            seen[item] = argument


def _cast_finite(name: str, items: list[np.ndarray], names: tuple[str, ...]):
    """Cast to the default float dtype, then check every value is finite."""
    dtype = _float_dtype()
    cast = []
    for item in items:
        with np.errstate(over="ignore", invalid="ignore"):
            cast.append(item.astype(dtype))
    bad_counts = [int((~np.isfinite(c)).sum()) for c in cast]
    if not any(bad_counts):
        return cast
    i = next(k for k, count in enumerate(bad_counts) if count)
    t, j = (int(k) for k in np.argwhere(~np.isfinite(cast[i]))[0])
    original = items[i][t, j]
    where = (
        f"{name}[{i}, {t}, {j}] is {original} (trajectory {i}, time index {t}, column "
        f"{j} {names[j]!r})"
    )
    if np.isfinite(np.float64(original)):
        raise _error(
            name,
            f"{name}[{i}, {t}, {j}] = {original} (trajectory {i}, time index {t}, "
            f"column {j} {names[j]!r}) is beyond the range of {dtype} "
            f"(largest {np.finfo(dtype).max:.3g}); rescale the data or enable "
            "float64 (jax.config.update('jax_enable_x64', True)).",
        )
    raise _error(
        name,
        f"{where}; data must be finite ({sum(bad_counts)} non-finite value(s) in all).",
    )


def _pad(items: list[np.ndarray], length: int) -> np.ndarray:
    out = np.zeros((len(items), length, items[0].shape[1]), dtype=items[0].dtype)
    for i, item in enumerate(items):
        out[i, : item.shape[0]] = item
    return out


def _times(ts, expected: int, has_states: bool) -> np.ndarray:
    ts_np = np.asarray(ts)
    _check_real("ts", ts_np)
    if ts_np.shape != (expected,):
        what = (
            f"(T+1,) = ({expected},)"
            if has_states
            else f"(T,) = ({expected},) (one time per output sample; no states)"
        )
        raise _error("ts", f"ts must have shape {what}, got {ts_np.shape}.")
    as64 = ts_np.astype(np.float64)
    if not np.all(np.isfinite(as64)):
        raise _error("ts", f"ts must be finite, got {ts_np}.")
    steps = np.diff(as64)
    if np.any(steps <= 0):
        t = int(np.argmax(steps <= 0))
        raise _error(
            "ts",
            f"ts must be strictly increasing, but ts[{t + 1}] = {ts_np[t + 1]} <= "
            f"ts[{t}] = {ts_np[t]}.",
        )
    dtype = _float_dtype()
    cast = as64.astype(dtype)
    steps = np.diff(cast)
    if np.any(~np.isfinite(cast)) or np.any(steps <= 0):
        t = int(np.argmax(~(steps > 0))) if np.any(steps <= 0) else 0
        raise _error(
            "ts",
            f"ts[{t}] = {as64[t]!r} and ts[{t + 1}] = {as64[t + 1]!r} are no longer "
            f"strictly increasing in {dtype}; subtract the start time or enable "
            "float64 (jax.config.update('jax_enable_x64', True)).",
        )
    return cast


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

    xs: Float[Array, "N T+1 n"] | None
    us: Float[Array, "N T m"] | None
    ys: Float[Array, "N T p"] | None
    ts: Real[Array, " S"] | None
    lengths: tuple[int, ...] = eqx.field(static=True)
    state_names: tuple[str, ...] = eqx.field(static=True)
    input_names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        xs: Float[ArrayLike, "N T+1 n"]
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
        given = {"xs": xs, "us": us, "ys": ys}
        roles, whole = {}, {}
        for name, value in given.items():
            if value is not None:
                roles[name], whole[name] = _experiments(name, value, lengths)
        self.lengths = _lengths(roles, whole)
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
                stored[name] = jnp.asarray(_pad(cast, T + _ROLES[name][1]))
            else:
                stored[name] = None
        self.xs, self.us, self.ys = stored["xs"], stored["us"], stored["ys"]
        has_states = "xs" in roles
        self.ts = (
            None if ts is None else jnp.asarray(_times(ts, T + has_states, has_states))
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
        return jnp.asarray(np.arange(self.num_steps)[None, :] < lengths[:, None])

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


def _check_lengths(lengths) -> tuple[int, ...]:
    values = np.asarray(lengths)
    if values.ndim != 1 or not (
        np.issubdtype(values.dtype, np.integer) or values.size == 0
    ):
        raise _error("lengths", f"expected a sequence of integers, got {lengths!r}.")
    if values.size and values.min() < 1:
        raise _error("lengths", f"every length must be >= 1, got {values.tolist()}.")
    return tuple(int(v) for v in values)
