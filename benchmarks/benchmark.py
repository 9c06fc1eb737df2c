"""Benchmark dynsys rollouts and their gradients against hand-written baselines.

One run measures, side by side, for each workload W0-W4: dynsys's default method, a
bare `jax.lax.scan` written by hand, PyTorch (an autograd loop that stacks states)
where `torch` is importable, and for W0 the Python loop that grows the matrix with
`concatenate` under `jit`. Times are medians of repeats (after compilation);
memory is the compiled gradient's temporary bytes from `memory_analysis()`, as a
multiple of the trajectory's bytes. It prints a table and writes the section of
`docs/benchmarks.md` for the current backend (CPU or GPU), keeping the other one.

    python benchmarks/benchmark.py                # all workloads; docs/benchmarks.md
    python benchmarks/benchmark.py --workloads W0,W2 --no-write
    python benchmarks/benchmark.py --quick --output /tmp/bench.md   # smoke test
    python benchmarks/benchmark.py --no-fit       # rollout workloads only
    python benchmarks/benchmark.py --fit-only --no-write   # the fitting section only
    python benchmarks/benchmark.py --no-startup   # without start-up and cold/warm fits
    python benchmarks/benchmark.py --peers-python /tmp/peers/bin/python   # and SIPPY
    python benchmarks/benchmark.py --csv-only [--csv-rows 10000000]   # CSV reading

With inputs (U1, U2 and W1u, W3u: `m` open-loop inputs, the gradient also with
respect to `B`) the default method is compared with `Sequential()` too. The fitting
section (`benchmarks/benchmark_fit.py`) measures one `dynsys.fit` iteration against a
bare jitted step, and the time the default optimiser and tuned Adam take to reach
1.1x the true model's loss. The start-up section (`benchmarks/benchmark_startup.py`)
times `dynsys --help` against `python -c "import argparse"` and `dynsys fit` with a
cold and a warm compilation cache.

The same command runs unchanged on a GPU machine (it then fills the GPU section and
adds W2 with T = 10^6 for Sequential, Parallel and Chunked).
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import os
import platform
import statistics
import sys
import tempfile
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import dynsys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark_csv  # noqa: E402
import benchmark_fit  # noqa: E402
import benchmark_startup  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    batch: int  # 0: one trajectory without a batch axis
    n: int
    num_steps: int
    dtype: str
    mlp: bool = False  # closed loop with an MLP controller
    inputs: int = 0  # open-loop inputs m (0: none)

    def describe(self) -> str:
        batch = "1 trajectory" if self.batch == 0 else f"{self.batch} trajectories"
        extra = ", MLP controller (width 64)" if self.mlp else ""
        if self.inputs:
            extra += f", m = {self.inputs} inputs"
        return f"{batch}, n = {self.n}, T = {self.num_steps:,}, {self.dtype}{extra}"


FULL = [
    Workload("W0", 0, 3, 9, "float64"),
    Workload("W1", 1024, 32, 1000, "float32"),
    Workload("W2", 0, 3, 100_000, "float32"),
    Workload("W3", 16, 256, 2000, "float32"),
    Workload("W4", 256, 8, 1000, "float32", mlp=True),
    Workload("U1", 64, 32, 1000, "float32", inputs=4),
    Workload("U2", 64, 32, 1000, "float64", inputs=4),
    Workload("W1u", 1024, 32, 1000, "float32", inputs=4),
    Workload("W3u", 16, 256, 2000, "float32", inputs=4),
]
QUICK = [
    Workload("W0", 0, 3, 9, "float64"),
    Workload("W1", 8, 4, 50, "float32"),
    Workload("W2", 0, 3, 1000, "float32"),
    Workload("W3", 2, 8, 40, "float32"),
    Workload("W4", 4, 4, 30, "float32", mlp=True),
    Workload("U1", 4, 4, 100, "float32", inputs=2),
]
MLP_WIDTH, MLP_DEPTH, MLP_INPUTS = 64, 2, 2


# --- timing and memory ------------------------------------------------------------


def median_seconds(fn, args, min_repeats, budget):
    """Median wall time of `fn(*args)` (compiled beforehand), over >= min_repeats."""
    jax.block_until_ready(fn(*args))
    times = []
    start = time.perf_counter()
    while len(times) < min_repeats or (
        time.perf_counter() - start < budget and len(times) < 200
    ):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def temp_bytes(jitted, args):
    try:
        analysis = jitted.lower(*args).compile().memory_analysis()
        return None if analysis is None else analysis.temp_size_in_bytes
    except Exception:  # some backends give no analysis
        return None


# --- the workloads ----------------------------------------------------------------


def make_problem(w: Workload):
    dtype = jnp.dtype(w.dtype)
    k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
    # A stable K: 0.95 times an orthogonal matrix (all eigenvalues on |z| = 0.95).
    K = (0.95 * jnp.linalg.qr(jax.random.normal(k1, (w.n, w.n)))[0]).astype(dtype)
    shape = (w.n,) if w.batch == 0 else (w.batch, w.n)
    x0 = jax.random.normal(k2, shape, dtype)
    target_shape = shape[:-1] + (w.num_steps + 1, w.n)
    target = 0.1 * jax.random.normal(k3, target_shape, dtype)
    if w.inputs:
        k5, k6 = jax.random.split(k4)
        B = (jax.random.normal(k5, (w.n, w.inputs)) / jnp.sqrt(w.n)).astype(dtype)
        us = jax.random.normal(k6, shape[:-1] + (w.num_steps, w.inputs), dtype)
        return dict(K=K, B=B, x0=x0, us=us, target=target)
    if not w.mlp:
        return dict(K=K, x0=x0, target=target)
    B = (jax.random.normal(k4, (w.n, MLP_INPUTS)) / w.n).astype(dtype)
    controller = dynsys.MLPController(
        w.n, MLP_INPUTS, width_size=MLP_WIDTH, depth=MLP_DEPTH, key=k4, dtype=dtype
    )
    return dict(K=K, B=B, x0=x0, target=target, controller=controller)


def bare_scan_rollout(K, x0, num_steps):
    """The hand-written baseline: one lax.scan, states stacked, x0 prepended."""

    def body(x, _):
        x = x @ K.T
        return x, x

    _, xs = jax.lax.scan(body, x0, None, length=num_steps)  # (T, ..., n)
    xs = jnp.concatenate([x0[None], xs], axis=0)
    return jnp.moveaxis(xs, 0, -2)


def bare_scan_closed_loop(K, B, controller, x0, num_steps):
    def body(x, t):
        u = jax.vmap(controller, in_axes=(None, 0))(t, x)
        x = x @ K.T + u @ B.T
        return x, x

    ts = jnp.arange(num_steps)
    _, xs = jax.lax.scan(body, x0, ts)
    xs = jnp.concatenate([x0[None], xs], axis=0)
    return jnp.moveaxis(xs, 0, -2)


def bare_scan_with_inputs(K, B, x0, us):
    """The hand-written baseline with open-loop inputs `us (..., T, m)`."""

    def body(x, u):
        x = x @ K.T + u @ B.T
        return x, x

    _, xs = jax.lax.scan(body, x0, jnp.moveaxis(us, -2, 0))
    xs = jnp.concatenate([x0[None], xs], axis=0)
    return jnp.moveaxis(xs, 0, -2)


def concat_loop_rollout(K, x0, num_steps):
    """The naive baseline: grow the matrix row by row with concatenate."""
    xs = x0[None]
    x = x0
    for _ in range(num_steps):
        x = K @ x
        xs = jnp.concatenate([xs, x[None]], axis=0)
    return xs


def mse(xs, target):
    return jnp.mean((xs - target) ** 2)


def candidates(w: Workload, p):
    """`{name: (forward(*args), loss(*args), args, argnums)}` for one workload."""
    T = w.num_steps
    out = {}
    if w.inputs:

        def dyn_u(K, B, x0, us, method=None):
            system = dynsys.LinearSystem(K, B)
            return dynsys.rollout(system, x0, T, inputs=us, method=method).xs

        args = (p["K"], p["B"], p["x0"], p["us"], p["target"])
        for name, method in [("dynsys", None), ("dynsys Sequential()", None)]:
            if name != "dynsys":
                method = dynsys.Sequential()
            out[name] = (
                lambda K, B, x0, us, tg, m=method: dyn_u(K, B, x0, us, m),
                lambda K, B, x0, us, tg, m=method: mse(dyn_u(K, B, x0, us, m), tg),
                args,
            )
        out["bare scan"] = (
            lambda K, B, x0, us, tg: bare_scan_with_inputs(K, B, x0, us),
            lambda K, B, x0, us, tg: mse(bare_scan_with_inputs(K, B, x0, us), tg),
            args,
        )
        return out, (0, 1, 2)
    if not w.mlp:

        def dyn_fwd(K, x0, method=None):
            return dynsys.rollout(dynsys.LinearSystem(K), x0, T, method=method).xs

        args = (p["K"], p["x0"], p["target"])
        out["dynsys"] = (
            lambda K, x0, tg: dyn_fwd(K, x0),
            lambda K, x0, tg: mse(dyn_fwd(K, x0), tg),
            args,
        )
        out["bare scan"] = (
            lambda K, x0, tg: bare_scan_rollout(K, x0, T),
            lambda K, x0, tg: mse(bare_scan_rollout(K, x0, T), tg),
            args,
        )
        if w.name == "W0":
            out["concat loop"] = (
                lambda K, x0, tg: concat_loop_rollout(K, x0, T),
                lambda K, x0, tg: mse(concat_loop_rollout(K, x0, T), tg),
                args,
            )
        return out, (0, 1)

    params, static = eqx.partition(p["controller"], eqx.is_inexact_array)
    system = dynsys.LinearSystem(p["K"], p["B"])

    def dyn(params, x0, adjoint):
        controller = eqx.combine(params, static)
        return dynsys.rollout(system, x0, T, controller=controller, adjoint=adjoint).xs

    def bare(params, x0):
        controller = eqx.combine(params, static)
        return bare_scan_closed_loop(p["K"], p["B"], controller, x0, T)

    args = (params, p["x0"], p["target"])
    for name, adjoint in [
        ("dynsys", dynsys.Autodiff()),
        ("dynsys Checkpointed", dynsys.Checkpointed()),
    ]:
        out[name] = (
            lambda q, x0, tg, a=adjoint: dyn(q, x0, a),
            lambda q, x0, tg, a=adjoint: mse(dyn(q, x0, a), tg),
            args,
        )
    out["bare scan"] = (
        lambda q, x0, tg: bare(q, x0),
        lambda q, x0, tg: mse(bare(q, x0), tg),
        args,
    )
    return out, (0,)


def torch_times(w: Workload, p, min_repeats, budget):
    """(forward, gradient) seconds of an autograd loop in PyTorch, or None."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    dtype = {"float32": torch.float32, "float64": torch.float64}[w.dtype]
    K = torch.tensor(np.asarray(p["K"]), dtype=dtype, requires_grad=True)
    x0 = torch.tensor(np.asarray(p["x0"]), dtype=dtype, requires_grad=True)
    target = torch.tensor(np.asarray(p["target"]), dtype=dtype)
    params = [K, x0]
    if w.mlp:
        B = torch.tensor(np.asarray(p["B"]), dtype=dtype)
        net = torch.nn.Sequential(
            torch.nn.Linear(w.n + 1, MLP_WIDTH),
            torch.nn.Tanh(),
            torch.nn.Linear(MLP_WIDTH, MLP_WIDTH),
            torch.nn.Tanh(),
            torch.nn.Linear(MLP_WIDTH, MLP_INPUTS),
        ).to(dtype)
        params = list(net.parameters())

    def forward():
        x, xs = x0, [x0]
        for t in range(w.num_steps):
            if w.mlp:
                time_feature = torch.full(x.shape[:-1] + (1,), float(t), dtype=dtype)
                u = net(torch.cat([x, time_feature], dim=-1))
                x = x @ K.T + u @ B.T
            else:
                x = x @ K.T
            xs.append(x)
        return torch.stack(xs, dim=-2)

    def gradient():
        loss = torch.mean((forward() - target) ** 2)
        return torch.autograd.grad(loss, params)

    def timed(fn):
        fn()
        times, start = [], time.perf_counter()
        while len(times) < min_repeats or (
            time.perf_counter() - start < budget and len(times) < 50
        ):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    with torch.no_grad():
        fwd = timed(forward)
    return fwd, timed(gradient)


