"""Checks that a dataset can support a model, before fitting: input excitation,
output signal, and scale.

A constant or zero input excites no dynamics, so `B` cannot be identified from it (a
fit still "succeeds" and scores well on held-out data with the same kind of input);
an output with no variance has no fit %; values whose squares overflow the
precision make every squared norm `inf`. Each finding is one line naming the
channel, at level `"warn"` (the fit can go on, but the result is partly undefined)
or `"refuse"` (nothing meaningful can come out).
"""

import warnings
from typing import NamedTuple

import numpy as np


class DataWarning(UserWarning):
    """A finding of `check_data` warned by `fit` or `fit_subspace` (a category of
    its own so that a caller that reports the findings itself can filter them)."""


class DataFinding(NamedTuple):
    """One finding of `check_data`: `level` is `"warn"` or `"refuse"`, `kind` one of
    `"input_zero"`, `"input_constant"`, `"input_excitation"`, `"output_no_variance"`,
    `"scale"`, and `message` one line naming the channel."""

    level: str
    kind: str
    message: str


# A Hankel singular value below this fraction of the largest counts as zero: well
# above float64 round-off, below the float32 rounding of a genuinely exciting input.
_RANK_TOLERANCE = 1e-6
# Rows of the block-Hankel matrix processed at once (bounds the memory of the check).
_CHUNK = 65536


def _valid_rows(array: np.ndarray, lengths) -> list[np.ndarray]:
    """Each experiment's valid steps of a padded `(N, T, c)` array."""
    return [array[i, :T_i] for i, T_i in enumerate(lengths)]


def _round_off(values: np.ndarray, dtype) -> float | np.floating:
    """The spread that round-off alone gives a channel of these magnitudes."""
    eps = np.finfo(dtype).eps if np.issubdtype(dtype, np.floating) else 1e-16
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    return 16.0 * eps * scale


def _channel_name(names, kind: str, j: int) -> str:
    return f"{kind} {names[j]!r}" if j < len(names) else f"{kind} {j}"


def _input_findings(us_rows, names, order, dtype) -> list[DataFinding]:
    findings = []
    flat = np.concatenate(us_rows)
    exciting = []
    for j in range(flat.shape[1]):
        u = flat[:, j]
        name = _channel_name(names, "input", j)
        if not np.any(u):
            findings.append(
                DataFinding(
                    "warn",
                    "input_zero",
                    f"the {name} is zero throughout: B cannot be identified "
                    "(the model's response to it is undefined).",
                )
            )
        elif _is_constant(u, dtype):
            findings.append(
                DataFinding(
                    "warn",
                    "input_constant",
                    f"the input is constant ({name} = {u[0]:.6g} throughout): B cannot "
                    "be identified; excite the system (steps, noise, a chirp).",
                )
            )
        else:
            exciting.append(j)
    if exciting:
        findings += _excitation_findings(us_rows, names, exciting, order)
    return findings


def _is_constant(u: np.ndarray, dtype) -> bool:
    """Whether an input channel varies by no more than round-off."""
    return bool(np.ptp(u) <= _round_off(u, dtype))


def constant_inputs(data, dtype=None) -> list[tuple[str, float]]:
    """The input channels of `data` that are zero or constant over every valid
    step (`check_data`'s `input_zero` and `input_constant`): `(name, value)` each
    (`name` the column's, else `"input j"`)."""
    us = getattr(data, "us", None)
    if us is None or np.asarray(us).shape[-1] == 0 or not _on_this_host(us):
        return []
    us = np.asarray(us)
    lengths = tuple(getattr(data, "lengths", None) or (us.shape[1],) * us.shape[0])
    flat = np.concatenate(_valid_rows(us, lengths))
    dtype = np.dtype(dtype if dtype is not None else us.dtype)
    names = tuple(getattr(data, "input_names", ()) or ())
    return [
        (names[j] if j < len(names) else f"input {j}", float(flat[0, j]))
        for j in range(flat.shape[1])
        if _is_constant(flat[:, j], dtype)
    ]


