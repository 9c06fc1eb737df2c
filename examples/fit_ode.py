"""Fitting in continuous time.

1. A linear ODE `dx/dt = A x + B u` identified from sampled data of a mass-spring-damper
   chain by gradient descent through the matrix exponential
   (`dynsys.Discretized(LinearODE(A, B), dt)`, exact zero-order hold).
2. A small neural vector field fitted to sampled van der Pol data through
   `dynsys.Sampled` (diffrax, gradients by its checkpointed adjoint).

Run: `.venv/bin/python examples/fit_ode.py` (add `--quick` for a short run). Prints the
errors; fixed seeds.
"""

import argparse

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, PRNGKeyArray

import dynsys


class NeuralODE(dynsys.AbstractODE):
    """$\\dot x = \\mathrm{MLP}(x, u)$: a neural vector field on the state and input."""

    mlp: eqx.nn.MLP
    state_size: int = eqx.field(static=True)
    input_size: int = eqx.field(static=True)

    def __init__(self, state_size: int, input_size: int, width: int, *, key):
        self.mlp = eqx.nn.MLP(
            state_size + input_size, state_size, width, depth=2,
            activation=jnp.tanh, key=key,
        )  # fmt: skip
        self.state_size = state_size
        self.input_size = input_size

    def vector_field(self, t, x, u):
        del t
        return self.mlp(x if u is None else jnp.concatenate([x, u]))


def random_inputs(key: PRNGKeyArray, shape, scale: float) -> Array:
    return scale * jax.random.normal(key, shape)


def fit_linear_ode(num_steps: int = 1500, *, progress: bool = True) -> dict:
    """Identify (A, B) of a 2-mass chain from 8 noise-free trajectories, 40 samples."""
    dt = 0.2
    A_true, B_true = zoo.mass_spring_damper_matrices(2, stiffness=1.5, damping=0.3)
    true = dynsys.LinearODE(A_true, B_true)
    key_x0, key_u, key_model = jax.random.split(jax.random.key(0), 3)
    inputs = random_inputs(key_u, (8, 40, 1), 1.0)
    data = dynsys.simulate(
        dynsys.discretize(true, dt),
        jax.random.normal(key_x0, (8, 4)),
        40,
        inputs=inputs,
    )
    # Start from a stable guess: -I plus small noise, B zero.
    A0 = -jnp.eye(4) + 0.1 * jax.random.normal(key_model, (4, 4))
    start = dynsys.Discretized(dynsys.LinearODE(A0, jnp.zeros((4, 1))), dt)
    result = dynsys.fit(
        start,
        data,
        solver=optax.adam(2e-2),
        num_steps=num_steps,
        progress=progress,
    )
    fitted = result.model.ode

    def relative_error(a, b):
        return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))

    return {
        "A_relative_error": relative_error(fitted.A, A_true),
        "B_relative_error": relative_error(fitted.B, B_true),
        "initial_loss": float(result.losses[0]),
        "final_loss": float(result.losses[-1]),
    }


def fit_neural_ode(num_steps: int = 600, *, progress: bool = True) -> dict:
    """A width-32 MLP vector field fitted to forced van der Pol data (dt = 0.1)."""
    dt, T, N = 0.1, 20, 16
    key_x0, key_u, key_model, key_val = jax.random.split(jax.random.key(1), 4)
    truth = zoo.van_der_pol(mu=1.0, dt=dt)
    data = dynsys.simulate(
        truth,
        jax.random.uniform(key_x0, (N, 2), minval=-2.0, maxval=2.0),
        T,
        inputs=random_inputs(key_u, (N, T, 1), 0.5),
    )
    key_val_x0, key_val_u = jax.random.split(key_val)
    val_data = dynsys.simulate(
        truth,
        jax.random.uniform(key_val_x0, (4, 2), minval=-2.0, maxval=2.0),
        T,
        inputs=random_inputs(key_val_u, (4, T, 1), 0.5),
    )
    # Looser tolerances than the defaults: the data are the limit of what is learned.
    model = dynsys.Sampled(
        NeuralODE(2, 1, 32, key=key_model), dt, rtol=1e-5, atol=1e-7, max_steps=256
    )

    def validation_nrmse(model):
        traj = dynsys.rollout(model, val_data.xs[:, 0], T, inputs=val_data.us)
        return float(dynsys.nrmse(val_data.xs[:, 1:], traj.xs[:, 1:]))

    before = validation_nrmse(model)
    result = dynsys.fit(
        model,
        data,
        loss=dynsys.MultipleShooting(horizon=5),
        solver=optax.adam(3e-3),
        num_steps=num_steps,
        progress=progress,
        val_data=val_data,
    )
    return {
        "validation_nrmse_before": before,
        "validation_nrmse_after": validation_nrmse(result.model),
        "initial_loss": float(result.losses[0]),
        "final_loss": float(result.losses[-1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer optimiser steps")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    linear = fit_linear_ode(300 if args.quick else 1500)
    print("linear ODE through expm:", linear)
    neural = fit_neural_ode(100 if args.quick else 600)
    print("neural vector field through Sampled:", neural)


if __name__ == "__main__":
    main()
