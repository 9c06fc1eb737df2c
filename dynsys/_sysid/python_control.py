"""Conversion to and from python-control state-space systems (an optional
dependency, imported only when these functions are called)."""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from .._systems.innovation import InnovationSystem
from .._systems.ode import LinearODE
from .._systems.system import LinearSystem
from .channel_names import chosen_names, unwrapped
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


# `to_control(operating_point=...)`: what becomes of a model's operating point.
_OPERATING_POINT = ("left_out", "as_input")

# The name of the constant input that carries the operating point.
CONSTANT_INPUT = "1 (operating point)"


def to_control(
    system,
    *,
    names=None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    noise_inputs: bool = False,
    operating_point: str = "left_out",
):
    """The python-control state-space system (`control.StateSpace`) of a linear
    system.

    A model identified from data carries its operating point (`input_level`
    $\\bar u$, `output_level` $\\bar y$), which python-control has no place for.
    By default (`operating_point="left_out"`) the python-control system is the
    model of the deviations, $u - \\bar u \\mapsto y - \\bar y$, and a model with a
    non-zero operating point gets one `UserWarning` line saying so. With
    `operating_point="as_input"` it is kept, as one more input named
    `"1 (operating point)"`, to be held at the constant 1: its columns are the
    constant terms $B_1 = \\mathrm{offset} - B \\bar u$ and $D_1 = \\bar y - D \\bar u$,
    so the system maps the physical inputs (and that 1) to the physical outputs
    (MATLAB's `ss` has no levels either). This also carries an `offset`, which the
    default refuses.

    A discrete-time system (`LinearSystem`, or one with `to_linear()` such as
    `StableLinearSystem` and `Discretized`) becomes `control.ss(K, B, C, D, dt)` with
    its `dt`, or `dt=True` (discrete time, period unspecified) when it has none; a
    `LinearODE` becomes a continuous-time one (`dt=0`). Missing parts become
    `C = I`, `D = 0`, and `B` with no columns for a system without input. The
    conversion is exact (float64 numpy arrays).

    **Arguments:**

    - `system`: a `LinearSystem`, a system with `to_linear()`, a `LinearODE`, or
        an `Identified` (`dynsys.identify`'s answer: its model, with its data's
        channel names).
    - `names`: a `Dataset` (or an `Identified`) whose channel names to use.
    - `input_names`, `output_names`: the channels' names, before those of `names`
        (default: the `Identified`'s), kept as python-control's signal labels.
    - `noise_inputs`: for an `InnovationSystem`, also its noise channels: the
        inputs become $[u; e]$ with `B = [B, L]` and `D = [D, I]` (MATLAB's
        `ss(sys, 'augmented')` without the noise scaling); by default only the
        measured inputs (the noise-free model), as for any linear system.
    - `operating_point`: `"left_out"` (the model of the deviations, with a
        warning when there is an operating point) or `"as_input"` (a last,
        constant input that carries it).

    **Returns:**

    A `control.StateSpace` (named channels when names are known).

    **Raises:**

    `ImportError` when python-control is not installed; `TypeError` for a system that
    is not linear; `ValueError` for a system with an `offset` (without
    `operating_point="as_input"`), names that do not match its channels,
    `noise_inputs` for a system without a noise model, or another
    `operating_point`.

    **Example:**

    ```python
    system = dynsys.LinearSystem(jnp.array([[0.5]]), jnp.array([[1.0]]), dt=0.1)
    sys = dynsys.to_control(system)          # needs: pip install control
    sys = dynsys.to_control(system, input_names=["u (V)"], output_names=["y (C)"])
    found = dynsys.identify(data)            # names from the data, levels kept:
    sys = dynsys.to_control(found, operating_point="as_input")
    control.forced_response(sys, U=np.vstack([u, np.ones_like(u)]))  # y in units
    ```
    """
    call = "to_control"
    if operating_point not in _OPERATING_POINT:
        raise ValueError(
            f"{call}(operating_point=...): expected 'left_out' or 'as_input', got "
            f"{operating_point!r}."
        )
    system, *carried = unwrapped(system)
    input_names, output_names = chosen_names(
        call, names, input_names, output_names, tuple(carried)
    )
    control = _import_control(call)
    A, B, C, D, dt, constants = _matrices(call, system, noise_inputs)
    labels = _labels(call, "input_names", input_names, B.shape[1])
    labels |= _labels(call, "output_names", output_names, C.shape[0])
    if operating_point == "as_input":
        a, c = constants
        B = np.concatenate([B, a[:, None]], axis=1)
        D = np.concatenate([D, c[:, None]], axis=1)
        named = labels.get("inputs") or [f"u[{k}]" for k in range(B.shape[1] - 1)]
        labels["inputs"] = [*named, CONSTANT_INPUT]
    else:
        _refuse_offset(call, system)
        _say_levels_dropped(call, linear_of(system) or system)
    return control.ss(A, B, C, D, dt, **labels)


