"""A model file as the plant of a controller experiment: loaded, checked against
the config (one line each, before training), with its observer gain."""

import dataclasses
import pathlib

import numpy as np

from ..config import ConfigError
from .typed_config import ObserverConfig


# What `dynsys fit --model neural` writes beside a neural model.
ENCODER_NAME = "neural_encoder.dynsys"


@dataclasses.dataclass(frozen=True)
class PlantFile:
    """The model read from `system.file` and what the run needs of it.

    - `linear`: the noise-free model as a `LinearSystem` (levels kept).
    - `observer_gain`: the predictor gain $L$, shape `(n, p)`.
    - `observer`: the observer in words.
    - `radius`: the spectral radius of `linear.K`.
    - `output_range`: `(low, high)` of the identification data's outputs, each
        `(p,)`, or `None` when the file's run folder does not name its data.
    - `names`: `{"inputs": [...], "outputs": [...]}`, the data's columns as the
        run folder names them, or `None`.
    - `truth`: `(name, system)`, the zoo model the data were simulated from when
        the run folder says so (a `dynsys fit` without a data file), or `None`.
    - `neural`: the `NeuralStateSpace` of a neural model file, or `None`. It is
        then the plant and the observer's model; `linear` is its linear base
        (set-point map and observer gain) and no LQG baseline is scored.
    - `encoder`: the neural model's `StateEncoder` (it starts the observer), or
        `None`.
    """

    path: pathlib.Path
    linear: object
    observer_gain: np.ndarray
    observer: str
    radius: float
    output_range: tuple[np.ndarray, np.ndarray] | None
    names: dict | None
    truth: tuple[str, object] | None
    neural: object = None
    encoder: object = None


def load_plant(config: dict) -> PlantFile:
    """Read and check `system.file` (`ConfigError`, one line, for a file that is
    not a linear or innovation model with inputs)."""
    from ..._io import load
    from ..._systems.innovation import InnovationSystem

    path = pathlib.Path(config["system"]["file"])
    try:
        model = load(path)
    except (ValueError, TypeError, OSError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"config key 'system.file': {reason}") from None
    from ..._systems.neural_state_space import NeuralStateSpace

    neural = model if isinstance(model, NeuralStateSpace) else None
    encoder = None if neural is None else _checked_encoder(config, path, neural)
    linear = _linear_model(path, model if neural is None else neural.base)
    if neural is not None:
        gain, words = _kalman_observer(config, linear)
        observer = (
            f"the neural model itself run alongside, corrected by the gain of "
            f"{words} of its linear base, started by its encoder on the window "
            "before the task"
        )
    elif isinstance(model, InnovationSystem):
        gain = np.asarray(model.kalman_gain, np.float64)
        observer = "the model's own Kalman predictor (InnovationSystem)"
    else:
        gain, observer = _kalman_observer(config, linear)
    radius = float(np.max(np.abs(np.linalg.eigvals(np.asarray(linear.K)))))
    output_range, names = _identification_data(path)
    truth = _simulated_from(path, linear)
    return PlantFile(
        path, linear, gain, observer, radius, output_range, names, truth, neural,
        encoder,
    )  # fmt: skip


def _linear_model(path: pathlib.Path, model):
    """The file's model (a neural model's linear base: the set-point map and the
    observer gain) as a `LinearSystem`, or a one-line `ConfigError`."""
    from ..._systems.system import LinearSystem

    key = "config key 'system.file'"
    linear = model.to_linear() if hasattr(model, "to_linear") else model
    if not isinstance(linear, LinearSystem):
        raise ConfigError(
            f"{key}: expected a linear or innovation model (LinearSystem, "
            f"InnovationSystem), got {type(model).__name__} in {path.name}."
        )
    if linear.input_size == 0:
        raise ConfigError(
            f"{key}: the model in {path.name} takes no input, so there is nothing "
            "to control."
        )
    if linear.offset is not None:
        raise ConfigError(
            f"{key}: the model in {path.name} has an offset; give a model with an "
            "operating point (input_level, output_level), as `dynsys fit` writes."
        )
    return linear


