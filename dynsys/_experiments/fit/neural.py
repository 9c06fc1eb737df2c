"""The neural stage of a `fit` experiment (`model = "neural"`): after the linear
fit, a `NeuralStateSpace` on top of it (`fit_neural`), and both models scored side by
side on the report data (fit % and RMS in the output's units, a figure).

When the held-out part was carved from the estimation data, the saved neural model
is trained again on all of them (`_refit`), as the linear model is refitted: the
held-out part is often where a record leaves the range of its start (the cascaded
tanks' last third drives the pump below anything before it), and a final model that
has seen it extrapolates less. On the tanks' two-thirds split this cut the held-out
RMS by 16-29 % over three seeds (docs/nonlinear-models.md, "The final neural
model")."""

import dataclasses
import time

import numpy as np

from ..config import ConfigError
from ..sizes import check_neural_memory
from .assumptions import worse_neural_lines
from .typed_config import NeuralConfig


@dataclasses.dataclass(frozen=True)
class NeuralStage:
    """What the neural stage adds to the run: metrics, figures, notes, files."""

    metrics: dict
    figures: dict
    notes: list[str]
    files: dict


def _scores(measured, predicted, lengths) -> tuple[list[float], list[float]]:
    """Per-channel fit % and RMS error over each experiment's first `lengths[i]`
    samples of the `(N, T, p)` arrays."""
    measured, predicted = np.asarray(measured), np.asarray(predicted)
    T = measured.shape[1]
    valid = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    y, y_hat = measured[valid], predicted[valid]
    from ..._fitting.metrics import channel_fit_percent

    fit = channel_fit_percent(y, y_hat, xp=np)
    rms = np.sqrt(np.mean((y - y_hat) ** 2, axis=0))
    return [float(v) for v in fit], [float(v) for v in rms]


def check_windows(fit_cfg: dict, train, val, itemsize: int, estimation) -> None:
    """Refuse, before the linear stage, a `neural_horizon` (with `neural_past`)
    too long for the estimation records, a `neural_past` not shorter than the
    validation records (`fit_neural`'s own checks, in config keys), or sizes whose
    training would not fit in memory (`sizes.check_neural_memory`, on all the
    `estimation` data: the final neural model trains on them)."""
    from ..._sysid.neural import check_arguments, check_options

    try:
        options = NeuralConfig.from_section(fit_cfg).arguments()
        check_options({k: v for k, v in options.items() if k not in KEYS[:2]})
    except ValueError as error:
        raise ConfigError(_in_config_keys(error)) from None
    past, horizon = fit_cfg["neural_past"], fit_cfg["neural_horizon"]
    longest = max(train.lengths)
    if past + horizon > longest:
        # The larger of the two is named first: it is the one to shorten.
        keys = [("fit.neural_past", past), ("fit.neural_horizon", horizon)]
        (first, a), (second, b) = sorted(keys, key=lambda item: -item[1])
        raise ConfigError(
            f"config key '{first}' ({a}) with '{second}' ({b}): a training window "
            f"of past + horizon = {past + horizon} samples is longer than the "
            f"longest estimation record ({longest}); choose a shorter horizon or "
            "past."
        )
    try:
        check_arguments(train, val, past, horizon)
    except ValueError as error:
        raise ConfigError(_in_config_keys(error)) from None
    windows = sum(max(0, T - past - horizon + 1) for T in estimation.lengths)
    channels = train.output_size + train.input_size
    check_neural_memory(fit_cfg, channels, windows, itemsize)


# fit_neural's arguments and the config keys that set them (NeuralConfig's order).
KEYS = ("horizon", "past", "width_size", "depth", "num_steps", "learning_rate",
        "batch_size")  # fmt: skip
CONFIG_KEYS = ("neural_horizon", "neural_past", "neural_width", "neural_depth",
               "neural_steps", "neural_lr", "neural_batch_size")  # fmt: skip


def _in_config_keys(error: ValueError) -> str:
    """A `fit_neural` argument error, naming the config keys instead."""
    message = str(error)
    for argument, key in zip(KEYS, CONFIG_KEYS):
        message = message.replace(
            f"fit_neural({argument}=...)", f"config key 'fit.{key}'"
        )
    return message


