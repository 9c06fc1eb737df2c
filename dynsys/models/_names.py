"""Channel names with units, for figures, tables and the command line."""

from typing import NamedTuple


class Names(NamedTuple):
    """The state, input and output names of a model, each with its unit, e.g.
    `Names(states=("θ (rad)", "ω (rad/s)"), inputs=("torque (N m)",),
    outputs=("θ (rad)", "ω (rad/s)"))`. Pass them on as `state_names=...`,
    `input_names=...`, `output_names=...` to `dynsys.plot` and to datasets."""

    states: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