def run_workload(w: Workload, min_repeats, budget):
    p = make_problem(w)
    cands, argnums = candidates(w, p)
    traj_bytes = (
        (max(w.batch, 1)) * (w.num_steps + 1) * w.n * jnp.dtype(w.dtype).itemsize
    )
    rows = {}
    for name, (fwd, loss, args) in cands.items():
        fwd_j = jax.jit(fwd)
        grad_j = jax.jit(jax.grad(loss, argnums=argnums))
        rows[name] = dict(
            forward=median_seconds(fwd_j, args, min_repeats, budget),
            gradient=median_seconds(grad_j, args, min_repeats, budget),
            memory=temp_bytes(grad_j, args),
        )
    torch_result = None if w.inputs else torch_times(w, p, min_repeats, budget)
    if torch_result is not None:
        rows["PyTorch"] = dict(
            forward=torch_result[0], gradient=torch_result[1], memory=None
        )
    return rows, traj_bytes


def compile_seconds(num_steps, method=None, repeats=3):
    """Seconds to compile dynsys's gradient (n = 3, unbatched): the least of
    `repeats` compilations (each of a new function, so none is cached)."""
    K = 0.9 * jnp.eye(3, dtype=jnp.float32)
    x0 = jnp.ones(3, jnp.float32)
    best = float("inf")
    for _ in range(repeats):

        def loss(K, x0):
            traj = dynsys.rollout(dynsys.LinearSystem(K), x0, num_steps, method=method)
            return jnp.mean(traj.xs**2)

        lowered = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(K, x0)
        start = time.perf_counter()
        lowered.compile()
        best = min(best, time.perf_counter() - start)
    return best


