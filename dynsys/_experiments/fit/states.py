"""The stages of a `fit` run on measured states: the one-step least-squares start
(`least_squares_start`) and the free runs scored on the report data
(`score_free_runs`)."""

import dataclasses

import numpy as np

from ..config import ConfigError


@dataclasses.dataclass(frozen=True)
class StateScores:
    """The free-run validation of measured states."""

    models: dict  # name -> model, in the tables' order (the truth first if known)
    runs: dict  # name -> its free run's states on the report data
    rows: dict  # fit % rows: label -> name -> fit %


def least_squares_start(config: dict, train):
    """The one-step least-squares estimate, the fit's start."""
    from ..._fitting.least_squares import fit_least_squares

    try:
        return fit_least_squares(train, ridge=config["fit"]["ridge"])
    except ValueError as error:
        raise ConfigError(f"config key 'fit.ridge': {error}") from None


def score_free_runs(data, start, estimate) -> StateScores:
    """The least-squares start's and the fitted model's free runs on `data.report`
    (`data`: a `FitData`), scored against the measured states (and the noise-free
    ones when known)."""
    from ..._fitting.metrics import fit_percent
    from ..._rollout.rollout import rollout
    from ..._systems.system import LinearSystem

    def free_run(system, dataset):
        return np.asarray(
            rollout(system, dataset.xs[:, 0], dataset.num_steps, inputs=dataset.us).xs
        )

    report, which, clean_val = data.report, data.which, data.clean_val
    runs = {
        "least squares": free_run(start, report),
        "fitted": free_run(estimate.fitted, report),
    }
    rows = {
        f"{which} fit % vs measurements": {
            label: float(fit_percent(report.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }
    }
    if clean_val is not None:
        rows[f"{which} fit % vs noise-free truth"] = {
            label: float(fit_percent(clean_val.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }
    models = {"least squares": start, "fitted": estimate.fitted}
    if isinstance(data.run.true_system, LinearSystem):
        models = {"true": data.run.true_system, **models}
    return StateScores(models, runs, rows)
