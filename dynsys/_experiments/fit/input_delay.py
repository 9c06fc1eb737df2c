"""The input delay (dead time) of the `fit` experiment, config key
`fit.input_delay`: `"auto"` (the default) estimates it with `estimate_delay` on the
estimation data's first part; an integer (every input) or a list (one per input)
gives it; 0 turns it off.

The structure scan and the fits run on the delayed inputs (`delay_inputs`), so the
order they choose is the plant's; the models they return then carry the delay
(`with_input_delay`: a shift register in the state) and act on the data as
recorded, which is where they are validated and what `model.dynsys` holds.
"""

import dataclasses
import time

from ..config import ConfigError


KEY = "config key 'fit.input_delay'"
MAX_ESTIMATED = 10  # the largest delay `"auto"` tries (estimate_delay's max_delay)


@dataclasses.dataclass(frozen=True)
class InputDelay:
    """The delay of each input in samples, `(m,)`; whether it was estimated."""

    delays: tuple[int, ...]
    estimated: bool
    seconds: float = 0.0
    # The ARX estimate that the held-out data refused (then `delays` are 0).
    rejected: tuple[int, ...] | None = None

    def line(self) -> str:
        """`"input delay: 1 sample (estimated)"`, one number per input."""
        values = ", ".join(str(d) for d in self.delays)
        unit = "sample" if self.delays == (1,) else "samples"
        how = "estimated" if self.estimated else "given"
        if self.rejected is not None:
            refused = ", ".join(str(d) for d in self.rejected)
            how += (
                f"; the ARX estimate {refused} did not validate better on the "
                "held-out data"
            )
        return f"input delay: {values} {unit} ({how})"


def applies(fit_cfg: dict, data) -> bool:
    """Whether the run can carry a delay: input–output data with inputs, a
    state-space structure fitted by its output error (a polynomial structure has
    its own `nk`; a noise model's predictor is not delayed here)."""
    whole = data.run.data
    return (
        whole.ys is not None
        and whole.us is not None
        and whole.us.shape[-1] > 0
        and fit_cfg["structure"] == "state-space"
        and fit_cfg["loss"] != "prediction"
        and fit_cfg["model"] != "neural"
    )


def _given(fit_cfg: dict, m: int) -> tuple[int, ...] | None:
    """The delays the config gives, `(m,)`, or `None` for `"auto"`; `ConfigError`
    (one line) for anything else."""
    value = fit_cfg["input_delay"]
    if isinstance(value, str):
        if value != "auto":
            raise ConfigError(
                f"{KEY}: expected 'auto', an integer >= 0 or a list of one per "
                f"input, got {value!r}."
            )
        return None
    if isinstance(value, int):
        return (value,) * m
    if len(value) != m:
        raise ConfigError(
            f"{KEY}: expected one delay per input ({m}), got {len(value)}: {value!r}."
        )
    return tuple(value)


def _shortest(data) -> int:
    """The shortest experiment of the estimation and held-out parts, in samples."""
    parts = [d for d in (data.train, data.val, data.test) if d is not None]
    return min(min(d.lengths) for d in parts)


def _longest(data) -> int:
    """The longest delay the split leaves room for: half its shortest experiment."""
    return _shortest(data) // 2


def check_input_delay(config: dict, data) -> None:
    """Refuse (`ConfigError`, one line naming the key) a delay the run cannot
    carry, before any work: of the wrong count, too long for the data, or given
    to a run without inputs or with another structure or loss."""
    fit_cfg = config["fit"]
    if not applies(fit_cfg, data):
        value = fit_cfg["input_delay"]
        if value != "auto" and value != 0 and any(_as_list(value)):
            raise ConfigError(
                f"{KEY}: a delay needs input–output data and a state-space model "
                "fitted by its output error (structure 'state-space', loss not "
                f"'prediction', model not 'neural'), got {value!r}."
            )
        return
    delays = _given(fit_cfg, data.run.data.us.shape[-1])
    if delays is None:
        return
    longest = _longest(data)
    if max(delays) > longest:
        raise ConfigError(
            f"{KEY}: expected at most {longest} samples (half the shortest "
            f"experiment of the split, {_shortest(data)} samples), got {max(delays)}."
        )


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def input_delay(config: dict, data, echo) -> InputDelay:
    """The delays of the run (`check_input_delay` has passed): given, or
    estimated on `data.train` (none where the scan cannot run on data that
    short), with their console line."""
    fit_cfg = config["fit"]
    m = data.run.data.us.shape[-1] if data.run.data.us is not None else 0
    if not applies(fit_cfg, data):
        if m and data.run.data.ys is not None and fit_cfg["input_delay"] == "auto":
            echo(
                "  input delay: not estimated (it is for a state-space model "
                "fitted by its output error; a polynomial structure has its own nk)"
            )
        return InputDelay((0,) * m, fit_cfg["input_delay"] == "auto")
    delays = _given(fit_cfg, m)
    if delays is not None:
        found = InputDelay(delays, False)
    else:
        from ..._sysid.delay import estimate_delay

        started = time.perf_counter()
        top = min(MAX_ESTIMATED, _longest(data))
        try:
            delays = tuple(estimate_delay(data.train, max_delay=top))
        except ValueError:  # too short for the scan: nothing is invented
            delays = (0,) * m
        rejected = None
        if any(delays) and not _validates(config, data, delays):
            delays, rejected = (0,) * m, delays
        found = InputDelay(delays, True, time.perf_counter() - started, rejected)
    timing = f", {found.seconds:.1f} s" if found.estimated else ""
    echo(f"  {found.line()}{timing}")
    return found


