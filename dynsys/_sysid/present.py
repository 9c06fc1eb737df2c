"""A linear model as a reader wants to see it (`present`, as MATLAB's `present(sys)`):
its size and sample time, its operating point, poles, zeros, static gains and
transfer functions, with standard deviations when a covariance is given."""

from collections.abc import Sequence

import numpy as np
import scipy.linalg

from .channel_names import chosen_names, unwrapped
from .response import modes
from .signals import linear_of


def present(
    model,
    covariance=None,
    *,
    names=None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> str:
    """A readable summary of a linear model: sizes and sample time, operating
    point, each pole (eigenvalue, natural frequency, damping ratio), the zeros,
    static gain and transfer function of each (input, output) pair; with
    `covariance`, the poles' and static gains' standard deviations (`± std`, by
    linearisation, as `pole_uncertainty` and `static_gain_uncertainty`).
    `print(found)` of an `Identified` prints this, with its names and covariance.

    **Arguments:**

    - `model`: a `LinearSystem` (or a model with `to_linear()`, such as an
        identified `StableLinearSystem`), or an `Identified` (`dynsys.identify`'s
        answer: its model, its data's channel names and its covariance).
    - `covariance`: optional `ParameterCovariance` of that model
        (`FitResult.covariance`).
    - `names`: a `Dataset` (or an `Identified`) whose channel names to use.
    - `input_names`, `output_names`: the channels' names, before those of
        `names`; default: the `Identified`'s, else `u0, ...`, `y0, ...`.

    **Returns:**

    The summary, a `str` of several lines (print it).

    **Raises:**

    `TypeError` for a model that is not linear; `ValueError` for names that do not
    match its channels.

    **Example:**

    ```python
    model = dynsys.LinearSystem(jnp.array([[0.9]]), jnp.array([[0.5]]), dt=0.1)
    print(dynsys.present(model, input_names=["drive (V)"], output_names=["T (C)"]))
    # result = dynsys.fit(start, data): the fitted model, ± std, the data's names
    print(dynsys.present(result.model, result.covariance, names=data))
    ```
    """
    given = model
    model, *carried = unwrapped(model)
    if covariance is None and model is not given:
        covariance = getattr(given, "covariance", None)
    input_names, output_names = chosen_names(
        "present", names, input_names, output_names, tuple(carried)
    )
    linear = linear_of(model)
    if linear is None:
        raise TypeError(
            "present(model=...): expected a LinearSystem or a model with "
            f"to_linear(), got {type(model).__name__}."
        )
    K, B, C, D = _matrices(linear)
    n, m, p = K.shape[0], B.shape[1], C.shape[0]
    inputs = _names("input_names", input_names, m, "u")
    outputs = _names("output_names", output_names, p, "y")
    poles, gain_std = _uncertainty(covariance, model)
    lines = [_heading(linear, n, m, p)]
    lines += _levels(linear, inputs, outputs)
    lines += _poles(linear, poles)
    for i, j in ((i, j) for i in range(p) for j in range(m)):
        lines += _pair(K, B[:, j], C[i], D[i, j], inputs[j], outputs[i], gain_std, i, j)
    return "\n".join(lines)


def _matrices(linear):
    K = np.asarray(linear.K, np.float64)
    n = K.shape[0]
    B = np.zeros((n, 0)) if linear.B is None else np.asarray(linear.B, np.float64)
    C = np.eye(n) if linear.C is None else np.asarray(linear.C, np.float64)
    D = np.zeros((C.shape[0], B.shape[1]))
    if linear.D is not None:
        D = np.asarray(linear.D, np.float64)
    return K, B, C, D


def _names(argument: str, names, count: int, letter: str) -> list[str]:
    if names is None:
        return [f"{letter}{k}" for k in range(count)]
    names = [str(name) for name in names]
    if len(names) != count:
        raise ValueError(
            f"present({argument}=...): expected {count} names (one per channel), "
            f"got {len(names)}."
        )
    return names


def _uncertainty(covariance, model):
    """`(PoleUncertainty or None, static gain std (p, m) or None)`."""
    if covariance is None:
        return None, None
    from .bands import pole_uncertainty, static_gain_uncertainty

    poles = pole_uncertainty(covariance, model)
    _, std = static_gain_uncertainty(covariance, model)
    return poles, np.asarray(std)


def _heading(linear, n: int, m: int, p: int) -> str:
    time = f"dt = {linear.dt:g} s" if linear.dt else "no dt: time in steps"
    return (
        f"discrete-time linear model x[t+1] = K x[t] + B u[t], y[t] = C x[t] + D u[t]"
        f": {n} states, {m} inputs, {p} outputs; {time}"
    )


def _levels(linear, inputs, outputs) -> list[str]:
    lines = []
    for what, level, names in (
        ("input", linear.input_level, inputs),
        ("output", linear.output_level, outputs),
    ):
        if level is not None:
            values = ", ".join(
                f"{name} {v:.6g}" for name, v in zip(names, np.asarray(level))
            )
            lines.append(f"operating point, {what}s: {values}")
    if lines:
        lines.append("  (the matrices act on the deviations u - input level, "
                     "y - output level)")  # fmt: skip
    return lines


def _poles(linear, poles) -> list[str]:
    """One line per pole, sorted as `modes` sorts them."""
    found = modes(linear) if poles is None else poles
    unit = "rad/s" if linear.dt else "rad/sample"
    lines = ["poles (eigenvalue of K; natural frequency; damping ratio):"]
    for k, z in enumerate(np.asarray(found.eigenvalues)):
        frequency = float(np.asarray(found.natural_frequency)[k])
        damping = float(np.asarray(found.damping_ratio)[k])
        f_text, d_text = f"{frequency:.4g}", f"{damping:.4g}"
        if poles is not None:
            f_text += f" ± {float(np.asarray(poles.natural_frequency_std)[k]):.2g}"
            d_text += f" ± {float(np.asarray(poles.damping_std)[k]):.2g}"
        lines.append(f"  {_complex(z)}; {f_text} {unit}; {d_text}")
    return lines


def _pair(K, b, c, d, input_name, output_name, gain_std, i, j) -> list[str]:
    """The zeros, static gain and transfer function of one (input, output) pair."""
    zeros = siso_zeros(K, b, c, d)
    gain = static_gain(K, b, c, d)
    gain_text = f"{gain:.6g}"
    if gain_std is not None:
        gain_text += f" ± {gain_std[i, j]:.2g}"
    numerator, denominator = transfer_function(K, b, c, d)
    zero_text = ", ".join(_complex(z) for z in zeros) if len(zeros) else "none"
    return [
        f"{input_name} → {output_name}:",
        f"  static gain {gain_text}",
        f"  zeros: {zero_text}",
        f"  transfer function (powers of z, highest first): "
        f"[{_coefficients(numerator)}] / [{_coefficients(denominator)}]",
    ]


def siso_zeros(K, b, c, d) -> np.ndarray:
    """The finite zeros of $c (zI - K)^{-1} b + d$: the finite generalised
    eigenvalues of the Rosenbrock pencil $[[K, b], [c, d]] - z [[I, 0], [0, 0]]$."""
    n = K.shape[0]
    system = np.block([[K, b[:, None]], [c[None, :], np.array([[d]])]])
    mass = np.zeros((n + 1, n + 1))
    mass[:n, :n] = np.eye(n)
    values = scipy.linalg.eigvals(system, mass)
    finite = values[np.isfinite(values)]
    return finite[np.argsort(-np.abs(finite))]


def static_gain(K, b, c, d) -> float:
    """$c (I - K)^{-1} b + d$ (inf for an eigenvalue of exactly 1)."""
    try:
        return float(c @ np.linalg.solve(np.eye(K.shape[0]) - K, b) + d)
    except np.linalg.LinAlgError:
        return float("inf")


def transfer_function(K, b, c, d) -> tuple[np.ndarray, np.ndarray]:
    """`(numerator, denominator)` coefficients in powers of $z$, highest first:
    $\\det(zI - K + b c) - \\det(zI - K) + d \\det(zI - K)$ over $\\det(zI - K)$."""
    denominator = np.real(np.poly(K)) if K.size else np.ones(1)
    numerator = np.real(np.poly(K - np.outer(b, c))) if K.size else np.ones(1)
    return numerator - denominator + d * denominator, denominator


def _complex(z) -> str:
    z = complex(z)
    if z.imag == 0:
        return f"{z.real:.6g}"
    return f"{z.real:.6g} {'+' if z.imag > 0 else '-'} {abs(z.imag):.6g}j"


def _coefficients(values) -> str:
    return ", ".join(f"{v:.6g}" for v in values)
