"""The `dynsys` command."""

import argparse
import json
import pathlib
import sys
import time

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
    x0 = args.x0_mean + args.x0_scale * jax.random.normal(
        key_x0, (args.batch, system.state_size)
    )
    inputs = None
    if system.input_size > 0:
        inputs = 0.5 * jax.random.normal(
            key_u, (args.batch, args.steps, system.input_size)
        )
    try:
        traj = dynsys.rollout(system, x0, args.steps, inputs=inputs)
        jax.block_until_ready(traj)
    except Exception as error:  # a solver failure is raised at run time
        reason = str(error).strip().splitlines()[0]
        print(
            f"dynsys simulate: the rollout of {args.model} failed: {reason}\n"
            "  Initial states are --x0-mean + --x0-scale * N(0, 1); models whose "
            "states must stay positive (e.g. lotka_volterra) need a positive mean, "
            "e.g. --x0-mean 2 --x0-scale 0.3.",
            file=sys.stderr,
        )
        return 2
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


def _fit(args: argparse.Namespace) -> int:
    """`dynsys fit`: a fit experiment built from the options (see `_experiment`)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import dynsys

    data = {
        "trajectories": args.trajectories,
        "length": args.length,
        "measurement_noise": args.noise,
        "validation": args.validation,
    }
    if args.data is not None:
        data["file"] = args.data
    config = {
        "kind": "fit",
        "name": "fit",
        "seed": args.seed,
        "description": "dynsys fit: x_{t+1} = K x_t + B u_t by least squares, then "
        "gradient descent.",
        "system": {"model": "mass_spring_damper"},
        "data": data,
        "fit": {
            "model": args.model,
            "loss": args.loss,
            "horizon": args.horizon,
            "steps": args.steps,
            "lr": args.lr,
            "ridge": args.ridge,
        },
    }
    start = time.perf_counter()
    try:
        result = dynsys.run_experiment(
            config, out=args.out, progress=not args.no_progress
        )
    except dynsys.ConfigError as error:
        print(f"dynsys fit: {_option_names(str(error))}", file=sys.stderr)
        return 2
    written = sorted(p.name for p in result.path.iterdir())
    print(f"  wrote {result.path}/: {', '.join(written)}")
    print(f"  total time {time.perf_counter() - start:.1f} s")
    return 0


_OPTIONS = {
    "'data.trajectories'": "--trajectories",
    "'data.length'": "--length",
    "'data.measurement_noise'": "--noise",
    "'data.validation'": "--validation",
    "'data.file'": "DATA",
    "'fit.horizon'": "--horizon",
    "'fit.steps'": "--steps",
    "'fit.lr'": "--lr",
    "'fit.ridge'": "--ridge",
    "'seed'": "--seed",
}


def _option_names(message: str) -> str:
    """Name the command-line option rather than the config key it set."""
    for key, option in _OPTIONS.items():
        message = message.replace(f"config key {key}", option)
    return message


def _run(args: argparse.Namespace) -> int:
    """`dynsys run CONFIG.toml`: one experiment (or sweep) into a run folder."""
    import dynsys

    try:
        result = _run_experiment(args)
    except dynsys.ConfigError as error:
        print(f"dynsys run: {error}", file=sys.stderr)
        return 2
    if not dynsys.is_main_process():
        return 0
    for run in result.runs:
        print(
            f"  {run.path.name}: "
            + ", ".join(f"{k} {v:.4g}" for k, v in run.metrics["summary"].items())
        )
    return 0


def _run_experiment(args: argparse.Namespace):
    """Run `args.config` with the run options; copy figures to `args.figures`."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import dynsys

    if getattr(args, "distributed", False):  # before any computation
        dynsys.initialize_distributed()
    main = dynsys.is_main_process()
    result = dynsys.run_experiment(
        args.config,
        out_root=args.out_root,
        overrides=args.set,
        progress=main and not args.no_progress,
    )
    if not main:  # process 0 writes and reports
        return result
    print(f"wrote {result.path}/ (summary.md, metrics.json, figures)")
    if args.figures is not None:
        for path in result.copy_figures(args.figures):
            print(f"wrote {path}")
    return result


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-root", default="runs", help="where run folders go")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set fit.steps=50 (repeatable)",
    )
    parser.add_argument(
        "--figures",
        type=pathlib.Path,
        help="also copy the figures here as <name>_<figure>.png",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="one of several processes (jax.distributed): join them first, from "
        "DYNSYS_COORDINATOR, DYNSYS_NUM_PROCESSES and DYNSYS_PROCESS_ID or from the "
        "launcher (srun, mpirun); process 0 writes the run folder",
    )


def run_script(default_config: pathlib.Path, argv: list[str] | None, description: str):
    """The body of an experiment script in `scripts/`: `dynsys run` with a default
    config (`--config` to change it). Returns the `ExperimentResult`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", default=default_config, help="a TOML config")
    _add_run_options(parser)
    return _run_experiment(parser.parse_args(argv))


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
    simulate.add_argument(
        "--x0-mean", type=float, default=0.0, help="mean of the initial states"
    )
    simulate.add_argument(
        "--x0-scale", type=float, default=1.0, help="spread of the initial states"
    )
    simulate.add_argument("--out", default="runs/simulate", help="output folder")
    simulate.set_defaults(handler=_simulate)
    fit = commands.add_parser(
        "fit",
        help="fit a linear model to trajectories (default: simulated zoo data)",
        description="Fit x_{t+1} = K x_t + B u_t to DATA (a .npz or .csv dataset; "
        "see dynsys.load_dataset). Without DATA, fits noisy trajectories simulated "
        "from the mass_spring_damper zoo model and compares with the truth. Starts "
        "from the one-step least-squares estimate, refines it by gradient descent, "
        "and writes a run folder: config.toml, model.dynsys, metrics.json, "
        "history.csv, PNG figures and summary.md (the same as `dynsys run` with "
        "kind = 'fit').",
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
    run = commands.add_parser(
        "run",
        help="run an experiment (or a sweep) from a TOML config",
        description="Run the experiment described by CONFIG (a TOML file: kind = "
        "'fit' or 'train_controller', with [system], [data]/[fit] or "
        "[controller]/[cost]/[train] tables and an optional [sweep]; see "
        "scripts/configs/ and the experiments guide). Writes "
        "OUT_ROOT/<name>-<timestamp>/ with config.toml, metrics.json, history.csv, "
        "model.dynsys, PNG figures and summary.md.",
    )
    run.add_argument("config", help="the experiment's TOML config")
    _add_run_options(run)
    run.set_defaults(handler=_run)
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
