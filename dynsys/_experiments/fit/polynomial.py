"""The polynomial structures of the `fit` experiment (`fit.structure = "armax"` or
`"bj"`): the orders, given (`fit.orders`) or chosen by a small scan on the
held-out part, the prediction-error fit (`fit_armax`, `fit_box_jenkins`) on the
first part, and the refit of the chosen orders on all the estimation data. The
results are the `Start` and `Estimate` of the state-space path, so that the
validation, tables, figures and record stages read them alike; the saved model is
an `InnovationSystem`.

The scan: equal orders `n = 1 .. SCAN_MAX_ORDER` (every polynomial of degree `n`)
with the input delay `nk` 0 or 1, each fitted on the first part and scored by its
free-run fit % on the held-out part (as `compare`), the fewest parameters within
`SCAN_TOLERANCE` points of the best winning (by AIC of the innovations without
held-out data). A fit is host NumPy (filters and a least-squares step): on the
heating record's 534 estimation samples the eight ARMAX candidates take about
1 s together, the Box–Jenkins ones about as long.
"""

import dataclasses
import math
import time
from typing import Any

import numpy as np

from ..config import ConfigError
from ..runtime.compile_clock import stage
from . import checks as fit_checks
from .estimate import Estimate
from .start import Start


SCAN_MAX_ORDER = 4
SCAN_DELAYS = (0, 1)
SCAN_TOLERANCE = 0.2

# Each structure: its orders' names (`fit.orders`, in this order), its fit, its
# name in words.
ORDER_NAMES = {
    "armax": ("na", "nb", "nc", "nk"),
    "bj": ("nb", "nc", "nd", "nf", "nk"),
}
NAMES = {"armax": "ARMAX", "bj": "Box–Jenkins"}


def is_polynomial(fit_cfg: dict) -> bool:
    """Whether the config asks for a polynomial structure."""
    return fit_cfg["structure"] in ORDER_NAMES


