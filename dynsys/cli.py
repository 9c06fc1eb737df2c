"""The `dynsys` command.

It parses its arguments and makes the cheap checks of files and options before it
imports JAX (or anything of dynsys that does): `dynsys --help`, `dynsys fit --help`
and a refused argument or file answer in the time Python takes to start. Only
standard-library modules are imported at the top of this file; each command imports
what it needs when it runs.
"""

import argparse
import gc
import os
import pathlib
import sys
import time


def _check_simulate_options(args: argparse.Namespace) -> None:
    import math

    for option, value, low in (("--steps", args.steps, 1), ("--batch", args.batch, 1)):
        if value < low:
            raise ValueError(f"{option}: expected an integer >= {low}, got {value}.")
    if args.steps > 10**7 or args.batch * args.steps > 10**8:
        raise ValueError(
            f"--steps {args.steps} x --batch {args.batch}: at most 10^8 steps in all "
            "(and --steps at most 10^7)."
        )
    for option, value in (("--x0-mean", args.x0_mean), ("--x0-scale", args.x0_scale)):
        if not math.isfinite(value):
            raise ValueError(f"{option}: expected a finite number, got {value}.")
    if args.x0_scale < 0:
        raise ValueError(f"--x0-scale: expected a number >= 0, got {args.x0_scale}.")
    if not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed: expected an integer in [0, 2^63), got {args.seed}.")
    if _names_a_file(args.model) and not os.path.isfile(args.model):
        raise ValueError(f"MODEL: no such model file {args.model!r}.")


def _names_a_file(model: str) -> bool:
    """`dynsys simulate MODEL`: a model file (written by `dynsys.save`), not a zoo
    name."""
    return model.endswith(".dynsys") or os.sep in model or os.path.isfile(model)


def _simulated_system(model: str):
    """The zoo model `model` and its names, or the system saved in the file `model`
    (a run folder's `model.dynsys` or `neural_model.dynsys`) with generic names."""
    import warnings

    import dynsys
    import dynsys.models as zoo

    if not _names_a_file(model):
        return zoo.get(model), zoo.names(model)
    import jax

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        system = dynsys.load(model)
    if caught:  # float64 leaves read in this float32 session: simulate in float64
        jax.config.update("jax_enable_x64", True)
        system = dynsys.load(model)
    if not isinstance(system, dynsys.AbstractSystem):
        raise ValueError(
            f"MODEL: {model!r} holds a {type(system).__name__}, not a system to "
            "simulate."
        )
    names = [
        tuple(f"{letter}{k}" for k in range(size))
        for letter, size in (
            ("x", system.state_size),
            ("u", system.input_size),
            ("y", system.output_size),
        )
    ]
    return system, zoo.Names(*names)


def _simulate(args: argparse.Namespace) -> int:
    """`dynsys simulate MODEL`: roll a zoo model (or a model file) out and write its
    run folder."""
    import os

    from ._experiments.run_folder import check_out

    _check_simulate_options(args)
    out = check_out(args.out, "--out")  # before the zoo imports JAX

    from dynsys._compile.cache import use_compile_cache
    from dynsys._experiments.results import strict_json

    use_compile_cache()
    system, names = _simulated_system(args.model)
    x0, inputs = _simulate_start(args, system)
    traj = _simulate_rollout(args, system, x0, inputs)
    summary = _write_simulation(args, system, traj, out, names)
    print(strict_json(summary), end="")
    files = ("trajectory.png", "trajectory.npz", "summary.json")
    print("wrote " + ", ".join(os.path.join(str(out), name) for name in files))
    return 0


def _simulate_start(args: argparse.Namespace, system):
    """The initial states `--x0-mean + --x0-scale * N(0, 1)` and random inputs
    (`None` for a model without inputs), from `--seed`."""
    import jax

    key_x0, key_u = jax.random.split(jax.random.key(args.seed))
    x0 = args.x0_mean + args.x0_scale * jax.random.normal(
        key_x0, (args.batch, system.state_size)
    )
    inputs = None
    if system.input_size > 0:
        inputs = 0.5 * jax.random.normal(
            key_u, (args.batch, args.steps, system.input_size)
        )
    return x0, inputs


