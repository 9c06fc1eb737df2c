"""The neural default as the public nonlinear benchmarks judge it, on simulated
stand-ins: each case writes an estimation record and a separate test record, runs
`dynsys fit ESTIMATION --model neural` on the estimation record alone (nothing
else given), then scores the saved linear and neural models on the test record
the run never saw (`dynsys.compare`: the linear model's initial state by least
squares, the neural model's from its encoder on the first 20 samples; both scored
from sample 20 on).

Cases (issue 46's three benchmarks; their test records are not in the repository):

- `bouc_wen`: the hysteretic Bouc-Wen oscillator with the parameters of the
  public benchmark (Noel and Schoukens 2016: `m = 2`, `c = 10`, `k = 5e4`,
  `alpha = 5e4`, `beta = 1e3`, `gamma = 0.8`, `delta = -1.1`, `nu = 1`), 750 Hz,
  random-phase multisines of 50 N RMS over 5-150 Hz; estimation: five periods of
  8,192 samples; test: one period of another realisation; displacement in m, 1 %
  noise.
- `silverbox`: a Duffing oscillator like the Silverbox (`y'' + 2 zeta w y' + w^2
  (y + a y^3) = w^2 g u`, its linear part from an order-2 fit of the shared
  estimation record: 69.6 Hz, `zeta = 0.048`, `g = 0.93`; `a = 5`), 610.35 Hz;
  estimation: four odd random-phase multisines of 0.022 V RMS (12,288 samples
  each, steady state); test: an "arrow", band-limited noise whose amplitude grows
  linearly to twice the estimation's RMS (40,000 samples; its last part leaves
  the estimation's output range, as the benchmark's arrow does).
- `tanks`: two tanks in cascade (`nonlinear_benchmarks.cascaded_tanks`: square-root
  outflows, overflow saturation, 4 s), 1,024 samples each, other random pump
  levels for the test record.

Run (from the repository root; about 3 minutes a case on a 2-core machine, the
tanks under one):

    python benchmarks/nonlinear_stand_ins.py [bouc_wen silverbox tanks] [--seed 0]

Prints one markdown row per case: RMS of the linear and the neural model on the
test record (whole, and over its last fifth: for `silverbox`, the extrapolated part),
their ratio, the neural model's best step and the run's wall time.
"""

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import dynsys


jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from nonlinear_benchmarks import cascaded_tanks  # noqa: E402


def _rk4_sampled(field, num_states: int, rate: float, substeps: int):
    """A compiled `u (T,) -> y (T,)`: `field(state, u)` integrated by RK4 with
    `substeps` steps per sample, the input held over each sample, `y` the first
    state at each sample time, from rest."""
    h = 1.0 / (rate * substeps)

    def sample(state, u):
        def substep(s, _):
            k1 = field(s, u)
            k2 = field(s + h / 2 * k1, u)
            k3 = field(s + h / 2 * k2, u)
            k4 = field(s + h * k3, u)
            return s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

        return jax.lax.scan(substep, state, None, length=substeps)[0], state[0]

    return jax.jit(lambda u: jax.lax.scan(sample, jnp.zeros(num_states), u)[1])


def multisine(length: int, rate: float, band, rms: float, rng, odd=False):
    """A random-phase multisine `(length,)`: unit amplitudes at the lines in
    `band` (Hz; only odd lines when `odd`), scaled to `rms`."""
    freqs = np.fft.rfftfreq(length, 1.0 / rate)
    lines = (freqs > 0) & (freqs >= band[0]) & (freqs <= band[1])
    if odd:
        lines &= np.arange(len(freqs)) % 2 == 1
    spectrum = np.zeros(len(freqs), complex)
    spectrum[lines] = np.exp(2j * np.pi * rng.uniform(size=lines.sum()))
    u = np.fft.irfft(spectrum, length)
    return u / u.std() * rms


def bouc_wen(rng) -> tuple:
    """`((u, y) estimation, (u, y) test, names)` of the Bouc-Wen stand-in."""
    m, c, k, alpha, beta, gamma, delta = 2.0, 10.0, 5e4, 5e4, 1e3, 0.8, -1.1

    def field(s, u):
        y, v, z = s
        dz = alpha * v - beta * (gamma * jnp.abs(v) * z + delta * v * jnp.abs(z))
        return jnp.array([v, (u - c * v - k * y - z) / m, dz])

    run = _rk4_sampled(field, 3, 750.0, 20)

    def record(periods):
        u = np.tile(multisine(8192, 750.0, (5.0, 150.0), 50.0, rng), periods)
        y = np.asarray(run(jnp.asarray(u)))
        return u, y + 0.01 * y.std() * rng.standard_normal(len(y))

    return record(5), record(1), ("force_N", "disp_m")