def _checked_encoder(config: dict, path: pathlib.Path, model):
    """A neural model's encoder: `system.encoder` or the one beside it, one that
    reads the model's inputs and outputs and gives its state (else a one-line
    `ConfigError`)."""
    from ..._fitting.encoder import StateEncoder
    from ..._io import load

    key = "config key 'system.encoder'"
    given = config["system"]["encoder"]
    file = pathlib.Path(given) if given is not None else path.parent / ENCODER_NAME
    if given is None and not file.is_file():
        raise ConfigError(
            f"{key}: {path.name} is a neural model, which "
            f"starts from its encoder; no {ENCODER_NAME} beside it; give "
            "system.encoder."
        )
    try:
        encoder = load(file)
    except (ValueError, TypeError, OSError):
        encoder = None
    if not isinstance(encoder, StateEncoder):
        raise ConfigError(
            f"{key}: {file.name} does not read as the StateEncoder that "
            "`dynsys fit --model neural` writes beside its model."
        )
    channels = model.input_size + model.output_size
    reads = encoder.feature_mean.shape[-1]
    if encoder.state_size != model.state_size or reads != encoder.past * channels:
        raise ConfigError(
            f"{key}: {file.name} gives {encoder.state_size} states from {reads} "
            f"values, but {path.name} has {model.state_size} states and "
            f"{channels} channels ({encoder.past} samples: "
            f"{encoder.past * channels} values): an encoder of another model."
        )
    return encoder


def _kalman_observer(config: dict, linear):
    """The steady-state Kalman predictor gain of a `LinearSystem` from the noise
    levels in `[observer]`."""
    from ..._control.lqg import kalman_gain

    observer = ObserverConfig.from_section(config["observer"])
    try:
        gain = kalman_gain(linear, **observer.arguments())
    except ValueError as error:
        raise ConfigError(f"config key 'observer.process_noise': {error}") from None
    words = (
        f"a steady-state Kalman predictor (process noise {observer.process_noise:g}, "
        f"measurement noise {observer.measurement_noise:g})"
    )
    return gain, words


def _identification_data(path: pathlib.Path):
    """`(output range, names)` of the data the model was identified from, read
    from the `config.toml` of the run folder it was written in (`(None, None)` if
    there is none, or it names no data file that still reads)."""
    import tomllib

    from ..._data.load import load_dataset

    try:
        written = tomllib.loads((path.parent / "config.toml").read_text())
        data = written["data"]
        names = {"inputs": data.get("inputs"), "outputs": data.get("outputs")}
        dataset = load_dataset(
            data["file"], inputs=names["inputs"], outputs=names["outputs"]
        )
        ys = np.concatenate(_outputs(dataset), axis=0)
    except Exception:  # no run folder, or one that names no readable data
        return None, None
    return (ys.min(axis=0), ys.max(axis=0)), names


def _outputs(dataset):
    """The dataset's output samples per experiment (padding left out), each
    `(T_i, p)`."""
    ys = np.asarray(dataset.ys if dataset.ys is not None else dataset.xs)
    return [ys[i, :length] for i, length in enumerate(dataset.lengths)]


def _simulated_from(path: pathlib.Path, linear):
    """`(name, system)` of the zoo model that simulated the data, read from the
    run folder's `config.toml` (a fit without a data file), when it has the
    model's input and output sizes; else `None`."""
    import tomllib

    from ..schema import zoo

    try:
        written = tomllib.loads((path.parent / "config.toml").read_text())
        if written.get("kind") != "fit" or written.get("data", {}).get("file"):
            return None
        system = written["system"]
        truth = zoo().get(system["model"], **system.get("params", {}))
    except Exception:  # no run folder, or not one of simulated data
        return None
    sizes = (truth.input_size, truth.output_size)
    if sizes != (linear.input_size, linear.output_size):
        return None
    return system["model"], truth
