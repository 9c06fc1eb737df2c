"""Conversion to and from python-control state-space systems (an optional
dependency, imported only when these functions are called)."""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from .._systems.innovation import InnovationSystem
from .._systems.ode import LinearODE
from .._systems.system import LinearSystem
from .signals import linear_of


def _import_control(call: str):
    try:
        import control
    except ImportError as error:
        raise ImportError(
            f"{call} needs python-control, which is not installed: install the "
            "package `control` (or dynsys with the `control` extra: "
            "pip install 'dynsys[control]')."
        ) from error
    return control


def _labels(call: str, argument: str, names, count: int) -> dict:
    """`{keyword: names}` for `control.ss`, checked to be `count` names (or `{}`)."""
    if names is None:
        return {}
    names = [str(name) for name in names]
    if len(names) != count:
        raise ValueError(
            f"{call}({argument}=...): expected {count} names (one per channel), got "
            f"{len(names)}."
        )
    keyword = {"input_names": "inputs", "output_names": "outputs"}[argument]
    return {keyword: names}


def to_control(
    system,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    noise_inputs: bool = False,
):
    """The python-control state-space system (`control.StateSpace`) of a linear
    system.

    A model identified from data carries its operating point (`input_level`
    $\\bar u$, `output_level` $\\bar y$): the python-control system is the model of
    the deviations, $u - \\bar u \\mapsto y - \\bar y$ (python-control has no
    levels); add the levels back to its responses to get physical values. A model
    with a non-zero operating point gets a `UserWarning` saying so, since the
    `StateSpace` alone cannot show it.

    A discrete-time system (`LinearSystem`, or one with `to_linear()` such as
    `StableLinearSystem` and `Discretized`) becomes `control.ss(K, B, C, D, dt)` with
    its `dt`, or `dt=True` (discrete time, period unspecified) when it has none; a
    `LinearODE` becomes a continuous-time one (`dt=0`). Missing parts become
    `C = I`, `D = 0`, and `B` with no columns for a system without input. The
    conversion is exact (float64 numpy arrays).

    **Arguments:**

    - `system`: a `LinearSystem`, a system with `to_linear()`, or a `LinearODE`.
    - `input_names`, `output_names`: the channels' names (e.g. a `Dataset`'s
        `input_names`, `output_names`), kept as python-control's signal labels.
    - `noise_inputs`: for an `InnovationSystem`, also its noise channels: the
        inputs become $[u; e]$ with `B = [B, L]` and `D = [D, I]` (MATLAB's
        `ss(sys, 'augmented')` without the noise scaling); by default only the
        measured inputs (the noise-free model), as for any linear system.

    **Returns:**

    A `control.StateSpace` (named channels when names are given).

    **Raises:**

    `ImportError` when python-control is not installed; `TypeError` for a system that
    is not linear; `ValueError` for a system with an `offset` (python-control has no
    affine term) or names that do not match its channels, or `noise_inputs` for a
    system without a noise model.

    **Example:**

    ```python
    system = dynsys.LinearSystem(jnp.array([[0.5]]), jnp.array([[1.0]]), dt=0.1)
    sys = dynsys.to_control(system)          # needs: pip install control
    sys = dynsys.to_control(system, input_names=["u (V)"], output_names=["y (C)"])
    ```
    """
    call = "to_control"
    control = _import_control(call)
    if noise_inputs:
        return _augmented_control(control, system, input_names, output_names)
    if isinstance(system, LinearODE):
        square, B, C, D, dt, offset = (system.A, system.B, system.C, system.D, 0, None)
    else:
        linear = linear_of(system)
        if linear is None:
            raise TypeError(
                f"{call}(system=...): expected a LinearSystem, a system with "
                f"to_linear() or a LinearODE, got {type(system).__name__}."
            )
        square, B, C, D = linear.K, linear.B, linear.C, linear.D
        dt = True if linear.dt is None else linear.dt
        offset = linear.offset
    if offset is not None:
        raise ValueError(
            f"{call}(system=...): the system has an offset (an affine term), which a "
            "python-control state-space system cannot hold; remove it (offset=None) "
            "or shift the state or outputs first."
        )
    _say_levels_dropped(call, linear_of(system) or system)
    A = np.asarray(square, dtype=np.float64)
    n = A.shape[0]
    B = np.zeros((n, 0)) if B is None else np.asarray(B, dtype=np.float64)
    C = np.eye(n) if C is None else np.asarray(C, dtype=np.float64)
    D = (
        np.zeros((C.shape[0], B.shape[1]))
        if D is None
        else np.asarray(D, dtype=np.float64)
    )
    labels = _labels(call, "input_names", input_names, B.shape[1])
    labels |= _labels(call, "output_names", output_names, C.shape[0])
    return control.ss(A, B, C, D, dt, **labels)


def _say_levels_dropped(call: str, system) -> None:
    """Warn (once per call) when `system` has a non-zero operating point, which
    the python-control system cannot hold."""
    import sys
    import warnings

    from .._compile.cache import _first_caller_outside

    levels = {
        name: np.asarray(level, np.float64)
        for name in ("input_level", "output_level")
        if (level := getattr(system, name, None)) is not None
    }
    if not any(np.any(level != 0) for level in levels.values()):
        return
    said = ", ".join(
        f"{name.replace('_', ' ')} {np.array2string(v, precision=4, separator=', ')}"
        for name, v in levels.items()
    )
    warnings.warn(
        f"{call}: the model's operating point ({said}) is left out: python-control "
        "has no levels, so the StateSpace maps u - input_level to y - output_level; "
        "add the levels back to its responses for physical values.",
        UserWarning,
        stacklevel=_first_caller_outside(sys._getframe()),  # the user's call
    )


