"""`identify`: what `dynsys fit` does with input–output data, in one call.

The estimation stages of the `fit` kind are composed here, once (`estimate_outputs`),
and both the command's recipe (`pipeline.py`) and `dynsys.identify` call them: the
structure scan (order and feedthrough, `order.py`) and its refined candidates, the
subspace start (`start.py`), the output-error fit with early stopping on the held-out
part (`estimate.py`), and the refit on all the estimation data, which falls back to
the first part's model when it ends unstable. So the two cannot drift apart.
"""

import dataclasses
import math
import re
from typing import Any, TYPE_CHECKING

from ..._fitting.host_blas import on_one_blas_thread
from ..._sysid.order import padded_size_known
from ..._sysid.scan_memo import remembered_scans
from ..._type_checks import checks_own_arguments
from ..config import ConfigError
from .ahead import RefitAhead
from .data import FitData, given_data, other_channels
from .estimate import Estimate, fit_outputs_model, refit_on_estimation_data
from .input_delay import delayed_data, delayed_models, input_delay
from .start import find_start, Start


if TYPE_CHECKING:
    from ..._data.dataset import Dataset
    from ..._sysid.order import OrderSelection


@dataclasses.dataclass(frozen=True)
class Stages:
    """The estimation stages' results: the start (`Start`, the structure scan's
    included), the fit on the estimation data's first part (`Estimate`) and the
    refit on all of them (`Estimate`; `None` without a carved held-out part, or
    when the refit ended unstable and the first part's model is kept)."""

    start: Start
    estimate: Estimate
    final: Estimate | None


def estimate_outputs(
    config: dict, data: FitData, progress: bool, found, echo
) -> Stages:
    """The estimation stages of input–output data, in the order `dynsys fit` runs
    them: the start (the structure scan when order or feedthrough is not given),
    the output-error fit with early stopping on `data.val`, and, when `data.val`
    was carved from the estimation data, the refit on all of them. The warnings go
    to `found`; the console lines to `echo`. A polynomial structure
    (`fit.structure`, `polynomial.py`) has stages of its own, of the same shape."""
    from .polynomial import is_polynomial, polynomial_stages

    if is_polynomial(config["fit"]):
        return Stages(*polynomial_stages(config, data, found, echo))
    with remembered_scans():  # the delay check's scan is the structure scan's
        delay = input_delay(config, data, echo)
        # The scan and the fits see the plant behind the delay; its models carry it.
        plant = delayed_data(config, data, delay.delays)
        train, val = plant.train, plant.val
        # The refit's program compiles while the scan runs (on another core).
        ahead = RefitAhead(config, plant.estimation) if plant.carved else None
        with padded_size_known(None if ahead is None else ahead.start):
            start = find_start(config, train, val, found, echo)
    estimate = fit_outputs_model(config, start, train, val, progress, found, echo)
    final = None
    if plant.carved:  # the chosen structure refitted on all the estimation data
        final = refit_on_estimation_data(
            config, estimate, plant, progress, found, echo, ahead
        )
    return delayed_models(Stages(start, estimate, final), delay)