def _simulate_rollout(args: argparse.Namespace, system, x0, inputs):
    """The rollout; a solver failure becomes one `ValueError` line with a hint."""
    import logging

    import jax

    import dynsys

    # A solver failure is raised from a callback, which JAX also logs with its
    # traceback; the one line below says it all.
    callback_logger = logging.getLogger("jax._src.callback")
    level = callback_logger.level
    callback_logger.setLevel(logging.CRITICAL)
    try:
        traj = dynsys.rollout(system, x0, args.steps, inputs=inputs)
        jax.block_until_ready(traj)
    except Exception as error:  # a solver failure is raised at run time
        lines = [line.strip() for line in str(error).strip().splitlines()]
        reason = next(
            (line for line in lines if "failed" in line and "Traceback" not in line),
            lines[0] if lines else type(error).__name__,
        )
        if reason.startswith("equinox.") and ": " in reason:
            reason = reason.split(": ", 1)[1]
        raise ValueError(
            f"the rollout of {args.model} failed: {reason} Initial states are "
            "--x0-mean + --x0-scale * N(0, 1); models whose states must stay positive "
            "(e.g. lotka_volterra) need a positive mean, e.g. --x0-mean 2 "
            "--x0-scale 0.3."
        ) from None
    finally:
        callback_logger.setLevel(level)
    return traj


def _write_simulation(args: argparse.Namespace, system, traj, out, names) -> dict:
    """Write `trajectory.png`, `trajectory.npz` and `summary.json` aside, then move
    them into `out` whole; returns the summary."""
    import shutil

    import jax.numpy as jnp

    import dynsys
    from dynsys import plot
    from dynsys._experiments.results import strict_json
    from dynsys._experiments.run_folder import (
        clean_stale,
        replace_folder,
        staging_folder,
    )
    from dynsys.plot._save import save_png

    clean_stale(out.absolute().parent)
    staging = staging_folder(out)
    try:
        unit = " (s)" if getattr(system, "dt", None) else " (steps)"
        fig = plot.trajectory(
            traj,
            names=names,
            time_label="t" + unit,
            title=f"{os.path.basename(args.model)}: {args.batch} trajectories",
        )
        save_png(fig, staging / "trajectory.png", dpi=120)
        # The states (and inputs) as a dataset with the zoo's names: `dynsys fit
        # trajectory.npz` reads them back as measured states.
        dynsys.Dataset(
            traj.xs,
            traj.us,
            traj.ts,
            state_names=names.states,
            input_names=names.inputs if traj.us is not None else None,
        ).save(staging / "trajectory.npz")
        summary = {
            "model": args.model,
            "state_size": system.state_size,
            "input_size": system.input_size,
            "num_steps": args.steps,
            "batch": args.batch,
            "seed": args.seed,
            "precision": str(traj.xs.dtype),
            "final_state_rms": float(jnp.sqrt(jnp.mean(traj.xs[..., -1, :] ** 2))),
        }
        (staging / "summary.json").write_text(strict_json(summary))
        replace_folder(staging, out, "--out")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary


