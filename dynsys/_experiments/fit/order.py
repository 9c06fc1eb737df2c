"""The structure scan of the `fit` experiment: when the order (or feedthrough) is
not given, `select_order` chooses it before the output-error fit.

The budget: orders `1 .. min(10, the largest the data allow)`, each with and
without `D` unless `fit.feedthrough` is given, estimated by the subspace method and
scored on the held-out data (or by AIC without them); every order is scanned (a
subspace candidate costs a least-squares step and a free run in NumPy: a lightly
damped or slow mode may only pay off several orders above a plateau). With held-out
data the three best candidates are then refined by the
output-error fit (at most 30 Levenberg–Marquardt steps each) and scored again
before the choice: the structure whose subspace estimate validates best is not
always the one the fit improves most. So are up to three more, the simplest among
those validating within `SCAN_REFINE_MARGIN` points of the best subspace
candidate: the choice takes the fewest parameters among the refined scores within
`SCAN_TOLERANCE`, and a simple structure the subspace method nearly matched is
the one whose refinement can change it (on an unstable plant recorded under
feedback, the subspace estimates of orders 2..8 all validate within 0.2 points;
only the refined true order 2 shows it is enough). On data that look bounded a stable
candidate is preferred while it validates within `checks.STABLE_MARGIN` points of
the best (always, with `fit.model = "stable"`). The chosen structure's subspace
estimate is the start of the full fit.
"""

import functools
import math
import time

from ..config import ConfigError


SCAN_MAX_ORDER = 10
SCAN_TOLERANCE = 0.2
SCAN_REFINE = 3  # candidates refined by the output-error fit before the choice
# ... and up to SCAN_REFINE more, the simplest within this many points of the best
SCAN_REFINE_MARGIN = 2.0
SCAN_REFINE_STEPS = 30  # optimiser steps for each


def wants_scan(fit_cfg: dict) -> bool:
    """Whether the structure is left to the data (order or feedthrough not given)."""
    return fit_cfg["order"] is None or fit_cfg["feedthrough"] is None


def scan_structure(fit_cfg: dict, train, val, echo):
    """`select_order` over the candidates the config leaves open: `(scan, start,
    seconds)`, `start` the chosen structure's subspace estimate."""
    from ..._sysid.order import select_order
    from ..._sysid.subspace import fit_subspace, largest_order
    from .checks import STABLE_MARGIN, looks_bounded

    order = fit_cfg["order"]
    # Held-out experiments must keep more samples than the order (x0's unknowns).
    shortest = min(val.lengths) - 1 if val is not None else SCAN_MAX_ORDER
    top = max(1, min(SCAN_MAX_ORDER, largest_order(train), shortest))
    orders = range(1, top + 1) if order is None else (order,)
    given = fit_cfg["feedthrough"]
    feedthrough = (False, True) if given is None else (given,)
    if train.us is None:
        feedthrough = (False,)
    refine = {}
    # The refinement is an output-error fit; a prediction-error fit starts from the
    # chosen subspace estimate with its noise model instead.
    prediction = fit_cfg["loss"] == "prediction"
    if val is not None and len(orders) * len(feedthrough) > 1 and not prediction:
        refine = {
            "method": "fit",
            "refine": SCAN_REFINE,
            "refine_margin": SCAN_REFINE_MARGIN,
            "fit_options": {"num_steps": SCAN_REFINE_STEPS},
        }
    started = time.perf_counter()
    try:
        scan = select_order(
            train,
            orders,
            feedthrough=feedthrough,
            criterion="validation" if val is not None else "aic",
            val_data=val,
            tolerance=SCAN_TOLERANCE,
            horizon=fit_cfg["subspace_horizon"],
            offset=fit_cfg["offset"],
            stable=fit_cfg["model"] == "stable" or looks_bounded(train),
            stable_margin=math.inf if fit_cfg["model"] == "stable" else STABLE_MARGIN,
            **refine,
        )
        start = fit_subspace(
            train,
            scan.order,
            horizon=fit_cfg["subspace_horizon"],
            feedthrough=scan.feedthrough,
            offset=fit_cfg["offset"],
            noise_model=prediction,
        )
    except ValueError as error:
        key = "fit.subspace_horizon" if "(horizon=" in str(error) else "fit.order"
        raise ConfigError(f"config key '{key}': {error}") from None
    seconds = time.perf_counter() - started
    scored = "held-out fit %" if val is not None else "AIC on the estimation data"
    if scan.score_window is not None:
        scored += f" over windows of {scan.score_window} steps"
    refined = sum(c.refined for c in scan.candidates)
    how = f", the best {refined} refined by the fit" if refined else ""
    if refined > SCAN_REFINE:
        how = (
            f", {refined} refined by the fit (the best {SCAN_REFINE} and the "
            f"simpler ones within {SCAN_REFINE_MARGIN:g} points of the best)"
        )
    echo(
        f"  structure scan: {len(scan.candidates)} subspace candidates{how}, scored "
        f"by {scored}, {seconds:.1f} s; chosen order {scan.order}, "
        f"{'with' if scan.feedthrough else 'no'} feedthrough D"
    )
    return scan, start, seconds