@dataclasses.dataclass(frozen=True, repr=False)
class Identified:
    """What `dynsys.identify` found; `print(found)` shows it as MATLAB's
    `present(sys)` does (`summary()`): its structure and scores, then the model's
    operating point, poles, zeros, static gains and transfer functions, with
    `± std` from its covariance, under the data's channel names.

    Its names travel with it: `dynsys.present(found)`, `dynsys.to_control(found)`,
    `dynsys.plot.bode(found)` and `dynsys.plot.step_response(found)` take the model
    and name the channels after the data.

    **Fields:**

    - `model`: the identified model, as `dynsys fit` saves it in `model.dynsys`: a
        `LinearSystem` (`StableLinearSystem` with `model="stable"`, or where it
        is `first_part` and that is the stable refit of a fit that drifted
        unstable, docs/structure-selection.md; an
        `InnovationSystem` with `loss="prediction"` or `structure="armax"` or
        `"bj"`). With a held-out part carved from `data`, the chosen structure
        refitted on all of `data`
        (or `first_part` when that refit ended unstable).
    - `order`, `feedthrough`: the plant's structure (`feedthrough`: whether it
        has `D`), without the input delay's registers.
    - `input_delay`: the delay of each input in samples, `(m,)`, which `model`
        carries (`with_input_delay`; its order is `order + sum(input_delay)`).
    - `plant`, `plant_covariance`: with a delay, the model without it (of order
        `order`) and its `ParameterCovariance` (`covariance` is then `None`: the
        delayed model's parameters are not the fitted ones):
        `dynsys.present(found.plant, found.plant_covariance, names=found)` shows
        its poles and static gains `± std`; without a delay, `model` and
        `covariance`.
    - `held_out_fit_percent`: the fit % per output channel (MATLAB's `compare`)
        of `first_part` on the held-out data that chose the structure and the
        kept optimiser step (`None` without held-out data). What `dynsys fit`
        prints as the held-out fit % of the fitted model.
    - `test_fit_percent`: the fit % per output channel of `model` on `validation`
        when it was a clean test (chose nothing); else `None`.
    - `first_part`: the model fitted on the estimation data's first part, the one
        `held_out_fit_percent` scores (`model` itself when nothing was carved).
    - `scan`: the structure scan (`OrderSelection`: `.markdown()` is its table),
        or `None` when `order` and `feedthrough` were both given.
    - `held_out`: how the held-out data were chosen, in words.
    - `warnings`: what not to trust, one line each (the run's `dynsys fit:
        warning:` lines).
    - `input_names`, `output_names`: the data's channel names (units included,
        as the file's columns name them).
    - `covariance`: the `ParameterCovariance` of `model`'s parameters
        (Gauss–Newton at the fit, `FitResult.covariance`), or `None` with the
        reason in `covariance_reason`.
    """

    model: Any
    order: int
    feedthrough: bool
    held_out_fit_percent: tuple[float, ...] | None
    test_fit_percent: tuple[float, ...] | None
    first_part: Any
    scan: "OrderSelection | None"
    held_out: str
    warnings: tuple[str, ...]
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    covariance: Any = None
    covariance_reason: str | None = None
    input_delay: tuple[int, ...] = ()
    plant: Any = None
    plant_covariance: Any = None

    def summary(self) -> str:
        """What `print(found)` shows: the structure, the fit % per output, the
        warnings, then `dynsys.present` of the model (with `± std`)."""
        return identified_summary(self)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        scores = _scores(self.output_names, self.held_out_fit_percent)
        channels = f"{', '.join(self.input_names) or 'no input'} → " + ", ".join(
            self.output_names
        )
        return (
            f"<Identified: order {self.order}{' with D' * self.feedthrough}, "
            f"{channels}; held-out fit {scores or 'none'}; print() it for the "
            "model's poles, zeros and static gains>"
        )


def identified_summary(found: Identified) -> str:
    """`Identified.summary()`: a few lines of what was identified and how well,
    then the model as `dynsys.present` shows it."""
    from ..._sysid.present import present

    structure = f"order {found.order}, {'with' if found.feedthrough else 'no'} D"
    if any(found.input_delay):
        values = ", ".join(str(d) for d in found.input_delay)
        structure += f", input delay {values}"
    lines = [f"identified: {structure}; {found.held_out}"]
    held_out = _scores(found.output_names, found.held_out_fit_percent)
    if held_out:
        lines.append(f"held-out fit: {held_out}")
    test = _scores(found.output_names, found.test_fit_percent)
    if test:
        lines.append(f"fit on the validation data (a clean test): {test}")
    lines += [f"warning: {line}" for line in found.warnings]
    if any(found.input_delay) and found.plant_covariance is not None:
        lines.append(
            f"the plant without its input delay ({values} "
            f"sample{'s' * (found.input_delay != (1,))}; the model carries it as "
            "that many more states, poles at 0):"
        )
        lines.append(present(found.plant, found.plant_covariance, names=found))
        return "\n".join(lines)
    if found.covariance is None and found.covariance_reason:
        lines.append(f"no ± std: the covariance was {found.covariance_reason}")
    lines.append(present(found))
    return "\n".join(lines)


