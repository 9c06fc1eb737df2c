"""The check of the final neural model on held inputs (`dynsys fit --model
neural`): does `held_input_excursion` tell the final models that run away on a
test record from those that do not?

For each case of `neural_in_range.py` (`low-tailS`: simulated cascaded tanks
whose held-out part drives the pump below the training range, a separate test
record over the whole range) and seed: `fit_neural` on the first two thirds,
early-stopped on the last third (in range, the default), the final model trained
again on all the estimation data as the command does (`final_model`), and both
models' excursions beyond the measured outputs' range on held inputs (as the
command measures them: eight probe records, levels held 16-64 samples) and their
test RMS. Prints one markdown row each, with the model the command saves
(the first part's when the final one runs away: its excursion above one width
and above three times the first's).

    python benchmarks/neural_runaway.py [CASE:SEED ...]
    python benchmarks/neural_runaway.py 8:0 8:1 8:2 1:0 2:0 3:0 5:0 6:0 7:0
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
from neural_in_range import low_tail, split  # noqa: E402
from neural_validation_blocks import dataset, final_model, test_rms  # noqa: E402


def excursion(result, estimation) -> float:
    us, ys = np.asarray(estimation.us)[0], np.asarray(estimation.ys)[0]
    return dynsys.held_input_excursion(
        result.model, result.encoder, us, ys, holds=(16, 64)
    )


def measure(case: int, seed: int) -> str:
    pieces, test = low_tail(case)
    train, held = split(pieces)
    train, held, estimation = dataset(train), dataset(held), dataset(pieces)
    key = jax.random.key(seed)
    started = time.perf_counter()
    first = dynsys.fit_neural(train, held, key=key)
    final, steps = final_model(first, train, estimation, key)
    if steps == 0:
        return f"| {case} | {seed} | best step 0: no final model | | | | |"
    first_x, final_x = excursion(first, estimation), excursion(final, estimation)
    runs_away = final_x > max(1.0, 3.0 * first_x)
    first_rms, final_rms = test_rms(first, test), test_rms(final, test)
    saved = first_rms if runs_away else final_rms
    return (
        f"| {case} | {seed} | {first_x:.3g} / {final_x:.3g} | "
        f"{first_rms:.4g} / {final_rms:.4g} | {'first' if runs_away else 'final'} | "
        f"{saved:.4g} | {time.perf_counter() - started:.0f} s |"
    )


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    pairs = [tuple(int(v) for v in a.split(":")) for a in argv] or [(8, 0), (8, 1)]
    print("| case | seed | excursion on held inputs (widths): first / final | test "
          "RMS: first / final | saved | its test RMS | wall |")  # fmt: skip
    print("|---:|---:|---|---|---|---:|---:|")
    for case, seed in pairs:
        print(measure(case, seed), flush=True)


if __name__ == "__main__":
    main()
