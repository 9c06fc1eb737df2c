"""Levenberg–Marquardt steps on the real records under six set-ups, side by side in
one run, to judge what the step count depends on (issue 20, item 4: at most 30
steps on every shared real record):

- `dynsys`: `dynsys.fit` (default optimiser, output-error loss) from
  `fit_subspace(data, order)`, as `benchmarks/benchmark_lm.py` measures it;
- `balanced`: the same fit from the same model in its balanced realisation
  (equal, diagonal controllability and observability Gramians): the loss is the
  same, only the coordinates the damping is measured in change;
- `minpack full`: MINPACK's Levenberg–Marquardt (`scipy.optimize.least_squares`,
  `method="lm"`) on the same residuals, every parameter of `(K, B, C, D)` and the
  output level free and the initial state eliminated by least squares, as dynsys
  does (dynsys also fits the input level, which the output level and the initial
  state all but duplicate);
- `dynsys separable`: `dynsys.fit` with `B`, `D` and the output level eliminated
  (`dynsys/_fitting/separable.py`, `solver=dynsys.LevenbergMarquardt(separable=
  ...)`), with the eliminated problem's derivative (`"exact"`) and with Kaufman's (`"kaufman"`:
  the full problem's derivative, less its part along the linear parameters);
- `minpack separable`: MINPACK's on the separable problem (Golub and Pereyra's
  variable projection): `B`, `D`, the output level and the initial state, in which
  the outputs are linear, eliminated by least squares at every `(K, C)`.

Estimation data = the first two thirds of each record in `data/real/`, means
removed, float64. A dynsys step is one trial point (one residual evaluation; a
Jacobian only where it is accepted), rejected ones included, whose count is shown;
MINPACK's counts are its Jacobian and residual evaluations (`njev`, `nfev`).

    python benchmarks/benchmark_lm_alternatives.py [--records heating:7:D,dryer:9]
        [--default-only]

A record is `name:order`, or `name:order:D` for a model with feedthrough;
`--default-only` leaves out dynsys's other set-ups (their columns show "—").
"""

import argparse
import sys
import time
import warnings

import jax


jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.optimize  # noqa: E402
from benchmark_lm import _estimation_data  # noqa: E402

import dynsys  # noqa: E402


# The twelve record-orders of issue 44 (item 4: the default fit's final loss at
# most MINPACK's + 0.1 % on every one).
DEFAULT_RECORDS = (
    "heating:4,heating:7:D,dryer:5,dryer:9,cd_player_arm:3:D,cd_player_arm:6:D,"
    "cd_player_arm:10:D,evaporator:5:D,evaporator:7:D,glass_furnace:6:D,"
    "ph_neutralisation:2:D,ph_neutralisation:3"
)


def balanced(model):
    """`model` in its balanced realisation; `None` where it is not stable or its
    Gramians are singular."""
    K, B, C = (np.asarray(a, float) for a in (model.K, model.B, model.C))
    if np.max(np.abs(np.linalg.eigvals(K))) >= 1:
        return None
    try:
        controllable = np.linalg.cholesky(
            scipy.linalg.solve_discrete_lyapunov(K, B @ B.T)
        )
        observable = np.linalg.cholesky(
            scipy.linalg.solve_discrete_lyapunov(K.T, C.T @ C)
        )
    except np.linalg.LinAlgError:
        return None
    left, hankel, right_t = np.linalg.svd(observable.T @ controllable)
    transform = controllable @ right_t.T / np.sqrt(hankel)
    inverse = (left / np.sqrt(hankel)).T @ observable.T
    return dynsys.LinearSystem(
        K=jnp.asarray(inverse @ K @ transform),
        B=jnp.asarray(inverse @ B),
        C=jnp.asarray(C @ transform),
        D=model.D,
        input_level=model.input_level,
        output_level=model.output_level,
    )