def _hankel_gram(us_rows, columns, depth: int) -> np.ndarray:
    """$H H^\\top$ of the block-Hankel matrix of the inputs `columns` with `depth`
    block rows (windows never cross experiments)."""
    size = depth * len(columns)
    gram = np.zeros((size, size))
    for u in us_rows:
        u = u[:, columns].astype(np.float64)
        for start in range(0, max(0, u.shape[0] - depth + 1), _CHUNK):
            piece = u[start : start + _CHUNK + depth - 1]
            windows = np.lib.stride_tricks.sliding_window_view(piece, depth, axis=0)
            rows = windows.reshape(windows.shape[0], -1)
            gram += rows.T @ rows
    return gram


def _excitation_findings(us_rows, names, columns, order) -> list[DataFinding]:
    """Persistent excitation of the needed order (`2 order`, or 2 when no order is
    given) from the rank of the block-Hankel matrix of the (non-constant) inputs."""
    shortest = min(u.shape[0] for u in us_rows)
    needed = max(2, 2 * order) if order else 2
    depth = max(1, min(needed, shortest // 2))
    eigenvalues = np.linalg.eigvalsh(_hankel_gram(us_rows, columns, depth))
    top = float(eigenvalues[-1])
    if top <= 0:
        return []
    if _full_rank(eigenvalues):
        return []
    single = np.linalg.eigvalsh(_hankel_gram(us_rows, columns, 1))
    if not _full_rank(single):
        inputs = ", ".join(
            repr(names[j]) if j < len(names) else str(j) for j in columns
        )
        rank = int(np.sum(single > single[-1] * _RANK_TOLERANCE**2))
        return [
            DataFinding(
                "warn",
                "input_excitation",
                f"the inputs {inputs} are linearly dependent (rank {rank} of "
                f"{len(columns)}): B cannot be identified for each of them.",
            )
        ]
    # The order of excitation: the largest depth whose Hankel matrix has full rank.
    reached = max(
        (
            d
            for d in range(1, depth)
            if _full_rank(np.linalg.eigvalsh(_hankel_gram(us_rows, columns, d)))
        ),
        default=0,
    )
    for_what = f"order {order} needs {needed}" if order else f"a model needs {needed}"
    return [
        DataFinding(
            "warn",
            "input_excitation",
            f"the input is persistently exciting of order {reached} only ({for_what}): "
            "B may not be identifiable; excite the system with a richer input.",
        )
    ]


def _full_rank(eigenvalues: np.ndarray) -> bool:
    """Whether a Gram matrix of these (ascending) eigenvalues has full rank."""
    return bool(eigenvalues[0] > eigenvalues[-1] * _RANK_TOLERANCE**2)


def _output_findings(ys_rows, names, dtype, what: str) -> list[DataFinding]:
    flat = np.concatenate(ys_rows)
    findings = []
    for j in range(flat.shape[1]):
        y = flat[:, j]
        if np.ptp(y) <= _round_off(y, dtype):
            name = _channel_name(names, what, j)
            findings.append(
                DataFinding(
                    "warn",
                    "output_no_variance",
                    f"the {name} has no variance (constant {y[0] + 0.0:.6g}): its fit "
                    "% is undefined and nothing about the dynamics can be learnt from "
                    "it.",
                )
            )
    if findings and len(findings) == flat.shape[1]:
        findings = [f._replace(level="refuse") for f in findings]
    return findings


def _scale_findings(arrays, dtype) -> list[DataFinding]:
    """Values whose squares, summed over the record, overflow `dtype`."""
    if not np.issubdtype(dtype, np.floating):
        return []
    largest = float(np.finfo(dtype).max)
    findings = []
    for what, rows, names in arrays:
        flat = np.concatenate(rows)
        for j in range(flat.shape[1]):
            peak = float(np.max(np.abs(flat[:, j]))) if flat.shape[0] else 0.0
            if peak**2 * flat.shape[0] > largest:
                name = _channel_name(names, what, j)
                findings.append(
                    DataFinding(
                        "refuse",
                        "scale",
                        f"the {name} reaches {peak:.3g}: its squared norm over "
                        f"{flat.shape[0]} steps overflows {np.dtype(dtype).name} "
                        f"(largest {largest:.3g}); rescale it or use float64.",
                    )
                )
    return findings


def check_data(data, *, order: int | None = None, dtype=None) -> list[DataFinding]:
    """Check that `data` can support a model, before fitting.

    - **Input excitation**: an input that is zero, or constant (a step held for the
        whole record), cannot identify `B`; the non-constant inputs must be
        persistently exciting of order `2 * order` (the block-Hankel matrix of the
        inputs with that many block rows has full rank; a level counts, as it
        excites a model's response to a constant).
    - **Output signal**: each output (or, without outputs, state) channel must vary
        by more than round-off; otherwise its fit % is undefined (level `"refuse"`
        when no channel varies).
    - **Scale**: values whose squares, summed over the record, overflow `dtype`
        (e.g. $|y| \\sim 10^{20}$ in float32) are refused.

    **Arguments:**

    - `data`: a `Dataset` (outputs `ys (N, T, p)` or states, inputs `us (N, T, m)`).
    - `order`: the state dimension the model will have (`None`: unknown, only the
        inputs' rank and constancy are checked).
    - `dtype`: the precision the fit computes in (default: the data's).

    **Returns:**

    A list of `DataFinding(level, kind, message)`, empty when nothing is wrong.

    **Example:**

    ```python
    held = dynsys.Dataset(us=jnp.ones((1, 50, 1)), ys=jnp.ones((1, 50, 1)).cumsum(1))
    [f.message for f in dynsys.check_data(held, order=2)]  # the input is constant
    ```
    """
    ys = getattr(data, "ys", None)
    what = "output"
    if ys is None:
        xs, what = getattr(data, "xs", None), "state"
        if xs is None or not _on_this_host(xs, getattr(data, "us", None)):
            return []  # a global dataset of several processes is checked on none
        ys = np.asarray(xs)[:, :-1]
    if ys is None or not _on_this_host(ys, getattr(data, "us", None)):
        return []
    ys = np.asarray(ys)
    lengths = tuple(getattr(data, "lengths", None) or (ys.shape[1],) * ys.shape[0])
    dtype = np.dtype(dtype if dtype is not None else ys.dtype)
    names = tuple(getattr(data, f"{what}_names", ()) or ())
    ys_rows = _valid_rows(ys, lengths)
    arrays = [(what, ys_rows, names)]
    findings = []
    us = getattr(data, "us", None)
    if us is not None and np.asarray(us).shape[-1] > 0:
        us_rows = _valid_rows(np.asarray(us), lengths)
        input_names = tuple(getattr(data, "input_names", ()) or ())
        arrays.append(("input", us_rows, input_names))
        findings += _input_findings(us_rows, input_names, order, dtype)
    findings += _output_findings(ys_rows, names, dtype, what)
    findings += _scale_findings(arrays, dtype)
    return findings


def _on_this_host(*arrays) -> bool:
    """Whether the arrays can be read here (not traced under `jit`, not spread over
    several processes: those are checked where they are whole)."""
    import jax

    return all(
        a is None
        or (
            not isinstance(a, jax.core.Tracer)
            and getattr(a, "is_fully_addressable", True)
        )
        for a in arrays
    )


def warn_findings(call: str, findings: list[DataFinding]) -> None:
    """Each finding as a `DataWarning` naming `call` (one line each)."""
    for finding in findings:
        warnings.warn(f"{call}: {finding.message}", DataWarning, stacklevel=3)
