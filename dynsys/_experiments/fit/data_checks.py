"""The data checks of a fit experiment (`check_data`): printed one line each,
recorded in `metrics.json["data_checks"]`, and a refusal before anything is fitted;
and the run status when a channel's fit % is undefined."""

import hashlib
import math

import numpy as np

from ..config import ConfigError


def run_data_checks(config: dict, data, source: str, echo) -> list[dict]:
    """Check `data` (the whole dataset of a fit experiment) in the run's precision;
    echo each finding; raise `ConfigError` (one line, naming the data) when one is a
    refusal. Returns the findings as dicts for `metrics.json`."""
    from ..._data.checks import check_data

    findings = check_data(data, order=config["fit"]["order"], dtype=config["precision"])
    for finding in findings:
        echo(f"  data check ({finding.level}): {finding.message}")
    refused = [f.message for f in findings if f.level == "refuse"]
    if refused:
        key = "data.file" if config["data"]["file"] is not None else "data"
        raise ConfigError(
            f"config key '{key}': {source} cannot support a model: " + " ".join(refused)
        )
    return [finding._asdict() for finding in findings]


def undefined_fit(metrics: dict) -> str | None:
    """Why some fit % in `metrics["fit_percent"]` is undefined (the channels whose
    value is NaN: no variance), or `None` when every one is defined."""
    channels = metrics.get("fit_percent_channels") or []
    undefined = set()

    def visit(value, index):
        if isinstance(value, dict):
            for item in value.values():
                visit(item, None)
        elif isinstance(value, list | tuple):
            for k, item in enumerate(value):
                visit(item, k)
        elif isinstance(value, float) and math.isnan(value):
            undefined.add(
                channels[index]
                if index is not None and index < len(channels)
                else "a channel"
            )

    visit(metrics.get("fit_percent", {}), None)
    if not undefined:
        return None
    return (
        "fit % undefined (no variance) for "
        + ", ".join(repr(c) for c in sorted(undefined))
        + " of the data it is reported on"
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
