"""Benchmark layered controllers: gradient time through a closed-loop rollout, and
compile time against depth.

1. The gradient of a closed-loop cost (zoo pendulum, batch of 16 initial states, 100
   steps) with respect to a 6-layer, width-12 layered controller whose every layer is
   also fed `t` and `x`, written three ways with the same weights:
   `LayeredController` (tuple of layers, unrolled), `StackedController` (hidden
   layers scanned over depth), and a Python list of closures composed with
   `functools.reduce`.
2. Compile time (lowering + XLA compilation of that gradient) of the stacked form at
   depth 2 and 64, and of the tuple form at depth 64 for contrast.

Times are the minimum (compile) or median (run) of a few repeats, in one process, so
the ratios are comparable. Run: `python benchmarks/benchmark_controllers.py`.
"""

import argparse
import functools
import statistics
import time

import dynsys.models as zoo
import equinox as eqx
import jax
import jax.numpy as jnp

import dynsys


NUM_STEPS, BATCH, WIDTH, DEPTH = 100, 16, 12, 6


class ClosureController(dynsys.AbstractController):
    """The same network as a Python list of closures composed with `reduce`."""

    params: list[tuple[jax.Array, jax.Array, jax.Array]]

    def __call__(self, t, x):
        context = jnp.concatenate([x, jnp.reshape(t, (1,)).astype(x.dtype)])

        def make_layer(W, V, b, last):
            def layer(h):
                z = W @ h + V @ context + b
                return z if last else jnp.tanh(z)

            return layer

        layers = [
            make_layer(W, V, b, k == len(self.params) - 1)
            for k, (W, V, b) in enumerate(self.params)
        ]
        return functools.reduce(lambda h, f: f(h), layers, jnp.zeros((0,), x.dtype))


def closure_form(layered: dynsys.LayeredController) -> ClosureController:
    return ClosureController(
        [(la.weight, la.context_weight, la.bias) for la in layered.layers]
    )


def make_loss(system, x0s):
    def loss(controller):
        traj = dynsys.rollout(system, x0s, NUM_STEPS, controller=controller)
        return dynsys.quadratic_cost(traj, 1.0, 0.1)

    return loss


def compile_seconds(system, x0s, controller, repeats):
    best = float("inf")
    for _ in range(repeats):
        grad = eqx.filter_jit(
            eqx.filter_grad(make_loss(system, x0s))
        )  # fresh each time
        start = time.perf_counter()
        grad.lower(controller).compile()
        best = min(best, time.perf_counter() - start)
    return best


def run_seconds(system, x0s, controller, repeats):
    grad = eqx.filter_jit(eqx.filter_grad(make_loss(system, x0s)))
    jax.block_until_ready(grad(controller))  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(grad(controller))
        times.append(time.perf_counter() - start)
    return statistics.median(times), grad(controller)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed gradient runs")
    parser.add_argument("--compile-repeats", type=int, default=3)
    args = parser.parse_args(argv)

    system = zoo.Pendulum()
    key_init, key_x0 = jax.random.split(jax.random.key(0))
    x0s = jax.random.normal(key_x0, (BATCH, 2))
    layered = dynsys.LayeredController.mlp(2, 1, WIDTH, DEPTH, key=key_init)
    forms = {
        "LayeredController (tuple)": layered,
        "StackedController (scan)": dynsys.StackedController.from_layered(layered),
        "list of closures + reduce": closure_form(layered),
    }
    print(f"backend: {jax.default_backend()}, device: {jax.devices()[0].device_kind}")
    print(
        f"gradient of a {NUM_STEPS}-step closed-loop cost, batch {BATCH}, "
        f"{DEPTH} layers of width {WIDTH}, each fed (t, x); float32"
    )
    print("| form | compile (s) | gradient (ms) | vs tuple |")
    print("| --- | ---: | ---: | ---: |")
    results = {}
    for name, controller in forms.items():
        compile_s = compile_seconds(system, x0s, controller, args.compile_repeats)
        run_s, grad = run_seconds(system, x0s, controller, args.repeats)
        results[name] = (compile_s, run_s, grad)
    base = results["LayeredController (tuple)"][1]
    for name, (compile_s, run_s, _) in results.items():
        print(f"| {name} | {compile_s:.3f} | {1e3 * run_s:.3f} | {run_s / base:.2f}x |")
    # Same weights, same gradients (closure params are (W, V, b) per layer).
    g_tuple = results["LayeredController (tuple)"][2]
    g_closure = results["list of closures + reduce"][2]
    diff = max(
        float(jnp.max(jnp.abs(a - b), initial=0.0))
        for la, (W, V, b_) in zip(g_tuple.layers, g_closure.params)
        for a, b in [(la.weight, W), (la.context_weight, V), (la.bias, b_)]
    )
    print(f"max |gradient difference| tuple vs closures: {diff:.2e}")

    print()
    print("compile time of the gradient against depth (width 12, min of repeats)")
    print("| form | depth | compile (s) | vs stacked depth 2 |")
    print("| --- | ---: | ---: | ---: |")
    rows = []
    for depth in (2, 64):
        stacked = dynsys.StackedController.mlp(2, 1, WIDTH, depth, key=key_init)
        rows.append(
            (
                "stacked",
                depth,
                compile_seconds(system, x0s, stacked, args.compile_repeats),
            )
        )
    deep_tuple = dynsys.LayeredController.mlp(2, 1, WIDTH, 64, key=key_init)
    rows.append(("tuple", 64, compile_seconds(system, x0s, deep_tuple, 1)))
    for form, depth, seconds in rows:
        print(f"| {form} | {depth} | {seconds:.3f} | {seconds / rows[0][2]:.2f}x |")


if __name__ == "__main__":
    main()
