"""Output feedback through an observer: the plant and a model's state estimate
simulated as one system, so that a controller that sees only the estimate is
trained through `rollout` with exact gradients (observer gain included)."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from .._custom_types import Input, Output, State, Time
from .._systems.controller import AbstractController
from .._systems.system import AbstractSystem


class ObservedPlant(AbstractSystem):
    """A plant and an observer of it built from a model, as one system.

    The state is $z = (x, \\hat x)$: the plant's state $x$ (shape `(n_p,)`) followed
    by the model's estimate $\\hat x$ (shape `(n,)`). With the input $u_t$,

    $x_{t+1} = \\mathrm{plant.step}(t, x_t, u_t)$, $\\quad y_t =
    \\mathrm{plant.output}(t, x_t, u_t)$,

    $\\hat x_{t+1} = \\mathrm{model.step}(t, \\hat x_t, u_t) + L\\,(y_t -
    \\mathrm{model.output}(t, \\hat x_t, u_t))$,

    the one-step predictor form of a Luenberger or steady-state Kalman observer
    (`kalman_gain` gives $L$ for a linear model). The output is the plant's $y_t$.
    With `model` the identified model and `plant` the true system (or the model
    itself), a controller wrapped in `OutputFeedback` sees only $\\hat x$, as on the
    real plant.

    **Arguments:**

    - `plant`: the simulated plant, an `AbstractSystem` with outputs.
    - `model`: the observer's model, with the plant's input and output sizes.
    - `gain`: the observer gain $L$, shape `(n, p)` (`n` the model's state size,
        `p` the outputs); trainable like every other array.

    **Raises:**

    `ValueError` (one line) when the sizes do not match.
    """

    plant: AbstractSystem
    model: AbstractSystem
    gain: Float[Array, "n p"]

    def __init__(
        self, plant: AbstractSystem, model: AbstractSystem, gain: Real[ArrayLike, "n p"]
    ):
        self.plant = plant
        self.model = model
        self.gain = jnp.asarray(gain, dtype=jnp.result_type(float))

    def __check_init__(self):
        call = "ObservedPlant"
        if (self.model.input_size, self.model.output_size) != (
            self.plant.input_size,
            self.plant.output_size,
        ):
            raise ValueError(
                f"{call}(model=...): expected {self.plant.input_size} inputs and "
                f"{self.plant.output_size} outputs (the plant's), got "
                f"{self.model.input_size} and {self.model.output_size}."
            )
        expected = (self.model.state_size, self.plant.output_size)
        if tuple(self.gain.shape) != expected:
            raise ValueError(
                f"{call}(gain=...): expected shape (n, p) = {expected}, got "
                f"{tuple(self.gain.shape)}."
            )

    @property
    def state_size(self) -> int:
        return self.plant.state_size + self.model.state_size

    @property
    def input_size(self) -> int:
        return self.plant.input_size

    @property
    def output_size(self) -> int:
        return self.plant.output_size

    @property
    def dt(self) -> float | None:
        return getattr(self.plant, "dt", None)

    def split(self, z: Array) -> tuple[Array, Array]:
        """`(x, x_hat)` of a state `z` of shape `(..., n_p + n)`."""
        n_p = self.plant.state_size
        return z[..., :n_p], z[..., n_p:]

    def step(self, t: Time, z: State, u: Input) -> State:
        x, estimate = self.split(z)
        y = self.plant.output(t, x, u)
        innovation = y - self.model.output(t, estimate, u)
        return jnp.concatenate(
            [
                self.plant.step(t, x, u),
                self.model.step(t, estimate, u) + self.gain @ innovation,
            ]
        )

    def output(self, t: Time, z: State, u: Input) -> Output:
        return self.plant.output(t, self.split(z)[0], u)


class OutputFeedback(AbstractController):
    """A controller that sees only the observer's estimate $\\hat x$ of an
    `ObservedPlant`'s state $z = (x, \\hat x)$: $u_t = \\mathrm{controller}(t,
    \\hat x_t)$.

    **Arguments:**

    - `controller`: any `AbstractController` of the model's state (e.g.
        `LinearFeedback`, `MLPController`, a layered controller).
    - `plant_state_size`: `n_p`, the size of the plant's part of $z$
        (`ObservedPlant.plant.state_size`).
    """

    controller: AbstractController
    plant_state_size: int = eqx.field(static=True)

    def __check_init__(self):
        if isinstance(self.plant_state_size, bool) or not (
            isinstance(self.plant_state_size, int) and self.plant_state_size >= 0
        ):
            raise ValueError(
                "OutputFeedback(plant_state_size=...): expected an integer >= 0, "
                f"got {self.plant_state_size!r}."
            )

    def __call__(self, t: Time, z: State) -> Float[Array, " m"]:
        return self.controller(t, z[..., self.plant_state_size :])
