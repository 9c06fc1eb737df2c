"""What a fit run says when its result is not to be trusted: warnings, each one
line, collected for the console (`dynsys fit: warning: ...`), summary.md and
metrics.json `warnings`."""

import contextlib
import functools
import warnings

import numpy as np


# Fit-% points by which a stable model may validate worse than an unstable one
# and still be preferred, on data that look bounded. Bounded data do not make a
# stable plant (an unstable plant under feedback gives bounded data, and only its
# unstable models validate), so the preference is a margin, not a filter: large
# enough that an unstable model must validate clearly better (a twentieth of the
# outputs' spread in NRMSE), small against the gap such a plant shows (tens of
# points between its unstable and its stabilised models).
STABLE_MARGIN = 5.0

# Relative size below which a model's input gain counts as negligible: the
# response to the inputs is this small a fraction of the outputs' spread.
_NEGLIGIBLE_GAIN = 1e-3


@contextlib.contextmanager
def captured_warnings(found: list[str]):
    """Collect the messages of the Python warnings raised inside (once each, no
    source path) into `found`, instead of printing them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for item in caught:
                add(found, str(item.message))


# Advice of the library's warnings written as a Python call, as the config key
# that does the same in a fit run (`dynsys fit` names its option instead).
_RUN_ADVICE = {
    "fit(fit_subspace(data, noise_model=True), data, loss=Prediction())": (
        "config key 'fit.loss' prediction (a noise model fitted by its one-step "
        "prediction error), or config key 'fit.structure' armax or bj for one "
        "output"
    ),
}


def add(found: list[str], message: str) -> None:
    """Append `message` (one line, no trailing full stop doubled, a library
    call's advice as the run's config key: `_RUN_ADVICE`) unless present."""
    line = " ".join(message.split()).rstrip(".") + "."
    for call, key in _RUN_ADVICE.items():
        line = line.replace(call, key)
    if line not in found:
        found.append(line)


def spectral_radius(model) -> float:
    from ..._fitting.metrics import spectral_radius as radius

    K = np.asarray(model.to_linear().K if hasattr(model, "to_linear") else model.K)
    return radius(K) if K.size else 0.0


def looks_bounded(data) -> bool:
    """Whether measured outputs look like those of a stable system: in each
    experiment the second half spreads at most 10 times as far from the first
    half's mean as the first half does (a diverging record grows far faster)."""
    ys = np.asarray(data.ys)
    for i, T in enumerate(data.lengths):
        y = ys[i, :T]
        half = max(1, T // 2)
        first, second = y[:half], y[half:]
        spread = np.max(np.abs(first - first.mean(0)), axis=0)
        later = np.max(np.abs(second - first.mean(0)), axis=0) if len(second) else 0
        if np.any(later > 10 * np.maximum(spread, 1e-300)):
            return False
    return True


def model_warnings(name: str, model, data, found: list[str]) -> None:
    """Warn when `model` (a start or the fitted model) is unstable while the data
    are bounded, or ignores its inputs."""
    rho = spectral_radius(model)
    if rho >= 1.0 and looks_bounded(data):
        add(
            found,
            f"the {name} model is unstable (max |eigenvalue| {rho:.4f}) while the "
            "data look bounded; its free run diverges (right for an unstable plant "
            "recorded under feedback; --model stable forces a stable model)",
        )
    linear = model.to_linear() if hasattr(model, "to_linear") else model
    if getattr(linear, "B", None) is not None and _ignores_inputs(linear, data):
        add(
            found,
            f"the {name} model's input gain is negligible (it ignores the inputs); "
            "check the input columns, the excitation, or try config key "
            "'fit.feedthrough' or another config key 'fit.order'",
        )


@functools.cache
def _forced_program():
    """`forced_outputs` as one program per model structure and data shape (outside
    `jit`, its scan compiled again for each model), kept across runs."""
    from ..._compile.jit import kept_jit
    from ..._sysid.initial_state import forced_outputs

    return kept_jit(forced_outputs)


def _ignores_inputs(linear, data) -> bool:
    """The response to the data's inputs is below `_NEGLIGIBLE_GAIN` of the
    outputs' spread (per channel, every channel)."""
    from ..._fitting.length_buckets import shared_length

    us = np.asarray(data.us)
    if linear.input_level is not None:
        us = us - np.asarray(linear.input_level)[None, None]
    mask = np.arange(us.shape[1])[None, :] < np.asarray(data.lengths)[:, None]
    us = np.where(mask[..., None], us, 0.0)
    bare = type(linear)(linear.K, linear.B, linear.C, linear.D)
    # Padded (zero inputs after the end, cut off below) to the length records of
    # nearby lengths share: a file of another length compiles no program here.
    N, T, m = us.shape
    steps = shared_length(T, f"forced_outputs/{N}x{m}:{us.dtype}")
    us = np.pad(us, ((0, 0), (0, steps - T), (0, 0)))
    response = np.asarray(_forced_program()(bare, us, steps, N))[:, :T][mask]
    ys = np.asarray(data.ys)[mask]
    spread = np.std(ys, axis=0)
    return bool(np.all(np.std(response, axis=0) < _NEGLIGIBLE_GAIN * spread))


def stop_reason(result) -> str | None:
    """The fit's stop reason, or "maximum steps reached" when it ran every step
    without converging (so `None` never hides a fit cut short)."""
    if result.stop_reason is not None:
        return result.stop_reason
    if not result.converged:
        return "maximum steps reached"
    return None


def fit_warnings(result, reason: str | None, found: list[str]) -> None:
    """Warn about a fit that ended at its step cap or made no progress."""
    if reason == "maximum steps reached":
        add(
            found,
            f"the fit ended at its step cap ({len(result.losses)} steps) before "
            "converging; more steps (config key 'fit.steps') may improve it",
        )
    if result.best_step == 0 and len(result.losses) > 1:
        what = "validation" if result.val_losses else "training"
        add(
            found,
            f"the fit returned its start: no step improved its {what} loss",
        )


def validation_warnings(which: str, channels, fit_percent, found: list[str]) -> None:
    """Warn for each channel whose fit % is below 0 (worse than its mean), or
    whose free run diverged."""
    from ..._fitting.metrics import fit_percent_text

    for channel, value in zip(channels, fit_percent):
        text = fit_percent_text(value)
        if text == "diverged":
            add(found, f"{which} fit % of {channel}: the model's free run diverged")
        elif value < 0:
            add(
                found,
                f"{which} fit % of {channel} is {text}, below 0: the model "
                "predicts it worse than its mean does",
            )
