"""Where the neural step count is chosen (issue 46): on the estimation data's last
third (what `dynsys fit --model neural` does), or on two blocks spread over the
record (train, held out, train, held out, train; a third held out in all). Either
way the final model is trained on all the estimation data for the chosen step
scaled to as many passes (as `dynsys fit` does, without its cap), and scored on a
test record none of the trainings saw.

Cases (each an estimation record `E` and a test record `H`):

- `real-lastH`: the cascaded tanks' record, `E` its first two thirds, `H` its last
  third (which drives the pump below anything in `E`: extrapolation);
- `real-firstH`: `E` its last two thirds, `H` its first third (whose pump voltage
  goes above anything in `E`);
- `sim1`, `sim2`: the simulated cascaded tanks of `nonlinear_benchmarks.py`
  (square-root outflows, overflow), 1,024 samples, seeds 1 and 2, each `H` a
  separate record of the same kind (seed + 100), as a benchmark's test record is.

Prints, per case, rule and seed: the best step of the choosing run, the test RMS
of the model of that run and of the final model (output units; encoder on the
first `past` samples of `H`, free run on the rest, `NeuralFit.compare`).

    python benchmarks/neural_validation_blocks.py [CASES] [RULES] [SEEDS]
    python benchmarks/neural_validation_blocks.py real-lastH,sim1 last,blocks 0,1
"""

import pathlib
import sys
import time

import jax
import numpy as np


jax.config.update("jax_enable_x64", True)

import dynsys  # noqa: E402


HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from nonlinear_benchmarks import cascaded_tanks  # noqa: E402


TANKS = HERE.parents[1] / "shared/data/real/cascaded_tanks_estimation.csv"
PATTERNS = {"last": "TV", "blocks": "TVTVT"}  # T trains, V chooses the step


def dataset(pieces) -> dynsys.Dataset:
    """One experiment per `(u (T, m), y (T, p))` piece."""
    return dynsys.Dataset(us=[u for u, _ in pieces], ys=[y for _, y in pieces])


def pieces(u, y, pattern: str) -> tuple[list, list]:
    """`(train, held)`: the record cut in the order of `pattern`, the held-out
    pieces (`V`) a third of it in all, the training pieces (`T`) the rest."""
    length = len(u)
    held_length = length // 3 // pattern.count("V")
    train_length = (length - held_length * pattern.count("V")) // pattern.count("T")
    train, held, start = [], [], 0
    for i, role in enumerate(pattern):
        stop = length if i == len(pattern) - 1 else start + (
            held_length if role == "V" else train_length
        )
        (held if role == "V" else train).append((u[start:stop], y[start:stop]))
        start = stop
    return train, held


def test_rms(result, test) -> float:
    c = result.compare(test)
    return float(np.sqrt(np.mean((np.asarray(c.measured) - np.asarray(c.predicted)) ** 2)))


def cases() -> dict:
    data = dynsys.load_dataset(TANKS, inputs=["pump_V"], outputs=["level_V"])
    u, y = np.asarray(data.us)[0], np.asarray(data.ys)[0]
    last, first = len(u) - len(u) // 3, len(u) // 3
    found = {
        "real-lastH": (u[:last], y[:last], dataset([(u[last:], y[last:])])),
        "real-firstH": (u[first:], y[first:], dataset([(u[:first], y[:first])])),
    }
    for seed in (1, 2):
        test = cascaded_tanks(1024, seed + 100)
        found[f"sim{seed}"] = (*cascaded_tanks(1024, seed), dataset([test]))
    return found


def measure(case: str, u, y, test, rule: str, seed: int) -> None:
    train, held = pieces(u, y, PATTERNS[rule])
    train, held, estimation = dataset(train), dataset(held), dataset([(u, y)])
    key = jax.random.key(seed)
    started = time.perf_counter()
    first = dynsys.fit_neural(train, held, key=key)
    line = (
        f"{case} {rule} seed {seed}: best step {first.best_step} of "
        f"{first.steps_run}, test RMS {test_rms(first, test):.4g}"
    )
    final, steps = final_model(first, train, estimation, key)
    if steps:
        line += f"; final ({steps} steps) test RMS {test_rms(final, test):.4g}"
    else:
        line += "; final: the start (no step beat it)"
    print(f"{line}  ({time.perf_counter() - started:.0f} s)", flush=True)


def final_model(first, train, estimation, key):
    """`(NeuralFit, steps)`: the final model, trained on all the `estimation`
    data from `key` for as many passes over the data as the choosing run
    `first`'s best step (at least 50), as `dynsys fit` scales it (without its
    cap, `fit.neural_steps`), no early stopping; `(first, 0)` when no step beat
    its start."""
    if first.best_step == 0:
        return first, 0
    passes = sum(estimation.lengths) / sum(train.lengths)
    steps = max(50, int(round(first.best_step * passes)))
    final = dynsys.fit_neural(
        estimation, estimation, key=key, num_steps=steps, patience=10**6
    )
    return final, steps


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    found = cases()
    names = argv[0].split(",") if argv else list(found)
    rules = argv[1].split(",") if len(argv) > 1 else list(PATTERNS)
    seeds = [int(s) for s in argv[2].split(",")] if len(argv) > 2 else [0, 1]
    for name in names:
        for seed in seeds:
            for rule in rules:
                measure(name, *found[name], rule, seed)


if __name__ == "__main__":
    main()