def _train(config, train, val, linear, progress, **overrides):
    import jax

    from ..._sysid.neural import fit_neural

    options = NeuralConfig.from_section(config["fit"]).arguments()
    try:
        return fit_neural(
            train, val, base=linear, key=jax.random.key(config["seed"]),
            progress=progress, **{**options, **overrides},
        ), options  # fmt: skip
    except ValueError as error:
        raise ConfigError(_in_config_keys(error)) from None


EVAL_EVERY = 50  # steps between the refit's evaluations (fit_neural's default)


def refit_steps(
    best_step: int, train, estimation, num_steps: int, eval_every: int = EVAL_EVERY
) -> int:
    """The final neural model's training steps on all the estimation data: the
    first part's best step scaled by how many more samples there are (the same
    number of passes over the data), at least `eval_every` and at most the
    training budget `num_steps` (`fit.neural_steps`)."""
    scale = sum(estimation.lengths) / sum(train.lengths)
    return min(num_steps, max(eval_every, int(round(best_step * scale))))


# The final model runs away on held inputs when its free run leaves the measured
# outputs' range by more than this many widths of it, and by more than
# RUNAWAY_RATIO times the first part's model does (a lightly damped plant's true
# response to held levels overshoots the range a broadband record covers; both
# models then overshoot alike).
RUNAWAY_WIDTHS = 1.0
RUNAWAY_RATIO = 3.0


@dataclasses.dataclass(frozen=True)
class NeuralRefit:
    """The final neural model, trained on all the estimation data: its `NeuralFit`,
    the samples it was trained on, the steps it ran, its wall time, its
    (training) fit % and RMS on them, the first part's model's fit % on them,
    and how far each model's free run leaves the measured outputs' range on
    inputs held at random levels inside the measured ones' (`excursions`, first
    and final, in widths of that range; `held_probe.py`). `kept` is False when
    the final model fits the estimation data worse than the first part's model
    (training on more data should not fit them worse) or runs away on the held
    inputs where that one does not (`runs_away`); the first part's model is then
    saved."""

    result: object
    samples: int
    steps: int
    seconds: float
    scores: tuple[list[float], list[float]]
    first_fit: list[float]
    excursions: tuple[float, float] = (0.0, 0.0)

    @property
    def fits_worse(self) -> bool:
        return float(np.mean(self.scores[0])) < float(np.mean(self.first_fit))

    @property
    def runs_away(self) -> bool:
        first, final = self.excursions
        return final > max(RUNAWAY_WIDTHS, RUNAWAY_RATIO * first)

    @property
    def kept(self) -> bool:
        return not (self.fits_worse or self.runs_away)