def _fit(args: argparse.Namespace) -> int:
    """`dynsys fit`: a fit experiment from the options (`_experiments/schema.py`)."""
    _check_validation_options(args)
    data = {
        "trajectories": args.trajectories,
        "length": args.length,
        "measurement_noise": args.noise,
    }
    if args.validation is not None:
        data["validation"] = args.validation
    if args.data is not None:
        data["file"] = args.data
        for role in ("states", "inputs", "outputs"):
            if getattr(args, role) is not None:
                data[role] = getattr(args, role)
        data["trajectory_column"] = args.trajectory_column
        data["time_column"] = args.time_column
        for key in ("validation_file", "validation_split", "dt"):
            if getattr(args, key) is not None:
                data[key] = getattr(args, key)
        if args.select_on_validation:
            data["select_on_validation"] = True
    elif args.measure is not None:
        data["measured_states"] = args.measure
    config = {
        "kind": "fit",
        "name": "fit",
        "seed": args.seed,
        "description": "dynsys fit: x_{t+1} = K x_t + B u_t (y_t = C x_t + D u_t) "
        "fitted to data.",
        "system": {"model": "mass_spring_damper"},
        "data": data,
        "fit": {
            "model": args.model,
            "loss": args.loss,
            "horizon": args.horizon,
            "optimizer": args.optimizer,
            "lr": args.lr,
            "ridge": args.ridge,
            "offset": not args.no_offset,
            "stabilise": not args.no_stabilise,
        },
    }
    if args.steps is not None:
        config["fit"]["steps"] = args.steps
    for key in ("neural_steps", "neural_horizon"):
        if getattr(args, key) is not None:
            config["fit"][key] = getattr(args, key)
    if args.order is not None:
        config["fit"]["order"] = args.order
    if args.structure is not None:
        config["fit"]["structure"] = args.structure
    if args.orders is not None:
        config["fit"]["orders"] = args.orders
    if args.feedthrough is not None:
        config["fit"]["feedthrough"] = args.feedthrough
    if args.delay is not None:
        config["fit"]["input_delay"] = _delays(args.delay)
    _check_fit_config(config, args.out)

    import dynsys

    from ._cli_warnings import said_once, say

    start = time.perf_counter()
    with said_once() as caught:
        result = dynsys.run_experiment(
            config,
            out=args.out,
            progress=not args.no_progress,
            echo=lambda line: print(_option_names(line)),
        )
    _print_warnings("dynsys fit", result.metrics, _option_names)
    say("dynsys fit", caught, _said_by(result.metrics), _option_names)
    written = sorted(p.name for p in result.path.iterdir() if p.name != ".dynsys-run")
    print(f"  wrote {result.path}/: {', '.join(written)}")
    print(f"  total time {time.perf_counter() - start:.1f} s")
    return _exit_status(result)


def _check_validation_options(args: argparse.Namespace) -> None:
    """`--validation` (a share of whole experiments held out) means nothing next to
    `--validation-split` or `--validation-data`, which choose the held-out data
    themselves: refused, so that no typed option is silently ignored."""
    if args.select_on_validation and args.validation_file is None:
        raise ValueError(
            "--select-on-validation: expected a --validation-data FILE for it to "
            "select on, got none."
        )
    if args.validation is None:
        return
    for option, value in (
        ("--validation-split", args.validation_split),
        ("--validation-data", args.validation_file),
    ):
        if value is not None:
            raise ValueError(
                f"--validation {args.validation:g} and {option} {value}: give one "
                "(--validation holds out a share of whole experiments; "
                f"{option} chooses the held-out data itself)."
            )


def _check_fit_config(config: dict, out: str) -> None:
    """The checks of `run_experiment` that need no JAX, made before it is imported:
    each option's type and range, DATA a regular file, `--out` a folder dynsys may
    write. `run_experiment` makes them again (and those that need the zoo)."""
    import copy

    from ._experiments.config import resolve
    from ._experiments.paths import resolve_data_file
    from ._experiments.run_folder import check_out
    from ._experiments.schema import _schema
    from ._experiments.sizes import check_sizes

    models = (config["system"]["model"],)  # the zoo's own check imports JAX
    resolved = resolve(copy.deepcopy(config), _schema("fit", models))
    check_sizes(resolved)
    resolve_data_file(resolved)
    check_out(out, "run_experiment(out=...)")


def _print_warnings(prefix: str, metrics: dict, named=lambda line: line) -> None:
    """Each warning the run recorded, one line on stderr (through `named`: `dynsys
    fit` names its options rather than the config keys they set)."""
    for line in metrics.get("warnings") or []:
        print(f"{prefix}: warning: {named(line)}", file=sys.stderr)


def _said_by(metrics: dict) -> list[str]:
    """The lines a run's own report already says (its warnings, its stop reason)."""
    return [*(metrics.get("warnings") or []), metrics.get("stop_reason") or ""]