def _validates(config: dict, data, delays: tuple[int, ...]) -> bool:
    """Whether the estimated delay validates: the best subspace candidate of the
    structure scan's orders and feedthroughs (unrefined) fits the held-out data
    at least as well behind the delay as without it. A slow start (a small first
    Markov parameter, e.g. a sampled position driven by a force) passes the ARX
    test as a delay that a model without one fits better. Without held-out data
    the ARX estimate stands."""
    from ..._sysid.order import select_order
    from ..._sysid.subspace import largest_order
    from .order import SCAN_MAX_ORDER

    if data.val is None:
        return True
    fit_cfg = config["fit"]
    given = fit_cfg["feedthrough"]

    def best(part) -> float:
        shortest = min(part.val.lengths) - 1
        top = max(1, min(SCAN_MAX_ORDER, largest_order(part.train), shortest))
        orders = range(1, top + 1) if fit_cfg["order"] is None else (fit_cfg["order"],)
        scan = select_order(
            part.train,
            orders,
            feedthrough=(False, True) if given is None else (given,),
            criterion="validation",
            val_data=part.val,
            horizon=fit_cfg["subspace_horizon"],
            offset=fit_cfg["offset"],
        )
        fits = [c.mean_fit for c in scan.candidates if c.mean_fit is not None]
        return max(fits) if fits else -float("inf")

    try:
        return best(delayed_data(config, data, delays)) >= best(data)
    except ValueError:  # the scan cannot run: the ARX estimate stands
        return True


def delayed_data(config: dict, data, delays: tuple[int, ...]):
    """The `FitData` as the plant behind the delays sees it: the whole record
    delayed (`delay_inputs`: its first `max(delays)` samples dropped), then split
    as the record was, so that each part's first inputs are the samples before
    it rather than dropped too."""
    from ..._sysid.delay import delay_inputs
    from .data import _split

    if not any(delays):
        return data

    def shift(part):
        return None if part is None else delay_inputs(part, delays)

    run = dataclasses.replace(
        data.run,
        data=shift(data.run.data),
        clean=shift(data.run.clean),
        validation=shift(data.run.validation),
    )
    train, val, clean_val, _ = _split(config, run)
    test = None if data.test is None else run.validation
    return dataclasses.replace(
        data, run=run, train=train, val=val, clean_val=clean_val, test=test
    )


def delayed_models(stages, delay: InputDelay):
    """`stages` (`identify.Stages`) with every model carrying the delay, so that
    it acts on the data as recorded; the start keeps the delay and its
    summary.md line."""
    from ..._sysid.delay import with_input_delay

    delays = delay.delays
    start = stages.start
    notes = [f"{delay.line()[0].upper()}{delay.line()[1:]}.", "", *start.notes]
    if not any(delays):
        return dataclasses.replace(
            stages, start=dataclasses.replace(start, delay=delay, notes=notes)
        )

    def carry(model):
        linear = model.to_linear() if hasattr(model, "to_linear") else model
        return with_input_delay(linear, delays)

    def carried(estimate):
        if estimate is None:
            return None
        result = dataclasses.replace(
            estimate.result, model=carry(estimate.result.model)
        )
        return dataclasses.replace(
            estimate, result=result, fitted=carry(estimate.fitted)
        )

    subspace = carry(start.subspace)
    begin = subspace if start.begin is start.subspace else carry(start.begin)
    start = dataclasses.replace(
        start, subspace=subspace, begin=begin, delay=delay, plant=start.subspace,
        notes=notes,
    )
    return dataclasses.replace(
        stages, start=start, estimate=carried(stages.estimate),
        final=carried(stages.final),
    )
