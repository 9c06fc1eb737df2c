"""Independent references for tests: plain Python loops and finite differences."""

import numpy as np


def python_loop_rollout(step, output, controller, x0, num_steps, inputs=None, t0=0):
    """Roll out with a plain Python loop in NumPy float64, appending rows to lists."""
    x = np.asarray(x0, dtype=np.float64)
    xs, us, ys = [x], [], []
    for k in range(num_steps):
        t = t0 + k
        u = None
        if controller is not None:
            u = np.asarray(controller(t, x), dtype=np.float64)
        if inputs is not None:
            u = inputs[k] if u is None else u + inputs[k]
        us.append(u)
        ys.append(np.asarray(output(t, x, u), dtype=np.float64))
        x = np.asarray(step(t, x, u), dtype=np.float64)
        xs.append(x)
    us_array = None if inputs is None and controller is None else np.stack(us)
    ys_array = np.stack(ys) if ys else np.zeros((0, len(x0)))
    return np.stack(xs), us_array, ys_array


def finite_difference_gradient(f, x, eps=1e-6):
    """Central finite differences of a scalar function `f` of a float64 array `x`."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (float(f(x + step)) - float(f(x - step))) / (2 * eps)
    return grad