def _augmented_control(control, system, input_names, output_names):
    """`to_control(system, noise_inputs=True)`: inputs $[u; e]$."""
    call = "to_control"
    if not isinstance(system, InnovationSystem):
        raise ValueError(
            f"{call}(noise_inputs=True): expected an InnovationSystem (a model with a "
            f"noise model), got {type(system).__name__}."
        )
    A = np.asarray(system.K, dtype=np.float64)
    C = np.asarray(system.C, dtype=np.float64)
    n, p = A.shape[0], C.shape[0]
    B = np.zeros((n, 0)) if system.B is None else np.asarray(system.B, np.float64)
    D = np.zeros((p, B.shape[1])) if system.D is None else np.asarray(system.D)
    B = np.concatenate([B, np.asarray(system.kalman_gain, np.float64)], axis=1)
    D = np.concatenate([np.asarray(D, np.float64), np.eye(p)], axis=1)
    labels = _labels(call, "input_names", input_names, B.shape[1])
    labels |= _labels(call, "output_names", output_names, p)
    dt = True if system.dt is None else system.dt
    return control.ss(A, B, C, D, dt, **labels)


def from_control(
    sys, *, noise_inputs: int = 0
) -> LinearSystem | LinearODE | InnovationSystem:
    """The dynsys system of a python-control system.

    A discrete-time `control.StateSpace` (or anything `control.ss` accepts, such as a
    `TransferFunction`) becomes a `LinearSystem(K=A, B, C, D, dt)` (`dt=None` when
    python-control's `dt` is `True`, i.e. unspecified); a continuous-time one
    (`dt=0`) becomes a `LinearODE`. `B` with no columns becomes `None`, and so does
    an all-zero `D`; `C` is kept. Arrays take JAX's default float dtype.

    **Arguments:**

    - `sys`: a python-control system.
    - `noise_inputs`: the number of its last inputs that are noise channels $e_t$
        (as `to_control(..., noise_inputs=True)` writes them; must equal its
        number of outputs): the result is then an `InnovationSystem` whose
        `kalman_gain` is their columns of `B` (their columns of `D` must be the
        identity).

    **Returns:**

    A `LinearSystem` (discrete time) or a `LinearODE` (continuous time); an
    `InnovationSystem` with `noise_inputs`.

    **Raises:**

    `ImportError` when python-control is not installed; `TypeError` when `sys` is not
    a python-control system; `ValueError` for `noise_inputs` that do not fit it.

    **Example:**

    ```python
    system = dynsys.from_control(control.ss([[0.5]], [[1.0]], [[1.0]], [[0.0]], 0.1))
    ```
    """
    call = "from_control"
    control = _import_control(call)
    if not isinstance(sys, control.InputOutputSystem):
        raise TypeError(
            f"{call}(sys=...): expected a python-control system (StateSpace or "
            f"TransferFunction), got {type(sys).__name__}."
        )
    sys = control.ss(sys)
    A, B, C, D = (np.asarray(a, dtype=np.float64) for a in (sys.A, sys.B, sys.C, sys.D))
    if noise_inputs:
        return _innovation_of(call, sys, A, B, C, D, noise_inputs)
    B_or_none = None if B.shape[1] == 0 else jnp.asarray(B)
    D_or_none = None if B_or_none is None or not np.any(D) else jnp.asarray(D)
    if sys.dt == 0 or sys.dt is None:
        return LinearODE(jnp.asarray(A), B_or_none, jnp.asarray(C), D_or_none)
    dt = None if sys.dt is True else float(sys.dt)
    return LinearSystem(jnp.asarray(A), B_or_none, jnp.asarray(C), D_or_none, dt=dt)


def _innovation_of(call, sys, A, B, C, D, noise_inputs) -> InnovationSystem:
    """`from_control(sys, noise_inputs=p)`: the last `p` inputs are the noise."""
    p = C.shape[0]
    if noise_inputs != p or B.shape[1] < p:
        raise ValueError(
            f"{call}(noise_inputs=...): expected the number of outputs p = {p} (and "
            f"at most the {B.shape[1]} inputs), got {noise_inputs!r}."
        )
    if sys.dt == 0 or sys.dt is None:
        raise ValueError(
            f"{call}(noise_inputs=...): an innovation-form model is discrete time, "
            "but the system is continuous time (dt = 0)."
        )
    if not np.allclose(D[:, -p:], np.eye(p)):
        raise ValueError(
            f"{call}(noise_inputs={p}): the noise columns of D must be the identity "
            f"(y = C x + D u + e), got {D[:, -p:].tolist()}."
        )
    m = B.shape[1] - p
    B_u = None if m == 0 else jnp.asarray(B[:, :m])
    D_u = None if m == 0 or not np.any(D[:, :m]) else jnp.asarray(D[:, :m])
    dt = None if sys.dt is True else float(sys.dt)
    return InnovationSystem(
        jnp.asarray(A),
        B_u,
        jnp.asarray(C),
        D_u,
        kalman_gain=jnp.asarray(B[:, m:]),
        dt=dt,
    )
