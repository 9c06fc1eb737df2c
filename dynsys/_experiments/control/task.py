"""The set-point task on a model file: the closed loop through the model's
observer, the schedule of set points, the initial states, and the cost on the
output error and the input effort (both in the data's units)."""

import dataclasses

import numpy as np

from ..config import ConfigError
from .observer_start import encoder_start
from .plant_file import PlantFile
from .typed_config import WeightsConfig


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity
class SetPointTask:
    """What every controller of the run is scored on.

    - `loop`: `ObservedPlant(plant, model, L)` on the model (time = step index).
    - `references`: the set points as deviations from the output level, `(T, p)`.
    - `output_targets`, `input_targets`: the set points and the inputs that hold
        them in steady state, in the data's units, `(T, p)` and `(T, m)`.
    - `weights`: `cost.Q` and `cost.R` as `lqr_gain`'s arguments.
    - `set_points`: the set points as given, `(S, p)`.
    - `steady_state`: `(N_x, N_u)` (`steady_state_map`).
    - `input_level`: the operating point's input, `(m,)`.
    - `encoder`: a neural plant's `StateEncoder`, which starts the observer
        (`at_rest`), or `None`: the observer starts at the operating point.
    """

    loop: object
    references: np.ndarray
    output_targets: np.ndarray
    input_targets: np.ndarray
    weights: WeightsConfig
    set_points: np.ndarray
    steady_state: tuple[np.ndarray, np.ndarray]
    input_level: np.ndarray
    encoder: object = None

    @property
    def plant_state_size(self) -> int:
        return self.loop.plant.state_size

    def at_rest(self, offsets):
        """`(N, n_p + n)`: the plant at rest at the steady state of the output
        `offsets (N, p)` from the operating point (the linear base's, for a
        neural plant), and the observer at the operating point, or, with an
        `encoder`, at the state it reads off the plant's window before $t = 0$."""
        import jax.numpy as jnp

        N_x, N_u = self.steady_state
        offsets = jnp.asarray(offsets)
        states = offsets @ jnp.asarray(N_x).T
        if self.encoder is None:
            estimates = jnp.zeros_like(states)
        else:
            level = jnp.asarray(self.input_level)[None]
            inputs = offsets @ jnp.asarray(N_u).T + level
            plant = self.loop.plant
            estimates = encoder_start(self.encoder, plant, states, inputs)
        return jnp.concatenate([states, estimates.astype(states.dtype)], axis=-1)

    def closed_loop(self, controller):
        """The trained (or baseline) controller `c` of `[x_hat; r]` wrapped as
        `SetPointFeedback` for `loop`."""
        from ..._control.set_point import SetPointFeedback

        return SetPointFeedback(
            controller,
            self.references,
            self.input_level,
            self.plant_state_size,
            self.loop.dt,
        )

    def cost(self, controller, z0s):
        """$\\operatorname{mean}_{\\text{batch}} \\sum_t (y_t - r_t)^\\top Q (y_t -
        r_t) + (u_t - u^{ss}_t)^\\top R (u_t - u^{ss}_t)$ of the closed loops from
        `z0s` `(N, n_p + n)` over the horizon."""
        trajectory = self.rollout(controller, z0s)
        return self.trajectory_cost(trajectory)

    def rollout(self, controller, z0s):
        from ..._rollout.rollout import rollout

        horizon = self.references.shape[0]
        return rollout(self.loop, z0s, horizon, controller=self.closed_loop(controller))

    def trajectory_cost(self, trajectory):
        import jax.numpy as jnp

        lead = (1,) * (trajectory.ys.ndim - 2)  # the batch axes
        outputs, inputs = self.output_targets, self.input_targets
        error = trajectory.ys - outputs.reshape(lead + outputs.shape)
        effort = trajectory.us - inputs.reshape(lead + inputs.shape)
        Q = jnp.asarray(self.weights.output_weight)
        R = jnp.asarray(self.weights.input_weight)
        per_step = jnp.einsum("...i,ij,...j->...", error, Q, error) + jnp.einsum(
            "...i,ij,...j->...", effort, R, effort
        )
        return jnp.mean(jnp.sum(per_step, axis=-1))


def _level(level, size: int) -> np.ndarray:
    return np.zeros(size) if level is None else np.asarray(level, np.float64)


def set_point_task(config: dict, plant: PlantFile) -> SetPointTask:
    """The task of `[cost]` and `train.horizon` on the plant's model."""
    from ..._control.observer import ObservedPlant
    from ..._control.set_point import steady_state_map
    from ..._systems.system import LinearSystem

    linear = plant.linear
    p, m = linear.output_size, linear.input_size
    weights = WeightsConfig.from_section(config["cost"], p, m)
    set_points = set_point_list(config, p)
    horizon = config["train"]["horizon"]
    y_level, u_level = _level(linear.output_level, p), _level(linear.input_level, m)
    references = schedule(set_points - y_level, horizon)
    N_x, N_u = steady_state_map(linear)
    # The plant without a sample time: the loop's time is the step index.
    stepped = LinearSystem(
        linear.K, linear.B, linear.C, linear.D,
        input_level=linear.input_level, output_level=linear.output_level,
    )  # fmt: skip
    if plant.neural is not None:  # the neural model on the stepped base
        import equinox as eqx

        stepped = eqx.tree_at(lambda model: model.base, plant.neural, stepped)
    return SetPointTask(
        loop=ObservedPlant(stepped, stepped, plant.observer_gain),
        references=references,
        output_targets=references + y_level,
        input_targets=references @ N_u.T + u_level,
        weights=weights,
        set_points=set_points,
        steady_state=(N_x, N_u),
        input_level=u_level,
        encoder=plant.encoder,
    )


def set_point_list(config: dict, outputs: int) -> np.ndarray:
    """`cost.set_point` as `(S, p)`: one set point (a list of `p` numbers) or a
    sequence (a list of such lists), in the outputs' units."""
    given = config["cost"]["set_point"]
    key = "config key 'cost.set_point'"
    if given is None:
        raise ConfigError(
            f"{key}: a model-file plant tracks output set points; give one set "
            f"point ({outputs} numbers, in the outputs' units) or a list of them."
        )
    rows = given if given and all(isinstance(g, list) for g in given) else [given]
    for row in rows:
        numbers = all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in row
        )
        if not numbers or len(row) != outputs or not np.all(np.isfinite(row)):
            raise ConfigError(
                f"{key}: expected {outputs} finite numbers per set point (one per "
                f"output of the model), got {row!r}."
            )
    return np.asarray(rows, dtype=np.float64)


def schedule(set_points: np.ndarray, horizon: int) -> np.ndarray:
    """`(T, p)`: the `S` set points held in turn over equal parts of `T` steps."""
    S = set_points.shape[0]
    which = np.minimum(np.arange(horizon) * S // horizon, S - 1)
    return set_points[which]


def initial_states(key, count: int, task: SetPointTask, spread: np.ndarray):
    """`(count, n_p + n)`: the plant at rest at outputs drawn uniformly in the
    operating point ± `spread` (output units); the observer, which does not know
    where the plant starts, at the operating point or at its encoder's estimate
    (`SetPointTask.at_rest`)."""
    import jax
    import jax.numpy as jnp

    p = task.steady_state[0].shape[1]
    unit = jax.random.uniform(key, (count, p), minval=-1, dtype=float)
    return task.at_rest(unit * jnp.asarray(spread)[None])