def _scores(names, percents) -> str:
    """`"temp_C 85.9 %"`, one per output (`""` for none)."""
    if percents is None:
        return ""
    names = names or [f"y{k}" for k in range(len(percents))]
    return ", ".join(f"{name} {value:.1f} %" for name, value in zip(names, percents))


# The config keys `identify`'s arguments set, by argument (named after the keys).
_FIT_KEYS = (
    "structure",
    "orders",
    "order",
    "feedthrough",
    "model",
    "loss",
    "horizon",
    "optimizer",
    "steps",
    "lr",
    "batch_size",
    "subspace_horizon",
    "offset",
    "stabilise",
    "input_delay",
)
_ARGUMENTS = {
    **{f"fit.{key}": key for key in _FIT_KEYS},
    "data.file": "data",
    "data.inputs": "data",
    "data": "data",
    "data.validation_file": "validation",
    "data.validation": "validation_fraction",
    "data.validation_split": "validation_split",
    "data.select_on_validation": "select_on_validation",
    "seed": "seed",
    "precision": "precision",
}


def _named(line: str) -> str:
    """`line` with each `config key 'fit.order'` as the argument that set it
    (`identify(order=...)`)."""

    def argument(match: re.Match) -> str:
        name = _ARGUMENTS.get(match.group(1))
        return match.group(0) if name is None else f"identify({name}=...)"

    return re.sub(r"config key '([\w.]+)'", argument, line)


def _check_arguments(data, validation, model, fraction, split, select) -> None:
    """One-line refusals of what the config keys cannot say wrong."""
    from ..._data.dataset import Dataset

    for name, value in (("data", data), ("validation", validation)):
        if value is None and name == "validation":
            continue
        if not isinstance(value, Dataset):
            raise ValueError(
                f"identify({name}=...): expected a dynsys.Dataset (load_dataset "
                f"gives one), got {type(value).__name__}."
            )
        if value.ys is None:
            raise ValueError(
                f"identify({name}=...): expected input–output data (a Dataset with "
                "outputs ys), got states only; fit measured states with "
                "dynsys.fit_least_squares and dynsys.fit."
            )
    if validation is not None:
        other = other_channels(data, validation, roles=("input", "output"))
        if other is not None:
            role, have, want = other
            raise ValueError(
                f"identify(validation=...): expected the data's {role} channels "
                f"{want}, got {have}."
            )
        same = data.dt == validation.dt or (
            data.dt is not None
            and validation.dt is not None
            and math.isclose(data.dt, validation.dt, rel_tol=1e-6)
        )
        if not same:
            raise ValueError(
                f"identify(validation=...): expected the data's sample time "
                f"{data.dt}, got {validation.dt}."
            )
    if model not in ("linear", "stable"):
        raise ValueError(
            f"identify(model=...): expected 'linear' or 'stable', got {model!r} (a "
            "neural model: dynsys.fit_neural on identify's model)."
        )
    if select and validation is None:
        raise ValueError(
            "identify(select_on_validation=...): expected a validation Dataset for "
            "it to select on, got validation=None."
        )
    if fraction is not None and (split is not None or validation is not None):
        other = "validation_split" if split is not None else "validation"
        raise ValueError(
            f"identify(validation_fraction=...): {fraction!r} holds out a share of "
            f"whole experiments, and {other}=... chooses the held-out data itself; "
            "give one."
        )