def method_comparison(num_steps, min_repeats, budget):
    """W2 at a long horizon: gradient seconds per method (for the GPU section)."""
    w = Workload("W2", 0, 3, num_steps, "float32")
    p = make_problem(w)
    out = {}
    for method in [dynsys.Sequential(), dynsys.Parallel(), dynsys.Chunked(1000)]:

        def loss(K, x0, tg, method=method):
            xs = dynsys.rollout(dynsys.LinearSystem(K), x0, num_steps, method=method).xs
            return mse(xs, tg)

        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        out[repr(method)] = median_seconds(
            grad, (p["K"], p["x0"], p["target"]), min_repeats, budget
        )
    return out


# --- report -------------------------------------------------------------------------


def fmt_time(seconds):
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(x):
    return "—" if x is None else f"{x:.2f}×"


def versions():
    out = {"python": platform.python_version()}
    for package in ["jax", "jaxlib", "equinox", "numpy", "torch"]:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def machine():
    device = jax.devices()[0]
    kind = getattr(device, "device_kind", str(device))
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores "
        f"visible, JAX backend `{jax.default_backend()}` ({len(jax.devices())} × "
        f"{kind})"
    )


def results_table(workloads, results):
    lines = [
        "| workload | candidate | forward | gradient | gradient vs bare scan "
        "| temp memory / trajectory |",
        "|---|---|---|---|---|---|",
    ]
    for w in workloads:
        rows, traj_bytes = results[w.name]
        bare = rows["bare scan"]["gradient"]
        for name, row in rows.items():
            memory = row["memory"]
            mem = "—" if memory is None else f"{memory / traj_bytes:.2f}×"
            lines.append(
                f"| {w.name} | {name} | {fmt_time(row['forward'])} | "
                f"{fmt_time(row['gradient'])} | {fmt_ratio(row['gradient'] / bare)} | "
                f"{mem} |"
            )
    return lines


