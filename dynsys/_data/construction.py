"""How a `Dataset` is built: each role's experiments checked (shapes, lengths, real
finite values), cast to the default float dtype and padded to the longest."""

import jax
import jax.numpy as jnp
import numpy as np


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


def _check_lengths(lengths) -> tuple[int, ...]:
    values = np.asarray(lengths)
    if values.ndim != 1 or not (
        np.issubdtype(values.dtype, np.integer) or values.size == 0
    ):
        raise _error("lengths", f"expected a sequence of integers, got {lengths!r}.")
    if values.size and values.min() < 1:
        raise _error("lengths", f"every length must be >= 1, got {values.tolist()}.")
    return tuple(int(v) for v in values)