def dynsys_row(start, data, separable=None):
    """`(steps, rejected steps, final loss, best loss within 30 steps, ms per
    step)` of `dynsys.fit`; the time per step is a second fit's (the first
    compiles), divided by its steps."""
    # `None`: the default solver (Levenberg–Marquardt on these sizes).
    solver = None
    if separable is not None:
        solver = dynsys.LevenbergMarquardt(separable=separable)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dynsys.fit(start, data, solver=solver, progress=False)
        begin = time.perf_counter()
        dynsys.fit(start, data, solver=solver, progress=False)
        seconds = time.perf_counter() - begin
    losses = np.asarray(result.losses)
    rejected = int(np.sum(losses[1:] == losses[:-1]))
    per_step = 1000 * seconds / result.steps_run
    return result.steps_run, rejected, losses.min(), losses[:31].min(), per_step


def _free_response(K, C, length):
    """`C K^t` for `t < length`, stacked: `(length * p, n)`."""

    def power(P, _):
        return K @ P, C @ P

    _, rows = jax.lax.scan(power, jnp.eye(K.shape[0]), None, length=length)
    return rows.reshape(-1, K.shape[0])


def _without(columns, vector):
    """`vector` minus its least-squares fit by `columns`."""
    q, _ = jnp.linalg.qr(columns)
    return vector - q @ (q.T @ vector)


def full_residuals(u, y, n, feedthrough):
    """The output-error residuals of `(K, B, C, D, output level)` (raveled in that
    order; `D` only with `feedthrough`), the initial state eliminated by least
    squares."""
    (T, p), m = y.shape, u.shape[1]

    def residuals(theta):
        sizes = np.cumsum([n * n, n * m, p * n, p * m if feedthrough else 0])
        K, B, C, D, level = jnp.split(theta, sizes)
        K, B, C = K.reshape(n, n), B.reshape(n, m), C.reshape(p, n)
        D = D.reshape(p, m) if feedthrough else jnp.zeros((p, m))

        def step(x, u_t):
            return K @ x + B @ u_t, C @ x + D @ u_t + level

        _, predicted = jax.lax.scan(step, jnp.zeros(n), u)
        error = (y - predicted).reshape(-1)
        return _without(_free_response(K, C, T), error)

    return residuals


def separable_residuals(u, y, n, feedthrough):
    """The output-error residuals of `(K, C)` (raveled), with `B`, `D`, the output
    level and the initial state, in which the outputs are linear, eliminated by
    least squares."""
    (T, p), m = y.shape, u.shape[1]

    def regressors(K, C):
        # Z (n, n, m): the state's response to a unit entry B[i, j].
        def step(Z, u_t):
            response = jnp.einsum("pn,nim->pim", C, Z).reshape(p, n * m)
            Z = jnp.einsum("nk,kim->nim", K, Z) + jnp.eye(n)[:, :, None] * u_t
            return Z, response

        _, columns = jax.lax.scan(step, jnp.zeros((n, n, m)), u)
        level = jnp.tile(jnp.eye(p), (T, 1))
        columns = [columns.reshape(T * p, n * m), _free_response(K, C, T), level]
        if feedthrough:
            direct = jnp.einsum("tm,pq->tpqm", u, jnp.eye(p))
            columns.append(direct.reshape(T * p, p * m))
        return jnp.concatenate(columns, axis=1)

    def residuals(theta):
        K, C = theta[: n * n].reshape(n, n), theta[n * n :].reshape(p, n)
        return _without(regressors(K, C), y.reshape(-1))

    return residuals


def minpack_row(residuals, start):
    """`(Jacobian evaluations, residual evaluations, final loss, whether it
    converged)` of MINPACK's
    Levenberg–Marquardt from `start`, at most 2,000 residual evaluations."""
    function = jax.jit(residuals)
    jacobian = jax.jit(jax.jacfwd(residuals))
    result = scipy.optimize.least_squares(
        lambda theta: np.asarray(function(jnp.asarray(theta))),
        np.asarray(start),
        jac=lambda theta: np.asarray(jacobian(jnp.asarray(theta))),
        method="lm",
        xtol=1e-10,
        ftol=1e-12,
        gtol=1e-15,
        max_nfev=2000,
    )
    return result.njev, result.nfev, 2 * result.cost, result.status > 0