@on_one_blas_thread
@checks_own_arguments
def identify(
    data: "Dataset",
    *,
    validation: "Dataset | None" = None,
    structure: str = "state-space",
    orders: tuple[int, ...] | list[int] | None = None,
    order: int | None = None,
    feedthrough: bool | None = None,
    model: str = "linear",
    loss: str = "simulation",
    horizon: int = 20,
    optimizer: str = "default",
    steps: int | None = None,
    lr: float = 3e-3,
    batch_size: int | None = None,
    subspace_horizon: int | None = None,
    offset: bool = True,
    stabilise: bool = True,
    input_delay: str | int | tuple[int, ...] | list[int] = "auto",
    validation_split: float | None = None,
    validation_fraction: float | None = None,
    select_on_validation: bool = False,
    seed: int = 0,
    precision: str = "float64",
    progress: bool = False,
) -> Identified:
    """Identify a linear model from input–output data as `dynsys fit` does: the
    same answer in Python (like MATLAB's `ssest(data, 1:10)`).

    The held-out part that chooses is carved from `data` (the last third of one
    experiment, else a quarter of the experiments); orders 1 to 10 with and
    without `D` are scanned on it (on the inputs delayed by the input delay,
    estimated unless `input_delay` gives it), the best refined by the output-error fit;
    the chosen structure is fitted with early stopping on the held-out part, then
    refitted on all of `data` (the first part's model is kept when that refit ends
    unstable). `dynsys.fit_subspace` then `dynsys.fit` is the low-level path (one
    order read from the singular values, no structure scan, no refit): on the
    heating record of the README, fitted on its first two thirds, it validates
    69.6 % on the last third (order 4), where this gives 90.9 % (order 7 behind
    an input delay of 1 sample; 85.9 %, order 7 with `D`, with `input_delay=0`), as
    `dynsys fit` does.

    **Arguments** (each named after the `[fit]` or `[data]` config key it sets, as
    `dynsys fit`'s options do; docs/experiments.md):

    - `data`: a `Dataset` with inputs and outputs (`load_dataset` gives one).
    - `validation`: a `Dataset` with the same channels, a clean test that chooses
        nothing and only scores `model` (`--validation-data`); with
        `select_on_validation=True` it is the held-out data that choose instead.
    - `structure`: `"state-space"` (the default), or `"armax"` / `"bj"`: a
        polynomial model with a noise model (one output), fitted by prediction
        error (`fit_armax`, `fit_box_jenkins`) and returned as an
        `InnovationSystem` (`dynsys fit --structure`).
    - `orders`: the polynomial orders, `(na, nb, nc, nk)` for `"armax"`,
        `(nb, nc, nd, nf, nk)` for `"bj"` (default: a scan of equal orders 1 to 4
        with `nk` 0 or 1 on the held-out part).
    - `order`: the model order (default: chosen by the structure scan).
    - `feedthrough`: fit `D` (`y = C x + D u`); default: chosen by the scan.
    - `model`: `"linear"` or `"stable"` (a `StableLinearSystem`).
    - `loss`, `horizon`: `"simulation"`, `"one_step"` or `"shooting"` (with a
        window of `horizon` steps), or `"prediction"`: a noise model (start
        `fit_subspace(..., noise_model=True)`) fitted by its one-step prediction
        error, an `InnovationSystem`.
    - `optimizer`, `steps`, `lr`, `batch_size`: `"default"` (Levenberg–Marquardt,
        no tuning), `"adam"` (learning rate `lr`) or `"lbfgs"`; the step cap
        (default: the optimiser's); trajectories per step.
    - `subspace_horizon`, `offset`, `stabilise`: the subspace method's horizon;
        whether the data's means are removed and kept in the model; whether an
        unstable start on bounded data is stabilised.
    - `input_delay`: the input delay (dead time) in samples: `"auto"` (the
        default) estimates it on the estimation data's first part
        (`estimate_delay`); an integer (every input) or one per input gives it;
        0 turns it off. The scan and the fits run on the delayed inputs and
        `model` carries the delay (`with_input_delay`).
    - `validation_split`: hold out this last share of each experiment by time.
    - `validation_fraction`: hold out this share of whole experiments (config key
        `data.validation`; default 0.25 of several experiments).
    - `seed`: the run's seed (as `dynsys fit --seed`).
    - `precision`: `"float64"` (as `dynsys fit`) or `"float32"`; computed inside
        `jax.enable_x64(...)`, JAX's global setting left as it is. In a session
        with JAX's 64-bit mode off the models come back in float32 (as
        `dynsys.load` converts a model file), and data made there were already
        rounded to float32 (a warning says so): for `dynsys fit`'s answer, call
        `jax.config.update("jax_enable_x64", True)` before making the data.
    - `progress`: print `dynsys fit`'s console lines and a progress bar.

    **Returns:**

    An `Identified`: `.model`, `.order`, `.feedthrough`, `.held_out_fit_percent`,
    `.scan` (the structure scan's table: `.scan.markdown()`), `.warnings`, the
    data's `.input_names`, `.output_names` and the model's `.covariance`;
    `print(found)` shows the model as MATLAB's `present(sys)` does.

    **Raises:**

    `ValueError` (one line naming the argument) for bad arguments or data too
    short for them.

    **Example:**

    ```python
    data = dynsys.load_dataset("heating.csv", inputs=["drive_V"], outputs=["temp_C"])
    found = dynsys.identify(data)
    found.order, found.input_delay  # 7, (1,): as `dynsys fit`
    found.held_out_fit_percent      # (90.9,)
    print(found)  # drive_V → temp_C: poles, zeros, static gain ± std
    ```
    """
    arguments = dict(locals())  # identify's arguments by name, for its config
    checked = (validation_fraction, validation_split, select_on_validation)
    _check_arguments(data, validation, model, *checked)
    try:
        config = _config(arguments)
        identified = _estimated(config, data, validation, progress)
    except ConfigError as error:
        raise ValueError(_named(str(error))) from None
    return _in_session_precision(identified)


