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


_LOAD_IN_CHILD = r"""
import json, resource, sys
import dynsys
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    data = dynsys.load_dataset(sys.argv[1], **json.loads(sys.argv[2]))
    outcome = {"steps": data.num_steps, "error": None}
except ValueError as error:
    outcome = {"steps": None, "error": str(error)}
outcome["peak_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps(outcome))
"""


def load_in_child(path, **columns) -> dict:
    """`dynsys.load_dataset(path, **columns)` in a fresh Python process, to measure
    its memory: `{"steps": num_steps or None, "error": the ValueError's message or
    None, "peak_kib": the growth of the peak resident set size, in KiB}`."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _LOAD_IN_CHILD, str(path), json.dumps(columns)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def randomised(model, key, scale=0.3):
    """`model` with every floating array moved by normal noise of standard
    deviation `scale` (trained-like: a neural model's zero last layers are no
    longer zero, so it is truly nonlinear)."""
    import equinox as eqx
    import jax

    leaves, tree = jax.tree.flatten(model)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(
        tree,
        [
            leaf + scale * jax.random.normal(k, leaf.shape, leaf.dtype)
            if eqx.is_inexact_array(leaf)
            else leaf
            for leaf, k in zip(leaves, keys)
        ],
    )


def json_from_child(code: str, *args, cwd) -> dict:
    """Run the Python source `code` with the arguments `args` in a fresh process on
    the CPU, in the folder `cwd` (first on its path, beside dynsys), with a bare
    environment; the JSON its last printed line holds. The process must succeed."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    import dynsys

    path = os.pathsep.join([".", str(pathlib.Path(dynsys.__file__).parents[1])])
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
