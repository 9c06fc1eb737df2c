"""Structure selection: the model order and feedthrough chosen by fitting each
candidate and scoring it on validation data (or by AIC / BIC / FPE)."""

import contextlib
import contextvars
import dataclasses
import functools
import math
import time
import warnings
from typing import Any

import numpy as np

from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .._data.checks import check_data, warn_findings
from .._fitting.metrics import (
    channel_fit_percent,
    channel_mean,
    DIVERGED_FIT_PERCENT,
    fit_percent_text,
    spectral_radius,
)
from .._fitting.unstable_window import in_windows
from .._systems.system import LinearSystem
from .free_run import free_run
from .order_choice import choose, stalled, to_refine
from .refine_ahead import CandidatesAhead
from .scan_memo import recalled
from .signals import linear_of, signals
from .subspace import largest_order, realise, subspace_bases


_DEFAULT_MAX_ORDER = 10
# The growth over the held-out data past which a diverged free run says nothing
# of the model (`_scored_over_windows`): 1e8, the square root of float64's
# resolution (the initial state's normal equations square it).
_UNSCORABLE = math.log(1e8)
# ... a mode shared by at least this many orders, whose growth rates (log of the
# spectral radius) agree within this ratio: an inverted pendulum's candidates of
# orders 2-10 have 1.064-1.089 (ratio 1.4); a noisy stable plant's spurious
# unstable estimates of orders 6-10 had 1.17-1.36 (ratio 2.0).
_SHARED_BY_ORDERS = 3
_SHARED_RATE_RATIO = 1.5
_CRITERIA = ("validation", "aic", "bic", "fpe")
_METHODS = ("subspace", "fit")


@dataclasses.dataclass(frozen=True)
class OrderCandidate:
    """One row of an order scan.

    - `order`, `feedthrough`: the structure; `parameters`: its count
        $d = n(m + p) + pm$ (the last term only with feedthrough).
    - `fit_percent`: the free-run fit % per output channel on the validation data
        (`None` without validation data; NaN for a channel without variance, as
        `fit_percent`; $-\\infty$ for a free run that diverges); `mean_fit`: their
        mean over the channels that have one ($-\\infty$ when none has).
    - `aic`, `bic`, `fpe`: from the free-run residuals on the estimation data.
    - `spectral_radius`, `stable` (spectral radius < 1); `refined`: fitted by `fit`
        after the subspace start; `seconds`: the time its fit and scores took.
    - `held_out_losses`: each held-out sample's squared free-run error summed
        over the channels, each divided by its spread (`(samples,)`; `None`
        without validation data), which the choice compares between rows; not
        in `table()`.
    """

    order: int
    feedthrough: bool
    parameters: int
    fit_percent: tuple[float, ...] | None
    mean_fit: float | None
    aic: float
    bic: float
    fpe: float
    spectral_radius: float
    stable: bool
    refined: bool
    seconds: float
    # Each held-out sample's loss (`held_out_losses`), which the choice compares
    # between rows; `None` without validation data.
    held_out_losses: np.ndarray | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    @property
    def diverged(self) -> bool:
        """Whether the free run on the validation data diverged: a mean fit % below
        `DIVERGED_FIT_PERCENT` (an error over 11 times the outputs' spread) or not
        finite; `False` without validation data."""
        return self.mean_fit is not None and not self.mean_fit > DIVERGED_FIT_PERCENT