# `identify`'s arguments that set a `[fit]` key, each of the key's name.
_FIT_KEYS = (
    "structure", "orders", "order", "feedthrough", "model", "loss", "horizon",
    "optimizer", "steps", "lr", "batch_size", "subspace_horizon", "offset",
    "stabilise", "input_delay",
)  # fmt: skip
# And those that set a `[data]` key: the argument's name -> the key's.
_DATA_KEYS = {
    "validation_fraction": "validation",
    "validation_split": "validation_split",
    "select_on_validation": "select_on_validation",
}


def _config(arguments: dict) -> dict:
    """The `fit` experiment's config of `identify`'s `arguments` (by name; `None`:
    the key's default; the orders as a list of ints, a tuple of delays as a list),
    resolved (`ConfigError` for a bad value)."""
    from ..schema import resolve_config

    fit_keys = {name: arguments[name] for name in _FIT_KEYS}
    orders, delay = fit_keys["orders"], fit_keys["input_delay"]
    fit_keys["orders"] = None if orders is None else [int(k) for k in orders]
    fit_keys["input_delay"] = list(delay) if isinstance(delay, tuple) else delay
    data_keys = {key: arguments[name] for name, key in _DATA_KEYS.items()}
    raw = {
        "kind": "fit",
        "name": "identify",
        "seed": arguments["seed"],
        "precision": arguments["precision"],
        "data": {k: v for k, v in data_keys.items() if v is not None},
        "fit": {k: v for k, v in fit_keys.items() if v is not None},
    }
    return resolve_config(raw)


def _estimated(config: dict, data, validation, progress: bool) -> Identified:
    """`dynsys fit`'s estimation stages on `data` (and `validation`), in the
    config's precision (inside `jax.enable_x64`, JAX's global setting untouched)."""
    import jax

    echo = print if progress else _silent
    found: list[str] = []
    precision = config["precision"]
    with jax.enable_x64(precision == "float64"):
        data, validation = (
            _in_precision(name, given, precision, found, echo)
            for name, given in (("data", data), ("validation", validation))
        )
        fit_data = given_data(config, data, validation, echo)
        _refuse_unusable(config, fit_data, found, echo)
        stages = estimate_outputs(config, fit_data, progress, found, echo)
        return _identified(fit_data, stages, found)


