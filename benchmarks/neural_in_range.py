"""What `fit_neural(validate_in_range=True)` buys (issue 46): the early stopping
scoring each validation record up to where its input leaves the training inputs'
range, against the whole record, with the final model trained on all the
estimation data for the chosen step scaled to as many passes (as `dynsys fit
--model neural` does, without its cap) and scored on a test record none of the
trainings saw.

Cases (each an estimation record set `E`, split as `dynsys fit` splits it, the
last third of each experiment held out to choose, and a test record `H`):

- `real-middleH`: the cascaded tanks' record, `E` its first and last thirds (two
  experiments), `H` its middle third, whose pump voltage stays in `E`'s range, as
  a benchmark's test record does when the estimation record covers it; the
  held-out part of `E`'s second experiment drives the pump below its training
  part;
- `real-whole`: the whole record as `E`, as the default command sees it; no test
  record (the benchmark's is kept out): prints the best step and where the
  validation is cut;
- `low-tailS` (S a seed): simulated cascaded tanks (`nonlinear_benchmarks.py`),
  1,024 samples whose pump levels are drawn in [1.5, 8] V for the first two
  thirds and in [0.3, 8] V for the last (the held-out part goes below the
  training range, as the real record's does), `H` a separate 1,024-sample record
  with levels in [0.3, 8] V throughout.

Prints per case, rule and seed: the validation samples scored, the best step, and
the final model's test RMS (output units; the encoder on the first `past`
samples of `H`, the free run on the rest, `NeuralFit.compare`).

    python benchmarks/neural_in_range.py [CASES] [RULES] [SEEDS]
    python benchmarks/neural_in_range.py real-middleH,low-tail1 whole,in-range 0,1,2
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
from neural_validation_blocks import dataset, final_model, test_rms  # noqa: E402
from nonlinear_benchmarks import held_levels, tank_response  # noqa: E402


TANKS = HERE.parents[1] / "shared/data/real/cascaded_tanks_estimation.csv"
RULES = {"whole": False, "in-range": True}  # validate_in_range


def split(pieces) -> tuple[list, list]:
    """Each piece's first two thirds to train, its last third held out (the
    split of `dynsys fit`: `round(T / 3)` samples held out)."""
    train, held = [], []
    for u, y in pieces:
        k = len(u) - int(np.floor(len(u) / 3 + 0.5))
        train.append((u[:k], y[:k]))
        held.append((u[k:], y[k:]))
    return train, held


def low_tail(seed: int):
    rng = np.random.default_rng(seed)
    tail = lambda k: (1.5, 8.0) if k < 683 else (0.3, 8.0)  # noqa: E731
    estimation = tank_response(held_levels(1024, rng, tail), rng)
    test = tank_response(held_levels(1024, rng, lambda k: (0.3, 8.0)), rng)
    return [estimation], dataset([test])


def cases() -> dict:
    data = dynsys.load_dataset(TANKS, inputs=["pump_V"], outputs=["level_V"])
    u, y = np.asarray(data.us)[0], np.asarray(data.ys)[0]
    third = len(u) // 3
    found = {
        "real-middleH": (
            [(u[:third], y[:third]), (u[2 * third :], y[2 * third :])],
            dataset([(u[third : 2 * third], y[third : 2 * third])]),
        ),
        "real-whole": ([(u, y)], None),
    }
    for seed in range(1, 9):
        found[f"low-tail{seed}"] = low_tail(seed)
    return found


def measure(case: str, pieces, test, rule: str, seed: int) -> float | None:
    """One line; returns the final model's test RMS (`None` without a test)."""
    train, held = split(pieces)
    train, held, estimation = dataset(train), dataset(held), dataset(pieces)
    key = jax.random.key(seed)
    started = time.perf_counter()
    first = dynsys.fit_neural(train, held, key=key, validate_in_range=RULES[rule])
    line = (
        f"{case} {rule} seed {seed}: scored {list(first.val_scored)} of "
        f"{list(held.lengths)}, best step {first.best_step} of {first.steps_run}"
    )
    final, steps = final_model(first, train, estimation, key)
    line += f"; final {steps} steps" if steps else "; final: the start"
    rms = None if test is None else test_rms(final, test)
    if rms is not None:
        line += f", test RMS {rms:.4g}"
    print(f"{line}  ({time.perf_counter() - started:.0f} s)", flush=True)
    return rms


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    found = cases()
    names = argv[0].split(",") if argv else list(found)
    rules = argv[1].split(",") if len(argv) > 1 else list(RULES)
    seeds = [int(s) for s in argv[2].split(",")] if len(argv) > 2 else [0, 1, 2]
    means = {}
    for name in names:
        for rule in rules:
            scores = [measure(name, *found[name], rule, seed) for seed in seeds]
            if None not in scores:
                means[(name, rule)] = float(np.mean(scores))
    for (name, rule), value in means.items():
        print(f"mean test RMS, {name} {rule}: {value:.4g}")


if __name__ == "__main__":
    main()