@dataclasses.dataclass(frozen=True)
class PolynomialResult:
    """What the stages read of a `FitResult`, for a prediction-error fit of
    polynomials (no optimiser history: the minimisation runs on the host)."""

    model: Any  # the `InnovationSystem`
    metrics: dict
    stop_reason: str | None = None
    converged: bool = True
    losses: list = dataclasses.field(default_factory=list)
    val_losses: list = dataclasses.field(default_factory=list)
    best_step: int = 0
    covariance: Any = None
    covariance_reason: str = (
        "not computed for the polynomial structures (armax, bj)"
    )


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One row of the polynomial scan."""

    orders: dict
    parameters: int
    fit_percent: tuple | None  # held-out, per channel
    mean_fit: float | None
    aic: float
    seconds: float


def check_structure_choice(config: dict, data) -> None:
    """Refuse (`ConfigError`, one line naming the key) what a polynomial structure
    cannot do, before any work: several outputs, measured states, options of the
    state-space fit, orders of the wrong count; and a prediction-error fit of a
    state-space model without outputs or with another model than `linear`."""
    fit_cfg = config["fit"]
    structure = fit_cfg["structure"]
    if not is_polynomial(fit_cfg):
        _check_prediction_loss(fit_cfg, data)
        if fit_cfg["orders"] is not None:
            raise ConfigError(
                "config key 'fit.orders': polynomial orders need config key "
                "'fit.structure' 'armax' or 'bj', got 'state-space' (its order: "
                "config key 'fit.order')."
            )
        return
    whole = data.run.data
    if whole.ys is None:
        raise ConfigError(
            f"config key 'fit.structure': {structure!r} needs data with outputs "
            "(ys), got states only."
        )
    if whole.output_size != 1:
        names = ", ".join(whole.output_names or ())
        raise ConfigError(
            f"config key 'fit.structure': {structure!r} fits one output, got "
            f"{whole.output_size} ({names}); name one with config key "
            "'data.outputs', or use 'state-space'."
        )
    state_space = {
        "model": ("linear", "'linear'"),
        "loss": (
            ("simulation", "prediction"),
            "'prediction' (the default 'simulation' says the same here)",
        ),
        "optimizer": ("default", "'default'"),
        "order": (None, "unset (the orders: config key 'fit.orders')"),
        "feedthrough": (None, "unset (nk = 0 gives a feedthrough)"),
        "subspace_horizon": (None, "unset"),
    }
    for key, (default, wanted) in state_space.items():
        allowed = default if isinstance(default, tuple) else (default,)
        if fit_cfg[key] not in allowed:
            raise ConfigError(
                f"config key 'fit.{key}': with config key 'fit.structure' "
                f"{structure!r} expected {wanted}, got {fit_cfg[key]!r}."
            )
    orders = fit_cfg["orders"]
    names = ORDER_NAMES[structure]
    if orders is not None and len(orders) != len(names):
        raise ConfigError(
            f"config key 'fit.orders': {structure!r} takes {len(names)} orders "
            f"({', '.join(names)}), got {len(orders)} ({orders})."
        )


def _check_prediction_loss(fit_cfg: dict, data) -> None:
    """`fit.loss = "prediction"` of a state-space model: outputs, a linear model."""
    if fit_cfg["loss"] != "prediction":
        return
    if data.run.data.ys is None:
        raise ConfigError(
            "config key 'fit.loss': 'prediction' needs data with outputs (ys), got "
            "states only."
        )
    if fit_cfg["model"] != "linear":
        raise ConfigError(
            "config key 'fit.loss': 'prediction' fits a linear model with a noise "
            "model (an InnovationSystem); expected config key 'fit.model' 'linear', "
            f"got {fit_cfg['model']!r}."
        )


def polynomial_stages(config: dict, data, found: list[str], echo):
    """The estimation stages of a polynomial structure: `(Start, Estimate,
    final Estimate or None)`, the fields of `identify.Stages`."""
    fit_cfg = config["fit"]
    structure = fit_cfg["structure"]
    train, val = data.train, data.val
    notes = []
    scanned = None
    started = time.perf_counter()
    with stage("structure scan"):
        if fit_cfg["orders"] is None:
            scanned = _scan(structure, fit_cfg["offset"], train, val, found, echo)
            orders = scanned[0]
            chosen = "chosen by a scan on " + (
                "the held-out data" if val is not None else "AIC"
            )
            notes += _scan_notes(structure, scanned, val is not None)
        else:
            orders = dict(zip(ORDER_NAMES[structure], fit_cfg["orders"]))
            chosen = "given"
    seconds = time.perf_counter() - started  # the scan's (0 without one)
    notes += [
        f"A {NAMES[structure]} model has no subspace step and no optimiser history: "
        "no singular_values.png, loss.png or order_scan.png; the residual figure "
        "and tests are of its innovations (one-step prediction errors).",
        "",
    ]
    estimate = _estimate(config, structure, orders, train, found, echo, "fit")
    start = Start(
        subspace=None,
        begin=None,
        singular_values=None,
        seconds=seconds,
        chosen=chosen,
        scan=None,
        notes=notes,
        polynomial=_description(structure, orders, chosen, scanned, estimate),
    )
    final = None
    if data.carved:
        final = _estimate(
            config, structure, orders, data.estimation, found, echo, "refit"
        )
    return start, estimate, final


def _description(structure, orders, chosen, scanned, estimate) -> dict:
    """metrics.json's `polynomial`: the structure, its orders, how they were
    chosen, and the scan's rows."""
    model = estimate.result.model
    return {
        "structure": structure,
        "orders": dict(orders),
        "orders_chosen": scanned is not None,
        "chosen": chosen,
        "state_size": int(model.state_size),
        "innovation_variance": float(np.asarray(model.innovation_covariance)[0, 0]),
        "scan": None
        if scanned is None
        else {
            "criterion": scanned[2],
            "tolerance": SCAN_TOLERANCE,
            "seconds": scanned[3],
            "table": [dataclasses.asdict(c) for c in scanned[1]],
        },
    }


def orders_text(orders: dict) -> str:
    """`na=2, nb=2, nc=1, nk=1`."""
    return ", ".join(f"{k}={v}" for k, v in orders.items())


def _fit(structure: str, data, orders: dict, offset: bool):
    """The `InnovationSystem` of `structure` with these orders on `data`."""
    from ..._sysid.armax import fit_armax
    from ..._sysid.box_jenkins import fit_box_jenkins

    fitter = fit_armax if structure == "armax" else fit_box_jenkins
    return fitter(data, **orders, offset=offset)


def _estimate(config, structure, orders, data, found, echo, name) -> Estimate:
    """The fit of `orders` on `data` as an `Estimate` (its warnings to `found`)."""
    fit_cfg = config["fit"]
    started = time.perf_counter()
    unconverged: list[str] = []
    with stage(name), fit_checks.captured_warnings(unconverged):
        try:
            model = _fit(structure, data, orders, fit_cfg["offset"])
        except ValueError as error:
            raise ConfigError(f"config key 'fit.orders': {error}") from None
    seconds = time.perf_counter() - started
    for line in unconverged:
        fit_checks.add(found, line)
    result = PolynomialResult(
        model=model,
        metrics={"train": _one_step_metrics(model, data)},
        stop_reason=unconverged[0].rstrip(".") if unconverged else None,
        converged=not unconverged,
    )
    fitted = model  # an `InnovationSystem`: its residuals are its innovations
    fit_checks.model_warnings(
        "final" if name == "refit" else "fitted", fitted, data, found
    )
    what = "refitted on all the estimation data" if name == "refit" else "fit"
    echo(
        f"  {NAMES[structure]} {what} ({orders_text(orders)}; state size "
        f"{model.state_size}; prediction error, Levenberg–Marquardt): "
        f"{seconds:.1f} s"
    )
    optimiser = "prediction-error minimisation (Levenberg–Marquardt)"
    return Estimate(result, fitted, seconds, optimiser, 0, result.stop_reason)


