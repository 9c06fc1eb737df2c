"""The data checks of a fit experiment (`check_data`): printed one line each,
recorded in `metrics.json["data_checks"]`, and a refusal before anything is
fitted."""

import dataclasses
import hashlib
import pathlib

import numpy as np

from ..config import ConfigError
from ..runtime.compile_clock import stage
from .data import unused_validation


@dataclasses.dataclass(frozen=True)
class DataChecks:
    """The data-check stage's result: the findings (for `metrics.json`) and the
    warning when held-out experiments repeat estimation ones (`None` if not)."""

    findings: list  # dicts, the overlap warning last when there is one
    overlap: dict | None


def check_data(config: dict, data, echo) -> DataChecks:
    """Check the whole data (`data`: a `FitData`) and the split; refuse data that
    cannot support a model (`ConfigError`)."""
    with stage("data"):
        findings = run_data_checks(config, data.run.data, data.run.source, echo)
        overlap = split_overlap(data.train, data.val)
    unused = unused_validation(
        config, data.run.data, measured=data.run.true_system is None
    )
    if unused is not None:
        echo(f"  data check (warn): {unused}")
        findings.append({"level": "warn", "kind": "unused_option", "message": unused})
    if overlap is not None:
        echo(f"  data check (warn): {overlap['message']}")
        findings.append(overlap)
    return DataChecks(findings, overlap)


def run_data_checks(config: dict, data, source: str, echo) -> list[dict]:
    """Check `data` (the whole dataset of a fit experiment) in the run's precision;
    echo each finding; raise `ConfigError` (one line, naming the data) when one is a
    refusal. Returns the findings as dicts for `metrics.json`."""
    from ..._data.checks import check_data

    findings = check_data(data, order=config["fit"]["order"], dtype=config["precision"])
    unexcited = ("input_zero", "input_constant")  # refused here: no model of B
    findings = [
        f._replace(level="refuse") if f.kind in unexcited else f for f in findings
    ]
    for finding in findings:
        echo(f"  data check ({finding.level}): {finding.message}")
    _refuse_constant_inputs(config, data, source)
    refused = [f.message for f in findings if f.level == "refuse"]
    if refused:
        key = "data.file" if config["data"]["file"] is not None else "data"
        raise ConfigError(
            f"config key '{key}': {source} cannot support a model: " + " ".join(refused)
        )
    return [finding._asdict() for finding in findings]


def _refuse_constant_inputs(config: dict, data, source: str) -> None:
    """A `ConfigError` naming the input columns that are zero or constant
    throughout: a model cannot learn their effect (`B`), and a fit would still
    "succeed" and validate on held-out data of the same kind. With other inputs
    that vary, the advice is to leave the constant ones out of `data.inputs`."""
    from ..._data.checks import constant_inputs

    constant = constant_inputs(data, config["precision"])
    if not constant:
        return
    names = [name for name, _ in constant]
    others = [n for n in (data.input_names or ()) if n not in names]
    which = ", ".join(repr(n) for n in names)
    values = ", ".join(f"{v:.6g}" for _, v in constant)
    is_are = "is" if len(names) == 1 else "are"
    s = "" if len(names) == 1 else "s"
    if others:
        advice = (
            f"leave {'them' if s else 'it'} out of config key "
            f"'data.inputs' (keeping {', '.join(repr(n) for n in others)}), or "
            f"record {'them' if s else 'it'} excited (steps, noise, a chirp)"
        )
    else:
        advice = "excite the system (steps, noise, a chirp) and record it again"
    file = config["data"]["file"]
    key = "data.inputs" if file is not None else "data.input_scale"
    where = pathlib.Path(file).name if file is not None else source.split(":")[0]
    raise ConfigError(
        f"config key '{key}': the input{s} {which} {is_are} constant ({values} "
        f"throughout) in {where}: no model can learn {'their' if s else 'its'} "
        f"effect (B); {advice}."
    )


def _fingerprints(data) -> list[str]:
    """A digest of each experiment's valid samples (states, inputs, outputs)."""
    digests = []
    for i, T in enumerate(data.lengths):
        digest = hashlib.sha256(str(T).encode())
        for name in ("xs", "us", "ys"):
            array = getattr(data, name, None)
            if array is not None:
                rows = np.ascontiguousarray(np.asarray(array)[i, : T + (name == "xs")])
                digest.update(name.encode() + rows.tobytes())
        digests.append(digest.hexdigest())
    return digests


def split_overlap(train, val) -> dict | None:
    """A warning (as a data-check finding) when held-out experiments repeat
    estimation experiments sample for sample: the held-out score is then not
    independent of the fit. `None` without held-out data or repeats."""
    if val is None:
        return None
    seen = {digest: i for i, digest in reversed(list(enumerate(_fingerprints(train))))}
    pairs = [
        (j, seen[digest])
        for j, digest in enumerate(_fingerprints(val))
        if digest in seen
    ]
    if not pairs:
        return None
    j, i = pairs[0]
    count = len(pairs)
    message = (
        f"{count} held-out experiment{'s' * (count != 1)} of {len(val.lengths)} "
        f"repeat{'s' * (count == 1)} an estimation experiment sample for sample "
        f"(held-out {j} = estimation {i}): the validation score is not independent "
        "of the fit; remove the duplicated experiments from the data."
    )
    return {"level": "warn", "kind": "duplicate_split", "message": message}
