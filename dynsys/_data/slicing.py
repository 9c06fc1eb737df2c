"""Time slices and joins of datasets: the arguments of the new `Dataset`, from the
unpadded experiments of the old ones (`Dataset.window`, `split_time`, `join`)."""

import math

import numpy as np


_FIELDS = ("xs", "us", "ys")


def experiments(data) -> dict[str, list[np.ndarray] | None]:
    """Each role's experiments as unpadded numpy arrays (`xs`: `T_i + 1` rows)."""
    out = {}
    for field in _FIELDS:
        values = getattr(data, field)
        if values is None:
            out[field] = None
            continue
        values = np.asarray(values)
        extra = field == "xs"
        out[field] = [values[i, : T + extra] for i, T in enumerate(data.lengths)]
    return out


def _names(data) -> dict:
    return dict(
        state_names=data.state_names or None,
        input_names=data.input_names or None,
        output_names=data.output_names or None,
    )


def _times(data, starts: list[int], steps: int):
    """The times of experiments cut to start at `starts` (the longest has `steps`
    steps): the old times from there when every cut starts at the same sample, else
    a uniform grid from the first time (times of different cuts cannot be shared)."""
    if data.ts is None:
        return None
    extra = data.xs is not None
    ts = np.asarray(data.ts, dtype=np.float64)
    if len(set(starts)) == 1:
        return ts[starts[0] : starts[0] + steps + extra]
    dt = data.dt
    if dt is None:
        return None
    return ts[0] + dt * np.arange(steps + extra)


def cut(data, bounds: list[tuple[int, int]]) -> dict:
    """The `Dataset` arguments of steps `[a_i, b_i)` of each experiment `i` (states
    `x_{a_i} ... x_{b_i}`)."""
    parts = experiments(data)
    out = {}
    for field, items in parts.items():
        if items is None:
            out[field] = None
            continue
        extra = field == "xs"
        out[field] = [item[a : b + extra] for item, (a, b) in zip(items, bounds)]
    steps = max(b - a for a, b in bounds)
    ts = _times(data, [a for a, _ in bounds], steps)
    return dict(xs=out["xs"], us=out["us"], ts=ts, ys=out["ys"], **_names(data))


def _index(call: str, argument: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{call}({argument}=...): expected an integer, got {value!r}.")
    return int(value)


def window_bounds(data, start, stop) -> list[tuple[int, int]]:
    """Each experiment's steps `[start, stop)` (as Python slices: negative counts
    from that experiment's end), checked to keep at least one."""
    call = "Dataset.window"
    start, stop = _index(call, "start", start), _index(call, "stop", stop)
    bounds = []
    for i, T in enumerate(data.lengths):
        a, b, _ = slice(start, stop).indices(T)
        if b <= a:
            raise ValueError(
                f"{call}(start={start}, stop={stop}): experiment {i} has {T} samples, "
                "so the window keeps none of them; choose a window inside every "
                f"experiment (the shortest has {min(data.lengths)})."
            )
        bounds.append((a, b))
    return bounds


def split_bounds(data, fraction, min_samples: int) -> tuple[list, list]:
    """Estimation and validation steps of each experiment: the last `fraction` of
    each (rounded to whole samples) is validation."""
    call = f"Dataset.split_time(fraction={fraction!r})"
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, float | int)
        or not 0 < fraction < 1
    ):
        raise ValueError(f"{call}: expected a fraction in (0, 1).")
    estimation, validation = [], []
    for i, T in enumerate(data.lengths):
        held = math.floor(fraction * T + 0.5)
        kept = T - held
        if min(held, kept) < min_samples:
            raise ValueError(
                f"{call}: experiment {i} has {T} samples, which leaves {kept} for "
                f"estimation and {held} for validation; each side needs at least "
                f"{min_samples} (min_samples): use a fraction nearer 0.5 or more data."
            )
        estimation.append((0, kept))
        validation.append((kept, T))
    return estimation, validation


def join_parts(datasets) -> dict:
    """The `Dataset` arguments of the experiments of all `datasets`, in order."""
    call = "Dataset.join"
    if not datasets:
        raise ValueError(f"{call}: expected at least one Dataset, got none.")
    first = datasets[0]
    for k, data in enumerate(datasets):
        if not all(hasattr(data, field) for field in (*_FIELDS, "lengths")):
            raise ValueError(
                f"{call}: argument {k} is a {type(data).__name__}, not a Dataset."
            )
        for attribute, what in (
            ("state_names", "states"),
            ("input_names", "inputs"),
            ("output_names", "outputs"),
        ):
            if getattr(data, attribute) != getattr(first, attribute):
                raise ValueError(
                    f"{call}: dataset {k} has {what} {getattr(data, attribute)} but "
                    f"dataset 0 has {getattr(first, attribute)}; only datasets with "
                    "the same channels join."
                )
        dt, dt0 = data.dt, first.dt
        same = (dt is None and dt0 is None) or (
            dt is not None and dt0 is not None and math.isclose(dt, dt0, rel_tol=1e-6)
        )
        if not same or (data.ts is None) != (first.ts is None):
            raise ValueError(
                f"{call}: dataset {k} has sample time dt={dt} but dataset 0 has "
                f"dt={dt0}; only datasets with the same sample time join (load both "
                "with the same dt=)."
            )
    out = {field: [] for field in _FIELDS}
    for data in datasets:
        for field, items in experiments(data).items():
            if items is not None:
                out[field] += items
    return dict(
        xs=out["xs"] or None,
        us=out["us"] or None,
        ts=_joined_times(datasets),
        ys=out["ys"] or None,
        **_names(first),
    )


def _joined_times(datasets):
    """The longest dataset's times when every other's are their start, else a
    uniform grid from the first dataset's first time."""
    if datasets[0].ts is None:
        return None
    longest = max(datasets, key=lambda data: data.ts.shape[0])
    reference = np.asarray(longest.ts, dtype=np.float64)
    if all(
        np.allclose(np.asarray(data.ts), reference[: data.ts.shape[0]], rtol=1e-9)
        for data in datasets
    ):
        return reference
    dt = datasets[0].dt
    if dt is None:
        raise ValueError(
            "Dataset.join: the datasets' times differ and are not uniformly spaced, "
            "so they cannot be shared; give them the same times."
        )
    return float(datasets[0].ts[0]) + dt * np.arange(reference.shape[0])
