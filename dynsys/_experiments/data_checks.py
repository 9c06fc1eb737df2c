"""The data checks of a fit experiment (`check_data`): printed one line each,
recorded in `metrics.json["data_checks"]`, and a refusal before anything is fitted;
and the run status when a channel's fit % is undefined."""

import math

from .config import ConfigError


def run_data_checks(config: dict, data, source: str, echo) -> list[dict]:
    """Check `data` (the whole dataset of a fit experiment) in the run's precision;
    echo each finding; raise `ConfigError` (one line, naming the data) when one is a
    refusal. Returns the findings as dicts for `metrics.json`."""
    from .._data.checks import check_data

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
