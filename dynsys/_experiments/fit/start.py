"""The start of an input–output fit (`find_start`): the order checked against the
data, the subspace estimate (after the structure scan of `order.py` when the order
or feedthrough is not given), and its stabilised copy when it is unstable while the
data look bounded."""

import dataclasses
import time
from typing import Any

import numpy as np

from ..config import ConfigError
from ..runtime.compile_clock import stage
from . import checks as fit_checks
from .assumptions import distinct_digits
from .order import scan_notes, scan_structure, wants_scan, windowed_scan_line


@dataclasses.dataclass(frozen=True)
class Start:
    """The start stage's result."""

    subspace: Any  # the subspace estimate
    begin: Any  # what the fit starts from: `subspace`, or its stabilised copy
    singular_values: np.ndarray | None  # None for a polynomial structure
    seconds: float  # the subspace step's, the structure scan's included
    chosen: str  # how the order was chosen, in words
    scan: Any  # `(StructureScan, seconds)`, or None without a scan
    notes: list[str]  # summary.md lines: operating point, scan, stabilisation
    # A polynomial structure (`polynomial.py`; then `subspace`, `begin` and
    # `singular_values` are `None`): metrics.json's `polynomial` entry.
    polynomial: dict | None = None
    # The input delay (`input_delay.InputDelay`) the models carry, and the
    # subspace start without it (the plant's structure), or None.
    delay: Any = None
    plant: Any = None
    # The estimation data's means `(ū (m,) or None, ȳ (p,))`, or None.
    data_means: Any = None

    @property
    def structure(self):
        """The subspace start without the delay: its order and `D` are the
        plant's."""
        return self.subspace if self.plant is None else self.plant


def find_start(config: dict, train, val, found: list[str], echo) -> Start:
    """Check the order, estimate the subspace start and stabilise it if needed;
    the warnings go to `found`."""
    fit_cfg = config["fit"]
    _check_order(config, train, val)
    _warn_high_order(fit_cfg, train, found, echo)
    with stage("subspace"):
        subspace, singular_values, seconds, chosen, scan = _subspace_start(
            fit_cfg, train, val, echo
        )
    windowed = None if scan is None else windowed_scan_line(scan[0])
    if windowed is not None:
        echo(f"  warning: {windowed}")
        fit_checks.add(found, windowed)
    means = _data_means(train)
    notes = _levels_note(subspace, means, echo)
    notes += scan_notes(scan, held_out=val is not None)
    window = None if scan is None else scan[0].score_window
    begin, stabilised = _stabilised_if_needed(
        fit_cfg, subspace, train, val, found, echo, window
    )
    notes += stabilised
    fit_checks.model_warnings("subspace start", begin, train, found)
    return Start(
        subspace, begin, singular_values, seconds, chosen, scan, notes,
        data_means=means,
    )  # fmt: skip


def _check_order(config: dict, train, val) -> None:
    """Refuse, before any work, an order above what the estimation data allow,
    held-out experiments too short for it, or data too short for subspace
    identification at all."""
    from ..._sysid.subspace import largest_order

    fit_cfg, data_cfg = config["fit"], config["data"]
    try:
        largest = largest_order(train)
    except ValueError as error:
        raise ConfigError(f"config key 'data.file': {error}") from None
    order = fit_cfg["order"]
    if order is not None and order > largest and fit_cfg["subspace_horizon"] is None:
        raise ConfigError(
            f"config key 'fit.order': the estimation data ({sum(train.lengths)} "
            f"samples, {train.output_size} outputs) allow at most order {largest}, "
            f"got {order}."
        )
    if order is not None and val is not None and min(val.lengths) <= order:
        key = "data." + (
            "validation_file"
            if data_cfg["validation_file"] is not None
            and data_cfg["select_on_validation"]
            else "validation_split"
            if data_cfg["file"] is not None
            else "validation"
        )
        raise ConfigError(
            f"config key '{key}': the held-out data keep {min(val.lengths)} samples "
            f"of an experiment, too few to validate a model of order {order} (its "
            "initial state alone has that many unknowns); hold out more."
        )


# A given order is far above what the data support when its model has more than
# this many parameters per measured value of the estimation data.
PARAMETERS_PER_SAMPLE = 0.25


