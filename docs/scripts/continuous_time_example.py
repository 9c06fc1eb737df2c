"""The figure of docs/continuous-time.md: sampling continuous-time systems.

Left: a mass-spring-damper chain driven by a piecewise-constant force, sampled every
0.5 s: the exact zero-order hold (`discretize`), the adaptive ODE solve (`Sampled`)
and the forward-Euler discretisation; the force on its own axis below. Right: van der
Pol phase portraits from four initial states (one batched `rollout` of `Sampled`),
all reaching the limit cycle.

Run: `.venv/bin/python docs/scripts/continuous_time_example.py [--write | --out DIR]`
(by default into a new temporary folder; `--write` updates
docs/figures/continuous_time.png).
"""

import argparse
import os
import pathlib
import tempfile

import dynsys.models as zoo
import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

import dynsys  # noqa: E402
from dynsys import plot  # noqa: E402


DOCS_FIGURES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "figures"


def main(argv=None) -> pathlib.Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--write", action="store_true", help="update docs/figures/")
    where.add_argument("--out", help="write into this folder")
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    dt, T = 0.5, 40
    A, B = zoo.mass_spring_damper_matrices(num_masses=2, stiffness=1.0, damping=0.2)
    ode = dynsys.LinearODE(A, B)
    force = jnp.repeat(jnp.array([1.0, -1.0, 0.5, 0.0]), T // 4)[:, None]
    x0 = jnp.zeros(4)
    runs = {
        "exact ZOH (discretize)": dynsys.discretize(ode, dt),
        "adaptive solve (Sampled)": dynsys.Sampled(ode, dt),
        "forward Euler": dynsys.discretize(ode, dt, method="euler"),
    }
    trajs = {name: dynsys.rollout(s, x0, T, inputs=force) for name, s in runs.items()}
    gap = float(
        jnp.max(
            jnp.abs(
                trajs["adaptive solve (Sampled)"].xs
                - trajs["exact ZOH (discretize)"].xs
            )
        )
    )
    print(f"max |Sampled - exact ZOH| over {T} samples: {gap:.2e}")

    vdp = zoo.van_der_pol(mu=1.0, dt=0.1)
    starts = jnp.array([[0.1, 0.0], [3.0, 0.0], [-1.0, 3.0], [0.0, -4.0]])
    phase = dynsys.rollout(vdp, starts, 150, inputs=jnp.zeros((4, 150, 1)))

    chain = zoo.names("mass_spring_damper")
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    left, right = fig.subfigures(1, 2, width_ratios=[1.1, 1.0])
    position, held = left.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    # The exact discretisation is the known truth here; the others are models.
    styles = {"exact ZOH (discretize)": plot.STYLES["truth"] | {"marker": "none"},
              "adaptive solve (Sampled)": plot.STYLES["fit"] | {"linestyle": "none"},
              "forward Euler": plot.STYLES["estimate"]}  # fmt: skip
    for name, traj in trajs.items():
        position.plot(traj.ts, traj.xs[:, 1], label=name, **styles[name])
    exact = trajs["exact ZOH (discretize)"].xs[:, 1]
    reach = 1.4 * float(jnp.max(jnp.abs(exact)))  # Euler diverges past this
    position.set(ylabel=chain.states[1], ylim=(-reach, reach),
                 title=f"mass-spring-damper chain, dt = {dt} s")  # fmt: skip
    position.grid(True, alpha=0.3)
    left.legend(*position.get_legend_handles_labels(), loc="outside lower center",
                ncol=2, fontsize="small")  # fmt: skip
    held.step(trajs["forward Euler"].ts[:-1], force[:, 0], "k", where="post", lw=1)
    held.set(xlabel="t (s)", ylabel="force (N)")
    held.grid(True, alpha=0.3)
    vdp_names = zoo.names("van_der_pol").states
    plot.phase_portrait(phase, state_names=vdp_names, ax=right.subplots(),
                        title="van der Pol (μ = 1), Sampled every 0.1 s")  # fmt: skip

    if args.write:
        out = DOCS_FIGURES
    elif args.out:
        out = pathlib.Path(args.out)
    else:
        out = pathlib.Path(tempfile.mkdtemp(prefix="dynsys-continuous-"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "continuous_time.png"
    with tempfile.NamedTemporaryFile(dir=out, suffix=".png", delete=False) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
