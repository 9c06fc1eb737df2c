"""Draw every kind of `dynsys.plot` figure, for docs/gallery.md.

Each figure comes from a small, seeded computation with the library (simulated data
from zoo models, a subspace fit, a short gradient fit, a small noise sweep), so the
gallery shows real results drawn with the plotting conventions of
docs/plotting.md. By default the figures go to a new temporary folder (printed), so
running the script changes nothing in the repository; `--write` writes them into
`docs/figures/` (as `gallery_<kind>.png`), `--out DIR` into DIR.

Run: `python docs/scripts/make_gallery.py [--write | --out DIR] [--only KIND ...]`
"""

import argparse
import os
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np


matplotlib.use("Agg")

import dynsys.models as zoo  # noqa: E402

import dynsys  # noqa: E402
from dynsys import plot  # noqa: E402


DOCS_FIGURES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "figures"
DPI = 100
DT = 0.1


def _chain_with_sensors(num_masses: int = 2):
    """The mass-spring-damper chain with its positions measured (C picks them)."""
    chain = zoo.mass_spring_damper(num_masses=num_masses, dt=DT)
    n = chain.state_size
    C = jnp.eye(n)[:num_masses]
    system = dynsys.LinearSystem(chain.K, chain.B, C=C, dt=DT)
    names = zoo.names("mass_spring_damper", num_masses=num_masses)
    return system, names._replace(outputs=names.states[:num_masses])


def _experiments(system, noise: float, seed: int, N: int = 4, T: int = 300):
    """Noisy and noise-free data from random-input experiments, starting at rest."""
    k_u, k_noise = jax.random.split(jax.random.key(seed))
    inputs = jax.random.normal(k_u, (N, T, system.input_size))
    x0s = jnp.zeros((N, system.state_size))
    noisy = dynsys.simulate(
        system, x0s, T, inputs=inputs, measurement_noise=noise, key=k_noise
    )
    clean = dynsys.simulate(system, x0s, T, inputs=inputs)
    return noisy, clean


def _subspace_case():
    system, names = _chain_with_sensors()
    data, clean = _experiments(system, noise=0.05, seed=0)
    model = dynsys.fit_subspace(data)
    return system, names, data, clean, model


def trajectory():
    names = zoo.names("pendulum")
    pendulum = zoo.Pendulum(dt=0.05)
    x0s = jnp.stack([jnp.linspace(0.3, 2.5, 8), jnp.zeros(8)], axis=1)
    torque = jnp.broadcast_to(2.0 * jnp.sin(jnp.arange(80) * 0.05)[:, None], (80, 1))
    inputs = jnp.broadcast_to(torque, (8, 80, 1))
    traj = dynsys.rollout(pendulum, x0s, 80, inputs=inputs)
    return plot.trajectory(
        traj,
        state_names=names.states,
        input_names=names.inputs,
        input_bound=15.0,
        title="pendulum, 8 initial angles, a sinusoidal torque (limit ±15 N m)",
    )


def trajectory_band():
    chain = zoo.mass_spring_damper(num_masses=2, dt=DT)
    names = zoo.names("mass_spring_damper")
    x0 = jnp.array([1.0, 0.0, 0.0, 0.0])
    forces = 0.5 * jax.random.normal(jax.random.key(1), (200, 120, 1))
    traj = dynsys.rollout(chain, jnp.broadcast_to(x0, (200, 4)), 120, inputs=forces)
    return plot.trajectory(
        traj,
        state_names=names.states,
        input_names=names.inputs,
        title="mass-spring-damper released from p1 = 1 m under 200 random force "
        "sequences: the spread the random force causes",
    )


def comparison():
    system, names, data, clean, model = _subspace_case()
    result = dynsys.compare(model, data)
    return plot.comparison(
        {"subspace fit": result},
        truth=np.asarray(clean.ys[0]),
        roles={"subspace fit": "fit"},
        names=names.outputs,
        dt=DT,
        title="experiment 0: free run of the subspace fit, x0 estimated",
    )


def comparison_page():
    """A 20-state system: the first of two pages of 12 channels."""
    chain = zoo.mass_spring_damper(num_masses=10, dt=DT)
    names = zoo.names("mass_spring_damper", num_masses=10)
    data, _ = _experiments(chain, noise=0.02, seed=2, N=2, T=100)
    least_squares = dynsys.fit_least_squares(data)
    result = dynsys.compare(least_squares, data)
    first, _ = plot.pages(chain.state_size)
    return plot.comparison(
        {"least squares": result},
        roles={"least squares": "estimate"},
        names=names.states,
        channels=first,
        dt=DT,
        title="20 states, page 1 of 2 (channels 1–12): one-step least squares",
    )