def _exit_status(result) -> int:
    """0, or 128 + the signal's number for a run stopped by SIGINT/SIGTERM."""
    import signal

    if result.metrics.get("status") != "interrupted":
        return 0
    name = result.metrics.get("signal") or "SIGINT"
    print(
        f"  interrupted ({name}): {result.path} holds the model kept when it "
        "stopped, marked interrupted",
        file=sys.stderr,
    )
    return 128 + int(getattr(signal, name, signal.SIGINT))


def _names(text: str) -> list[str]:
    """A comma-separated list of column names (argparse type)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated column names, got {text!r}"
        )
    return names


def _orders(text: str) -> list[int]:
    """A comma-separated list of polynomial orders (argparse type)."""
    try:
        orders = [int(k) for k in text.split(",")]
    except ValueError:
        orders = None
    if orders is None or any(k < 0 for k in orders):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated orders >= 0, e.g. 2,2,1,1, got {text!r}"
        )
    return orders


def _indices(text: str) -> list[int]:
    """A comma-separated list of state indices (argparse type)."""
    try:
        return [int(k) for k in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated state indices, got {text!r}"
        ) from None


def _delays(text: str | int):
    """`--delay`: `"3"` as 3, `"3,1"` as `[3, 1]` (one per input); anything else
    as given, for the config check to name (`--no-delay` gives 0)."""
    if isinstance(text, int):
        return text
    try:
        values = [int(k) for k in text.split(",")]
    except ValueError:
        return text
    return values[0] if len(values) == 1 and "," not in text else values


_OPTIONS = {
    "'data.states'": "--states",
    "'data.inputs'": "--inputs",
    "'data.outputs'": "--outputs",
    "'data.measured_states'": "--measure",
    "'fit.orders'": "--orders",
    "'fit.order'": "--order",
    "'fit.structure'": "--structure",
    "'fit.optimizer'": "--optimizer",
    "'fit.model'": "--model",
    "'fit.loss'": "--loss",
    "'fit.feedthrough'": "--feedthrough/--no-feedthrough",
    "'fit.input_delay'": "--delay",
    "'fit.offset'": "--no-offset",
    "'fit.stabilise'": "--no-stabilise",
    "'fit.neural_steps'": "--neural-steps",
    "'fit.neural_horizon'": "--neural-horizon",
    "'data.trajectory_column'": "--trajectory-column",
    "'data.time_column'": "--time-column",
    "'data.trajectories'": "--trajectories",
    "'data.length'": "--length",
    "'data.measurement_noise'": "--noise",
    "'data.validation'": "--validation",
    "'data.validation_file'": "--validation-data",
    "'data.select_on_validation'": "--select-on-validation",
    "'data.validation_split'": "--validation-split",
    "'data.dt'": "--dt",
    "'data.file'": "DATA",
    "'fit.horizon'": "--horizon",
    "'fit.steps'": "--steps",
    "'fit.lr'": "--lr",
    "'fit.ridge'": "--ridge",
    "'seed'": "--seed",
    "run_experiment(out=...)": "--out",
}


def _option_names(message: str) -> str:
    """Name the command-line option rather than the config key it set (`config
    key 'fit.order'` -> `--order`; a quoted key among several, `'fit.order'`, too).
    """
    for key, option in _OPTIONS.items():
        if key.startswith("'"):
            message = message.replace(f"config key {key}", option)
            message = message.replace(key, option)
        else:
            message = message.replace(key, option)
    return message


def _run(args: argparse.Namespace) -> int:
    """`dynsys run CONFIG.toml`: one experiment (or sweep) into a run folder."""
    import dynsys

    from ._cli_warnings import said_once, say

    with said_once() as caught:
        result = _run_experiment(args)
    if not dynsys.is_main_process():  # process 0 reports
        return 0
    for run in result.runs:
        _print_warnings(f"dynsys run: {run.path.name}", run.metrics)
        print(
            f"  {run.path.name}: "
            + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in run.metrics["summary"].items()
            )
            + (" (interrupted)" if run.metrics.get("status") == "interrupted" else "")
        )
    said = [line for run in result.runs for line in _said_by(run.metrics)]
    say("dynsys run", caught, said)
    return _exit_status(result)


def _run_experiment(args: argparse.Namespace):
    """Run `args.config` with the run options; copy figures to `args.figures`."""
    from ._experiments.config import apply_overrides, read_toml

    # A missing or invalid TOML file, or a bad --set, is refused before JAX loads.
    apply_overrides(read_toml(args.config), args.set)

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
    """The body of an experiment script in `examples/`: `dynsys run` with a default
    config (`--config` to change it). Returns the `ExperimentResult`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", default=default_config, help="a TOML config")
    _add_run_options(parser)
    return _run_experiment(parser.parse_args(argv))