def targets(results, compile_times, quick):
    """`[(target, measured, met)]` for each target of the issue that was measured."""
    out = []

    def ratio(workload, name, key, base="bare scan"):
        rows = results[workload][0]
        return rows[name][key] / rows[base][key]

    def mem(workload, name):
        rows, traj = results[workload]
        m = rows[name]["memory"]
        return None if m is None else m / traj

    if "W0" in results:
        f, g = ratio("W0", "dynsys", "forward"), ratio("W0", "dynsys", "gradient")
        out.append(
            (
                "W0: dynsys within 1.15× of the bare scan (forward and gradient)",
                f"forward {f:.2f}×, gradient {g:.2f}×",
                max(f, g) <= 1.15,
            )
        )
    for name in ("U1", "U2", "W1u", "W3u"):
        if name in results:
            r = ratio(name, "dynsys", "gradient", base="dynsys Sequential()")
            out.append(
                (
                    f"{name}: default rollout gradient with inputs at most 1.05× "
                    "`Sequential()`'s",
                    f"{r:.2f}×",
                    r <= 1.05,
                )
            )
    for name, goal in [("W1", 2.0), ("W3", 2.0), ("W2", 5.0)]:
        if name in results:
            speedup = 1 / ratio(name, "dynsys", "gradient")
            out.append(
                (
                    f"{name}: gradient at least {goal:g}× faster than bare scan "
                    "autodiff",
                    f"{speedup:.2f}× faster",
                    speedup >= goal,
                )
            )
    if "W1" in results:
        m, b = mem("W1", "dynsys"), mem("W1", "bare scan")
        out.append(
            (
                "W1: gradient temp memory at most 1.5× the trajectory (bare: 3×)",
                f"{m:.2f}× (bare scan {b:.2f}×)" if m is not None else "—",
                m is not None and m <= 1.5,
            )
        )
    if "W4" in results:
        m, b = mem("W4", "dynsys Checkpointed"), mem("W4", "bare scan")
        t = ratio("W4", "dynsys Checkpointed", "gradient")
        out.append(
            (
                "W4: Checkpointed temp memory at most 3× the trajectory (bare: 11×) "
                "at no more than 1.6× the bare scan's gradient time",
                f"memory {m:.2f}× (bare scan {b:.2f}×), time {t:.2f}×"
                if m is not None
                else f"memory —, time {t:.2f}×",
                m is not None and m <= 3.0 and t <= 1.6,
            )
        )
    if compile_times:
        (short, t_short), (long, t_long) = compile_times[:2]
        per_method = ", ".join(f"{name}: {t:.2f} s" for name, t in compile_times[2:])
        out.append(
            (
                f"compile time of the default gradient for T = {long:,} within 2× "
                f"of T = {short}",
                f"{t_long:.2f} s vs {t_short:.2f} s ({t_long / t_short:.2f}×); "
                f"per method ({per_method})",
                t_long <= 2 * t_short,
            )
        )
    return out


