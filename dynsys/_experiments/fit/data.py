"""The data of a `fit` experiment: simulated from a zoo model (with the clean copy
and the true system kept for comparison) or read from a file, named, and split
into estimation and validation experiments (`load_data`, the first stage)."""

import dataclasses
import math
import zipfile
from typing import Any

import numpy as np

from ..config import ConfigError
from ..outcome import config_vector as _vector
from ..runtime.compile_clock import stage
from ..schema import zoo, zoo_names


# The share of experiments held out when `data.validation` is not given.
DEFAULT_VALIDATION = 0.25


def unused_validation(config: dict, data, measured: bool) -> str | None:
    """A note (one line) when `data.validation` was given but holds nothing out:
    a validation file or `data.validation_split` decides instead, or the data are
    one experiment (whose last part is held out by time when `measured`: read
    from a file or given in Python, not simulated); `None` otherwise."""
    data_cfg = config["data"]
    given = data_cfg["validation"]
    if given is None:
        return None
    key = f"config key 'data.validation' ({given:g})"
    if data_cfg["validation_file"] is not None and data_cfg["select_on_validation"]:
        return f"{key} is not used: the validation file is held out instead"
    if data_cfg["validation_file"] is not None:
        return (
            f"{key} is not used: the validation file is a clean test, and the "
            "held-out data that choose are the last part of each estimation "
            "experiment (config key 'data.validation_split', default 1/3)"
        )
    if data_cfg["validation_split"] is not None:
        return (
            f"{key} is not used: config key 'data.validation_split' "
            f"({data_cfg['validation_split']:g}) holds out the last part of each "
            "experiment instead"
        )
    if data.num_trajectories == 1 and given > 0:
        held = (
            "the last third of it is held out by time instead (config key "
            "'data.validation_split' chooses how much)"
            if measured
            else "nothing is held out"
        )
        return f"{key} holds out whole experiments, but the data are one; {held}"
    return None


@dataclasses.dataclass(frozen=True)
class _Data:
    """The data of a fit run, and what is known about how they were made."""

    data: Any  # the Dataset
    source: str  # one line saying where the data came from
    true_system: Any = None  # the simulating model, when simulated
    clean: Any = None  # the same data without noise, when simulated
    validation: Any = None  # a held-out Dataset from its own file, when given


def _measured_system(system, measured: list[int] | None, state_names):
    """The zoo system with `C` selecting the measured states (or as it is)."""
    import jax.numpy as jnp

    from ..._systems.system import LinearSystem

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

    from ..._data.simulate import simulate

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
    from ..._data.dataset import Dataset

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
    from ..._data.dataset import Dataset

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


def _read(data_cfg: dict, key: str):
    """The dataset of the file at config key `data.<key>`, read with the roles of
    the config; a file that cannot be read is a `ConfigError` naming the key."""
    from ..._data.load import load_dataset

    roles = {
        "states": data_cfg["states"],
        "inputs": data_cfg["inputs"],
        "outputs": data_cfg["outputs"],
        # The defaults: such a column when the file has one (not required).
        "trajectory": data_cfg["trajectory_column"]
        if data_cfg["trajectory_column"] != "trajectory"
        else None,
        "time": data_cfg["time_column"] if data_cfg["time_column"] != "time" else None,
        "dt": data_cfg["dt"],
    }
    try:
        return load_dataset(data_cfg[key], **roles)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ConfigError(f"config key 'data.{key}': {error}") from None


def _described(path: str, data) -> str:
    lengths = sorted(set(data.lengths))
    steps = (
        f"{lengths[0]} steps"
        if len(lengths) == 1
        else f"{lengths[0]} to {lengths[-1]} steps"
    )
    dt = "" if data.dt is None else f", dt {data.dt:g} s"
    count = data.num_trajectories
    return f"{path}: {count} experiment{'s' * (count != 1)} x {steps}{dt}"