def refined_size(scanned, start, train) -> tuple[int, bool] | None:
    """The size the scan's refined candidates were padded to (`padded.py`: their
    largest structure, or a larger one an earlier scan of the same channels used,
    `shared_size`), which the final fit from `start` on `train` shares:
    `(order, feedthrough)`, or `None` without a scan, refinements or padding (as
    `select_order` decides). A start of a lower order shares it only where the
    padded problem is small (`LOWER_ORDER_PADDING_LIMIT`): each of its steps, up
    to its step cap, costs what a step of the padded model costs (on the
    glass-furnace record, 80 steps of an order-6 model padded to 9 took 12.1 s
    instead of 7.2 s)."""
    from ..._fitting.padded import (
        PADDED_JACOBIAN_LIMIT,
        padded_size,
        shared_size,
        worth_padding,
    )

    if scanned is None:
        return None
    refined = [(c.order, c.feedthrough) for c in scanned[0].candidates if c.refined]
    if not refined:
        return None
    size = padded_size(refined)
    worth = functools.partial(worth_padding, start, data=train)
    if _within_limit(start, size, train, PADDED_JACOBIAN_LIMIT) is None:
        return None
    return _within_limit(start, shared_size(*size, train, worth), train)


def final_size(model, data) -> tuple[int, bool] | None:
    """The size a final fit of `model` on `data` (the refit on all the estimation
    data) is padded to, so that a file of the same channels fitted before has
    compiled its program: `model`'s own structure or a larger one an earlier fit
    used (`shared_size`); `None` (not padded) for a model that is not a plain
    `LinearSystem` with outputs, or where padding is not worth it."""
    from ..._fitting.padded import shared_size, worth_padding
    from ..._systems.system import LinearSystem

    if type(model) is not LinearSystem or model.C is None:
        return None
    own = (model.state_size, model.D is not None)
    if not worth_padding(model, *own, data):
        return None

    def fits(order, feedthrough):
        return _within_limit(model, (order, feedthrough), data) is not None

    return shared_size(*own, data, fits)


def _within_limit(start, size, data, limit=None) -> tuple[int, bool] | None:
    """`size` where it holds `start` and the fit of `start` padded to it is small
    enough (below `limit`; by default the lower limit, `LOWER_ORDER_PADDING_LIMIT`,
    for a start of a lower order), else `None`."""
    from ..._fitting.padded import (
        LOWER_ORDER_PADDING_LIMIT,
        PADDED_JACOBIAN_LIMIT,
        worth_padding,
    )

    if start.state_size > size[0] or (start.D is not None and not size[1]):
        return None
    if limit is None:
        lower = start.state_size < size[0]
        limit = LOWER_ORDER_PADDING_LIMIT if lower else PADDED_JACOBIAN_LIMIT
    return size if worth_padding(start, *size, data, limit) else None


def windowed_scan_line(scan) -> str | None:
    """One line when the scan scored its candidates over windows
    (`OrderSelection.score_window`): at least half of them diverged on the
    held-out data with an unstable mode, beyond what a free run of it holds in
    float64 (a plant unstable in open loop, recorded under feedback: an inverted
    pendulum at 50 Hz grows 1.09-fold a step); `None` otherwise."""
    if scan.score_window is None:
        return None
    return (
        "most structure-scan candidates have an unstable mode whose free run over "
        "the held-out data cannot be scored in float64 (a plant unstable in open "
        "loop, recorded under feedback), so every candidate was scored over "
        f"windows of {scan.score_window} held-out steps, each from its own "
        "initial state; the fitted model's free run below may diverge"
    )


def scan_notes(scanned, held_out: bool) -> list[str]:
    """The lines of summary.md that show the scan's table (none without a scan);
    `scanned`: `(scan, seconds)` or `None`."""
    if scanned is None:
        return []
    scan, seconds = scanned
    if held_out:
        over = ""
        if scan.score_window is not None:
            over = f" (over windows of {scan.score_window} steps)"
        rule = (
            f"the best mean held-out fit %{over}, or the fewest parameters within "
            f"{scan.tolerance:g} points of it"
        )
        if scan.tolerance > 0:
            from ..._sysid.order_choice import NOISE_TOLERANCE

            rule += (
                f" (within {NOISE_TOLERANCE:g} where the best's held-out errors look "
                "like noise and do not tell the two apart)"
            )
    else:
        rule = "the lowest AIC on the estimation data (no held-out data)"
    return [
        "Structure scan (subspace estimates; rows marked refined were refined by "
        f"the output-error fit before the choice), {seconds:.1f} s; chosen by "
        f"{rule}:",
        "",
        scan.markdown(),
        "",
    ]


def scan_figure(scanned, held_out: bool) -> dict:
    """`{"order_scan.png": figure}` of the scan (`{}` without one)."""
    from ... import plot

    if scanned is None:
        return {}
    scan = scanned[0]
    refined = any(row.refined for row in scan.candidates)
    title = "structure scan: " + (
        "held-out fit % of each candidate"
        + (" (the refined ones after refinement)" if refined else "")
        if held_out
        else "AIC of each subspace candidate"
    )
    return {"order_scan.png": plot.order_scan(scan, title=title)}


def scan_metrics(scanned, start, fit_cfg: dict) -> dict:
    """The keys of metrics.json about the structure: whether the start has `D`,
    whether it was chosen, and the scan (`None` without one)."""
    entries = {
        "feedthrough": start.D is not None,
        "feedthrough_chosen": fit_cfg["feedthrough"] is None,
        "structure_scan": None,
    }
    if scanned is None:
        return entries
    scan, seconds = scanned
    entries["structure_scan"] = {
        "criterion": scan.criterion,
        "tolerance": scan.tolerance,
        "order": scan.order,
        "feedthrough": scan.feedthrough,
        "seconds": seconds,
        "channels": list(scan.channels),
        "score_window": scan.score_window,
        "table": scan.table(),
    }
    return entries