def section(
    backend, workloads, results, compile_times, target_rows, extra, args, fit_lines
):
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## {backend.upper()}",
        "",
        f"Measured {now} with `{' '.join(['python', *sys.argv])}`"
        + (
            " (quick mode: tiny sizes, not meaningful as figures)."
            if args.quick
            else "."
        ),
        "",
        f"- Machine: {machine()}.",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + ".",
        "- Workloads: "
        + "; ".join(f"{w.name}: {w.describe()}" for w in workloads)
        + ".",
        "- Times are medians over repeats after compilation; the gradient is that "
        "of the mean squared error to a fixed target trajectory, with respect to "
        "`K` and `x0` (W0-W3), `K`, `B` and `x0` (with inputs: U1, U2, W1u, W3u) "
        "or the controller's parameters (W4). Memory is "
        "`memory_analysis().temp_size_in_bytes` of the compiled gradient divided by "
        "the bytes of the trajectory `xs`.",
        "",
        *results_table(workloads, results),
        "",
        *fit_lines,
        "### Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        *(f"| {t} | {m} | {'yes' if ok else 'no'} |" for t, m, ok in target_rows),
        "",
    ]
    if extra:
        lines += [
            "### W2 at T = 1,000,000: gradient per method",
            "",
            "| method | gradient |",
            "|---|---|",
            *(f"| `{name}` | {fmt_time(t)} |" for name, t in extra.items()),
            "",
        ]
    return "\n".join(lines)


HEADER = """# Benchmarks

Written by `benchmarks/benchmark.py` (rerun it to refresh a section; each backend
writes its own section and keeps the other), all figures of a section from one run
of the command it names. How the default method is chosen and what each method
costs: [Performance](performance.md). The fitting section (`fit` against a bare
jitted step, time to reach the true model's loss) comes from
`benchmarks/benchmark_fit.py`, run by the same command.
"""
GPU_PENDING = """## GPU

The GPU figures are still to be measured: run `python benchmarks/benchmark.py`
unchanged on a machine with a GPU (`jax.default_backend() == "gpu"`); it fills this
section, including W2 with T = 10⁶ for `Sequential`, `Parallel` and `Chunked`.
"""


