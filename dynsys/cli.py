"""The `dynsys` command."""

import argparse
import json
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