def phase_portrait():
    names = zoo.names("van_der_pol")
    vdp = zoo.van_der_pol(mu=1.0, dt=0.1)
    starts = jnp.array([[0.1, 0.0], [3.0, 0.0], [-1.0, 3.0], [0.0, -4.0]])
    traj = dynsys.rollout(vdp, starts, 150, inputs=jnp.zeros((4, 150, 1)))
    return plot.phase_portrait(
        traj,
        system=zoo.VanDerPol(1.0),
        state_names=names.states,
        title="van der Pol (μ = 1): every start reaches the limit cycle",
    )


def eigenvalues():
    system, _, data, _, model = _subspace_case()
    least_squares_data, _ = _experiments(
        zoo.mass_spring_damper(num_masses=2, dt=DT), noise=0.05, seed=0
    )
    least_squares = dynsys.fit_least_squares(least_squares_data)
    return plot.eigenvalues(
        {"least squares (noisy states)": least_squares, "subspace fit": model},
        truth=system,
        roles={"least squares (noisy states)": "estimate", "subspace fit": "fit"},
        dt=DT,
        title="eigenvalues of K and the modes they stand for",
    )


def singular_values():
    _, _, data, _, model = _subspace_case()
    values = dynsys.subspace_singular_values(data)
    return plot.singular_values(
        values, order=model.state_size, title="order selection (2 masses: n = 4)"
    )


def bode():
    system, names, _, _, model = _subspace_case()
    return plot.bode(
        {"subspace fit": model},
        truth=system,
        hz=True,
        output_names=names.outputs,
        input_names=names.inputs,
        title="frequency response, force to positions",
    )


def step_response():
    system, names, _, _, model = _subspace_case()
    return plot.step_response(
        {"subspace fit": model},
        150,
        truth=system,
        output_names=names.outputs,
        input_names=names.inputs,
        title="unit step of the force, from rest",
    )


def residuals():
    _, names, data, _, model = _subspace_case()
    result = dynsys.residual_analysis(model, data, max_lag=25)
    return plot.residuals(
        result,
        output_names=names.outputs,
        input_names=names.inputs,
        title="residuals of the subspace fit (white and input-independent: inside)",
    )


def loss_history():
    import optax

    chain = zoo.mass_spring_damper(num_masses=2, dt=DT)
    data, _ = _experiments(chain, noise=0.05, seed=3, N=6, T=100)
    train, held = data.split(0.34)
    start = dynsys.fit_least_squares(train)
    result = dynsys.fit(
        start,
        train,
        loss=dynsys.Simulation(),
        solver=optax.adam(3e-3),
        num_steps=150,
        progress=False,
        val_data=held,
    )
    return plot.loss_history(
        result,
        ylabel="simulation loss (mean squared error, m² and m²/s²)",
        title="gradient fit from least squares (best held-out step returned)",
    )


def sweep():
    system, names = _chain_with_sensors()
    noises = [0.01, 0.03, 0.1, 0.3, 1.0]
    scores = []  # (seeds, noises, outputs)
    for seed in range(3):
        row = []
        for noise in noises:
            data, clean = _experiments(system, noise=noise, seed=10 + seed, T=200)
            model = dynsys.fit_subspace(data, 4)
            # Fit % of the free run against the noise-free outputs (x0 estimated).
            row.append(np.asarray(dynsys.compare(model, clean).fit_percent))
        scores.append(row)
    scores = np.asarray(scores)
    return plot.sweep(
        "data.measurement_noise",
        noises,
        {
            f"subspace fit, free-run fit % vs noise-free truth, {name}": scores[..., i]
            for i, name in enumerate(names.outputs)
        },
        xlabel="std of the noise added to each measured position (m)",
        ylabel="fit (%)",
        title="subspace identification under measurement noise",
    )


KINDS = {
    "trajectory": trajectory,
    "trajectory_band": trajectory_band,
    "comparison": comparison,
    "comparison_page": comparison_page,
    "phase_portrait": phase_portrait,
    "eigenvalues": eigenvalues,
    "singular_values": singular_values,
    "bode": bode,
    "step_response": step_response,
    "residuals": residuals,
    "loss_history": loss_history,
    "sweep": sweep,
}


def _save(fig, path: pathlib.Path) -> None:
    """Atomically: a temporary file in the same folder, then a rename."""
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".png", delete=False) as f:
        fig.savefig(f, dpi=DPI, format="png")
    os.chmod(f.name, 0o644)
    os.replace(f.name, path)


def main(argv=None) -> list[pathlib.Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--write", action="store_true",
                       help="write into docs/figures/ (the gallery)")  # fmt: skip
    where.add_argument("--out", help="write into this folder")
    parser.add_argument("--only", nargs="+", choices=sorted(KINDS),
                        help="kinds to draw")  # fmt: skip
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    if args.write:
        out = DOCS_FIGURES
    elif args.out:
        out = pathlib.Path(args.out)
    else:
        out = pathlib.Path(tempfile.mkdtemp(prefix="dynsys-gallery-"))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in args.only or KINDS:
        path = out / f"gallery_{kind}.png"
        _save(KINDS[kind](), path)
        written.append(path)
        print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    return written


if __name__ == "__main__":
    main()
