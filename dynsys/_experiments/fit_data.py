"""The data of a `fit` experiment: simulated from a zoo model (with the clean copy
and the true system kept for comparison) or read from a file, named, and split
into estimation and validation experiments."""

import dataclasses
import zipfile
from typing import Any

import numpy as np

from .config import ConfigError
from .outcome import config_vector as _vector
from .schema import zoo, zoo_names


@dataclasses.dataclass(frozen=True)
class _Data:
    """The data of a fit run, and what is known about how they were made."""

    data: Any  # the Dataset
    source: str  # one line saying where the data came from
    true_system: Any = None  # the simulating model, when simulated
    clean: Any = None  # the same data without noise, when simulated


def _measured_system(system, measured: list[int] | None, state_names):
    """The zoo system with `C` selecting the measured states (or as it is)."""
    import jax.numpy as jnp

    from .._systems.system import LinearSystem

    if measured is None:
        return system, None
    n = system.state_size
    bad = [k for k in measured if not 0 <= k < n]
    if bad or len(set(measured)) != len(measured) or not measured:
        raise ConfigError(
            "config key 'data.measured_states': expected distinct state indices in "
            f"0..{n - 1}, got {measured}."
        )
    if not isinstance(system, LinearSystem):
        raise ConfigError(
            "config key 'data.measured_states': only linear zoo models can be "
            f"measured through outputs; {type(system).__name__} is not linear."
        )
    C = jnp.eye(n)[jnp.asarray(measured)]
    names = [state_names[k] for k in measured] if state_names else None
    return (
        LinearSystem(system.K, system.B, C, None, system.offset, dt=system.dt),
        names,
    )


def _simulated(config: dict) -> _Data:
    import jax

    from .._data.simulate import simulate

    data_cfg, system_cfg = config["data"], config["system"]
    seed = config["seed"]
    key_x0, key_u, key_noise = jax.random.split(jax.random.key(seed), 3)
    zoo_system = zoo().get(system_cfg["model"], **system_cfg["params"])
    n, m = zoo_system.state_size, zoo_system.input_size
    state_names = _channel_names(config, "states", n)
    system, output_names = _measured_system(
        zoo_system, data_cfg["measured_states"], state_names
    )
    N, T = data_cfg["trajectories"], data_cfg["length"]
    mean = _vector(config, "data", "x0_mean", n, "state")
    x0s = mean[None] + data_cfg["x0_scale"] * jax.random.normal(key_x0, (N, n))
    inputs = None
    if m:
        inputs = data_cfg["input_scale"] * jax.random.normal(key_u, (N, T, m))
    noise = dict(
        process_noise=data_cfg["process_noise"],
        measurement_noise=data_cfg["measurement_noise"],
    )
    data = simulate(system, x0s, T, inputs=inputs, key=key_noise, **noise)
    clean = simulate(system, x0s, T, inputs=inputs)
    input_names = _channel_names(config, "inputs", m)
    if output_names is not None:  # only the outputs are measured: drop the states
        data, clean = _outputs_only(data), _outputs_only(clean)
        state_names = None
    data = _named(data, state_names, input_names, output_names)
    measured = (
        f", outputs {', '.join(output_names or [])}"
        if data_cfg["measured_states"] is not None
        else ""
    )
    source = (
        f"{system_cfg['model']} (zoo), {N} simulated trajectories x {T} steps"
        f"{measured}, measurement noise {noise['measurement_noise']:g}"
        + (f", process noise {noise['process_noise']:g}") * bool(noise["process_noise"])
        + f" (seed {seed})"
    )
    return _Data(data, source, true_system=system, clean=clean)


def _outputs_only(data):
    """The inputs and outputs of `data`, without its states."""
    from .._data.dataset import Dataset

    ts = None if data.ts is None else data.ts[: data.num_steps]
    return Dataset(us=data.us, ts=ts, ys=data.ys)


def _zoo_names(config: dict, which: str):
    """The zoo model's channel names with units, of one role (`"states"`, ...)."""
    return list(getattr(zoo_names(config), which)) or None


def _channel_names(config: dict, role: str, count: int):
    """`system.state_names` or `system.input_names` (`role` `"states"` or
    `"inputs"`) checked against `count`, else the zoo model's names."""
    key = f"{role[:-1]}_names"
    names = config["system"][key]
    if names is None:
        return _zoo_names(config, role)
    if len(names) != count:
        raise ConfigError(
            f"config key 'system.{key}': expected {count} names, got {len(names)}."
        )
    return list(names)


def _named(data, state_names, input_names, output_names):
    """`data` with the given column names (where given and the columns exist)."""
    from .._data.dataset import Dataset

    def role(field: str, names, current):
        """The field's experiments and names (the given ones, else the current)."""
        if getattr(data, field) is None:
            return None, None
        return _experiments(data, field), tuple(names) if names else current

    xs, state_names = role("xs", state_names, data.state_names)
    us, input_names = role("us", input_names, data.input_names)
    ys, output_names = role("ys", output_names, data.output_names)
    return Dataset(
        xs,
        us,
        data.ts,
        ys=ys,
        state_names=state_names,
        input_names=input_names,
        output_names=output_names,
    )


def _experiments(data, field: str):
    """The field's values, one unpadded array per experiment (ragged-safe)."""
    values = np.asarray(getattr(data, field))
    extra = 1 if field == "xs" else 0
    return [values[i, : T + extra] for i, T in enumerate(data.lengths)]


def _from_file(config: dict) -> _Data:
    from .._data.load import load_dataset

    data_cfg = config["data"]
    roles = {
        "states": data_cfg["states"],
        "inputs": data_cfg["inputs"],
        "outputs": data_cfg["outputs"],
        "trajectory": data_cfg["trajectory_column"],
        "time": data_cfg["time_column"],
    }
    try:
        data = load_dataset(data_cfg["file"], **roles)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ConfigError(f"config key 'data.file': {error}") from None
    lengths = sorted(set(data.lengths))
    steps = (
        f"{lengths[0]} steps"
        if len(lengths) == 1
        else f"{lengths[0]} to {lengths[-1]} steps"
    )
    source = f"{data_cfg['file']}: {data.num_trajectories} experiments x {steps}"
    return _Data(data, source)


def _columns(data) -> str:
    """What the run detected in the data: the state, input and output columns."""

    def part(count: int, what: str, names) -> str:
        if not count:
            return f"no {what}s"
        return f"{count} {what}{'s' * (count != 1)} ({', '.join(names)})"

    parts = [
        part(data.state_size, "state", data.state_names),
        part(data.input_size, "input", data.input_names),
    ]
    if data.output_size:
        parts.append(part(data.output_size, "output", data.output_names))
    return ", ".join(parts)


def _split(config: dict, run: _Data):
    """Training and held-out data (and the held-out noise-free data, if known)."""
    data, fraction = run.data, config["data"]["validation"]
    if fraction <= 0 or data.num_trajectories < 2:
        return data, None, None
    train, val = data.split(fraction)
    clean_val = None
    if run.clean is not None:
        clean_val = run.clean[np.arange(train.num_trajectories, data.num_trajectories)]
    return train, val, clean_val
