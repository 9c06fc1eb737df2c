"""What the final neural refit buys (issue 46): the neural model trained on all the
estimation data for a number of steps chosen on a split, against the model trained
on the split's first part alone, both scored on a held-out last third of a real
record that neither saw.

For each record and seed, with `fit_neural`'s defaults:

- the record's first two thirds `E` are the estimation data, its last third `H`
  the held-out test;
- `first`: `fit_neural(train, val)` with `train` the first two thirds of `E` and
  `val` its last third (early stopping), as `dynsys fit --model neural` trains;
- `refit x1`: `fit_neural(E, E, num_steps=best step of first)`, from new weights
  (same key), no early stopping (the best free run on `E` is kept);
- `refit x1.5`: the same for the best step scaled by `len(E) / len(train)`, as
  many passes over the data (what `dynsys fit` does now).

Each prints the RMS (output units) on `H`, the encoder on its first `past`
samples and the free run on the rest, as `NeuralFit.compare` scores.

    python benchmarks/neural_refit.py [tanks|silverbox ...] [--seeds 0,1,2]
"""

import argparse
import pathlib
import sys
import time

import jax
import numpy as np

import dynsys


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from neural_held_out import DATA, RECORDS, check_records  # noqa: E402


def _part(data, start: int, stop: int):
    return dynsys.Dataset(
        us=np.asarray(data.us)[..., start:stop, :],
        ys=np.asarray(data.ys)[..., start:stop, :],
    )


def _rms(result, test) -> float:
    c = result.compare(test)
    return float(np.sqrt(np.mean((np.asarray(c.measured) - np.asarray(c.predicted)) ** 2)))


def measure(name: str, seed: int) -> None:
    file, inputs, outputs = RECORDS[name]
    data = dynsys.load_dataset(DATA / file, inputs=[inputs], outputs=[outputs])
    T = data.ys.shape[-2]
    cut = T - T // 3
    estimation, test = _part(data, 0, cut), _part(data, cut, T)
    k = cut - cut // 3
    train, val = _part(data, 0, k), _part(data, k, cut)
    key = jax.random.key(seed)
    started = time.perf_counter()
    first = dynsys.fit_neural(train, val, key=key)
    print(
        f"{name} seed {seed}: first part: best step {first.best_step} of "
        f"{first.steps_run}, held-out RMS {_rms(first, test):.4g}, "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    for scale in (1.0, cut / k):
        steps = max(50, int(round(first.best_step * scale)))
        started = time.perf_counter()
        refit = dynsys.fit_neural(
            estimation, estimation, key=key, num_steps=steps, patience=10**6
        )
        print(
            f"{name} seed {seed}: refit x{scale:.2f} ({steps} steps): held-out RMS "
            f"{_rms(refit, test):.4g}, {time.perf_counter() - started:.0f} s",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", default=["tanks"])
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args(argv)
    check_records(parser, args.records)
    jax.config.update("jax_enable_x64", True)
    for name in args.records:
        for seed in map(int, args.seeds.split(",")):
            measure(name, seed)


if __name__ == "__main__":
    main()