def _from_file(config: dict) -> _Data:
    data_cfg = config["data"]
    data = _read(data_cfg, "file")
    source = _described(data_cfg["file"], data)
    validation = None
    if data_cfg["validation_file"] is not None:
        validation = _read(data_cfg, "validation_file")
        _check_same_channels(data, validation, data_cfg["validation_file"])
        _check_same_dt(data, validation, data_cfg)
        source += "; held out: " + _described(data_cfg["validation_file"], validation)
    return _Data(data, source, validation=validation)


def other_channels(data, validation, roles=("state", "input", "output")):
    """`(role, validation's names, data's names)` of the first of `roles` whose
    channel names differ between the two datasets, else `None`."""
    for role in roles:
        have = list(getattr(validation, f"{role}_names"))
        want = list(getattr(data, f"{role}_names"))
        if have != want:
            return role, have, want
    return None


def _check_same_channels(data, validation, path: str) -> None:
    """The validation file must have the estimation file's channels."""
    other = other_channels(data, validation)
    if other is not None:
        role, have, want = other
        raise ConfigError(
            f"config key 'data.validation_file': {path} has {role} columns "
            f"{have}, but the estimation data has {want}; give a file with the "
            "same channels."
        )


def _check_same_dt(data, validation, data_cfg: dict) -> None:
    """The validation file must have the estimation file's sample time: a time
    column in one file only, or time columns that disagree, are refused (as
    `data.dt` with a validation file whose times disagree already is)."""
    if data.dt == validation.dt or (
        data.dt is not None
        and validation.dt is not None
        and math.isclose(data.dt, validation.dt, rel_tol=1e-6)
    ):
        return

    def says(dt) -> str:
        return "no sample time (no time column)" if dt is None else f"dt {dt:g} s"

    known = data.dt if data.dt is not None else validation.dt
    both = data.dt is not None and validation.dt is not None
    fix = (
        "give files with the same sample time"
        if both
        else f"set config key 'data.dt' to {known:g} for both"
    )
    raise ConfigError(
        f"config key 'data.validation_file': {data_cfg['validation_file']} has "
        f"{says(validation.dt)}, but the estimation data ({data_cfg['file']}) have "
        f"{says(data.dt)}; {fix}."
    )


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
    """Training and held-out data (and the held-out noise-free data, if known), and
    how they were chosen (words).

    The held-out data choose the structure and the kept optimiser step. They are
    carved from the estimation data: `data.validation_split` (or, for a file of
    one experiment or next to a validation file, 1/3) holds out the last part of
    each experiment by time; otherwise `data.validation` (default
    `DEFAULT_VALIDATION`) holds out whole experiments. A validation file is not
    among them: it is the clean test (`load_data`), unless
    `data.select_on_validation` makes it the held-out data that choose (the
    score on it is then optimistic)."""
    data_cfg = config["data"]
    data, fraction = run.data, data_cfg["validation"]
    fraction = DEFAULT_VALIDATION if fraction is None else fraction
    split = data_cfg["validation_split"]
    measured = run.true_system is None  # read from a file, or given (`identify`)
    if run.validation is not None:
        if data_cfg["select_on_validation"]:
            return data, run.validation, None, "the validation file (it also chooses)"
        if split is None:  # a clean test file: the choosing part carved by time
            _check_long_enough(data, data_cfg["file"])
            split = 1 / 3
    if split is None and measured and data.num_trajectories == 1:
        # The default split: a failure names the data, not an option not given.
        _check_long_enough(data, data_cfg["file"])
        split = 1 / 3
    if split is not None:
        estimation, validation, words = _time_split(config, data, split)
        return estimation, validation, None, words
    if fraction <= 0 or data.num_trajectories < 2:
        return data, None, None, "no held-out data"
    train, val = data.split(fraction)
    clean_val = None
    if run.clean is not None:
        clean_val = run.clean[np.arange(train.num_trajectories, data.num_trajectories)]
    return train, val, clean_val, f"{val.num_trajectories} experiments held out"