class _VersionAction(argparse.Action):
    """`--version`: reads the installed version only when asked (reading package
    metadata costs a noticeable part of the start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs
        )

    def __call__(self, parser, namespace, values, option_string=None):
        import importlib.metadata

        print(f"dynsys {importlib.metadata.version('dynsys')}")  # as argparse's
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The `dynsys` command's parser: `simulate`, `fit`, `run` and `compare`."""
    parser = argparse.ArgumentParser(
        prog="dynsys",
        description="Declarative, differentiable simulation of dynamical systems.",
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_simulate_parser(commands)
    _add_fit_parser(commands)
    _add_run_parser(commands)
    _add_compare_parser(commands)
    return parser


def _add_simulate_parser(commands) -> None:
    """`dynsys simulate MODEL`."""
    simulate = commands.add_parser(
        "simulate", help="simulate a zoo model or a model file; plot its trajectories"
    )
    simulate.add_argument(
        "model",
        help="a zoo model name, e.g. mass_spring_damper, or a model file written by "
        "dynsys.save, e.g. a run folder's neural_model.dynsys (inputs 0.5 N(0, 1))",
    )
    simulate.add_argument("--steps", type=int, default=200, help="number of steps")
    simulate.add_argument("--batch", type=int, default=16, help="trajectories")
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument(
        "--x0-mean", type=float, default=0.0, help="mean of the initial states"
    )
    simulate.add_argument(
        "--x0-scale", type=float, default=1.0, help="spread of the initial states"
    )
    simulate.add_argument(
        "--out",
        default="runs/simulate",
        help="output folder (replaces only an earlier dynsys output folder)",
    )
    simulate.set_defaults(handler=_simulate)


def _add_fit_parser(commands) -> None:
    """`dynsys fit [DATA]`: the model and optimiser options, then the columns of
    DATA (`_add_column_options`), then the data options."""
    fit = commands.add_parser(
        "fit",
        help="fit a linear model to data (default: simulated zoo data)",
        description="Fit x_{t+1} = K x_t + B u_t (y_t = C x_t + D u_t) to DATA (a "
        ".npz or .csv dataset; see dynsys.load_dataset). Without DATA, fits noisy "
        "trajectories simulated from the mass_spring_damper zoo model and compares "
        "with the truth. With measured states: the one-step least-squares estimate, "
        "refined by fitting the free run. With outputs (--outputs, or y* columns): "
        "a subspace estimate (order and feedthrough chosen by a scan of orders "
        "1..10 with and without D, scored on the held-out data, unless --order / "
        "--feedthrough / --no-feedthrough), "
        "refined by an output-error fit, then compared on held-out experiments "
        "with residual analysis and a Bode plot (--loss prediction: a noise model "
        "fitted by its prediction error; --structure armax|bj, one output: a "
        "polynomial model with a noise model instead). Writes a run folder: "
        "config.toml, "
        "model.dynsys, metrics.json, history.csv, PNG figures and summary.md (the "
        "same as `dynsys run` with kind = 'fit').",
    )
    fit.add_argument("data", nargs="?", help="a .npz or .csv dataset (optional)")
    fit.add_argument(
        "--model",
        choices=["linear", "stable", "neural"],
        default="linear",
        help="linear: LinearSystem; stable: StableLinearSystem (spectral radius < 1); "
        "neural: the linear fit, then a neural state-space model on it (output data)",
    )
    fit.add_argument(
        "--neural-steps", type=int, default=None, help="neural: Adam steps (maximum)"
    )
    fit.add_argument(
        "--neural-horizon", type=int, default=None, help="neural: simulated window"
    )
    fit.add_argument(
        "--loss",
        choices=["simulation", "one_step", "shooting", "prediction"],
        default="simulation",
        help="simulation (free run), one_step, shooting (MultipleShooting), or "
        "prediction (a noise model, fitted by its one-step prediction error: "
        "saved as an InnovationSystem)",
    )
    fit.add_argument("--horizon", type=int, default=20, help="shooting window")
    fit.add_argument(
        "--optimizer",
        choices=["default", "adam", "lbfgs"],
        default="default",
        help="default: Levenberg-Marquardt (small problems) or L-BFGS, no tuning",
    )
    fit.add_argument(
        "--steps", type=int, default=None, help="optimiser steps (a maximum)"
    )
    fit.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    _add_column_options(fit)
    fit.add_argument(
        "--order",
        type=int,
        default=None,
        help="model order for output data (default: a scan of orders 1..10 "
        "scored on the held-out data)",
    )
    fit.add_argument(
        "--structure",
        choices=["state-space", "armax", "bj"],
        default=None,
        help="state-space (default); armax or bj: a polynomial model with a noise "
        "model, one output, fitted by prediction error and saved as an "
        "InnovationSystem",
    )
    fit.add_argument(
        "--orders",
        type=_orders,
        default=None,
        help="armax: na,nb,nc,nk; bj: nb,nc,nd,nf,nk (default: a scan of equal "
        "orders 1..4, nk 0 or 1, on the held-out data)",
    )
    fit.add_argument(
        "--measure",
        type=_indices,
        default=None,
        help="simulated data: measure only these states, e.g. 0,1 (outputs)",
    )
    fit.add_argument("--ridge", type=float, default=0.0, help="least-squares ridge")
    _add_validation_options(fit)
    fit.add_argument("--trajectories", type=int, default=16, help="simulated data")
    fit.add_argument("--length", type=int, default=100, help="simulated steps")
    fit.add_argument("--noise", type=float, default=0.1, help="measurement noise")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--no-progress", action="store_true", help="no progress bar")
    fit.add_argument(
        "--out",
        default="runs/fit",
        help="output folder (replaces only an earlier dynsys run folder; any other "
        "existing path is refused)",
    )
    fit.set_defaults(handler=_fit)


def _add_validation_options(fit: argparse.ArgumentParser) -> None:
    """`dynsys fit`'s held-out data, sample time and identification switches."""
    fit.add_argument(
        "--validation",
        type=float,
        default=None,
        help="share of the experiments held out, for data of several experiments "
        "(default 0.25; not with --validation-split or --validation-data)",
    )
    fit.add_argument(
        "--validation-data",
        dest="validation_file",
        metavar="FILE",
        help="a clean test file (the same columns as DATA): only scores the final "
        "model; structure and steps are chosen on a part of DATA",
    )
    fit.add_argument(
        "--select-on-validation",
        action="store_true",
        help="let the --validation-data file choose the structure and the kept "
        "step too (its fit %% is then optimistic)",
    )
    fit.add_argument(
        "--validation-split",
        type=float,
        metavar="F",
        help="hold out the last F of each record by time (default for a file of "
        "one experiment: 1/3)",
    )
    fit.add_argument(
        "--dt", type=float, help="sample time in s, for a file without a time column"
    )
    fit.add_argument(
        "--feedthrough",
        action="store_true",
        default=None,
        help="fit D (y = C x + D u) (default: the scan decides)",
    )
    fit.add_argument(
        "--no-feedthrough",
        dest="feedthrough",
        action="store_false",
        help="no D (y = C x)",
    )
    fit.add_argument(
        "--delay",
        metavar="N[,M...]",
        help="input delay (dead time) in samples, one for every input or one per "
        "input (default: estimated from the data)",
    )
    fit.add_argument(
        "--no-delay",
        dest="delay",
        action="store_const",
        const=0,
        help="no input delay",
    )
    fit.add_argument(
        "--no-offset",
        action="store_true",
        help="do not remove the data's means (the model then has no levels)",
    )
    fit.add_argument(
        "--no-stabilise",
        action="store_true",
        help="fit from the subspace start even when it is unstable, and keep a "
        "fit that drifted unstable from a stable start",
    )


def _add_column_options(fit: argparse.ArgumentParser) -> None:
    """`dynsys fit`'s "columns of DATA" group."""
    columns = fit.add_argument_group(
        "columns of DATA", "comma-separated names; default: x*, u*, y* columns"
    )
    columns.add_argument("--states", type=_names, help="state columns, e.g. x1,x2")
    columns.add_argument("--inputs", type=_names, help="input columns, e.g. u1")
    columns.add_argument("--outputs", type=_names, help="output columns, e.g. y1,y2")
    columns.add_argument("--trajectory-column", default="trajectory")
    columns.add_argument("--time-column", default="time")


def _add_run_parser(commands) -> None:
    """`dynsys run CONFIG` with the run options (`_add_run_options`)."""
    run = commands.add_parser(
        "run",
        help="run an experiment (or a sweep) from a TOML config",
        description="Run the experiment described by CONFIG (a TOML file: kind = "
        "'fit' or 'train_controller', with [system], [data]/[fit] or "
        "[controller]/[cost]/[train] tables and an optional [sweep]; see "
        "examples/configs/ and the experiments guide). Writes "
        "OUT_ROOT/<name>-<timestamp>/ with config.toml, metrics.json, history.csv, "
        "model.dynsys, PNG figures and summary.md.",
    )
    run.add_argument("config", help="the experiment's TOML config")
    _add_run_options(run)
    run.set_defaults(handler=_run)


def _add_compare_parser(commands) -> None:
    """`dynsys compare MODEL DATA`: a saved model scored on a record."""
    compare = commands.add_parser(
        "compare",
        help="score a saved model on a record (fit %% and RMS per output)",
        description="Score MODEL (a model.dynsys or neural_model.dynsys file) on "
        "DATA (.csv, .dat/.txt, .npz, .mat): a linear model runs freely from the "
        "initial state that best explains DATA; a neural model starts from the "
        "state its encoder reads off the first samples. Prints fit %% and RMS per "
        "output channel; with --out, writes scores.json and comparison.png there.",
    )
    compare.add_argument("model", help="the saved model file")
    compare.add_argument("data", help="the record to score it on")
    compare.add_argument(
        "--encoder",
        help="a neural model's encoder file (default: neural_encoder.dynsys beside "
        "MODEL)",
    )
    compare.add_argument("--dt", type=float, help="sample time in s, if no time column")
    compare.add_argument("--out", help="a folder for scores.json and comparison.png")
    _add_column_options(compare)
    compare.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    """`dynsys compare MODEL DATA`: print the scores, write the figure if asked."""
    from ._experiments import compare_model

    out = None if args.out is None else compare_model.checked_out(args.out)
    import jax

    from ._data.load import load_dataset

    with jax.enable_x64(True):  # as `dynsys fit` wrote the model: float64
        data = load_dataset(
            args.data,
            inputs=args.inputs,
            outputs=args.outputs,
            # the defaults: such a column when the file has one (not required)
            trajectory=None
            if args.trajectory_column == "trajectory"
            else args.trajectory_column,
            time=None if args.time_column == "time" else args.time_column,
            dt=args.dt,
        )
        comparison, scores = compare_model.score(args.model, data, args.encoder)
    skipped = f" after the encoder's first {scores.skipped}" if scores.skipped else ""
    print(f"{args.model} on {args.data}: {scores.samples} samples scored{skipped}")
    print("\n".join(compare_model.table(scores)))
    if out is not None:
        sources = {"model": args.model, "data": args.data, "encoder": args.encoder}
        compare_model.write(out, comparison, scores, sources)
        print(f"  wrote {out}/: comparison.png, scores.json")
    return 0


def _one_line(error: BaseException) -> str:
    text = " ".join(line.strip() for line in str(error).strip().splitlines())
    return text or type(error).__name__


# The cyclic garbage collector's thresholds in the command's own process. A fit run
# keeps hundreds of thousands of objects alive (JAX's traces and caches, the data);
# at Python's default (700, 10, 10) the collector ran some 830 times and walked them
# for about 1.1 s of a 15 s heating-record fit; at these it runs about ten times
# (0.4 s), and the cd_player_arm run's peak memory was no higher (534 against
# 564 MB).
COMMAND_GC_THRESHOLDS = (50_000, 20, 20)


def main(argv: list[str] | None = None) -> int:
    """The `dynsys` command. Bad input (a `ValueError` from the library, such as a
    `ConfigError`, or a file that cannot be read or written) is one line on stderr
    and exit status 2; an interrupt is 128 + the signal's number. On the command
    line, `dynsys run --distributed` runs in a watched child process
    (`_experiments/supervise.py`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if argv is None:  # the command's own process: JAX has not started yet
        from ._compile import read_ahead
        from ._compile.jit import use_for_process
        from ._experiments.runtime.figure_helper import enable_for_process

        # NumPy's OpenBLAS on one thread for the many small host problems of a
        # fit, unless the user chose (dynsys/_fitting/host_blas.py says why);
        # set before NumPy loads it, which reads it once.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        use_for_process()
        enable_for_process()  # figures drawn on two cores
        read_ahead.enable_for_process()  # kept programs loaded on a thread
        gc.set_threshold(*COMMAND_GC_THRESHOLDS)
    distributed = getattr(args, "distributed", False)
    if distributed:
        from . import _config
        from ._experiments.runtime.supervise import supervise

        supervised = _config.read(_config.SUPERVISED)
        if argv is None and not supervised:
            return supervise(sys.argv[1:], out_root=args.out_root)
        if supervised:  # the watched child: leave without waiting
            return _leave(_main(args, distributed))  # for the other processes
    return _main(args, distributed)


def _main(args: argparse.Namespace, distributed: bool) -> int:
    import signal
    import zipfile

    from ._compile.cache import lines_printed
    from ._experiments.runtime.interrupt import catch_interrupts

    prefix = f"dynsys {args.command}"
    # A process of several: JAX's runtime errors (a failed collective) too.
    runtime = (RuntimeError,) if distributed else ()
    try:
        with catch_interrupts(), lines_printed():  # the cache's lines: one each
            return args.handler(args)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, *runtime) as error:
        message = _one_line(error)
        if args.command == "fit":  # its config keys were set by options
            message = _option_names(message)
        if distributed:
            from ._experiments.runtime.supervise import failure_line

            message = failure_line(error)
        print(f"{prefix}: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as error:
        name = error.args[0] if error.args else "SIGINT"
        cause = error.__cause__
        # A signal that ended the run in another error (a half-made result): say
        # which, so that the moment it arrived is known.
        how = (
            f" while running ({type(cause).__name__}: {_one_line(cause)})"
            if cause is not None and not isinstance(cause, KeyboardInterrupt)
            else ""
        )
        print(
            f"{prefix}: interrupted ({name}){how}; nothing was written.",
            file=sys.stderr,
        )
        return 128 + int(getattr(signal, str(name), signal.SIGINT))


def _leave(code: int) -> int:
    """Exit a failed process of a distributed run at once: its normal exit would
    wait for the other processes (one of which may be gone) and end in a crash."""
    if code != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def command() -> None:
    """The `dynsys` command's entry point: `main()`, then the process ends without
    the interpreter's teardown, which frees every object of JAX and of the run one by
    one (0.4-1 s after a `dynsys fit`, measured in docs/benchmarks.md). What a normal
    exit does that matters is done first: the run's other (non-daemon) threads are
    joined, the `atexit` functions run (the figure helper's end, logging's flush),
    and the standard streams are flushed. An unexpected exception still ends the
    usual way, with its traceback."""
    import atexit
    import threading

    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # CPython's own exit runs these the same way
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    command()
