"""The `dynsys` command."""

import argparse
import json
import os
import pathlib
import sys

from . import __version__


def _simulate(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import dynsys
    import dynsys.models as zoo
    from dynsys import plot

    try:
        system = zoo.get(args.model)
    except ValueError as error:
        print(f"dynsys simulate: {error}", file=sys.stderr)
        return 2
    key_x0, key_u = jax.random.split(jax.random.key(args.seed))
    x0 = jax.random.normal(key_x0, (args.batch, system.state_size))
    inputs = None
    if system.input_size > 0:
        inputs = 0.5 * jax.random.normal(
            key_u, (args.batch, args.steps, system.input_size)
        )
    traj = dynsys.rollout(system, x0, args.steps, inputs=inputs)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unit = " (s)" if getattr(system, "dt", None) else " (steps)"
    fig = plot.trajectory(
        traj, time_label="t" + unit, title=f"{args.model}: {args.batch} trajectories"
    )
    figure_path = out / "trajectory.png"
    fig.savefig(figure_path, dpi=120)
    arrays = {"ts": traj.ts, "xs": traj.xs, "ys": traj.ys}
    if traj.us is not None:
        arrays["us"] = traj.us
    np.savez(out / "trajectory.npz", **{k: np.asarray(v) for k, v in arrays.items()})
    summary = {
        "model": args.model,
        "state_size": system.state_size,
        "input_size": system.input_size,
        "num_steps": args.steps,
        "batch": args.batch,
        "final_state_rms": float(jnp.sqrt(jnp.mean(traj.xs[..., -1, :] ** 2))),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {figure_path}, {out / 'trajectory.npz'}, {out / 'summary.json'}")
    return 0


def _match_eigenvalues(reference, others):
    """Reorder each array of eigenvalues to pair with `reference` (nearest first)."""
    import numpy as np

    matched = []
    for values in others:
        remaining = list(values)
        order = []
        for target in reference:
            k = int(np.argmin([abs(v - target) for v in remaining]))
            order.append(remaining.pop(k))
        matched.append(np.asarray(order))
    return matched


def _format_complex(z) -> str:
    sign = "+" if z.imag >= 0 else "-"
    return f"{z.real:.4f}{sign}{abs(z.imag):.4f}j"


def _replace_folder(staging: pathlib.Path, out: pathlib.Path) -> None:
    """Move the finished `staging` folder to `out`, replacing an earlier run."""
    import shutil

    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _fit(args: argparse.Namespace) -> int:
    import time

    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import optax

    import dynsys
    import dynsys.models as zoo
    from dynsys import plot

    start_time = time.perf_counter()
    name = "dynsys fit"
    if args.steps < 1:
        print(f"{name}: --steps must be positive, got {args.steps}.", file=sys.stderr)
        return 2
    true_system = None
    clean_val = None
    if args.data is None:
        true_system = zoo.mass_spring_damper()
        key_x0, key_u, key_noise = jax.random.split(jax.random.key(args.seed), 3)
        n, m = true_system.state_size, true_system.input_size
        x0s = jax.random.normal(key_x0, (args.trajectories, n))
        inputs = jax.random.normal(key_u, (args.trajectories, args.length, m))
        data = dynsys.simulate(
            true_system,
            x0s,
            args.length,
            inputs=inputs,
            measurement_noise=args.noise,
            key=key_noise,
        )
        clean = dynsys.simulate(true_system, x0s, args.length, inputs=inputs)
        source = (
            f"mass_spring_damper (zoo), {args.trajectories} simulated trajectories x "
            f"{args.length} steps, measurement noise {args.noise:g} (seed {args.seed})"
        )
    else:
        try:
            data = dynsys.load_dataset(args.data)
        except ValueError as error:
            print(f"{name}: {error}", file=sys.stderr)
            return 2
        clean = None
        source = (
            f"{args.data}: {data.num_trajectories} trajectories x {data.num_steps} "
            "steps"
        )
    if data.num_trajectories >= 2:
        train_data, val_data = data.split(args.validation)
        if clean is not None:
            clean_val = clean[
                np.arange(train_data.num_trajectories, data.num_trajectories)
            ]
    else:
        train_data, val_data = data, None
    try:
        estimate = dynsys.fit_least_squares(train_data, ridge=args.ridge)
    except ValueError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    if args.model == "stable":
        start_model = dynsys.StableLinearSystem.from_linear(estimate)
    else:
        start_model = estimate
    if args.loss == "shooting":
        loss = dynsys.MultipleShooting(min(args.horizon, train_data.num_steps))
    else:
        loss = args.loss
    n, m = data.state_size, data.input_size
    print(f"{name}: {source}")
    held = (
        "no held-out data"
        if val_data is None
        else (f"{val_data.num_trajectories} held out")
    )
    print(
        f"  {train_data.num_trajectories} for training, {held}; model {args.model}, "
        f"loss {args.loss}, {args.steps} Adam steps (lr {args.lr:g}) from the "
        "least-squares estimate"
    )
    fit_start = time.perf_counter()
    result = dynsys.fit(
        start_model,
        train_data,
        loss=loss,
        optimizer=optax.adam(args.lr),
        num_steps=args.steps,
        progress=not args.no_progress,
        val_data=val_data,
    )
    fit_seconds = time.perf_counter() - fit_start
    fitted = result.model
    fitted_linear = fitted.to_linear() if hasattr(fitted, "to_linear") else fitted

    def free_run(system, dataset):
        return np.asarray(
            dynsys.rollout(
                system, dataset.xs[:, 0], dataset.num_steps, inputs=dataset.us
            ).xs
        )

    report = val_data if val_data is not None else train_data
    which = "held-out" if val_data is not None else "training"
    runs = {
        "least squares": free_run(estimate, report),
        "fitted": free_run(fitted_linear, report),
    }
    fit_rows = {
        f"{which} fit % vs measurements": {
            label: float(dynsys.fit_percent(report.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }
    }
    if clean_val is not None:
        fit_rows[f"{which} fit % vs noise-free truth"] = {
            label: float(dynsys.fit_percent(clean_val.xs[:, 1:], xs[:, 1:]))
            for label, xs in runs.items()
        }

    # The table.
    print()
    if result.stop_reason is not None:
        print(f"  note: the fit stopped early: {result.stop_reason}")
    eig_fit = np.linalg.eigvals(np.asarray(fitted_linear.K))
    eig_ls = np.linalg.eigvals(np.asarray(estimate.K))
    columns = ["least squares", "fitted"]
    if true_system is not None:
        eig_true = np.linalg.eigvals(np.asarray(true_system.K))
        order = np.lexsort((-eig_true.imag, -np.abs(eig_true)))
        eig_true = eig_true[order]
        eig_ls, eig_fit = _match_eigenvalues(eig_true, [eig_ls, eig_fit])
        columns = ["true", *columns]
        eig_columns = [eig_true, eig_ls, eig_fit]
    else:
        order = np.lexsort((-eig_fit.imag, -np.abs(eig_fit)))
        eig_fit = eig_fit[order]
        (eig_ls,) = _match_eigenvalues(eig_fit, [eig_ls])
        eig_columns = [eig_ls, eig_fit]
    width = 20
    print(f"  {'eigenvalues':<16}" + "".join(f"{c:>{width}}" for c in columns))
    for k in range(len(eig_fit)):
        print(
            f"  {'':<16}"
            + "".join(f"{_format_complex(col[k]):>{width}}" for col in eig_columns)
        )
    print(
        f"  {'max |eigenvalue|':<16}"
        + "".join(f"{np.max(np.abs(col)):>{width}.4f}" for col in eig_columns)
    )
    print()
    label_width = max(len(label) for label in fit_rows) + 2
    print(f"  {'':<{label_width}}" + "".join(f"{c:>15}" for c in runs))
    for label, row in fit_rows.items():
        print(
            f"  {label:<{label_width}}" + "".join(f"{v:>15.1f}" for v in row.values())
        )
    print()
    print(
        f"  fit time {fit_seconds:.1f} s ({args.steps} steps, including compilation); "
        f"best step {result.best_step}"
    )

    # The run folder, built aside and moved into place whole.
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    if staging.exists():
        import shutil

        shutil.rmtree(staging)
    staging.mkdir()
    try:
        dynsys.save(staging / "model.dynsys", fitted)
        metrics = {
            "source": source,
            "model": args.model,
            "loss": args.loss,
            "steps": args.steps,
            "steps_run": int(result.losses.shape[0]),
            "best_step": result.best_step,
            "stop_reason": result.stop_reason,
            "fit_seconds": fit_seconds,
            "fit_metrics": result.metrics,
            "fit_percent": fit_rows,
            "eigenvalues": {
                c: [[float(z.real), float(z.imag)] for z in col]
                for c, col in zip(columns, eig_columns)
            },
            "K": np.asarray(fitted_linear.K).tolist(),
            "B": None
            if fitted_linear.B is None
            else np.asarray(fitted_linear.B).tolist(),
        }
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        validation = dict(result.val_losses)
        lines = ["step,train_loss,validation_loss"]
        for k, value in enumerate(result.losses):
            v = validation.get(k)
            lines.append(f"{k},{value!r},{'' if v is None else repr(v)}")
        if len(result.losses) in validation:
            lines.append(f"{len(result.losses)},,{validation[len(result.losses)]!r}")
        (staging / "loss_history.csv").write_text("\n".join(lines) + "\n")
        if true_system is not None:
            data.save(staging / "data.npz")
        times = (
            np.asarray(report.ts)
            if report.ts is not None
            else np.arange(report.num_steps + 1)
        )
        predictions = {}
        if clean_val is not None:
            predictions["true (noise-free)"] = np.asarray(clean_val.xs[0])
        predictions["least squares"] = runs["least squares"][0]
        predictions["fitted"] = runs["fitted"][0]
        unit = " (s)" if report.dt not in (None, 1.0) else " (steps)"
        figures = {
            "trajectories.png": plot.comparison(
                times,
                np.asarray(report.xs[0]),
                predictions,
                state_names=report.state_names,
                time_label="t" + unit,
                title=f"{which} trajectory 0: free run from its first state",
            ),
            "eigenvalues.png": plot.eigenvalues(
                ({"true": true_system} if true_system is not None else {})
                | {"least squares": estimate, "fitted": fitted_linear},
                title="eigenvalues of K",
            ),
            "loss.png": plot.loss_history(
                result, title=f"{args.loss} loss ({args.model} model)"
            ),
        }
        for filename, figure in figures.items():
            figure.savefig(staging / filename, dpi=110)
        _replace_folder(staging, out)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    written = sorted(p.name for p in out.iterdir())
    print(f"  wrote {out}/: {', '.join(written)}")
    print(f"  total time {time.perf_counter() - start_time:.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynsys",
        description="Declarative, differentiable simulation of dynamical systems.",
    )
    parser.add_argument("--version", action="version", version=f"dynsys {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    simulate = commands.add_parser(
        "simulate", help="simulate a zoo model and plot its trajectories"
    )
    simulate.add_argument("model", help="a zoo model name, e.g. mass_spring_damper")
    simulate.add_argument("--steps", type=int, default=200, help="number of steps")
    simulate.add_argument("--batch", type=int, default=16, help="trajectories")
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--out", default="runs/simulate", help="output folder")
    simulate.set_defaults(handler=_simulate)
    fit = commands.add_parser(
        "fit",
        help="fit a linear model to trajectories (default: simulated zoo data)",
        description="Fit x_{t+1} = K x_t + B u_t to DATA (a .npz or .csv dataset; "
        "see dynsys.load_dataset). Without DATA, fits noisy trajectories simulated "
        "from the mass_spring_damper zoo model and compares with the truth. Starts "
        "from the one-step least-squares estimate, refines it by gradient descent, "
        "and writes a run folder: model.dynsys, metrics.json, loss_history.csv and "
        "PNG figures.",
    )
    fit.add_argument("data", nargs="?", help="a .npz or .csv dataset (optional)")
    fit.add_argument(
        "--model",
        choices=["linear", "stable"],
        default="linear",
        help="linear: LinearSystem; stable: StableLinearSystem (spectral radius < 1)",
    )
    fit.add_argument(
        "--loss",
        choices=["simulation", "one_step", "shooting"],
        default="simulation",
        help="simulation (free run), one_step, or shooting (MultipleShooting)",
    )
    fit.add_argument("--horizon", type=int, default=20, help="shooting window")
    fit.add_argument("--steps", type=int, default=400, help="optimiser steps")
    fit.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    fit.add_argument("--ridge", type=float, default=0.0, help="least-squares ridge")
    fit.add_argument("--validation", type=float, default=0.25, help="fraction held out")
    fit.add_argument("--trajectories", type=int, default=16, help="simulated data")
    fit.add_argument("--length", type=int, default=100, help="simulated steps")
    fit.add_argument("--noise", type=float, default=0.1, help="measurement noise")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--no-progress", action="store_true", help="no progress bar")
    fit.add_argument("--out", default="runs/fit", help="output folder")
    fit.set_defaults(handler=_fit)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
