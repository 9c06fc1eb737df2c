"""Prediction-error minimisation of a polynomial model: Levenberg–Marquardt on the
one-step prediction errors, on the host in float64.

Why not `_fitting.LevenbergMarquardt`: it is a strategy of the jitted training loop
on an equinox model; here the residuals and their exact Jacobian are a handful of
zero-initial-condition filters of the data (`armax.py`, `box_jenkins.py`) and the
parameters some tens at most, so a plain loop has nothing to compile."""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Minimum(NamedTuple):
    """The result of `minimise`: the parameters `theta (P,)`, the residuals `(R,)`
    and Jacobian `(R, P)` there, the number of accepted steps, and whether the
    stopping test was met (else the step cap was reached)."""

    theta: np.ndarray
    residuals: np.ndarray
    jacobian: np.ndarray
    steps: int
    converged: bool


def minimise(
    evaluate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    theta: np.ndarray,
    feasible: Callable[[np.ndarray], bool],
    *,
    max_steps: int = 200,
    rtol: float = 1e-10,
) -> Minimum:
    """Minimise $\\lVert r(\\theta) \\rVert^2$ by Levenberg–Marquardt.

    **Arguments:**

    - `evaluate`: `theta (P,) -> (r (R,), J (R, P))`, the residuals and their
        Jacobian.
    - `theta`: the start, shape `(P,)`; it must be `feasible`.
    - `feasible`: whether a trial point may be evaluated (a predictor that would be
        unstable is not); an infeasible trial counts as a rejected step.
    - `max_steps`: the cap on accepted steps; `rtol`: the stopping test.

    The step solves $(J^\\top J + \\lambda\\,\\mathrm{diag}(J^\\top J))\\delta =
    -J^\\top r$ (Marquardt's scaling: invariant to the parameters' units); a trial
    is accepted when the loss falls by at least a thousandth of the decrease the
    linearisation predicts, and the damping then shrinks as Nielsen (1999)
    proposes, by `max(1/3, 1 - (2 rho - 1)^3)` with `rho` the ratio of actual to
    predicted decrease; it doubles, then quadruples, ... after a rejected trial. It
    stops when an accepted step changes every parameter by less than
    `rtol (|theta| + rtol)`, when it changes the loss by less than `rtol` of
    itself, or when no damping gives a decrease (a minimum to round-off).
    """
    theta = np.asarray(theta, np.float64)
    r, J = evaluate(theta)
    loss = float(r @ r)
    damping, growth = 1e-3, 2.0
    for step in range(max_steps):
        g = J.T @ r
        H = J.T @ J
        scale = np.diag(H).copy()
        scale = np.maximum(scale, 1e-12 * max(float(scale.max(initial=0.0)), 1e-300))
        while True:
            try:
                delta = np.linalg.solve(H + damping * np.diag(scale), -g)
            except np.linalg.LinAlgError:
                delta = np.linalg.lstsq(H + damping * np.diag(scale), -g, rcond=None)[0]
            predicted = -(2.0 * float(g @ delta) + float(delta @ H @ delta))
            if not np.isfinite(predicted) or predicted <= 0.0:
                return Minimum(theta, r, J, step, True)  # gradient 0 to round-off
            trial = theta + delta
            new_loss = np.inf
            if feasible(trial):
                r_new, J_new = evaluate(trial)
                new_loss = float(r_new @ r_new)
            rho = (loss - new_loss) / predicted
            if np.isfinite(new_loss) and rho > 1e-3:
                break
            damping *= growth
            growth *= 2.0
            if damping > 1e16:
                return Minimum(theta, r, J, step, True)
        damping *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
        growth = 2.0
        small_step = np.all(np.abs(delta) <= rtol * (np.abs(theta) + rtol))
        small_change = loss - new_loss <= rtol * loss
        theta, r, J, loss = trial, r_new, J_new, new_loss
        if small_step or small_change:
            return Minimum(theta, r, J, step + 1, True)
    return Minimum(theta, r, J, max_steps, False)