def _refit(config, data, result, linear, progress) -> NeuralRefit | None:
    """When the held-out part was carved from the estimation data
    (`data.carved`), the neural model trained again from new weights on all of
    them, on the final `linear` model, for `refit_steps` steps (no data are left
    to stop on: the held-out part is now training data, so its score is a training
    fit). `None` without a carved part, or when the first part's model never beat
    its start (best step 0: no step count to scale)."""
    if not data.carved or result.best_step == 0:
        return None
    estimation = data.estimation
    budget = config["fit"]["neural_steps"]
    steps = refit_steps(result.best_step, data.train, estimation, budget)
    started = time.perf_counter()
    # The best free run on the training data is kept: no evaluation stops it.
    final, _ = _train(
        config, estimation, estimation, linear, progress, num_steps=steps,
        eval_every=EVAL_EVERY, patience=steps // EVAL_EVERY + 1,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    c, first = final.compare(estimation), result.compare(estimation)
    scores = _scores(c.measured, c.predicted, c.lengths)
    first_fit = _scores(first.measured, first.predicted, first.lengths)[0]
    samples = sum(estimation.lengths)
    horizon = int(config["fit"]["neural_horizon"])
    holds = (max(1, horizon // 4), horizon)  # 16-64 samples by default
    excursions = tuple(_excursion(r, estimation, holds) for r in (result, final))
    return NeuralRefit(final, samples, steps, seconds, scores, first_fit, excursions)


def _excursion(result, estimation, holds) -> float:
    """`held_input_excursion` of `result`'s model on the longest estimation
    record (0 without inputs, nothing to hold, or when that record is not longer
    than the encoder's `past`)."""
    from ..._sysid.held_probe import held_input_excursion

    longest = int(np.argmax(estimation.lengths))
    T = estimation.lengths[longest]
    if estimation.us is None or T <= result.encoder.past:
        return 0.0
    us, ys = (np.asarray(a)[longest, :T] for a in (estimation.us, estimation.ys))
    return held_input_excursion(result.model, result.encoder, us, ys, holds=holds)


def _table(channels, linear, neural, echo) -> None:
    echo(f"    {'channel':<20}{'linear fit %':>14}{'neural fit %':>14}"
         f"{'linear RMS':>14}{'neural RMS':>14}")  # fmt: skip
    for j, name in enumerate(channels):
        echo(
            f"    {name:<20}{linear[0][j]:>14.1f}{neural[0][j]:>14.1f}"
            f"{linear[1][j]:>14.4g}{neural[1][j]:>14.4g}"
        )


def _figure(report, linear_c, neural_c, past, scores, which):
    from ... import plot

    dt = report.dt
    T = neural_c.measured.shape[1]
    ts = (past + np.arange(T)) * (1.0 if dt is None else dt)
    return plot.comparison(
        ts,
        np.asarray(neural_c.measured[0]),
        {
            "linear": np.asarray(linear_c.predicted[0, past:]),
            "neural": np.asarray(neural_c.predicted[0]),
        },
        fit_percent={"linear": scores["linear"][0], "neural": scores["neural"][0]},
        names=list(report.output_names),
        time_label="t (s)" if dt is not None else "t (steps)",
        title=f"{which} data: free run from sample {past} (the first {past} start it)",
    )


def neural_stage(config, data, linear, final_linear, progress, echo):
    """Fit the neural model on `data.train` (early stopping on `data.val`, else
    the training data), starting from the fitted `linear` model; score both on
    `data.report` from sample `past` on (the linear model's initial state
    estimated from the whole record). When the held-out part was carved from the
    estimation data, the saved neural model is then trained again on all of them
    (`_refit`, on `final_linear` when there is one), as the linear model is."""
    from ..._sysid.validation import compare

    report, which = data.report, data.which
    started = time.perf_counter()
    result, options = _train(config, data.train, data.val, linear, progress)
    seconds = time.perf_counter() - started
    past = result.past
    linear_c = compare(linear, report)
    neural_c = result.compare(report)
    scores = _both_scores(linear_c, neural_c, past, neural_c.lengths)
    echo(
        f"  neural state-space model (horizon {options['horizon']}, past {past}, "
        f"width {options['width_size']}, depth {options['depth']}, Adam): "
        f"{result.steps_run} steps, best step {result.best_step}, {seconds:.1f} s"
    )
    stop_reason = _stop_reason(result, options)
    if stop_reason is not None:
        echo(f"  note: {stop_reason}")
    in_range = _in_range_line(result, data.val)
    if in_range is not None:
        echo(f"  note: {in_range}")
    try:
        refit = _refit(
            config, data, result, linear if final_linear is None else final_linear,
            progress,
        )  # fmt: skip
    except ConfigError as error:  # e.g. a start whose loss is not finite on them
        refit = None
        echo(
            "  warning: the neural model was not trained again on all the "
            f"estimation data ({error}); the first part's model is saved"
        )
    if refit is not None:
        echo(f"  {_refit_line(refit)}")
        if not refit.kept:
            echo(f"  warning: {_refit_refused(refit)}")
    echo(
        f"  {which} data, free run from sample {past} (the first {past} start it; "
        "the linear fit % here is over these samples, not the whole record):"
    )
    channels = list(report.output_names)
    _table(channels, scores["linear"], scores["neural"], echo)
    in_range_scores = None
    if in_range is not None and data.test is None:
        scored = [max(0, n - past) for n in result.val_scored]
        in_range_scores = _both_scores(linear_c, neural_c, past, scored)
        echo(
            "  the same up to where an input leaves the training range "
            f"({sum(result.val_scored)} of {sum(report.lengths)} samples):"
        )
        _table(channels, in_range_scores["linear"], in_range_scores["neural"], echo)
    said = worse_neural_lines(channels, scores["linear"], scores["neural"])
    if said and in_range_scores is not None:
        refitted = refit is not None and refit.kept
        said = _worse_only_outside(channels, in_range_scores, refitted) or said
    for line in said:
        echo(f"  note: {line}.")
    if refit is not None and refit.kept:
        echo(
            "  the saved neural model is the final one; its fit % on all the "
            "estimation data: "
            + ", ".join(f"{v:.1f}" for v in refit.scores[0])
            + " (a training fit: it has seen the held-out part)"
        )
    metrics = {
        "options": options,
        "past": past,
        "steps_run": int(result.steps_run),
        "best_step": int(result.best_step),
        "stop_reason": stop_reason,
        "validation_scored_samples": list(result.val_scored),
        "in_range": None if in_range_scores is None else {
            "fit_percent": {k: v[0] for k, v in in_range_scores.items()},
            "rms": {k: v[1] for k, v in in_range_scores.items()},
        },
        "worse_than_linear": bool(said),
        "seconds": seconds,
        "fit_percent": {k: v[0] for k, v in scores.items()},
        "rms": {k: v[1] for k, v in scores.items()},
        "final": None if refit is None else {
            "saved": refit.kept,
            "steps": refit.steps,
            "seconds": refit.seconds,
            "training_fit_percent": refit.scores[0],
            "training_rms": refit.scores[1],
            "first_part_model_fit_percent": refit.first_fit,
            "held_input_excursion": {
                k: v if np.isfinite(v) else None
                for k, v in zip(("first", "final"), refit.excursions)
            },
        },
    }  # fmt: skip
    figure = _figure(report, linear_c, neural_c, past, scores, which)
    saved = refit.result if refit is not None and refit.kept else result
    return NeuralStage(
        metrics,
        {"neural_comparison.png": figure},
        _notes(result, seconds, which, past, channels, scores, stop_reason, said,
               refit, in_range),  # fmt: skip
        _model_files(saved, linear, report),
    )


def _refit_refused(refit: NeuralRefit) -> str:
    if refit.runs_away:
        first, final = refit.excursions
        return (
            "the neural model trained again on all the estimation data runs away "
            "when its inputs are held at random levels inside the measured range "
            f"(its free run leaves the measured outputs' range by {final:.3g} "
            f"times its width; the one trained on their first part by "
            f"{first:.3g}): that one is saved"
        )
    mean = float(np.mean(refit.scores[0]))
    return (
        f"the neural model trained again on all the estimation data fits them "
        f"worse ({mean:.1f} %) than the one trained on their first part "
        f"({float(np.mean(refit.first_fit)):.1f} %): that one is saved"
    )


def _refit_line(refit: NeuralRefit) -> str:
    return (
        "final neural model: trained again on all the estimation data "
        f"({refit.samples} samples, the held-out part included) for "
        f"{refit.steps} steps (the best step, scaled to as many passes over the "
        f"data), {refit.seconds:.1f} s"
    )


def _both_scores(linear_c, neural_c, past, lengths) -> dict:
    """`{"linear": (fit %, RMS), "neural": ...}` per channel over each record's
    first `lengths[i]` samples from sample `past` on (the linear comparison runs
    from sample 0, the neural one from `past`)."""
    return {
        "linear": _scores(
            linear_c.measured[:, past:], linear_c.predicted[:, past:], lengths
        ),
        "neural": _scores(neural_c.measured, neural_c.predicted, lengths),
    }


def _worse_only_outside(channels, in_range_scores, refitted: bool) -> list[str]:
    """The note for a neural model worse than the linear one on the whole
    held-out part but better on every channel where the inputs stay in the
    training range (else an empty list); `refitted`: the saved model was trained
    again on all the estimation data."""
    linear, neural = in_range_scores["linear"][1], in_range_scores["neural"][1]
    if not all(n < l for n, l in zip(neural, linear)):
        return []
    pairs = ", ".join(
        f"{name} RMS {n:.4g} against {l:.4g}"
        for name, n, l in zip(channels, neural, linear)
    )
    return [
        "the neural model is worse than the linear one on the whole held-out part "
        f"but better where the inputs stay in the training range ({pairs}): it "
        "extrapolates worse"
        + (
            "; the saved final model is trained on all the estimation data, the "
            "out-of-range part included"
            if refitted
            else ""
        )
    ]


def _in_range_line(result, val) -> str | None:
    """One line when the early stopping scored only the part of the validation
    records whose inputs stay in the training range (`fit_neural`'s
    `validate_in_range`), else `None`."""
    lengths = None if val is None else tuple(val.lengths)
    if lengths is None or tuple(result.val_scored) == lengths:
        return None
    from ..._sysid.in_range import RANGE_MARGIN

    return (
        "the early stopping scored the held-out data up to where an input leaves "
        f"the training inputs' range by more than {RANGE_MARGIN:.0%} of it: "
        f"{sum(result.val_scored)} of {sum(lengths)} samples (a free run past "
        "inputs never trained on measures how the model extrapolates, which "
        "changes from seed to seed); the table scores all of them"
    )


def _notes(result, seconds, which, past, channels, scores, stop_reason, said, refit,
           in_range):  # fmt: skip
    """summary.md's lines of the neural stage."""
    lines = [
        f"Neural state-space model on the fitted linear model: {result.steps_run} "
        f"steps (best {result.best_step}), {seconds:.1f} s; scored on the {which} "
        f"data from sample {past} on (the first {past} samples start the free "
        "run).",
        "",
        "| channel | linear fit % | neural fit % | linear RMS | neural RMS |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {scores['linear'][0][j]:.1f} | {scores['neural'][0][j]:.1f} | "
        f"{scores['linear'][1][j]:.4g} | {scores['neural'][1][j]:.4g} |"
        for j, name in enumerate(channels)
    ]
    lines += [""] + ([f"Note: {stop_reason}.", ""] if stop_reason else [])
    lines += [f"Note: {in_range}.", ""] if in_range else []
    lines += [f"Note: {line}." for line in said] + [""] * bool(said)
    if refit is not None:
        outcome = (
            f"The saved neural model is the {_refit_line(refit)}."
            if refit.kept
            else f"Warning: {_refit_refused(refit)}."
        )
        lines += [
            f"The {which} scores above are those of the neural model trained on "
            f"the estimation data's first part. {outcome}",
            "",
        ]
    saved = (
        "the neural model trained again on all the estimation data"
        if refit is not None and refit.kept
        else "the `NeuralStateSpace` of this table"
    )
    lines += [
        f"Neural model files: `neural_model.dynsys` ({saved}) and "
        "`neural_encoder.dynsys` (its `StateEncoder`, which reads the first "
        f"{past} samples of a record to start the free run); load each with "
        "`dynsys.load(path)`. `neural_linear_model.dynsys` is the linear model "
        "of this table, the one the neural model starts from (fitted on the "
        "estimation part); `model.dynsys` is the run's linear model (refitted "
        "on all the estimation data when a part was held out to choose).",
        "",
    ]
    return lines


def _stop_reason(result, options) -> str | None:
    """The neural fit's stop reason, or "maximum steps reached" when it ran its
    whole step cap (so `None` never hides a fit cut short)."""
    if result.stop_reason is not None:
        return result.stop_reason
    cap = options.get("num_steps")
    if cap is not None and result.steps_run >= cap:
        return f"maximum steps reached ({cap}, config key 'fit.neural_steps')"
    return None


def _model_files(result, linear, data) -> dict:
    """`neural_model.dynsys` (the `NeuralStateSpace`), `neural_encoder.dynsys`
    (its `StateEncoder`) and `neural_linear_model.dynsys` (the `linear` model it
    starts from and is scored against), all written by `dynsys.save` (atomic) and
    read back by `dynsys.load(path)` without a template; the models with `data`'s
    channel names."""
    from ..._io import save
    from ..._sysid.channel_names import names_of

    names = names_of("fit", data)
    return {
        "neural_model.dynsys": lambda path: save(path, result.model, names=names),
        "neural_encoder.dynsys": lambda path: save(path, result.encoder),
        "neural_linear_model.dynsys": lambda path: save(path, linear, names=names),
    }

