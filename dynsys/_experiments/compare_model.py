"""`dynsys compare MODEL DATA`: a saved model scored on a record it has not seen,
fit % and RMS per output channel (in the outputs' units), and a comparison figure.

A linear model runs freely from the initial state that best explains the record
(least squares, as `dynsys.compare`); a neural state-space model starts from the
state its encoder reads off the record's first `encoder.past` samples, and is
scored on the rest."""

import dataclasses
import json
import pathlib

import numpy as np

from .config import ConfigError
from .run_folder import check_out, write_marker

ENCODER_FILE = "neural_encoder.dynsys"  # what `dynsys fit --model neural` writes


@dataclasses.dataclass(frozen=True)
class Scores:
    """The comparison on the record: per output channel, in its order."""

    channels: tuple[str, ...]
    fit_percent: tuple[float, ...]
    rms: tuple[float, ...]
    samples: int  # valid steps scored, over all experiments
    skipped: int  # the encoder's samples at the start of each experiment


def _load(path: str, flag: str):
    from .._io import load

    try:
        return load(path)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{flag}: {error}") from None


def _encoder_for(model_path: str, encoder_path: str | None):
    """The encoder given by `--encoder`, or the one beside the model file."""
    from .._fitting.encoder import StateEncoder

    if encoder_path is None:
        beside = pathlib.Path(model_path).with_name(ENCODER_FILE)
        if not beside.is_file():
            raise ConfigError(
                f"--encoder: a neural model needs its encoder (its initial state "
                f"comes from it); none given and no {ENCODER_FILE} beside "
                f"{model_path!r}."
            )
        encoder_path = str(beside)
    encoder = _load(encoder_path, "--encoder")
    if not isinstance(encoder, StateEncoder):
        raise ConfigError(
            f"--encoder: {encoder_path!r} holds a {type(encoder).__name__}, not a "
            "StateEncoder (the neural_encoder.dynsys file of a neural fit)."
        )
    return encoder


def score(model_path: str, data, encoder_path: str | None = None):
    """`(Comparison, Scores)` of the model in `model_path` on the `Dataset` `data`."""
    from .._sysid.validation import compare
    from .._systems.neural_state_space import NeuralStateSpace

    model = _load(model_path, "MODEL")
    skipped = 0
    if isinstance(model, NeuralStateSpace):
        encoder = _encoder_for(model_path, encoder_path)
        skipped = encoder.past
        if min(data.lengths) <= skipped + 1:
            raise ConfigError(
                f"DATA: its shortest experiment has {min(data.lengths)} samples; the "
                f"encoder reads {skipped} before the model runs."
            )
        comparison = compare(model, data, encoder=encoder)
    elif encoder_path is not None:
        raise ConfigError(
            f"--encoder: {type(model).__name__} is not a neural model; its initial "
            "state is estimated from the record, so give no encoder."
        )
    else:
        comparison = compare(model, data)
    return comparison, _scores(comparison, skipped)


def _scores(comparison, skipped: int) -> Scores:
    measured = np.asarray(comparison.measured, np.float64)
    predicted = np.asarray(comparison.predicted, np.float64)
    lengths = np.asarray(comparison.lengths)
    mask = np.arange(measured.shape[1])[None, :] < lengths[:, None]
    error = (measured - predicted)[mask]
    rms = np.sqrt(np.mean(error**2, axis=0))
    return Scores(
        channels=tuple(comparison.names),
        fit_percent=tuple(float(v) for v in np.asarray(comparison.fit_percent)),
        rms=tuple(float(v) for v in rms),
        samples=int(mask.sum()),
        skipped=skipped,
    )


def table(scores: Scores) -> list[str]:
    """The console lines: one per output channel."""
    width = max(len("channel"), *(len(c) for c in scores.channels))
    lines = [f"  {'channel':<{width}}  {'fit %':>8}  {'RMS':>12}"]
    for channel, fit, rms in zip(scores.channels, scores.fit_percent, scores.rms):
        lines.append(f"  {channel:<{width}}  {fit:>8.1f}  {rms:>12.5g}")
    return lines


def write(out: pathlib.Path, comparison, scores: Scores, sources: dict) -> None:
    """`out/scores.json` and `out/comparison.png`, in a folder dynsys marks."""
    from .. import plot
    from .._atomic_write import write_atomic
    from .runtime.figure_helper import save_pngs

    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "dynsys compare")
    record = {**sources, **dataclasses.asdict(scores)}
    write_atomic(out / "scores.json", (json.dumps(record, indent=2) + "\n").encode())
    figure = plot.comparison(
        {"model": comparison}, title=f"{sources['model']} on {sources['data']}"
    )
    save_pngs({out / "comparison.png": figure})


def checked_out(out: str) -> pathlib.Path:
    return check_out(out, "--out")