def write_report(path, backend, text):
    """Replace this backend's section of the report, keep the other; atomically."""
    sections = {}
    if os.path.exists(path):
        old = open(path, encoding="utf-8").read()
        for other in ("cpu", "gpu"):
            b, e = f"<!-- {other} begin -->", f"<!-- {other} end -->"
            if b in old and e in old:
                sections[other] = old[old.index(b) + len(b) : old.index(e)].strip("\n")
    sections[backend] = text
    sections.setdefault("gpu", GPU_PENDING)
    sections.setdefault("cpu", "## CPU\n\nNot measured yet.\n")
    parts = [HEADER]
    for name in ("cpu", "gpu"):
        parts += [
            f"<!-- {name} begin -->",
            sections[name].rstrip("\n"),
            f"<!-- {name} end -->",
            "",
        ]
    content = "\n".join(parts)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".benchmarks-", suffix=".md")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(content)
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads",
        default=None,
        help="comma-separated, e.g. W0,W2 (default: all: W0-W4, U1, U2, W1u, W3u)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--repeats", type=int, default=5, help="minimum repeats")
    parser.add_argument(
        "--budget", type=float, default=1.0, help="seconds of repeats per measurement"
    )
    parser.add_argument("--output", default=None, help="default: docs/benchmarks.md")
    parser.add_argument("--no-write", action="store_true", help="only print")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the compile-time measurement"
    )
    parser.add_argument(
        "--no-fit", action="store_true", help="skip the fitting section"
    )
    parser.add_argument(
        "--fit-only", action="store_true", help="only the fitting section"
    )
    parser.add_argument(
        "--no-startup",
        action="store_true",
        help="skip the start-up and compilation-cache section",
    )
    parser.add_argument(
        "--peers-python",
        help="a Python with sippy_unipi: the start-up section also times SIPPY's "
        "N4SID on the heating record",
    )
    parser.add_argument(
        "--csv-only",
        action="store_true",
        help="only CSV reading: dynsys's fast and built-in paths against pandas",
    )
    parser.add_argument("--csv-rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    if args.csv_only:
        benchmark_csv.run(args.csv_rows)
        return
    if args.quick:
        args.repeats, args.budget = 2, 0.05
    jax.config.update("jax_enable_x64", True)  # W0 is float64; others ask float32

    table = QUICK if args.quick else FULL
    names = {w.name.upper(): w.name for w in table}
    if args.fit_only:
        chosen = set()
        args.no_compile = True
    elif args.workloads is None:
        chosen = set(names.values())
    else:
        asked = [name.strip() for name in args.workloads.split(",") if name.strip()]
        unknown = [name for name in asked if name.upper() not in names]
        if unknown:
            parser.error(
                f"unknown workloads {sorted(unknown)}; choose from "
                + ", ".join(w.name for w in table)
            )
        chosen = {names[name.upper()] for name in asked}
    workloads = [w for w in table if w.name in chosen]
    backend = "gpu" if jax.default_backend() == "gpu" else "cpu"

    results = {}
    for w in workloads:
        print(f"{w.name}: {w.describe()} …", flush=True)
        results[w.name] = run_workload(w, args.repeats, args.budget)
    compile_times = None
    if not args.no_compile:
        long = 1000 if args.quick else 100_000
        compile_times = ((10, compile_seconds(10)), (long, compile_seconds(long)))
        compile_times += tuple(
            (f"{method!r}, T = {steps:,}", compile_seconds(steps, method))
            for method in (dynsys.Sequential(), dynsys.Chunked(182))
            for steps in (100, long)
        )
    extra = None
    if backend == "gpu" and not args.quick:
        extra = method_comparison(1_000_000, args.repeats, args.budget)
    target_rows = targets(results, compile_times, args.quick)
    fit_lines = []
    if not args.no_fit:
        fit_lines, fit_targets = benchmark_fit.run(args.quick)
        target_rows += fit_targets
    if not args.no_startup:
        startup_lines, startup_targets = benchmark_startup.run(
            args.quick, args.peers_python
        )
        fit_lines += startup_lines
        target_rows += startup_targets

    text = section(
        backend, workloads, results, compile_times, target_rows, extra, args, fit_lines
    )
    print()
    print(text)
    if not args.no_write:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = args.output or os.path.join(root, "docs", "benchmarks.md")
        write_report(path, backend, text)
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
