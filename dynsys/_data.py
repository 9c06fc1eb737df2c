"""Datasets of trajectories: validation, `.npz`/`.csv` files, splitting, `simulate`."""

import csv
import io
import math
import os
import pathlib
import tempfile
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, Real

from ._custom_types import Input, State, Time
from ._rollout import rollout
from ._system import AbstractSystem


def _float_dtype():
    return jnp.result_type(float)


def _stack(name: str, value, width_word: str) -> np.ndarray:
    """A `(N, T(+1), k)` float array from an array or a sequence of 2-D trajectories."""
    if isinstance(value, np.ndarray | jax.Array):
        array = np.asarray(value)
        if array.ndim == 2:  # one trajectory
            array = array[None]
        if array.ndim != 3:
            raise ValueError(
                f"Dataset({name}=...): {name} must have shape (N, T+1, n) (or one "
                f"trajectory (T+1, n)), got {array.shape}."
            )
        return array
    trajectories = [np.asarray(item) for item in value]
    if not trajectories:
        raise ValueError(
            f"Dataset({name}=...): the dataset is empty (no trajectories)."
        )
    first = trajectories[0]
    for i, item in enumerate(trajectories):
        if item.ndim != 2:
            raise ValueError(
                f"Dataset({name}=...): trajectory {i} must be 2-D (time, "
                f"{width_word}), got shape {item.shape}."
            )
        if item.shape[1] != first.shape[1]:
            raise ValueError(
                f"Dataset({name}=...): trajectory {i} has {item.shape[1]} "
                f"{width_word}, but trajectory 0 has {first.shape[1]}; every "
                "trajectory must have the same width."
            )
        if item.shape[0] != first.shape[0]:
            raise ValueError(
                f"Dataset({name}=...): trajectory {i} has {item.shape[0]} time "
                f"points, but trajectory 0 has {first.shape[0]}; every trajectory "
                "must have the same length."
            )
    return np.stack(trajectories)


def _check_finite(name: str, array: np.ndarray, names: tuple[str, ...]) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        i, t, j = (int(k) for k in np.argwhere(bad)[0])
        raise ValueError(
            f"Dataset({name}=...): {name}[{i}, {t}, {j}] is {array[i, t, j]} "
            f"(trajectory {i}, time index {t}, column {j} {names[j]!r}); data must "
            f"be finite ({int(bad.sum())} non-finite value(s) in all)."
        )


def _names(given, default_prefix: str, width: int, argument: str) -> tuple[str, ...]:
    if given is None:
        return tuple(f"{default_prefix}{j}" for j in range(width))
    given = tuple(str(name) for name in given)
    if len(given) != width:
        raise ValueError(
            f"Dataset({argument}=...): expected {width} names, got {len(given)}."
        )
    return given