def _parameters(order: int, train, feedthrough: bool | None) -> int:
    """The free parameters of a linear model of `order` on `train`: `K`, `B`, `C`
    (and `D` when `feedthrough`)."""
    m, p = train.input_size, train.output_size
    return order * order + order * (m + p) + (p * m if feedthrough else 0)


def _warn_high_order(fit_cfg: dict, train, found: list[str], echo) -> None:
    """Warn (one line, before any work) when the given order's model has more
    than `PARAMETERS_PER_SAMPLE` parameters per measured value, with its cost
    against the structure scan's largest order."""
    from .order import SCAN_MAX_ORDER

    order = fit_cfg["order"]
    if order is None or order <= SCAN_MAX_ORDER:
        return
    values = sum(train.lengths) * train.output_size
    count = _parameters(order, train, fit_cfg["feedthrough"])
    if count <= PARAMETERS_PER_SAMPLE * values:
        return
    scanned = _parameters(SCAN_MAX_ORDER, train, fit_cfg["feedthrough"])
    outputs = f"{train.output_size} output{'s' * (train.output_size != 1)}"
    line = (
        f"config key 'fit.order': order {order} is far above what the data support: "
        f"its model has {count:,} parameters for {sum(train.lengths):,} estimation "
        f"samples of {outputs} ({count / values:.2g} per measured value; above "
        f"{PARAMETERS_PER_SAMPLE:g} a model fits the noise); expect a much longer "
        f"run ({count / scanned:.0f}x the parameters of order {SCAN_MAX_ORDER}, the "
        "structure scan's largest; the fit's time grows faster than that) and a "
        "model that does not validate"
    )
    echo(f"  warning: {line}")
    fit_checks.add(found, line)


