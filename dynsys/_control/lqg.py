"""The linear-quadratic baselines: the discrete LQR state feedback and the
steady-state Kalman (predictor) gain of a linear model, from the discrete
algebraic Riccati equations (SciPy's solver), as python-control's `dlqr` and
`dlqe` give them. Together, `OutputFeedback(LinearFeedback(lqr_gain(...)), n_p)`
on `ObservedPlant(plant, model, kalman_gain(...))` is the LQG controller."""

import numpy as np
import scipy.linalg

from .._systems.system import LinearSystem


def _linear(call: str, model) -> LinearSystem:
    linear = model.to_linear() if hasattr(model, "to_linear") else model
    if not isinstance(linear, LinearSystem):
        raise ValueError(
            f"{call}(model=...): expected a LinearSystem (or a model with "
            f"to_linear()), got {type(model).__name__}."
        )
    return linear


def _weight(call: str, name: str, value, size: int) -> np.ndarray:
    """A scalar (times the identity) or a symmetric `(size, size)` matrix."""
    matrix = np.asarray(value, dtype=np.float64)
    if matrix.ndim == 0:
        matrix = float(matrix) * np.eye(size)
    if matrix.shape != (size, size) or not np.all(np.isfinite(matrix)):
        raise ValueError(
            f"{call}({name}=...): expected a number or a finite ({size}, {size}) "
            f"matrix, got shape {matrix.shape}."
        )
    return (matrix + matrix.T) / 2


def _riccati(call: str, *arguments, s=None) -> np.ndarray:
    try:
        return scipy.linalg.solve_discrete_are(*arguments, s=s)
    except (np.linalg.LinAlgError, ValueError) as error:
        raise ValueError(
            f"{call}: the Riccati equation has no stabilising solution ({error}); "
            "the model may be unstabilisable or undetectable with these weights."
        ) from None


def lqr_gain(model, *, output_weight=1.0, input_weight=1.0, state_weight=None):
    """The discrete LQR gain $G$ (shape `(m, n)`): $u_t = -G x_t$ minimises
    $\\sum_t y_t^\\top Q_y y_t + x_t^\\top Q_x x_t + u_t^\\top R u_t$ over an infinite
    horizon for the model's deviations from its operating point ($y = C x + D u$;
    the cross term of `D` included).

    **Arguments:**

    - `model`: a `LinearSystem` (or a model with `to_linear()`) with inputs.
    - `output_weight`: $Q_y$, a number or `(p, p)` (needs `C`, or `p = n`).
    - `input_weight`: $R$, a number or `(m, m)`, positive definite.
    - `state_weight`: $Q_x$, a number or `(n, n)`, added to $C^\\top Q_y C$.

    **Returns:**

    `G` as a NumPy array `(m, n)`; `LinearFeedback(G)` applies it.
    """
    call = "lqr_gain"
    linear = _linear(call, model)
    if linear.B is None:
        raise ValueError(f"{call}(model=...): the model has no inputs to control.")
    K, B = np.asarray(linear.K, np.float64), np.asarray(linear.B, np.float64)
    n, m = B.shape
    C = np.eye(n) if linear.C is None else np.asarray(linear.C, np.float64)
    D = np.zeros((C.shape[0], m)) if linear.D is None else np.asarray(linear.D)
    Qy = _weight(call, "output_weight", output_weight, C.shape[0])
    R = _weight(call, "input_weight", input_weight, m) + D.T @ Qy @ D
    Q = C.T @ Qy @ C
    if state_weight is not None:
        Q = Q + _weight(call, "state_weight", state_weight, n)
    S = C.T @ Qy @ D
    P = _riccati(call, K, B, Q, R, s=S)
    return np.linalg.solve(R + B.T @ P @ B, B.T @ P @ K + S.T)


def kalman_gain(model, *, process_noise=1.0, measurement_noise=1.0):
    """The steady-state Kalman predictor gain $L$ (shape `(n, p)`) of the model
    with process noise $w_t$ on the state and measurement noise $v_t$ on the
    outputs: $\\hat x_{t+1} = K \\hat x_t + B u_t + L (y_t - C \\hat x_t - D u_t)$
    (`ObservedPlant`'s observer). For an `InnovationSystem` its own gain is the
    predictor gain already.

    **Arguments:**

    - `model`: a `LinearSystem` (or a model with `to_linear()`).
    - `process_noise`: $W = E[w w^\\top]$, a number or `(n, n)`.
    - `measurement_noise`: $V = E[v v^\\top]$, a number or `(p, p)`, positive
        definite.

    **Returns:**

    `L` as a NumPy array `(n, p)`.
    """
    call = "kalman_gain"
    linear = _linear(call, model)
    K = np.asarray(linear.K, np.float64)
    n = K.shape[0]
    C = np.eye(n) if linear.C is None else np.asarray(linear.C, np.float64)
    W = _weight(call, "process_noise", process_noise, n)
    V = _weight(call, "measurement_noise", measurement_noise, C.shape[0])
    P = _riccati(call, K.T, C.T, W, V)
    return K @ P @ C.T @ np.linalg.inv(C @ P @ C.T + V)
