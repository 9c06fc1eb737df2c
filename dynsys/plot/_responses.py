"""The responses the response plots draw: computed from a system, or given."""

import numpy as np


def system_dt(systems, dt):
    """The sample time: `dt` if given, else the `dt` of the first system having one."""
    if dt is not None:
        return float(dt)
    for s in systems:
        value = getattr(s, "dt", None)
        if value:
            return float(value)
    return None


def _matrices(system, call: str, label: str):
    K = getattr(system, "K", None)
    B = getattr(system, "B", None)
    if K is None or B is None:
        raise ValueError(
            f"{call}(systems=...): {label!r} must be a linear system with K and B "
            f"(or a precomputed response array), got {type(system).__name__}."
        )
    K, B = np.asarray(K, dtype=float), np.asarray(B, dtype=float)
    C = getattr(system, "C", None)
    C = np.eye(K.shape[0]) if C is None else np.asarray(C, dtype=float)
    D = getattr(system, "D", None)
    D = np.zeros((C.shape[0], B.shape[1])) if D is None else np.asarray(D, dtype=float)
    return K, B, C, D


def frequency_response(system, w_sample: np.ndarray, call: str, label: str):
    """$H(e^{i w}) = C (e^{i w} I - K)^{-1} B + D$ at `w_sample` rad/sample,
    shape `(F, p, m)`."""
    K, B, C, D = _matrices(system, call, label)
    n = K.shape[0]
    z = np.exp(1j * np.asarray(w_sample, dtype=float))
    resolvent = np.linalg.solve(z[:, None, None] * np.eye(n) - K, B.astype(complex))
    return C @ resolvent + D


def step_response(system, num_steps: int, call: str, label: str) -> np.ndarray:
    """Outputs $y_0 \\dots y_{T-1}$ from $x_0 = 0$ under a unit step on each input,
    shape `(T, p, m)`; any system (by `dynsys.rollout`)."""
    import jax.numpy as jnp

    from .._rollout import rollout

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
