"""What a `fit` run prints after fitting: the stop note, the models' eigenvalues
side by side, the fit % tables and the times."""

import numpy as np

from .assumptions import assumption_lines
from .estimate import as_linear


def _format_complex(z) -> str:
    sign = "+" if z.imag >= 0 else "-"
    return f"{z.real:.4f}{sign}{abs(z.imag):.4f}j"


def _match_eigenvalues(reference, others):
    """Reorder each array of eigenvalues to pair with `reference` (nearest first)."""
    matched = []
    for values in others:
        remaining = list(values)
        order = []
        for target in reference:
            k = int(np.argmin([abs(v - target) for v in remaining]))
            order.append(remaining.pop(k))
        matched.append(np.asarray(order))
    return matched


def eigenvalue_table(models: dict, echo) -> dict:
    """Print the models' eigenvalues side by side (paired when the orders match);
    returns them by model for `metrics.json`."""
    columns = {
        name: np.linalg.eigvals(np.asarray(as_linear(model).K))
        for name, model in models.items()
    }
    first = next(iter(columns.values()))
    order = np.lexsort((-first.imag, -np.abs(first)))
    reference = first[order]
    same = all(len(v) == len(reference) for v in columns.values())
    if same:
        values = [reference, *_match_eigenvalues(reference, list(columns.values())[1:])]
    else:
        values = [np.sort_complex(v)[::-1] for v in columns.values()]
    width = 20
    echo(f"  {'eigenvalues':<16}" + "".join(f"{c:>{width}}" for c in columns))
    for k in range(max(len(v) for v in values)):
        cells = [_format_complex(v[k]) if k < len(v) else "" for v in values]
        echo(f"  {'':<16}" + "".join(f"{c:>{width}}" for c in cells))
    echo(
        f"  {'max |eigenvalue|':<16}"
        + "".join(f"{np.max(np.abs(v)):>{width}.4f}" for v in values)
    )
    return {
        name: [[float(z.real), float(z.imag)] for z in v]
        for name, v in zip(columns, values)
    }


def mean_fit_percent(values) -> float:
    """The mean fit % over the channels that have one (see `fit_percent`)."""
    from ..._fitting.metrics import channel_mean

    return float(channel_mean(np.asarray(values, dtype=float), np))


def _fit_table(rows: dict, channels: list[str], echo) -> None:
    """rows: label -> model name -> per-channel fit % (a list)."""
    from ..._fitting.metrics import fit_percent_text

    for label, by_model in rows.items():
        echo(f"  {label}")
        names = list(by_model)
        echo(f"    {'channel':<20}" + "".join(f"{n:>16}" for n in names))
        for c, channel in enumerate(channels):
            echo(
                f"    {channel:<20}"
                + "".join(f"{fit_percent_text(by_model[n][c]):>16}" for n in names)
            )
        if len(channels) > 1:
            echo(
                f"    {'mean':<20}"
                + "".join(
                    f"{fit_percent_text(mean_fit_percent(by_model[n])):>16}" for n in names
                )
            )


def echo_stop(result, echo) -> None:
    """The fit's stop reason, when it has one."""
    if result.stop_reason is not None:
        echo(f"  note: {result.stop_reason}")


def echo_outputs(start, estimate, validation, channels, echo, final=None) -> dict:
    """Print the stop note, eigenvalues, fit % table and times of input–output
    data (and the final refit's scores, `final` its `Estimate`); returns the
    eigenvalues for `metrics.json`."""
    echo("")
    echo_stop(estimate.result, echo)
    models = validation.models
    if final is not None and final.fitted is not models["fitted"]:
        models = {**models, "final": final.fitted}
    eigenvalues = eigenvalue_table(models, echo)
    echo("")
    _fit_table(validation.rows, channels, echo)
    for line in final_lines(validation.final):
        echo(f"  {line}")
    echo("")
    _echo_caveat(validation.residuals, validation.models["fitted"], echo)
    for line in assumption_lines(start, estimate, validation):
        echo(f"  note: {line}.")
    refit = "" if final is None else f", refit {final.seconds:.1f} s"
    first = "structure scan" if start.polynomial is not None else "subspace"
    echo(
        f"  time: {first} {start.seconds:.2f} s, fit {estimate.seconds:.1f} s"
        f"{refit}, validation {validation.seconds:.2f} s"
    )
    return eigenvalues


def _echo_caveat(residuals, fitted, echo) -> None:
    """One line when the residual tests fail: the bands are too narrow; and one
    when a noise model may whiten them (`noise_model_hint`)."""
    from .uncertainty import band_caveat, noise_model_hint

    caveat = band_caveat(residuals)
    if caveat is not None:
        echo(f"  bands: {caveat}.")
    hint = noise_model_hint(residuals, fitted)
    if hint is not None:
        echo(f"  hint: {hint}.")


def final_lines(scores: dict | None) -> list[str]:
    """The lines that say what is known of the final model refitted on all the
    estimation data (`scores`: `Validation.final`; none without a refit)."""
    from ..._fitting.metrics import fit_percent_text

    if scores is None:
        return []

    def mean(values) -> str:
        return fit_percent_text(mean_fit_percent(values))

    lines = [
        "the saved model is the chosen structure refitted on all the estimation data "
        "(the held-out part included)",
        f"held-out fit % of the model fitted on the first part, on the held-out part"
        f"{_over(scores.get('first_part_held_out_window'))}: "
        f"{mean(scores['first_part_held_out'])} (mean over channels)",
    ]
    if scores["final_test"] is not None:
        lines.append(
            f"final model on the validation file (a clean test, it chose nothing): "
            f"{mean(scores['final_test'])}"
        )
    lines.append(
        f"final model on all the estimation data"
        f"{_over(scores.get('final_estimation_window'))}: "
        f"{mean(scores['final_estimation'])}"
        " (a training fit: it has seen the held-out part, which cannot score it "
        "honestly)"
    )
    return lines


def _over(window: int | None) -> str:
    """`", over windows of N steps"`, or `""` for a free run (`None`)."""
    return "" if window is None else f", over windows of {window} steps"


def echo_states(estimate, models, rows, runs, echo) -> dict:
    """Print the stop note, eigenvalues, free-run fit % and fit time of measured
    states; returns the eigenvalues for `metrics.json`."""
    result, optimiser = estimate.result, estimate.optimiser
    echo("")
    echo_stop(result, echo)
    eigenvalues = eigenvalue_table(models, echo)
    echo("")
    label_width = max(len(label) for label in rows) + 2
    echo(f"  {'':<{label_width}}" + "".join(f"{c:>15}" for c in runs))
    for label, row in rows.items():
        echo(f"  {label:<{label_width}}" + "".join(f"{v:>15.1f}" for v in row.values()))
    echo("")
    echo(
        f"  fit time {estimate.seconds:.1f} s ({optimiser}, {len(result.losses)} "
        f"steps, including compilation); best step {result.best_step}"
    )
    return eigenvalues