def _in_session_precision(identified: Identified) -> Identified:
    """`identified` with its models in float32 when JAX's 64-bit mode is off in
    this session (as `dynsys.load` converts a float64 model file), so that they
    compute there without JAX's truncation warnings."""
    import jax
    import jax.numpy as jnp

    if jax.config.jax_enable_x64:
        return identified

    def to_float32(a):
        if isinstance(a, jax.Array) and a.dtype == jnp.float64:
            return a.astype(jnp.float32)
        return a

    def covariance_to_float32(covariance):
        if covariance is None:
            return None
        return dataclasses.replace(
            covariance, model=jax.tree.map(to_float32, covariance.model)
        )

    covariance = covariance_to_float32(identified.covariance)
    return dataclasses.replace(
        identified,
        plant=jax.tree.map(to_float32, identified.plant),
        plant_covariance=covariance_to_float32(identified.plant_covariance),
        model=jax.tree.map(to_float32, identified.model),
        first_part=jax.tree.map(to_float32, identified.first_part),
        covariance=covariance,
    )


def _silent(line: str) -> None:
    """The console of a call that prints nothing."""


def _in_precision(name: str, data, precision: str, found: list[str], echo):
    """`data` (a `Dataset` or `None`) with its floating arrays in `precision`, as
    `dynsys fit` reads a file; a warning when float64 was asked of data already
    rounded to float32 (made while JAX's 64-bit mode was off)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if data is None:
        return None
    dtype = np.dtype(precision)
    leaves = [a for a in jax.tree.leaves(data) if jnp.issubdtype(a.dtype, jnp.floating)]
    if dtype == np.float64 and any(a.dtype == np.float32 for a in leaves):
        line = (
            f"identify({name}=...): the data are float32 (made while JAX's 64-bit "
            "mode was off), rounded before this float64 fit: the model differs from "
            "dynsys fit's on the same file; load them after "
            'jax.config.update("jax_enable_x64", True)'
        )
        echo(f"  warning: {line}")
        found.append(line)

    def cast(a):
        return a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a

    return jax.tree.map(cast, data)


def _refuse_unusable(config: dict, data: FitData, found: list[str], echo) -> None:
    """`dynsys fit`'s data checks: a refusal (`ConfigError`) when the data cannot
    support a model (a constant input, a flat output); its warnings (and those on
    the split: repeated experiments, an option that holds nothing out) to
    `found`."""
    from .data_checks import check_data
    from .polynomial import check_structure_choice

    from .input_delay import check_input_delay

    findings = check_data(config, data, echo).findings
    check_structure_choice(config, data)
    check_input_delay(config, data)
    found += [f["message"] for f in findings if f["level"] == "warn"]


def _identified(data: FitData, stages: Stages, found: list[str]) -> Identified:
    """The `Identified` of the stages' results."""
    import numpy as np

    from ..._sysid.validation import compare
    from .uncertainty import covariance_of

    estimate, final = stages.estimate, stages.final
    kept = final if final is not None else estimate

    def percent(model, on) -> tuple[float, ...] | None:
        if on is None:
            return None
        return tuple(float(v) for v in np.asarray(compare(model, on).fit_percent))

    scan = stages.start.scan
    structure = stages.start.structure  # the chosen structure's start (the plant's)
    if structure is None:  # a polynomial structure: its first fit
        structure = estimate.result.model
    whole = data.run.data
    covariance, reason = covariance_of(kept.result)
    delay = stages.start.delay
    plant, plant_covariance = kept.result.model, covariance
    if delay is not None and any(delay.delays):
        # The fits ran on the plant behind the delay: the covariance is of its
        # parameters, not of the delayed model's.
        plant = covariance.model if covariance is not None else None
        covariance, reason = None, (
            "computed for the plant without its input delay: "
            "dynsys.present(found.plant, found.plant_covariance, names=found)"
        )
    return Identified(
        model=kept.result.model,
        order=int(structure.state_size),
        feedthrough=structure.D is not None,
        held_out_fit_percent=percent(estimate.fitted, data.val),
        test_fit_percent=percent(kept.fitted, data.test),
        first_part=estimate.result.model,
        scan=None if scan is None else scan[0],
        held_out=data.held,
        warnings=tuple(_named(line) for line in found),
        input_names=tuple(whole.input_names),
        output_names=tuple(whole.output_names),
        covariance=covariance,
        covariance_reason=reason,
        input_delay=() if delay is None else tuple(delay.delays),
        plant=plant,
        plant_covariance=plant_covariance,
    )