def silverbox(rng) -> tuple:
    """`((u, y) estimation, (u, y) arrow test, names)` of the Duffing stand-in."""
    rate, w, zeta, gain, cubic = 610.35, 2 * np.pi * 69.6, 0.048, 0.93, 5.0

    def field(s, u):
        y, v = s
        return jnp.array([v, w**2 * (gain * u - y - cubic * y**3) - 2 * zeta * w * v])

    run = _rk4_sampled(field, 2, rate, 8)
    rms = 0.022
    # each multisine twice in a row, its first period dropped: steady state
    u_est = np.concatenate([
        np.tile(multisine(12288, rate, (0.0, 200.0), rms, rng, odd=True), 2)[12288:]
        for _ in range(4)
    ])  # fmt: skip
    length = 40000
    freqs = np.fft.rfftfreq(length, 1.0 / rate)
    spectrum = rng.standard_normal(len(freqs)) + 1j * rng.standard_normal(len(freqs))
    noise = np.fft.irfft(spectrum * (freqs <= 200.0), length)
    u_test = noise / noise.std() * 2 * rms * np.linspace(0.0, 1.0, length)
    noisy = []
    for u in (u_est, u_test):
        y = np.asarray(run(jnp.asarray(u)))
        noisy.append((u, y + 3e-4 * rng.standard_normal(len(y))))
    return noisy[0], noisy[1], ("u_V", "y_V")


def tanks(rng) -> tuple:
    """`((u, y) estimation, (u, y) test, names)` of the cascaded tanks."""
    seed = int(rng.integers(2**31))
    (u1, y1), (u2, y2) = cascaded_tanks(1024, seed), cascaded_tanks(1024, seed + 1)
    return (u1[:, 0], y1[:, 0]), (u2[:, 0], y2[:, 0]), ("pump_V", "level_V")


CASES = {"bouc_wen": bouc_wen, "silverbox": silverbox, "tanks": tanks}


def _dynsys() -> str:
    """The `dynsys` command beside this Python (its virtual environment's)."""
    found = shutil.which("dynsys", path=str(pathlib.Path(sys.executable).parent))
    return found or "dynsys"


def _write(path: pathlib.Path, u, y, names) -> None:
    table = np.stack([u, y], axis=1)
    np.savetxt(path, table, delimiter=",", header=",".join(names), comments="",
               fmt="%.10e")  # fmt: skip


def _errors(run: pathlib.Path, test: dynsys.Dataset) -> dict:
    """Each saved model's free-run errors on `test` from sample 20 on, `(T - 20,)`."""
    errors = {}
    linear = dynsys.compare(dynsys.load(run / "model.dynsys"), test.window(20, None))
    encoder = dynsys.load(run / "neural_encoder.dynsys")
    neural = dynsys.compare(dynsys.load(run / "neural_model.dynsys"), test,
                            encoder=encoder)  # fmt: skip
    for name, c in (("linear", linear), ("neural", neural)):
        errors[name] = (np.asarray(c.predicted) - np.asarray(c.measured))[0, :, 0]
    return errors


def measure(case: str, seed: int, folder: pathlib.Path) -> str:
    rng = np.random.default_rng(seed)
    (u, y), (u_test, y_test), names = CASES[case](rng)
    estimation = folder / f"{case}_estimation.csv"
    _write(estimation, u, y, names)
    run = folder / f"{case}_run"
    command = [
        _dynsys(), "fit", str(estimation), "--inputs",
        names[0], "--outputs", names[1], "--model", "neural", "--seed", str(seed),
        "--no-progress", "--out", str(run),
    ]  # fmt: skip
    start = time.perf_counter()
    log = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - start
    test = dynsys.Dataset(us=u_test[None, :, None], ys=y_test[None, :, None])
    errors = _errors(run, test)
    rms = {k: float(np.sqrt(np.mean(e**2))) for k, e in errors.items()}
    tail = {k: float(np.sqrt(np.mean(e[-len(e) // 5 :] ** 2))) for k, e in errors.items()}
    best = [line for line in log.splitlines() if "best step" in line and "neural" in line]
    best_step = best[0].split("best step")[1].split(",")[0].strip() if best else "?"
    return (
        f"| {case} | {rms['linear']:.4g} | {rms['neural']:.4g} | "
        f"{rms['neural'] / rms['linear']:.3f} | {tail['linear']:.4g} | "
        f"{tail['neural']:.4g} | {best_step} | {wall:.0f} s |"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), help=", ".join(CASES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; expected one of {', '.join(CASES)}")
    print("| case | linear RMS | neural RMS | neural / linear | linear RMS, last "
          "fifth | neural RMS, last fifth | best step | wall |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="dynsys_stand_ins_"))
    try:
        for case in args.cases:
            print(measure(case, args.seed, folder), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