def _subspace_start(fit_cfg: dict, train, val, echo):
    """The subspace estimate, its singular values, the time it took, how its order
    was chosen and the structure scan (`None` when order and feedthrough are given;
    `order.py`)."""
    from ..._sysid.subspace import fit_subspace, subspace_singular_values

    started = time.perf_counter()
    horizon = fit_cfg["subspace_horizon"]
    offset = fit_cfg["offset"]
    try:
        singular_values = np.asarray(
            subspace_singular_values(train, horizon=horizon, offset=offset)
        )
    except ValueError as error:
        key = "fit.subspace_horizon" if "(horizon=" in str(error) else "fit.order"
        raise ConfigError(f"config key '{key}': {error}") from None
    scan = None
    if wants_scan(fit_cfg):
        with stage("structure scan"):
            scan, start, scan_seconds = scan_structure(fit_cfg, train, val, echo)
        scan = (scan, scan_seconds)
        by = "the held-out data" if val is not None else "AIC"
        chosen = f"chosen by a structure scan on {by}"
        if fit_cfg["order"] is not None:
            chosen = f"given; feedthrough chosen by a scan on {by}"
    else:
        try:
            start = fit_subspace(
                train,
                fit_cfg["order"],
                horizon=horizon,
                feedthrough=fit_cfg["feedthrough"],
                offset=offset,
                noise_model=fit_cfg["loss"] == "prediction",
            )
        except ValueError as error:
            key = "fit.subspace_horizon" if "(horizon=" in str(error) else "fit.order"
            raise ConfigError(f"config key '{key}': {error}") from None
        chosen = "given"
    if start.state_size > singular_values.size - train.output_size:
        # a scanned order above what the default horizon shows: a longer horizon
        horizon = -(-start.state_size // train.output_size) + 1
        singular_values = np.asarray(
            subspace_singular_values(train, horizon=horizon, offset=offset)
        )
    seconds = time.perf_counter() - started
    echo(f"  subspace start: order {start.state_size} ({chosen}), {seconds:.2f} s")
    return start, singular_values, seconds, chosen, scan


def _data_means(train) -> tuple:
    """The estimation data's mean input and output, `(ū (m,) or None, ȳ (p,))`."""
    from ..._sysid.operating_point import data_levels
    from ..._sysid.signals import signals

    return tuple(
        None if level is None else np.asarray(level)
        for level in data_levels(signals(train, "fit"))
    )


def _levels_note(start, data_means, echo) -> list[str]:
    """Say that the estimation data's means were removed and what the model keeps:
    the means, or the means plus the constant offset the subspace estimate fits."""
    if start.output_level is None:
        return []

    def values(levels) -> str:
        return ", ".join(f"{v:.4g}" for v in np.asarray(levels))

    levels = [("output", start.output_level, data_means[1])]
    if start.input_level is not None:
        levels.append(("input", start.input_level, data_means[0]))
    kept = "; ".join(f"{what} level {values(level)}" for what, level, _ in levels)
    if all(np.allclose(level, mean, rtol=1e-4) for _, level, mean in levels):
        line = (
            "operating point: the estimation data's means were removed and are kept "
            f"in the model ({kept})"
        )
    else:
        pairs = [
            (what, *zip(*map(distinct_digits, np.ravel(level), np.ravel(mean))))
            for what, level, mean in levels
        ]
        kept = "; ".join(f"{what} level {', '.join(ls)}" for what, ls, _ in pairs)
        means = "; ".join(f"{what} {', '.join(ms)}" for what, _, ms in pairs)
        line = (
            f"operating point: the estimation data's means ({means}) were removed; "
            f"the model keeps them plus the constant offset the subspace estimate "
            f"fits ({kept})"
        )
    line += "; it simulates raw data in their units"
    echo(f"  {line}")
    return [line[0].upper() + line[1:] + ".", ""]


def _stabilised_if_needed(fit_cfg: dict, start, train, val, found, echo, window):
    """The subspace start, or when it is unstable while the data look bounded (and
    `fit.stabilise`), the stabilised start; and a note saying which. With held-out
    data the stabilised start is kept only while it validates within
    `STABLE_MARGIN` points of the unstable one (unless `fit.model = "stable"`):
    an unstable plant under feedback gives bounded data too. Both are scored over
    the scan's windows of `window` steps where it scored over windows."""
    from ..._sysid.stabilise import stabilised_start

    rho = fit_checks.spectral_radius(start)
    if rho < 1.0 or not fit_checks.looks_bounded(train):
        return start, []
    if fit_cfg["loss"] == "prediction":  # its Kalman predictor is stable anyway
        return start, []
    if not fit_cfg["stabilise"]:
        fit_checks.add(
            found,
            f"the subspace start is unstable (max |eigenvalue| {rho:.4f}) while the "
            "data look bounded; not stabilised (config key 'fit.stabilise')",
        )
        return start, []
    stable = stabilised_start(start, train)
    if fit_cfg["model"] != "stable" and val is not None:
        kept = _unstable_start_kept(start, stable, rho, val, window)
        if kept is not None:
            echo(f"  {kept}")
            return start, [kept[0].upper() + kept[1:] + ".", ""]
    line = (
        f"the subspace start was unstable (max |eigenvalue| {rho:.4f}) while the "
        "data look bounded: the fit starts from it with the unstable eigenvalues "
        "reflected into the unit disc and B, D re-estimated (turn off with config "
        "key 'fit.stabilise')"
    )
    echo(f"  {line}")
    return stable, [line[0].upper() + line[1:] + ".", ""]


def _unstable_start_kept(start, stable, rho: float, val, window) -> str | None:
    """The note saying why the fit starts from the unstable `start`, when its
    stabilised copy `stable` validates more than `STABLE_MARGIN` points worse on
    `val` (over windows of `window` steps, unless `None`); else `None`."""
    from ..._fitting.unstable_window import in_windows
    from ..._sysid.order import held_out_fit

    scored = in_windows(val, window)
    unstable_fit = held_out_fit(start, scored)[1]
    stable_fit = held_out_fit(stable, scored)[1]
    if not stable_fit < unstable_fit - fit_checks.STABLE_MARGIN:
        return None
    over = "" if window is None else f" (over windows of {window} steps)"
    return (
        f"the subspace start is unstable (max |eigenvalue| {rho:.4f}) while the data "
        f"look bounded, but its stabilised copy validates {stable_fit:.1f} % against "
        f"its {unstable_fit:.1f} % on the held-out data{over}: the fit starts from the "
        "unstable one (an unstable plant under feedback gives bounded data too; "
        "--model stable forces a stable model)"
    )
