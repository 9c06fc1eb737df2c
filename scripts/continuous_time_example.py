"""The figure of docs/continuous-time.md: sampling continuous-time systems.

Left: a mass-spring-damper chain driven by a piecewise-constant force, sampled every
0.5 s: the exact zero-order hold (`discretize`), the adaptive ODE solve (`Sampled`)
and the forward-Euler discretisation. Right: van der Pol phase portraits from four
initial states (one batched `rollout` of `Sampled`), all reaching the limit cycle.

Run: `.venv/bin/python scripts/continuous_time_example.py` (writes
docs/figures/continuous_time.png).
"""

import os
import pathlib
import tempfile

import dynsys.models as zoo
import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import dynsys  # noqa: E402


OUT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "figures"


def main() -> None:
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
    phase = dynsys.rollout(vdp, starts, 150, inputs=jnp.zeros((150, 1)))

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"exact ZOH (discretize)": "-", "adaptive solve (Sampled)": "o",
              "forward Euler": "--"}  # fmt: skip
    for name, traj in trajs.items():
        left.plot(traj.ts, traj.xs[:, 1], styles[name], label=name, markersize=3)
    left.step(trajs["forward Euler"].ts[:-1], force[:, 0], "k:", where="post",
              label="force (held)", linewidth=1)  # fmt: skip
    left.set(xlabel="t (s)", ylabel="position of mass 2",
             title=f"mass-spring-damper chain, dt = {dt} s")  # fmt: skip
    left.legend(fontsize=8)
    for k in range(starts.shape[0]):
        right.plot(phase.xs[k, :, 0], phase.xs[k, :, 1], ".-", markersize=2)
        right.plot(starts[k, 0], starts[k, 1], "ko", markersize=4)
    right.set(xlabel="$x_1$", ylabel="$x_2$",
              title="van der Pol ($\\mu = 1$), Sampled every 0.1 s")  # fmt: skip
    fig.tight_layout()

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "continuous_time.png"
    with tempfile.NamedTemporaryFile(dir=OUT, suffix=".png", delete=False) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    os.replace(tmp.name, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