def measure(record, default_only=False):
    name, order, *feedthrough = record.split(":")
    n, feedthrough = int(order), feedthrough == ["D"]
    data = _estimation_data(name)
    u, y = np.asarray(data.us[0], float), np.asarray(data.ys[0], float)
    data = dynsys.Dataset(us=jnp.asarray(u)[None], ys=jnp.asarray(y)[None])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = dynsys.fit_subspace(data, n, feedthrough=feedthrough)
    start = dynsys.LinearSystem(
        K=jnp.asarray(start.K, float),
        B=jnp.asarray(start.B, float),
        C=jnp.asarray(start.C, float),
        D=None if start.D is None else jnp.asarray(start.D, float),
        input_level=start.input_level,
        output_level=start.output_level,
    )
    cells, losses = [record], []
    setups = (
        (start, None),
        (balanced(start), None),
        (start, "exact"),
        (start, "kaufman"),
    )
    for model, separable in setups:
        if default_only and cells[1:]:
            cells.append("—")
            continue
        if model is None:
            cells.append("— (no balanced realisation)")
            continue
        steps, rejected, loss, at_30, per_step = dynsys_row(model, data, separable)
        losses.append((steps, rejected, loss, per_step))
        cells.append(
            f"{steps} ({rejected} rejected), {loss:.8g}, {at_30:.8g}, {per_step:.3g} ms"
        )
    # dynsys's loss: the mean over channels and steps of the squared error of each
    # channel divided by its variance; MINPACK minimises the same on outputs
    # divided by their standard deviations.
    deviation = y.std(axis=0)
    y = y / deviation
    K, B = np.asarray(start.K).ravel(), np.asarray(start.B).ravel()
    C = (np.asarray(start.C) / deviation[:, None]).ravel()
    D = [(np.asarray(start.D) / deviation[:, None]).ravel()] if feedthrough else []
    level = np.asarray(start.output_level) / deviation
    problems = (
        (full_residuals(u, y, n, feedthrough), np.concatenate([K, B, C, *D, level])),
        (separable_residuals(u, y, n, feedthrough), np.concatenate([K, C])),
    )
    for residuals, theta in problems:
        jacobians, evaluations, loss, converged = minpack_row(residuals, theta)
        capped = "" if converged else " (cap)"
        cells.append(f"{jacobians} / {evaluations}{capped}, {loss / y.size:.8g}")
        losses.append(loss / y.size)
    return cells, losses


def gap_row(record, losses):
    """Item 4's row: the default fit against the lower MINPACK loss."""
    (steps, rejected, loss, per_step), full, separable = losses[0], *losses[-2:]
    lower = min(full, separable)
    gap, gap_full = 100 * (loss / lower - 1), 100 * (loss / full - 1)
    met = "yes" if gap <= 0.1 else "no"
    if gap > 0.1 and gap_full <= 0.1:
        met = "against the full one only"
    return (
        f"| {record} | {steps} ({rejected}), {loss:.8g}, "
        f"{per_step:.3g} ms ({steps * per_step / 1000:.2f} s) "
        f"| {full:.8g} | {separable:.8g} | {gap:+.2f} % ({gap_full:+.2f} % against "
        f"the full one) | {met} |"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=DEFAULT_RECORDS)
    parser.add_argument(
        "--default-only",
        action="store_true",
        help="of dynsys's set-ups, the default fit only (item 4's table)",
    )
    args = parser.parse_args()
    print(
        "| record, order | dynsys: steps, loss, best loss in 30 steps, time per step "
        "| dynsys from the balanced realisation | dynsys, separable "
        "| dynsys, separable (Kaufman) "
        "| MINPACK, full: Jacobians / residual evaluations, loss "
        "| MINPACK, separable: the same | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    gaps = []
    for record in args.records.split(","):
        begin = time.perf_counter()
        cells, losses = measure(record, args.default_only)
        seconds = time.perf_counter() - begin
        cells.append(f"{seconds:.0f}")
        print("| " + " | ".join(cells) + " |", flush=True)
        gaps.append(gap_row(record, losses))
    print()
    print(
        "| record, order | dynsys: steps (rejected), final loss, time per step "
        "(steps × time per step) "
        "| MINPACK, full | MINPACK, separable | dynsys against the lower MINPACK "
        "loss | met (≤ + 0.1 %) |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(gaps))


if __name__ == "__main__":
    sys.exit(main())