def _matrices(call: str, system, noise_inputs: bool):
    """`(A, B, C, D, dt, (a (n,), c (p,)))` of the python-control system: float64
    matrices with the missing parts filled in, python-control's `dt`, and the
    constant terms of the model written without levels (zeros when it has none)."""
    if noise_inputs:
        return _augmented_matrices(call, system)
    if isinstance(system, LinearODE):
        square, B, C, D, dt = (system.A, system.B, system.C, system.D, 0)
        constants = (None, None)
    else:
        linear = linear_of(system)
        if linear is None:
            raise TypeError(
                f"{call}(system=...): expected a LinearSystem, a system with "
                f"to_linear() or a LinearODE, got {type(system).__name__}."
            )
        square, B, C, D = linear.K, linear.B, linear.C, linear.D
        dt = True if linear.dt is None else linear.dt
        constants = linear.constant_terms()
    A = np.asarray(square, dtype=np.float64)
    n = A.shape[0]
    B = np.zeros((n, 0)) if B is None else np.asarray(B, dtype=np.float64)
    C = np.eye(n) if C is None else np.asarray(C, dtype=np.float64)
    p = C.shape[0]
    D = np.zeros((p, B.shape[1])) if D is None else np.asarray(D, dtype=np.float64)
    return A, B, C, D, dt, _filled(constants, n, p)


def _filled(constants, n: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """The constant terms `(a, c)` as float64 arrays, zeros where `None`."""
    a, c = constants
    a = np.zeros(n) if a is None else np.asarray(a, dtype=np.float64)
    c = np.zeros(p) if c is None else np.asarray(c, dtype=np.float64)
    return a, c


def _refuse_offset(call: str, system) -> None:
    linear = system if isinstance(system, LinearODE) else linear_of(system)
    if getattr(linear, "offset", None) is not None:
        raise ValueError(
            f"{call}(system=...): the system has an offset (an affine term), which a "
            "python-control state-space system cannot hold; pass "
            "operating_point='as_input' (a constant input carries it), remove it "
            "(offset=None) or shift the state or outputs first."
        )


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
        "operating_point='as_input' keeps it as a constant input.",
        UserWarning,
        stacklevel=_first_caller_outside(sys._getframe()),  # the user's call
    )


def _augmented_matrices(call: str, system):
    """`to_control(system, noise_inputs=True)`'s matrices: inputs $[u; e]$."""
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
    a, c = _filled(_innovation_constants(system), n, p)
    B = np.concatenate([B, np.asarray(system.kalman_gain, np.float64)], axis=1)
    D = np.concatenate([np.asarray(D, np.float64), np.eye(p)], axis=1)
    dt = True if system.dt is None else system.dt
    return A, B, C, D, dt, (a, c)


def _innovation_constants(system):
    """The constant terms of an `InnovationSystem` written without levels."""
    from .._systems.system import constant_terms

    return constant_terms(
        system.B, system.D, None, system.input_level, system.output_level
    )


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