class Dataset(eqx.Module):
    """Several trajectories of one system: states, inputs and their times.

    All trajectories have the same length and width; the values are checked on
    construction (finite, consistent shapes). A `Dataset` is a pytree, so it can be
    passed through `jax.jit`.

    **Arguments:**

    - `xs`: states, shape `(N, T+1, n)` ($x_0 \\dots x_T$ of `N` trajectories), one
        trajectory `(T+1, n)`, or a sequence of `N` arrays `(T+1, n)`.
    - `us`: inputs, shape `(N, T, m)` ($u_0 \\dots u_{T-1}$), `(T, m)` or a sequence;
        `None` for data without input.
    - `ts`: the sample times, shape `(T+1,)`, strictly increasing; `None` means the
        step indices $0 \\dots T$.
    - `state_names`, `input_names`: column names (default `x0, x1, ...` and
        `u0, u1, ...`); used by the `.csv` format and in error messages.

    **Raises:**

    `ValueError` naming the argument and, for a bad value, its trajectory, time index
    and column; also for an empty dataset or trajectories of different lengths or
    widths.

    **Example:**

    ```python
    xs = jnp.zeros((3, 11, 2))          # 3 trajectories, 10 steps, 2 states
    us = jnp.ones((3, 10, 1))
    data = dynsys.Dataset(xs, us)
    data.num_trajectories, data.num_steps, data.state_size  # 3, 10, 2
    ```
    """

    xs: Float[Array, "N T+1 n"]
    us: Float[Array, "N T m"] | None
    ts: Real[Array, " T+1"] | None
    state_names: tuple[str, ...] = eqx.field(static=True)
    input_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        xs: Float[ArrayLike, "N T+1 n"] | Sequence[Float[ArrayLike, "T+1 n"]],
        us: Float[ArrayLike, "N T m"] | Sequence[Float[ArrayLike, "T m"]] | None = None,
        ts: Real[ArrayLike, " T+1"] | None = None,
        *,
        state_names: Sequence[str] | None = None,
        input_names: Sequence[str] | None = None,
    ):
        xs_np = _stack("xs", xs, "state columns")
        if xs_np.shape[0] == 0:
            raise ValueError("Dataset(xs=...): the dataset is empty (no trajectories).")
        N, T1, n = xs_np.shape
        if T1 < 2:
            raise ValueError(
                "Dataset(xs=...): each trajectory needs at least 2 time points "
                f"(one step), got {T1}."
            )
        if n == 0:
            raise ValueError("Dataset(xs=...): the states have no columns (n = 0).")
        self.state_names = _names(state_names, "x", n, "state_names")
        _check_finite("xs", xs_np.astype(np.float64), self.state_names)
        dtype = _float_dtype()
        self.xs = jnp.asarray(xs_np, dtype=dtype)
        if us is None:
            self.us = None
            self.input_names = ()
            if input_names:
                raise ValueError(
                    "Dataset(input_names=...): input names given but us is None."
                )
        else:
            us_np = _stack("us", us, "input columns")
            if us_np.shape[:2] != (N, T1 - 1):
                raise ValueError(
                    f"Dataset(us=...): us must have shape (N, T, m) = ({N}, {T1 - 1}, "
                    f"m) to match xs {xs_np.shape}, got {us_np.shape}."
                )
            if us_np.shape[2] == 0:
                raise ValueError(
                    "Dataset(us=...): the inputs have no columns (m = 0); pass "
                    "us=None for data without input."
                )
            self.input_names = _names(input_names, "u", us_np.shape[2], "input_names")
            _check_finite("us", us_np.astype(np.float64), self.input_names)
            self.us = jnp.asarray(us_np, dtype=dtype)
        if ts is None:
            self.ts = None
        else:
            ts_np = np.asarray(ts)
            if ts_np.shape != (T1,):
                raise ValueError(
                    f"Dataset(ts=...): ts must have shape (T+1,) = ({T1},), got "
                    f"{ts_np.shape}."
                )
            if not np.all(np.isfinite(ts_np)):
                raise ValueError(f"Dataset(ts=...): ts must be finite, got {ts_np}.")
            steps = np.diff(ts_np)
            if np.any(steps <= 0):
                t = int(np.argmax(steps <= 0))
                raise ValueError(
                    "Dataset(ts=...): ts must be strictly increasing, but "
                    f"ts[{t + 1}] = {ts_np[t + 1]} <= ts[{t}] = {ts_np[t]}."
                )
            self.ts = jnp.asarray(ts_np)

    @property
    def num_trajectories(self) -> int:
        """The number of trajectories `N`."""
        return self.xs.shape[0]

    @property
    def num_steps(self) -> int:
        """The number of steps `T` of each trajectory (each has `T+1` states)."""
        return self.xs.shape[1] - 1

    @property
    def state_size(self) -> int:
        """The number of state columns `n`."""
        return self.xs.shape[2]

    @property
    def input_size(self) -> int:
        """The number of input columns `m` (0 without inputs)."""
        return 0 if self.us is None else self.us.shape[2]

    @property
    def dt(self) -> float | None:
        """The sampling period when `ts` is given and uniformly spaced, else `None`."""
        if self.ts is None:
            return None
        steps = np.diff(np.asarray(self.ts, dtype=np.float64))
        if np.allclose(steps, steps[0], rtol=1e-9, atol=0.0):
            return float(steps[0])
        return None

    def __getitem__(self, index) -> "Dataset":
        """The trajectories `index` (an int, slice or index array) as a `Dataset`."""
        index = np.arange(self.num_trajectories)[index]
        index = np.atleast_1d(index)
        return Dataset(
            self.xs[index],
            None if self.us is None else self.us[index],
            self.ts,
            state_names=self.state_names,
            input_names=self.input_names or None,
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

        `(train, validation)` datasets.

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

        The `.csv` long format is described in `load_dataset`.

        **Raises:**

        `ValueError` for another suffix.
        """
        path = pathlib.Path(path)
        suffix = path.suffix.lower()
        if suffix == ".npz":
            buffer = io.BytesIO()
            arrays = {
                "xs": np.asarray(self.xs),
                "state_names": np.asarray(self.state_names, dtype=str),
            }
            if self.us is not None:
                arrays["us"] = np.asarray(self.us)
                arrays["input_names"] = np.asarray(self.input_names, dtype=str)
            if self.ts is not None:
                arrays["ts"] = np.asarray(self.ts)
            np.savez(buffer, **arrays)
            _write_atomic(path, buffer.getvalue())
        elif suffix == ".csv":
            _write_atomic(path, _to_csv(self).encode())
        else:
            raise ValueError(
                f"Dataset.save(path=...): expected a .npz or .csv file, got {path}."
            )


def _write_atomic(path: pathlib.Path, content: bytes) -> None:
    """Write `content` to a temporary file next to `path`, then rename it over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        # mkstemp creates the file 0600; give it the usual umask-based mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        with os.fdopen(handle, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _to_csv(data: Dataset) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["trajectory", "time", *data.state_names, *data.input_names])
    xs = np.asarray(data.xs, dtype=np.float64)
    us = None if data.us is None else np.asarray(data.us, dtype=np.float64)
    ts = np.arange(data.num_steps + 1) if data.ts is None else np.asarray(data.ts)
    for i in range(data.num_trajectories):
        for t in range(data.num_steps + 1):
            row = [str(i), repr(ts[t].item()), *(repr(v) for v in xs[i, t].tolist())]
            if us is not None:
                if t < data.num_steps:
                    row += [repr(v) for v in us[i, t].tolist()]
                else:  # no input after the last state
                    row += [""] * data.input_size
            writer.writerow(row)
    return out.getvalue()


def _csv_error(path, line: int, message: str) -> ValueError:
    return ValueError(f"load_dataset(path={str(path)!r}): line {line}: {message}")


def _load_csv(path: pathlib.Path, states, inputs) -> Dataset:
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    if not rows:
        raise ValueError(f"load_dataset(path={str(path)!r}): the file is empty.")
    header = [name.strip() for name in rows[0]]
    for required in ("trajectory", "time"):
        if required not in header:
            raise _csv_error(
                path,
                1,
                f"the header must have a {required!r} column, got {header}.",
            )
    others = [name for name in header if name not in ("trajectory", "time")]
    if states is None:
        states = [name for name in others if name.startswith("x")]
    if inputs is None:
        inputs = [name for name in others if name.startswith("u")]
    for kind, names in (("states", states), ("inputs", inputs)):
        missing = [name for name in names if name not in header]
        if missing:
            raise _csv_error(
                path, 1, f"{kind} columns {missing} are not in the header {header}."
            )
    if not states:
        raise _csv_error(
            path,
            1,
            "no state columns: name them x... (e.g. x0, x1) or pass states=[...]; "
            f"header {header}.",
        )
    if len(rows) < 2:
        raise ValueError(
            f"load_dataset(path={str(path)!r}): the dataset is empty (no data rows)."
        )
    column = {name: j for j, name in enumerate(header)}
    state_cols = [column[name] for name in states]
    input_cols = [column[name] for name in inputs]
    time_col = column["time"]

    def number(line: int, row: list[str], j: int) -> float:
        text = row[j].strip()
        try:
            return float(text)
        except ValueError:
            raise _csv_error(
                path,
                line,
                f"column {j + 1} ({header[j]!r}): {text!r} is not a number.",
            ) from None

    trajectories: dict[str, list[tuple[int, list[str]]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise _csv_error(
                path,
                line,
                f"expected {len(header)} cells (as in the header), got {len(row)}.",
            )
        trajectories.setdefault(row[column["trajectory"]].strip(), []).append(
            (line, row)
        )
    if not trajectories:
        raise ValueError(
            f"load_dataset(path={str(path)!r}): the dataset is empty (no data rows)."
        )
    xs, us, times = [], [], None
    first_id = next(iter(trajectories))
    for ident, lines in trajectories.items():
        ts = [number(line, row, time_col) for line, row in lines]
        if times is None:
            times = ts
        elif len(ts) != len(times):
            raise _csv_error(
                path,
                lines[0][0],
                f"trajectory {ident!r} has {len(ts)} rows, but trajectory "
                f"{first_id!r} has {len(times)}; all must have the same length.",
            )
        elif not np.allclose(ts, times, rtol=1e-9, atol=1e-12):
            k = int(np.argmax(~np.isclose(ts, times, rtol=1e-9, atol=1e-12)))
            raise _csv_error(
                path,
                lines[k][0],
                f"trajectory {ident!r} has time {ts[k]} where trajectory "
                f"{first_id!r} has {times[k]}; all must share their times.",
            )
        xs.append([[number(line, row, j) for j in state_cols] for line, row in lines])
        if input_cols:
            # The last row has no input (there are T inputs for T+1 states).
            us.append(
                [[number(line, row, j) for j in input_cols] for line, row in lines[:-1]]
            )
    try:
        return Dataset(
            np.asarray(xs),
            np.asarray(us) if input_cols else None,
            np.asarray(times),
            state_names=states,
            input_names=inputs or None,
        )
    except ValueError as error:
        raise ValueError(f"load_dataset(path={str(path)!r}): {error}") from None


def load_dataset(
    path: str | os.PathLike,
    *,
    states: Sequence[str] | None = None,
    inputs: Sequence[str] | None = None,
) -> Dataset:
    """Read a `Dataset` from a `.npz` or `.csv` file.

    **The `.csv` long format.** One header line, then one row per sample:

    ```
    trajectory,time,x0,x1,u0
    0,0.0,1.0,0.0,0.5
    0,0.1,0.99,-0.1,0.2
    0,0.2,0.97,-0.19,
    1,0.0,-1.0,0.3,0.1
    ...
    ```

    - `trajectory`: an identifier (any text); rows with the same identifier form one
        trajectory, in file order. Every trajectory has the same number of rows and
        the same times.
    - `time`: the sample time.
    - state columns: by default every column whose name starts with `x`.
    - input columns: by default every column whose name starts with `u`. The input on
        a row acts between that row's state and the next, so the last row of each
        trajectory has no input; its input cells are ignored (leave them empty).

    Other columns are ignored. `.npz` files hold the arrays `xs`, `us` (optional),
    `ts` (optional), `state_names` and `input_names` (optional).

    **Arguments:**

    - `path`: a `.npz` or `.csv` file.
    - `states`, `inputs`: for `.csv`, the names of the state and input columns, in
        order, when they do not follow the `x`/`u` naming.

    **Returns:**

    A `Dataset`.

    **Raises:**

    `ValueError` naming the line and column of a cell that is not a number, and for
    every `Dataset` check (non-finite values, unequal trajectories, no rows).

    **Example:**

    ```python
    data = dynsys.Dataset(jnp.ones((2, 4, 2)), jnp.zeros((2, 3, 1)))
    data.save("data.csv")
    dynsys.load_dataset("data.csv").xs.shape  # (2, 4, 2)
    ```
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise ValueError(f"load_dataset(path=...): no such file {str(path)!r}.")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _load_csv(path, states, inputs)
    if suffix != ".npz":
        raise ValueError(
            f"load_dataset(path=...): expected a .npz or .csv file, got {str(path)!r}."
        )
    try:
        with np.load(path, allow_pickle=False) as file:
            arrays = {name: file[name] for name in file.files}
    except (ValueError, OSError) as error:
        raise ValueError(
            f"load_dataset(path={str(path)!r}): not a readable .npz file ({error})."
        ) from None
    if "xs" not in arrays:
        raise ValueError(
            f"load_dataset(path={str(path)!r}): the file has no 'xs' array "
            f"(it has {sorted(arrays)})."
        )
    names = arrays.get("state_names")
    input_names = arrays.get("input_names")
    try:
        return Dataset(
            arrays["xs"],
            arrays.get("us"),
            arrays.get("ts"),
            state_names=None if names is None else names.tolist(),
            input_names=None if input_names is None else input_names.tolist(),
        )
    except ValueError as error:
        raise ValueError(f"load_dataset(path={str(path)!r}): {error}") from None


class _WithProcessNoise(AbstractSystem):
    """`system` with additive process noise passed as extra input columns."""

    system: AbstractSystem

    @property
    def state_size(self) -> int:
        return self.system.state_size

    @property
    def input_size(self) -> int:
        return self.system.input_size + self.system.state_size

    @property
    def dt(self):
        return getattr(self.system, "dt", None)

    def step(self, t: Time, x: State, u: Input) -> State:
        m = self.system.input_size
        assert u is not None
        u_system = u[:m] if m > 0 else None
        return self.system.step(t, x, u_system) + u[m:]


def simulate(
    system: AbstractSystem,
    x0s: Float[ArrayLike, "N n"],
    num_steps: int,
    *,
    inputs: Float[ArrayLike, "N T m"] | None = None,
    process_noise: float = 0.0,
    measurement_noise: float = 0.0,
    key: PRNGKeyArray | None = None,
) -> Dataset:
    """Make a synthetic `Dataset` by simulating `system` from each initial state.

    $x_{t+1} = \\mathrm{step}(t, x_t, u_t) + \\sigma_w w_t$; the dataset records
    $x_t + \\sigma_v v_t$ for $t = 0 \\dots T$, with $w_t, v_t$ standard normal.

    **Arguments:**

    - `system`: an `AbstractSystem`.
    - `x0s`: initial states, shape `(N, n)`.
    - `num_steps`: the number of steps `T` of each trajectory.
    - `inputs`: shape `(N, T, m)`, or `(T, m)` shared by all trajectories; required
        exactly when the system takes inputs.
    - `process_noise`: the standard deviation $\\sigma_w$ of the process noise.
    - `measurement_noise`: the standard deviation $\\sigma_v$ of the measurement
        noise (added to every recorded state, including $x_0$).
    - `key`: a PRNG key; required when any noise is non-zero.

    **Returns:**

    A `Dataset` with `xs (N, T+1, n)`, `us (N, T, m)` (or `None`) and the times of
    the rollout as `ts`.

    **Raises:**

    `ValueError` naming the argument for bad shapes, negative noise or a missing key.

    **Example:**

    ```python
    system = dynsys.LinearSystem(K=jnp.array([[0.9, 0.2], [-0.2, 0.9]]))
    data = dynsys.simulate(system, jnp.eye(2), 20, measurement_noise=0.01,
                           key=jax.random.key(0))
    data.xs.shape  # (2, 21, 2)
    ```
    """
    if not isinstance(system, AbstractSystem):
        raise TypeError(
            f"simulate(system=...): expected an AbstractSystem, got {type(system)}."
        )
    n, m = system.state_size, system.input_size
    x0s = jnp.asarray(x0s)
    if not jnp.issubdtype(x0s.dtype, jnp.inexact):
        x0s = x0s.astype(_float_dtype())
    if x0s.ndim != 2 or x0s.shape[1] != n:
        raise ValueError(
            f"simulate(x0s=...): x0s must have shape (N, n) = (N, {n}), got "
            f"{tuple(x0s.shape)}."
        )
    N = x0s.shape[0]
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(
            f"simulate(num_steps=...): expected a positive integer, got {num_steps!r}."
        )
    for name, value in (
        ("process_noise", process_noise),
        ("measurement_noise", measurement_noise),
    ):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(
                f"simulate({name}=...): expected a finite number >= 0, got {value!r}."
            )
    if (process_noise or measurement_noise) and key is None:
        raise ValueError(
            "simulate(key=...): a PRNG key is needed for the noise, got key=None."
        )
    if inputs is None and m > 0:
        raise ValueError(
            f"simulate(inputs=...): the system takes inputs (input_size={m}); pass "
            f"inputs of shape (N, T, m) = ({N}, {num_steps}, {m})."
        )
    if inputs is not None:
        inputs = jnp.asarray(inputs, dtype=x0s.dtype)
        if m == 0:
            raise ValueError(
                "simulate(inputs=...): the system takes no input (input_size=0), "
                f"got inputs of shape {tuple(inputs.shape)}."
            )
        if inputs.ndim == 2:
            inputs = jnp.broadcast_to(inputs, (N, *inputs.shape))
        if inputs.shape != (N, num_steps, m):
            raise ValueError(
                f"simulate(inputs=...): inputs must have shape (N, T, m) = ({N}, "
                f"{num_steps}, {m}) or (T, m), got {tuple(inputs.shape)}."
            )
    key_w, key_v = jax.random.split(key) if key is not None else (None, None)
    if process_noise:
        noise = process_noise * jax.random.normal(
            key_w, (N, num_steps, n), dtype=x0s.dtype
        )
        both = noise if inputs is None else jnp.concatenate([inputs, noise], axis=-1)
        traj = rollout(_WithProcessNoise(system), x0s, num_steps, inputs=both)
    else:
        traj = rollout(system, x0s, num_steps, inputs=inputs)
    xs = traj.xs
    if measurement_noise:
        xs = xs + measurement_noise * jax.random.normal(key_v, xs.shape, xs.dtype)
    return Dataset(xs, inputs, traj.ts)