def _check_long_enough(data, path: str | None) -> None:
    """A file of one experiment (`path`; `None` for data given in Python) whose
    last third cannot be held out (each side needs 4 samples): one line about the
    data, naming no option the user did not give."""
    samples = data.lengths[0]
    named = "" if path is None else f"{path}: "
    try:
        data.split_time(1 / 3, min_samples=4)
    except ValueError:
        raise ConfigError(
            f"config key 'data.file': {named}its one experiment has {samples} sample"
            f"{'s' * (samples != 1)}, too few to fit a model and check it on held-out "
            "data (at least 12 samples: a third of them held out, 4 on each side); "
            "give a longer record or a separate validation file."
        ) from None


def _time_split(config: dict, data, fraction: float):
    """`(estimation, validation, words)`: the last `fraction` of each experiment
    held out (at least 4 samples each side)."""
    try:  # the order's needs are checked next (start.py's _check_order)
        estimation, validation = data.split_time(fraction, min_samples=4)
    except ValueError as error:
        raise ConfigError(f"config key 'data.validation_split': {error}") from None
    words = (
        f"the last {fraction:.0%} of each experiment held out "
        f"({sum(validation.lengths)} of {sum(data.lengths)} samples)"
    )
    return estimation, validation, words


@dataclasses.dataclass(frozen=True)
class FitData:
    """The data stage's result: the data and how they were split.

    Three roles, kept apart: `train` estimates every candidate; `val` (held out)
    chooses the structure and the kept optimiser step; `test`, a validation file,
    only scores the final model. When `val` is carved from the estimation data
    (`carved`), the final model is the chosen structure refitted on all of them
    (`estimation`), and cannot be scored on `val` honestly."""

    run: _Data  # the whole data, their source and, when simulated, the truth
    train: Any  # the estimation Dataset (its first part when `val` is carved)
    val: Any  # the held-out Dataset that chooses, or None
    clean_val: Any  # the held-out data without noise (simulated only), or None
    held: str  # how the held-out data were chosen, in words
    test: Any = None  # the validation file as a clean test (chooses nothing)
    carved: bool = False  # `val` was carved from the estimation data

    @property
    def estimation(self):
        """All the estimation data: `train`, and `val` when it was carved."""
        return self.run.data if self.carved else self.train

    @property
    def report(self):
        """The data the models are scored on: the clean test, else the held-out,
        else the training."""
        if self.test is not None:
            return self.test
        return self.val if self.val is not None else self.train

    @property
    def which(self) -> str:
        """`"held-out"` or `"training"`: which data `report` is."""
        held_out = self.val is not None or self.test is not None
        return "held-out" if held_out else "training"


def load_data(config: dict, echo) -> FitData:
    """Simulate or read the data, split them, and say what was found."""
    with stage("data"):
        simulated = config["data"]["file"] is None
        run = _simulated(config) if simulated else _from_file(config)
    return split_data(config, run, echo)


def given_data(config: dict, data, validation, echo) -> FitData:
    """Data given in Python (`identify`): the `Dataset` `data`, and `validation`
    (a `Dataset` with the same channels, or `None`) in the role of the validation
    file; split as a file's data are."""
    source = _described("the data", data)
    if validation is not None:
        source += "; held out: " + _described("the validation data", validation)
    return split_data(config, _Data(data, source, validation=validation), echo)


def split_data(config: dict, run: _Data, echo) -> FitData:
    """Split the data of `run` into their roles (`FitData`) and say how."""
    with stage("data"):
        train, val, clean_val, held = _split(config, run)
    test = None
    if run.validation is not None and not config["data"]["select_on_validation"]:
        test = run.validation
        held += "; the validation file is a clean test (it chooses nothing)"
    carved = val is not None and val is not run.validation
    echo(f"{config['name']}: {run.source}")
    echo(f"  columns: {_columns(run.data)}")
    count = train.num_trajectories
    echo(f"  {count} experiment{'s' * (count != 1)} for estimation; validation: {held}")
    return FitData(run, train, val, clean_val, held, test, carved)
