"""The responses the response plots draw: computed from a system, or given; and
what the response plots share: the labelled systems, channel names, the
(output, input) pairs drawn and their line styles."""

from collections.abc import Mapping

import numpy as np

from . import _layout
from ._style import model_styles, style


def named(systems, names, input_names, output_names, call: str):
    """`(systems, input names, output names)`: each `Identified` among `systems`
    (one, or a mapping's values) as its model, and the channel names chosen as
    `present` chooses them: the given ones, then those of `names` (a `Dataset`),
    then the first `Identified`'s."""
    from .._sysid.channel_names import chosen_names, unwrapped

    carried: tuple = (None, None)
    if isinstance(systems, Mapping):
        unwrapped_systems = {}
        for label, system in systems.items():
            model, *own = unwrapped(system)
            unwrapped_systems[label] = model
            carried = carried if carried != (None, None) else tuple(own)
        systems = unwrapped_systems
    else:
        systems, *own = unwrapped(systems)
        carried = tuple(own)
    inputs, outputs = chosen_names(call, names, input_names, output_names, carried)
    return systems, inputs, outputs


def labelled(systems, truth) -> tuple[dict, dict]:
    """`(systems, series)`: the systems as a mapping label → system (a single
    system is `"model"`), and the same preceded by `"true system"` when `truth` is
    given."""
    systems = dict(systems) if isinstance(systems, Mapping) else {"model": systems}
    series = ({"true system": truth} if truth is not None else {}) | systems
    return systems, series


def io_panels(
    responses, systems, roles, truth, output_names, input_names, outputs, inputs, call
):
    """`(output names, input names, (output, input) pairs, styles)` of a response
    plot, from `responses` (label → `(leading, p, m)`)."""
    _, p, m = next(iter(responses.values())).shape
    out_names = _layout.names(output_names, "y", p, call, "output_names")
    in_names = _layout.names(input_names, "u", m, call, "input_names")
    pairs = _layout.io_pairs(p, m, outputs, inputs, call)
    styles = model_styles(list(systems), roles, call)
    if truth is not None:
        styles = {"true system": style("truth")} | styles
    return out_names, in_names, pairs, styles


def system_dt(systems, dt):
    """The sample time: `dt` if given, else the `dt` of the first system having one."""
    if dt is not None:
        return float(dt)
    for s in systems:
        value = getattr(s, "dt", None)
        if value:
            return float(value)
    return None


def _linear(system):
    from .._sysid.signals import linear_of

    return linear_of(system)


def figure_frequency_response(system, w_sample: np.ndarray, call: str, label: str):
    """`dynsys.frequency_response` at `w_sample` rad/sample, shape `(F, p, m)`
    (computed on the host, in float64)."""
    from .._sysid import host_response

    linear = _linear(system)
    if linear is None or linear.B is None:
        raise ValueError(
            f"{call}(systems=...): {label!r} must be a linear system with inputs "
            f"(or a precomputed response array), got {type(system).__name__}."
        )
    matrices = host_response.matrices_of(linear, "frequency_response")
    return host_response.frequency_response_from_matrices(matrices, w_sample)


def figure_step_response(system, num_steps: int, call: str, label: str) -> np.ndarray:
    """Outputs $y_0 \\dots y_{T-1}$ from $x_0 = 0$ under a unit step on each input,
    shape `(T, p, m)`: `dynsys.step_response` for a linear system (computed on the
    host, in float64), else one `dynsys.rollout` per input (any system with
    inputs)."""
    import jax.numpy as jnp

    from .._rollout.rollout import rollout
    from .._sysid import host_response

    linear = _linear(system)
    if linear is not None and linear.B is not None:
        matrices = host_response.matrices_of(linear, "step_response")
        return host_response.step_response_from_matrices(matrices, num_steps)
    m = getattr(system, "input_size", 0)
    if not m:
        raise ValueError(
            f"{call}(systems=...): {label!r} has no input, so no step response."
        )
    n = system.state_size
    steps = jnp.broadcast_to(jnp.eye(m)[:, None, :], (m, num_steps, m))
    traj = rollout(system, jnp.zeros((m, n)), num_steps, inputs=steps)
    return np.moveaxis(np.asarray(traj.ys), 0, -1)  # (T, p, m)


def check_response(value, leading: int, call: str, label: str, what: str):
    value = np.asarray(value)
    if value.ndim == 1:
        value = value[:, None, None]
    if value.ndim != 3 or value.shape[0] != leading:
        raise ValueError(
            f"{call}(systems=...): {label!r} must have shape ({leading}, p, m) "
            f"({what}), got {value.shape}."
        )
    return value
