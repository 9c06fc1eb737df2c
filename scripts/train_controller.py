"""Train a layered neural controller to hold the zoo pendulum upright.

The pendulum (`dynsys.models.Pendulum`, angle measured from hanging down) starts near
upright, at angles `pi +- 0.5` rad and speeds `+- 1` rad/s; a `StackedController`
(every layer fed the state) with a torque limit learns to bring it to
`(theta, omega) = (pi, 0)` by gradient descent through batched closed-loop rollouts.
Writes `before.png` and `after.png` (closed-loop trajectories) and `losses.png` into
`--out`, and prints the cost before and after.

Run: `python scripts/train_controller.py --out runs/train_controller`
"""

import argparse
import math
import os
import pathlib
import tempfile

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib
import optax


jax.config.update("jax_enable_x64", True)

import dynsys.models as zoo  # noqa: E402

import dynsys  # noqa: E402


SEED = 0
UPRIGHT = jnp.array([math.pi, 0.0])
NUM_STEPS = 60  # 3 s at dt = 0.05
TORQUE_LIMIT = 15.0  # N m; gravity alone gives m g l = 9.81 N m at horizontal


def initial_states(key, count):
    spread = jnp.array([0.5, 1.0])
    return UPRIGHT + spread * jax.random.uniform(key, (count, 2), minval=-1, maxval=1)


def closed_loop_cost(controller, system, x0s):
    traj = dynsys.rollout(system, x0s, NUM_STEPS, controller=controller)
    return dynsys.tracking_cost(
        traj, UPRIGHT, jnp.array([1.0, 0.1]), 0.01, Q_final=jnp.array([10.0, 1.0])
    )


def save_figure(fig, path: pathlib.Path):
    """Write atomically: a temporary file in the same folder, then rename."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.close(handle)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def plot_closed_loop(traj, title):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    ts = traj.ts
    for i in range(traj.xs.shape[0]):
        axes[0].plot(ts, traj.xs[i, :, 0], lw=1)
        axes[1].plot(ts, traj.xs[i, :, 1], lw=1)
        axes[2].plot(ts[:-1], traj.us[i, :, 0], lw=1)
    axes[0].axhline(math.pi, color="k", ls="--", lw=0.8)
    axes[0].set_ylabel("angle θ (rad)")
    axes[1].set_ylabel("speed ω (rad/s)")
    axes[2].set_ylabel("torque u (N m)")
    axes[2].set_xlabel("time (s)")
    axes[0].set_title(title)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/train_controller", type=pathlib.Path)
    parser.add_argument("--steps", default=400, type=int, help="optimiser steps")
    args = parser.parse_args(argv)
    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)

    system = zoo.Pendulum()
    key_init, key_train, key_test = jax.random.split(jax.random.key(SEED), 3)
    controller = dynsys.StackedController.mlp(
        2, 1, width_size=16, depth=4, use_time=False, bound=TORQUE_LIMIT, key=key_init
    )
    x0_train = initial_states(key_train, 64)
    x0_test = initial_states(key_test, 8)

    result = dynsys.train(
        lambda c, x0s: closed_loop_cost(c, system, x0s),
        controller,
        data=x0_train,
        batch_size=16,
        optimizer=optax.chain(
            optax.clip_by_global_norm(10.0),
            optax.adam(optax.cosine_decay_schedule(1e-2, args.steps)),
        ),
        num_steps=args.steps,
        key=key_train,
        progress=True,
    )
    evaluate = eqx.filter_jit(closed_loop_cost)
    before = float(evaluate(controller, system, x0_test))
    after = float(evaluate(result.model, system, x0_test))
    print(
        f"held-out cost: before {before:.4g}, after {after:.4g} "
        f"(best step {result.best_step}, stop: {result.stop_reason})"
    )

    import matplotlib.pyplot as plt

    for name, model in [("before", controller), ("after", result.model)]:
        traj = dynsys.rollout(system, x0_test, NUM_STEPS, controller=model)
        fig = plot_closed_loop(traj, f"Pendulum near upright: {name} training")
        save_figure(fig, args.out / f"{name}.png")
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.semilogy(result.losses, lw=1, label="minibatch")
    steps, values = zip(*result.full_losses)
    ax.semilogy(steps, values, "o-", ms=3, label="all training states")
    ax.set_xlabel("step")
    ax.set_ylabel("cost")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, args.out / "losses.png")
    plt.close(fig)
    print(f"wrote {args.out}/before.png, after.png, losses.png")


if __name__ == "__main__":
    main()
