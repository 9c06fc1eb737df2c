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


def assert_gradient_matches_differences(f, x, eps=1e-6, rtol=1e-6):
    """`jax.grad(f)` at the float64 array `x` equals `f`'s central finite
    differences (step `eps`, relative tolerance `rtol`; `f` is given JAX arrays)
    and no entry of it is zero."""
    import jax
    import jax.numpy as jnp

    grad = np.asarray(jax.grad(f)(jnp.asarray(x)))
    numeric = finite_difference_gradient(lambda v: f(jnp.asarray(v)), x, eps)
    np.testing.assert_allclose(grad, numeric, rtol=rtol)
    assert np.all(grad != 0)


def toml_text(config: dict) -> str:
    """The config as TOML (flat values and lists of numbers only)."""
    import json

    def value(v):
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    lines = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for section, keys in config.items():
        if isinstance(keys, dict):
            lines += [f"[{section}]", *(f"{k} = {value(v)}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


def refused_in_one_line(argv, tmp_path, capsys) -> str:
    """Run `dynsys` with `argv` (no progress, output under `tmp_path / "run"`) and
    check that it is refused before any work: exit code 2, one line on stderr and
    no traceback, no run folder. That line."""
    from dynsys import cli

    out = tmp_path / "run"
    code = cli.main([*argv, "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
    return err