@dataclasses.dataclass(frozen=True)
class OrderSelection:
    """The result of `select_order`: every candidate and the chosen structure.

    - `candidates`: the `OrderCandidate` rows, by order then feedthrough.
    - `order`, `feedthrough`, `model`: the chosen structure and its fitted model.
    - `criterion`: what chose it (`"validation"`, `"aic"`, `"bic"`, `"fpe"`);
        `tolerance`: with `"validation"`, the fit-% points below the best within
        which the candidate with the fewest parameters wins (also, with
        `tolerance > 0`, within 0.5 points where the held-out data cannot tell
        it from the best).
    - `channels`: the output channels' names.
    - `fit_result`: with `method="fit"`, the chosen structure's refinement (a
        `FitResult`, when it was refined), which a longer fit from the same start
        continues (`fit(..., resume=scan.fit_result)`); else `None`.
    - `score_window`: `None` when each candidate's fit % is its free run over the
        validation data; else the steps of the windows every candidate was scored
        over instead, each from its own initial state (at least half of them
        diverged there with an unstable mode: docs/structure-selection.md).
    """

    candidates: tuple[OrderCandidate, ...]
    order: int
    feedthrough: bool
    model: LinearSystem
    criterion: str
    tolerance: float
    channels: tuple[str, ...]
    fit_result: Any = dataclasses.field(default=None, repr=False, compare=False)
    score_window: int | None = None

    @property
    def chosen(self) -> OrderCandidate:
        """The chosen candidate's row."""
        return next(
            c
            for c in self.candidates
            if c.order == self.order and c.feedthrough == self.feedthrough
        )

    def table(self) -> list[dict]:
        """The rows as plain dicts (JSON-ready; NaN and infinities as `None`)."""

        def clean(value):
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, tuple):
                return [clean(v) for v in value]
            return value

        def row(c: OrderCandidate) -> dict:
            entries = {
                f.name: clean(getattr(c, f.name))
                for f in dataclasses.fields(c)
                if f.name != "held_out_losses"  # (one number per held-out sample)
            }
            if c.diverged:  # no meaningless 60-digit fit %
                entries["fit_percent"] = [None] * len(c.fit_percent or ())
                entries["mean_fit"] = None
            return {**entries, "diverged": c.diverged}

        return [row(c) for c in self.candidates]

    def markdown(self) -> str:
        """The table as Markdown, the chosen row marked; a diverged candidate's fit
        % cells read `diverged (|λ| ...)`."""
        channels = list(self.channels) if self.candidates[0].fit_percent else []
        head = ["order", "D", *[f"fit % {c}" for c in channels]]
        head += ["mean fit %", "AIC", "BIC", "FPE", "max abs eig", "refined", "chosen"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for c in self.candidates:
            cells = [str(c.order), "yes" if c.feedthrough else "no"]
            if c.diverged:
                gone = f"diverged (\\|λ\\| {c.spectral_radius:.4g})"
                cells += [gone] * (len(c.fit_percent or ()) + 1)
            else:
                cells += [fit_percent_text(v) for v in c.fit_percent or ()]
                cells += ["" if c.mean_fit is None else f"{c.mean_fit:.1f}"]
            cells += [f"{c.aic:.5g}", f"{c.bic:.5g}", f"{c.fpe:.4g}"]
            cells += [f"{c.spectral_radius:.4f}", "yes" if c.refined else ""]
            cells += ["**yes**" if c is self.chosen else ""]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _check_orders(call: str, data, orders) -> tuple[int, ...]:
    """The candidate orders (default `1 .. min(10, largest)`), each checked against
    the largest order the data allow."""
    largest = largest_order(data)
    if orders is None:
        return tuple(range(1, min(_DEFAULT_MAX_ORDER, largest) + 1))
    if isinstance(orders, int) and not isinstance(orders, bool):
        orders = (orders,)
    orders = tuple(orders)
    if not orders:
        raise ValueError(
            f"{call}(orders=...): the order list is empty; give orders between 1 "
            f"and {largest} (the largest the data allow)."
        )
    for n in orders:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(
                f"{call}(orders=...): orders must be positive integers, got {n!r}."
            )
        if n > largest:
            raise ValueError(
                f"{call}(orders=...): the data allow at most order {largest}, got {n}."
            )
    return tuple(sorted(set(int(n) for n in orders)))


def _check_choices(call, s, feedthrough, method, criterion, val_data):
    """The feedthrough options (without inputs: only `False`), method and criterion."""
    if isinstance(feedthrough, bool):
        feedthrough = (feedthrough,)
    feedthrough = tuple(dict.fromkeys(feedthrough))
    if not feedthrough or not all(isinstance(f, bool) for f in feedthrough):
        raise ValueError(
            f"{call}(feedthrough=...): expected a non-empty tuple of True/False, got "
            f"{feedthrough!r}."
        )
    if s.us is None:
        if feedthrough == (True,):
            raise ValueError(
                f"{call}(feedthrough=...): the data has no inputs, so there is no D "
                "to estimate; use (False,)."
            )
        feedthrough = (False,)
    if method not in _METHODS:
        raise ValueError(
            f"{call}(method=...): expected one of {_METHODS}, got {method!r}."
        )
    if criterion is None:
        criterion = "validation" if val_data is not None else "aic"
    if criterion not in _CRITERIA:
        raise ValueError(
            f"{call}(criterion=...): expected one of {_CRITERIA}, got {criterion!r}."
        )
    if criterion == "validation" and val_data is None:
        raise ValueError(
            f"{call}(criterion='validation'): needs val_data (held-out data); or use "
            "criterion='aic', 'bic' or 'fpe'."
        )
    return feedthrough, criterion


@checks_own_arguments
def information_criteria(model, data, parameters: int) -> tuple[float, float, float]:
    """`(AIC, BIC, FPE)` of `model`'s free-run residuals $e_t$ on `data` (initial
    states estimated), over the $N$ valid steps of every experiment, with
    $\\Sigma = \\frac1N \\sum_t e_t e_t^\\top$ `(p, p)` and $d$ = `parameters`:
    AIC $= N \\log\\det\\Sigma + 2d + N p (\\log 2\\pi + 1)$, BIC the same with
    $d \\log N$ for $2d$, FPE $= \\det\\Sigma\\,(1 + d/N) / (1 - d/N)$ (infinite when
    $d \\ge N$), as MATLAB's `aic`, `fpe`.

    **Arguments:**

    - `model`: a `LinearSystem` (or a model with `to_linear()`).
    - `data`: a `Dataset` with outputs (the estimation data).
    - `parameters`: the model's number of free parameters $d$.

    **Returns:**

    `(aic, bic, fpe)` as floats.
    """
    s = signals(data, "information_criteria")
    model = linear_of(model) or model
    mask = np.asarray(s.mask)
    with np.errstate(over="ignore", invalid="ignore"):  # a diverged run: inf, said
        residuals = (np.asarray(s.ys, dtype=np.float64) - free_run(model, s))[mask]
        count, p = residuals.shape
        sigma = residuals.T @ residuals / count
    finite = bool(np.all(np.isfinite(sigma)))
    sign, logdet = np.linalg.slogdet(sigma) if finite else (1.0, np.inf)
    if not np.isfinite(logdet) or sign <= 0:
        logdet = -np.inf if finite else np.inf
    constant = count * p * (math.log(2 * math.pi) + 1)
    aic = count * logdet + 2 * parameters + constant
    bic = count * logdet + parameters * math.log(count) + constant
    ratio = parameters / count
    fpe = float(np.exp(logdet)) * (1 + ratio) / (1 - ratio) if ratio < 1 else math.inf
    return float(aic), float(bic), float(fpe)


def held_out_fit(model, val_data) -> tuple[tuple[float, ...], float]:
    """`model`'s free-run fit % on `val_data` (initial states estimated by least
    squares): `(per channel, mean)`, the mean `-inf` when no channel varies."""
    return _held_out(model, val_data)[:2]


def _held_out(model, val_data):
    """`held_out_fit`'s `(per channel, mean)` and the free run's squared error of
    each held-out sample, each channel's divided by its spread (`(samples,)`, the
    samples of every experiment in turn: `held_out_losses`)."""
    val_signals = signals(val_data, "select_order")
    measured = np.asarray(val_signals.ys, dtype=np.float64)
    predicted = free_run(model, val_signals)
    mask = np.asarray(val_signals.mask)
    values = channel_fit_percent(measured, predicted, mask=mask, xp=np)
    mean = float(channel_mean(values, xp=np))
    per_channel = tuple(float(v) for v in values)
    losses = held_out_losses(measured, predicted, mask)
    return per_channel, (-math.inf if math.isnan(mean) else mean), losses


def held_out_losses(measured, predicted, mask) -> np.ndarray:
    """Each held-out sample's squared free-run error summed over the channels, each
    divided by its channel's sum of squared deviations from its mean (the terms
    whose sum, channel by channel, is `(1 - fit % / 100)^2`): `(samples,)`, the
    masked samples of every experiment in turn; non-finite where the run is."""
    keep = mask.astype(bool)
    y, error = measured[keep], (measured - predicted)[keep]
    spread = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
    varies = spread > 0
    with np.errstate(all="ignore"):
        return np.sum(error[:, varies] ** 2 / spread[varies], axis=1)


def _score(model, data, val_data, order, feedthrough, refined, started):
    """The `OrderCandidate` row of a fitted model."""
    p = model.output_size
    m = model.input_size
    parameters = order * (m + p) + (p * m if feedthrough else 0)
    fit_percent = mean = losses = None
    if val_data is not None:
        fit_percent, mean, losses = _held_out(model, val_data)
    aic, bic, fpe = information_criteria(model, data, parameters)
    rho = spectral_radius(model.K)
    return OrderCandidate(
        order=order,
        feedthrough=feedthrough,
        parameters=parameters,
        fit_percent=fit_percent,
        mean_fit=mean,
        aic=aic,
        bic=bic,
        fpe=fpe,
        spectral_radius=rho,
        stable=rho < 1.0,
        refined=refined,
        seconds=time.perf_counter() - started,
        held_out_losses=losses,
    )


def _subspace_candidate(data, val_data, order, feedthrough, options):
    """Realise one structure from the shared factorisation (as `fit_subspace`) and
    score it: `(OrderCandidate, model)`."""
    started = time.perf_counter()
    model = realise("select_order", options["bases"](order), order, feedthrough, False)
    return _score(model, data, val_data, order, feedthrough, False, started), model


def _subspace_scan(data, val_data, orders, feedthrough, options, stop):
    """The subspace candidates' rows and models, orders ascending, until
    `stop_after` orders in a row have not improved the best score; `stop`:
    `(criterion, tolerance, stop_after)`."""
    criterion, tolerance, stop_after = stop
    rows, models = [], []
    for n in orders:
        for f in feedthrough:
            row, model = _subspace_candidate(data, val_data, n, f, options)
            rows.append(row)
            models.append(model)
        if stop_after is not None and stalled(rows, criterion, tolerance, stop_after):
            break
    return rows, models


def _candidate_fit(data, val_data, start, options, size):
    """The `FitResult` of a subspace candidate `start` refined by `fit` (output
    error), padded to `size` (`padded.py`: every candidate shares one compiled
    program) unless it is `None`. A start with an unstable mode that a free run
    over the record could not hold in float64 is refined over windows
    (`unstable_window.py`)."""
    from .._fitting.fit import fit
    from .._fitting.fit_padded import fit_padded
    from .._fitting.unstable_window import windowed_loss

    options = dict(val_data=val_data, progress=False, **options["fit"])
    windows = None if "loss" in options else windowed_loss(start, data, val_data)
    if windows is not None:
        options["loss"] = windows
    if size is None:
        return fit(start, data, **options)
    return fit_padded(start, data, *size, **options)


def _refined_candidate(data, val_data, row, start, options, size):
    """Refine a subspace candidate (`_candidate_fit`) and score it again: `(row,
    model, FitResult)`."""
    started = time.perf_counter()
    result = _candidate_fit(data, val_data, start, options, size)
    model = linear_of(result.model) or result.model
    refined = _score(model, data, val_data, row.order, row.feedthrough, True, started)
    refined = dataclasses.replace(refined, seconds=row.seconds + refined.seconds)
    return refined, model, result


def _check_numbers(call: str, tolerance, stop_after, refine) -> None:
    """One-line errors for a negative `tolerance`, or a `stop_after` or `refine`
    that is not a positive integer or `None`."""
    if not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise ValueError(
            f"{call}(tolerance=...): expected a number >= 0, got {tolerance!r}."
        )
    for name, value in (("stop_after", stop_after), ("refine", refine)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                f"{call}({name}=...): expected a positive integer or None, got "
                f"{value!r}."
            )

@on_one_blas_thread
@checks_own_arguments
def select_order(
    data,
    orders=None,
    *,
    feedthrough=(False, True),
    method: str = "subspace",
    criterion: str | None = None,
    val_data=None,
    tolerance: float = 0.2,
    refine: int | None = None,
    refine_margin: float = 0.0,
    stop_after: int | None = None,
    stable: bool = False,
    stable_margin: float = math.inf,
    horizon: int | None = None,
    offset: bool = True,
    fit_options: dict | None = None,
) -> OrderSelection:
    """Choose the model order and whether to estimate a feedthrough `D` by fitting
    every candidate structure and scoring it, as MATLAB's `n4sid(data, 1:10)` with
    validation data, or SIPPY's information-criterion order choice.

    Each candidate `(order, feedthrough)` is fitted by `fit_subspace`; with
    `method="fit"` the best `refine` (default all) are then refined by `fit` and
    scored again (each padded with frozen states to the largest refined
    structure, so that all share one compiled program, where the padded problem
    is small; the steps are those of the unpadded fit: docs/performance.md).
    Unstable modes that a free run cannot hold in float64 are fitted, and scored,
    over windows (docs/structure-selection.md, `OrderSelection.score_window`).
    Each row: free-run fit % per channel on `val_data`, AIC, BIC, FPE on `data`
    (`information_criteria`), spectral radius.

    The choice: with `criterion="validation"` (the default when `val_data` is
    given) the best mean validation fit % wins, except that among the candidates
    within `tolerance` points of it the one with the fewest parameters
    $n(m+p) + pm\\,[D]$ is taken (a simpler model that validates as well; also
    one within 0.5 points that noisy held-out data cannot tell from the best:
    `order_choice.choose`); with `"aic"` (the default without `val_data`),
    `"bic"` or `"fpe"` the lowest value.
    Unlike `fit_subspace(order=None)`'s singular-value rule, this keeps a lightly
    damped mode with a small singular value when it improves the validation fit.

    **Arguments:**

    - `data`: the estimation `Dataset` (outputs `ys`, inputs `us` or none).
    - `orders`: the candidate orders (an int or a sequence of positive ints);
        default `1 .. min(10, the largest the data allow)`.
    - `feedthrough`: the feedthrough options to try, `(False, True)` by default
        (only `False` when the data has no inputs).
    - `method`: `"subspace"` or `"fit"` (subspace, then refined by `fit`).
    - `criterion`: `"validation"`, `"aic"`, `"bic"` or `"fpe"`.
    - `val_data`: held-out data with the same channels (for `"validation"`).
    - `tolerance`: fit-% points (above), `>= 0`.
    - `refine`: with `method="fit"`, how many of the best subspace candidates are
        refined (`None`: all); with `stable`, the best stable candidate is refined
        too when none of them is stable (the choice compares refined models).
    - `refine_margin`: with `method="fit"`, a `refine` count and `"validation"`:
        up to `refine` more candidates are refined, those with the fewest
        parameters among the ones simpler than the best `refine` and validating
        within this many fit-% points of the best subspace candidate (`0`:
        none). A simple structure that the subspace method scores nearly as well
        as the best is the one the choice (the fewest parameters within
        `tolerance`) takes if its refinement keeps up, e.g. the true order of a
        plant recorded under feedback.
    - `stop_after`: stop the scan (orders ascending) once this many successive
        orders have not beaten the best score so far (mean validation fit by more
        than `tolerance`, or the criterion); `None` scans every order.
    - `stable`: choose among the stable candidates (spectral radius below 1)
        when there is one, as for data from a plant known to be stable (with
        `method="fit"`, only refined candidates count).
    - `stable_margin`: with `stable` and `"validation"`, the stable candidates
        are preferred only while the best of them validates within this many
        fit-% points of the best candidate (default: always). Bounded data do not
        make a stable plant: an unstable plant under feedback gives bounded data,
        and only its unstable models validate.
    - `horizon`, `offset`: passed to `fit_subspace`.
    - `fit_options`: keyword arguments for `fit` (e.g. `{"num_steps": 100}`).

    **Returns:**

    An `OrderSelection` (`candidates`, `order`, `feedthrough`, `model`, `table()`,
    `markdown()`); `dynsys.plot.order_scan` draws it.

    **Raises:**

    `ValueError` (one line) for an empty order list, an order above the largest the
    data allow (naming it), `feedthrough=(True,)` without inputs, an unknown
    `method` or `criterion`, or `"validation"` without `val_data`.

    **Example:**

    ```python
    scan = dynsys.select_order(train, orders=range(1, 11), val_data=val)
    scan.order, scan.feedthrough, scan.model
    fig = dynsys.plot.order_scan(scan)
    ```
    """
    call = "select_order"
    s = signals(data, call)
    candidate_orders = _check_orders(call, data, orders)
    options_ft, criterion = _check_choices(
        call, s, feedthrough, method, criterion, val_data
    )
    _check_numbers(call, tolerance, stop_after, refine)
    _check_margins(call, stable_margin=stable_margin, refine_margin=refine_margin)
    warn_findings(call, check_data(data))
    bases = subspace_bases(call, data, horizon=horizon, offset=offset)
    options = {"bases": bases, "fit": dict(fit_options or {})}
    stop = (criterion, tolerance, stop_after)
    scanned = (candidate_orders, options_ft, stop, horizon, offset)
    rows, models = _recalled_scan(data, val_data, scanned, options)
    largest = max(candidate_orders)
    rows, val_data, window = _scored_over_windows(rows, models, val_data, largest)
    fit_results: dict[int, Any] = {}  # the refined rows' FitResults
    if method == "fit":
        refined = to_refine(rows, criterion, refine, refine_margin, stable)
        fit_results = _refine(data, val_data, rows, models, refined, options)
    chosen = choose(rows, criterion, float(tolerance), stable, float(stable_margin))
    selection = _selection(rows, models, fit_results, chosen, criterion, tolerance, s)
    return dataclasses.replace(selection, score_window=window)


def _recalled_scan(data, val_data, scanned, options):
    """`(rows, models)` of the subspace scan `scanned` (`(orders, feedthrough
    options, stop, horizon, offset)`), recalled where this process scanned the same
    data alike (`scan_memo.recalled`), else scanned."""
    orders, options_ft, stop = scanned[:3]
    return recalled(
        lambda: _subspace_scan(data, val_data, orders, options_ft, options, stop),
        data,
        val_data,
        scanned,
    )


def _scored_over_windows(rows, models, val_data, largest_order: int):
    """`(rows, val_data, window)`: when at least half of the candidates, of at
    least `_SHARED_BY_ORDERS` orders, diverged on `val_data` with an unstable mode
    that grows more than 1e8-fold over it (which a free run of the held-out data
    cannot score in float64: a model that merely ran away within that is a bad
    one), one mode by their growth rates (`_SHARED_RATE_RATIO`: a mode that
    several orders share is the plant's; one order's wild estimate from short
    data, or the scattered ones of noise, are not), every row scored again over the same
    windows of `window` steps of it (`scoring_window`), and those windows as the
    held-out data; else all as they are and `None`."""
    from .._fitting.unstable_window import scoring_window

    if val_data is None:
        return rows, val_data, None
    steps = max(val_data.lengths)
    unscorable = [
        r
        for r in rows
        if r.diverged and steps * math.log(max(r.spectral_radius, 1.0)) > _UNSCORABLE
    ]
    rates = [math.log(r.spectral_radius) for r in unscorable]
    shared = (  # several orders, one mode: the plant's
        len({r.order for r in unscorable}) >= _SHARED_BY_ORDERS
        and max(rates) <= _SHARED_RATE_RATIO * min(rates)
    )
    if 2 * len(unscorable) < len(rows) or not shared:
        return rows, val_data, None
    unstable = [r.spectral_radius for r in unscorable]
    window = scoring_window(unstable, min(val_data.lengths), largest_order)
    val_data = in_windows(val_data, window)
    rescored = []
    for row, model in zip(rows, models):
        scores, mean, losses = _held_out(model, val_data)
        rescored.append(
            dataclasses.replace(
                row, fit_percent=scores, mean_fit=mean, held_out_losses=losses
            )
        )
    return rescored, val_data, window


def _check_margins(call: str, **margins) -> None:
    """One-line errors for a margin (`stable_margin`, `refine_margin`) that is not
    a number `>= 0`."""
    for name, margin in margins.items():
        if isinstance(margin, bool) or not (
            isinstance(margin, (int, float)) and margin >= 0
        ):
            raise ValueError(
                f"{call}({name}=...): expected a number >= 0, got {margin!r}."
            )


# Told the size the scan's refinements are padded to, and a model of a refined
# structure, before they run (`padded_size_known`).
_ON_PADDED_SIZE: contextvars.ContextVar = contextvars.ContextVar(
    "dynsys_on_padded_size", default=None
)


@contextlib.contextmanager
def padded_size_known(listener):
    """Within it, `listener(size, model)` is called when a structure scan has
    chosen the size `(order, feedthrough)` its refinements are padded to, with a
    model of one of the refined structures, before they run: the `fit` experiment
    compiles its refit's program meanwhile (`_experiments/fit/ahead.py`)."""
    token = _ON_PADDED_SIZE.set(listener)
    try:
        yield
    finally:
        _ON_PADDED_SIZE.reset(token)


def _refine(data, val_data, rows, models, refined, options) -> dict[int, Any]:
    """Refine the rows `refined` (indices, in that order) by `fit`, each padded to
    the largest of their structures, or a size of a scan before it (`shared_size`),
    when that is worth it (`padded.py`), and put
    the refined row and model in their place in `rows` and `models`: the refined
    rows' `FitResult`s by index."""
    from .._fitting.padded import padded_size, shared_size, worth_padding

    size = padded_size((rows[i].order, rows[i].feedthrough) for i in refined)
    worth = functools.partial(worth_padding, models[refined[0]], data=data)
    size = shared_size(*size, data, worth) if worth(*size) else None
    listener = _ON_PADDED_SIZE.get()
    if listener is not None and size is not None:
        listener(size, models[refined[0]])
    fit_results = {}
    starts = {i: models[i] for i in refined}
    with warnings.catch_warnings():  # a candidate's fit notes are not the user's
        warnings.simplefilter("ignore")
        # Unpadded, each candidate has a chunk of its own: the later ones are
        # compiled on another core while the first runs (`refine_ahead.py`).
        ahead = CandidatesAhead(
            lambda i: _candidate_fit(data, val_data, starts[i], options, size),
            refined[1:] if size is None else (),
        )
        try:
            for i in refined:
                ahead.wait(i)
                rows[i], models[i], fit_results[i] = _refined_candidate(
                    data, val_data, rows[i], starts[i], options, size
                )
        finally:
            ahead.join()
    return fit_results


def _selection(rows, models, fit_results, chosen, criterion, tolerance, s):
    """The `OrderSelection` report of the scan's `rows` and `models` with row
    `chosen` chosen (its `FitResult`, if it was refined); `s`: the data's
    signals, for the channels' names."""
    return OrderSelection(
        candidates=tuple(rows),
        order=rows[chosen].order,
        feedthrough=rows[chosen].feedthrough,
        model=models[chosen],
        criterion=criterion,
        tolerance=float(tolerance),
        channels=tuple(s.names),
        fit_result=fit_results.get(chosen),
    )
