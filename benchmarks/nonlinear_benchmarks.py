"""Measure `fit_neural` against the best linear model on nonlinear records: the pH
neutralisation record in the repository (data/real/ph_neutralisation.csv) and two
simulated stand-ins for public benchmarks that are not in the repository: a
cascaded-tanks-like system (two tanks, square-root outflow, overflow saturation,
sample time 4 s) and a Duffing oscillator (the Silverbox's electronic circuit).

Prints, for each record, the validation fit % and RMS (in the output's units) of the
linear and the neural model, both scored on the free run from sample `past` on (the
first `past` samples start it), and the wall times.

Run: `python benchmarks/nonlinear_benchmarks.py [ph|tanks|duffing ...] [--steps N]`
"""

import argparse
import pathlib
import time

import jax
import numpy as np

import dynsys


ROOT = pathlib.Path(__file__).resolve().parents[1]


def cascaded_tanks(num_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`(u, y)`: two tanks in series, $\\dot h_1 = -k_1 \\sqrt{h_1} + k_u u$,
    $\\dot h_2 = k_1 \\sqrt{h_1} - k_2 \\sqrt{h_2}$, levels clipped to [0, 10]
    (overflow), sampled every 4 s with the input held; pump voltage: random levels
    held 10-40 samples; output: the lower level plus 0.02 noise."""
    rng = np.random.default_rng(seed)
    return tank_response(held_levels(num_samples, rng, lambda k: (1.0, 8.0)), rng)


def held_levels(num_samples: int, rng, bounds) -> np.ndarray:
    """A pump voltage `(num_samples,)`: random levels held 10-40 samples, each
    drawn uniformly in `bounds(k)` (`(low, high)` for the level starting at sample
    `k`)."""
    u, k = np.empty(num_samples), 0
    while k < num_samples:
        hold = rng.integers(10, 40)
        u[k : k + hold] = rng.uniform(*bounds(k))
        k += hold
    return u


def tank_response(u: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """`(u (T, 1), y (T, 1))`: the two tanks of `cascaded_tanks` driven by the pump
    voltage `u (T,)` from levels of 3, the lower level plus 0.02 noise from
    `rng`."""
    k1, k2, ku, dt, sub = 0.06, 0.05, 0.05, 4.0, 20
    h = np.array([3.0, 3.0])
    y = np.empty(len(u))
    for t in range(len(u)):
        y[t] = h[1]
        for _ in range(sub):
            q1 = k1 * np.sqrt(max(h[0], 0.0))
            dh = np.array([-q1 + ku * u[t], q1 - k2 * np.sqrt(max(h[1], 0.0))])
            h = np.clip(h + dt / sub * dh, 0.0, 10.0)
    y = y + 0.02 * rng.standard_normal(len(u))
    return u[:, None], y[:, None]


def duffing(num_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`(u, y)`: $\\ddot y + 2 \\zeta \\omega \\dot y + \\omega^2 y + a y^3 = u$,
    RK4 with the input held over each sample; input low-pass filtered noise."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(num_samples + 50)
    u = np.convolve(noise, np.ones(8) / 8, mode="same")[:num_samples] * 1.5
    omega, zeta, a, dt, sub = 1.0, 0.05, 1.0, 0.3, 4
    state = np.zeros(2)

    def field(s, force):
        return np.array([s[1], force - 2 * zeta * omega * s[1] - omega**2 * s[0]
                         - a * s[0] ** 3])  # fmt: skip

    y = np.empty(num_samples)
    h = dt / sub
    for t in range(num_samples):
        y[t] = state[0]
        for _ in range(sub):
            k1 = field(state, u[t])
            k2 = field(state + h / 2 * k1, u[t])
            k3 = field(state + h / 2 * k2, u[t])
            k4 = field(state + h * k3, u[t])
            state = state + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return u[:, None], y[:, None]


def _dataset(u, y) -> dynsys.Dataset:
    return dynsys.Dataset(us=u[None], ys=y[None])


def records(name: str):
    """`(estimation, validation, order)` of a record by name."""
    if name == "ph":
        data = dynsys.load_dataset(
            ROOT / "data/real/ph_neutralisation.csv",
            inputs=["acid_flow", "base_flow"],
            outputs=["pH"],
        )
        estimation, validation = data.split_time(0.33)
        return estimation, validation, None
    if name == "tanks":
        est, val = cascaded_tanks(1024, 1), cascaded_tanks(1024, 2)
        return _dataset(*est), _dataset(*val), 2
    if name == "duffing":
        est, val = duffing(3000, 1), duffing(1000, 2)
        return _dataset(*est), _dataset(*val), 2
    raise ValueError(f"unknown record {name!r}")


def _scores(measured, predicted) -> tuple[float, float]:
    """Mean fit % over channels and RMS error (output units), `(N, T, p)` arrays."""
    measured, predicted = np.asarray(measured), np.asarray(predicted)
    spread = np.linalg.norm(measured - measured.mean(axis=(0, 1)), axis=(0, 1))
    error = np.linalg.norm(measured - predicted, axis=(0, 1))
    rms = float(np.sqrt(np.mean((measured - predicted) ** 2)))
    return float(np.mean(100 * (1 - error / spread))), rms


def measure(name: str, num_steps: int | None) -> None:
    estimation, validation, order = records(name)
    kwargs = {} if num_steps is None else {"num_steps": num_steps}
    start = time.perf_counter()
    result = dynsys.fit_neural(
        estimation, validation, order=order, key=jax.random.key(0), **kwargs
    )
    wall = time.perf_counter() - start
    past = result.past
    # The linear model's free run over the whole record (x0 estimated from all of
    # it), scored on the same samples as the neural one (from `past` on).
    linear = dynsys.compare(result.linear, validation)
    linear_scores = _scores(linear.measured[:, past:], linear.predicted[:, past:])
    neural = result.compare(validation)
    neural_scores = _scores(neural.measured, neural.predicted)
    print(
        f"{name}: linear fit {linear_scores[0]:.1f} % RMS {linear_scores[1]:.4g} | "
        f"neural fit {neural_scores[0]:.1f} % RMS {neural_scores[1]:.4g} | steps "
        f"{result.steps_run} (best {result.best_step}, stop: {result.stop_reason}) | "
        f"linear {result.seconds['linear']:.1f} s, neural "
        f"{result.seconds['neural']:.1f} s, total {wall:.1f} s",
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", default=["ph", "tanks", "duffing"])
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
    for name in args.records:
        measure(name, args.steps)


if __name__ == "__main__":
    main()
