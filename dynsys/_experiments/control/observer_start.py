"""Where a neural plant's observer starts: the state its encoder reads off the
measured window before the task, with the plant held at rest at its starting
point (the constant starting input and the plant's output there)."""

import equinox as eqx
import jax
from jaxtyping import Array, Float


def encoder_start(
    encoder,
    plant,
    states: Float[Array, "N n_p"],
    inputs: Float[Array, "N m"],
) -> Float[Array, "N n"]:
    """The observer's initial states, shape `(N, n)`: `neural_initial_state` (the
    encoder as `compare(model, data, encoder=...)` applies it) on the records of
    `encoder.past` samples of each plant held at rest before $t = 0$.

    **Arguments:**

    - `encoder`: the neural model's `StateEncoder`.
    - `plant`: the simulated plant (an `AbstractSystem`), whose `output` gives
        the measured outputs.
    - `states (N, n_p)`: each plant's state at rest; `inputs (N, m)`: the input
        that holds it there, both in the plant's units.
    """
    import jax.numpy as jnp

    from ..._data.dataset import Dataset

    outputs = _measured(plant, states, inputs)
    # The encoder reads the first `past` samples of a record and gives the state
    # at the next one, t = 0 here: one sample more than it reads.
    length = encoder.past + 1

    def held(values):
        return jnp.repeat(values[:, None, :], length, axis=1)

    window = Dataset(us=held(inputs), ys=held(outputs))
    return _encoded(encoder, window)


# Compiled, each as one program: run op by op, the layers of a neural plant and
# of the encoder make the first start take seconds.


@eqx.filter_jit
def _measured(plant, states, inputs):
    """The plant's outputs at `states (N, n_p)` under `inputs (N, m)`: `(N, p)`."""
    return jax.vmap(lambda x, u: plant.output(0, x, u))(states, inputs)


@eqx.filter_jit
def _encoded(encoder, window):
    """`neural_initial_state(encoder, window)`: `(N, n)`."""
    from ..._sysid.neural_start import neural_initial_state

    return neural_initial_state(encoder, window)