def _one_step_metrics(model, data) -> dict:
    """The one-step prediction's fit % (Kalman predictor) and the innovation
    variance on `data`."""
    from ..._fitting.metrics import channel_mean
    from ..._sysid.validation import compare

    percent = np.asarray(compare(model, data, horizon=1).fit_percent, dtype=float)
    return {
        "one_step_fit_percent": float(channel_mean(percent, np)),
        "innovation_variance": float(np.asarray(model.innovation_covariance)[0, 0]),
    }


def _candidates(structure: str, largest: int):
    """The scan's orders: equal orders 1 .. `largest`, `nk` in `SCAN_DELAYS`."""
    names = ORDER_NAMES[structure]
    for n in range(1, largest + 1):
        for nk in SCAN_DELAYS:
            yield dict(zip(names, [n] * (len(names) - 1) + [nk]))


def _parameters(orders: dict, inputs: int) -> int:
    """The coefficients of a polynomial model (`nb`, `nf` per input)."""
    return sum(
        v * (inputs if k in ("nb", "nf") else 1)
        for k, v in orders.items()
        if k != "nk"
    )


def _scan(structure: str, offset: bool, train, val, found, echo):
    """`(orders, candidates, criterion, seconds)`: every candidate fitted on
    `train`, scored on `val` (or by AIC without it)."""
    from ..._sysid.order import held_out_fit

    started = time.perf_counter()
    samples = sum(train.lengths)
    inputs = train.input_size
    largest = SCAN_MAX_ORDER  # a candidate too long for the data is skipped
    if val is not None:  # its initial state is estimated on each held-out record
        largest = max(1, min(largest, min(val.lengths) - 1))
    rows = []
    for orders in _candidates(structure, largest):
        begun = time.perf_counter()
        with fit_checks.captured_warnings([]):
            try:
                model = _fit(structure, train, orders, offset)
            except ValueError:
                continue  # too short for it: not a candidate
        variance = float(np.asarray(model.innovation_covariance)[0, 0])
        d = _parameters(orders, inputs)
        aic = samples * math.log(max(variance, 1e-300)) + 2 * d
        percent = mean = None
        if val is not None:
            percent, mean = held_out_fit(model.to_linear(), val)
        rows.append(
            Candidate(orders, d, percent, mean, aic, time.perf_counter() - begun)
        )
    if not rows:
        raise ConfigError(
            f"config key 'fit.orders': the estimation data ({samples} samples) are "
            f"too short for any {NAMES[structure]} model of the scan; give the "
            "orders."
        )
    if val is not None:
        best = max(c.mean_fit for c in rows)
        near = [c for c in rows if c.mean_fit >= best - SCAN_TOLERANCE]
        chosen = min(near, key=lambda c: (c.parameters, -c.mean_fit))
        criterion = "validation"
    else:
        chosen = min(rows, key=lambda c: c.aic)
        criterion = "aic"
    seconds = time.perf_counter() - started
    scored = "held-out fit %" if val is not None else "AIC on the estimation data"
    echo(
        f"  structure scan ({NAMES[structure]}): {len(rows)} candidates (equal "
        f"orders 1..{largest}, nk {' or '.join(map(str, SCAN_DELAYS))}), scored by "
        f"{scored}, {seconds:.1f} s; chosen {orders_text(chosen.orders)}"
    )
    return chosen.orders, rows, criterion, seconds


def _scan_notes(structure: str, scanned, held_out: bool) -> list[str]:
    """summary.md's table of the scan."""
    from ..._fitting.metrics import fit_percent_text

    chosen, rows, _, seconds = scanned
    rule = (
        f"the best held-out fit %, or the fewest parameters within {SCAN_TOLERANCE:g} "
        "points of it"
        if held_out
        else "the lowest AIC of the innovations on the estimation data"
    )
    names = list(ORDER_NAMES[structure])
    lines = [
        f"Structure scan ({NAMES[structure]}, prediction-error fits of equal orders), "
        f"{seconds:.1f} s; chosen by {rule}:",
        "",
        "| " + " | ".join(names) + " | parameters | held-out fit % | AIC | chosen |",
        "|" + "---|" * (len(names) + 4),
    ]
    for c in rows:
        fit = "" if c.mean_fit is None else fit_percent_text(c.mean_fit)
        mark = "**yes**" if c.orders == chosen else ""
        cells = [str(c.orders[k]) for k in names]
        lines.append(
            "| " + " | ".join(cells) + f" | {c.parameters} | {fit} | {c.aic:.5g} | "
            f"{mark} |"
        )
    return lines + [""]
