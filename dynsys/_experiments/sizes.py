"""Bounds on the sizes a config asks for (steps, samples, network widths and
depths), checked before any work, each refusal one line naming the key, the bound
and the value.

The bounds (docs/experiments.md, "Sizes"):

- `MAX_STEPS` (10^8): optimiser steps, simulated trajectories x steps, horizons,
  windows; the bound of `fit.steps` and of `dynsys simulate`. 10^8 samples of one
  float64 channel are 0.8 GB, and 10^8 optimiser steps run for days.
- `MAX_WIDTH` (4096) and `MAX_DEPTH` (64): a hidden layer of width 4096 holds 16.8
  million weights (134 MB in float64, four times that with its gradient and Adam's
  two moments); the layers of a network are traced one by one, so its compile time
  grows with its depth.
- The neural stage's memory, estimated from its sizes (`neural_bytes`), at most
  half of the machine's memory (`machine_memory`): the sizes within the bounds above
  can still multiply beyond what a machine holds.
"""

import math
import os

from .config import ConfigError


MAX_STEPS = 10**8
MAX_WIDTH = 4096
MAX_DEPTH = 64

# The share of the machine's memory the neural stage's estimate may take.
MEMORY_SHARE = 0.5

# The context size assumed for the state and output networks (states + inputs)
# before the order is known: small next to a width worth bounding.
_CONTEXT = 16


def check_sizes(config: dict) -> None:
    """Refuse products of sizes above `MAX_STEPS` (samples simulated, rollouts
    trained): each size alone is bounded by the schema."""
    if config["kind"] == "fit" and config["data"]["file"] is None:
        data_cfg = config["data"]
        _check_product(
            ("data.trajectories", data_cfg["trajectories"]),
            ("data.length", data_cfg["length"]),
            "simulated samples",
        )
    if config["kind"] == "train_controller":
        train = config["train"]
        for states in ("initial_states", "test_states"):
            _check_product(
                (f"train.{states}", train[states]),
                ("train.horizon", train["horizon"]),
                "simulated steps",
            )


def _check_product(first: tuple, second: tuple, what: str) -> None:
    (key_a, a), (key_b, b) = first, second
    if a * b > MAX_STEPS:
        raise ConfigError(
            f"config keys '{key_a}' x '{key_b}': expected at most {MAX_STEPS:.0e} "
            f"{what} in all, got {a} x {b} = {a * b:.3g}."
        )


def neural_bytes(fit_cfg: dict, channels: int, windows: int, itemsize: int) -> int:
    """About the memory the neural stage's training takes, in bytes: the three
    networks' weights (state, output, encoder), each with its gradient and Adam's
    two moments, and the activations of one minibatch kept for the backward pass.

    `channels`: inputs + outputs (the encoder reads `past` samples of each);
    `windows`: the training windows (the minibatch is at most that many)."""
    width, depth = fit_cfg["neural_width"], fit_cfg["neural_depth"]
    past, horizon = fit_cfg["neural_past"], fit_cfg["neural_horizon"]
    batch = min(fit_cfg["neural_batch_size"], max(windows, 1))
    hidden = (depth - 2) * width * width

    def net(context: int) -> int:
        return hidden + (depth - 1) * width * context + width * _CONTEXT

    weights = 2 * net(_CONTEXT) + net(past * channels)
    # Two networks evaluated per simulated sample, each layer's input and output
    # kept for the backward pass; the encoder once per window.
    activations = batch * (horizon * 2 + 1) * depth * width * 2
    return itemsize * (4 * weights + activations)


def machine_memory() -> int | None:
    """The memory the run can use, in bytes: the machine's physical memory, or the
    first accelerator's when JAX reports less there; `None` when unknown."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    try:
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        limit = stats.get("bytes_limit")
    except Exception:  # no backend, or one that reports nothing
        limit = None
    known = [v for v in (total, limit) if v]
    return min(known) if known else None


def check_neural_memory(fit_cfg: dict, channels: int, windows: int, itemsize: int):
    """Refuse, before the linear stage, a neural stage whose sizes
    (`fit.neural_width`, `_depth`, `_batch_size`, `_horizon`, `_past`) would take
    more than `MEMORY_SHARE` of the machine's memory."""
    memory = machine_memory()
    if memory is None:
        return
    need = neural_bytes(fit_cfg, channels, windows, itemsize)
    if need <= MEMORY_SHARE * memory:
        return
    sizes = ", ".join(
        f"{key} {fit_cfg[key]}"
        for key in (
            "neural_width",
            "neural_depth",
            "neural_batch_size",
            "neural_horizon",
            "neural_past",
        )
    )
    raise ConfigError(
        f"config key 'fit.neural_width': the neural stage ({sizes}) would need "
        f"about {_gigabytes(need)}, more than {MEMORY_SHARE:.0%} of this machine's "
        f"{_gigabytes(memory)}; choose a smaller neural_width, neural_depth, "
        "neural_batch_size or neural_horizon."
    )


def _gigabytes(count: float) -> str:
    if count >= 1e12:
        return f"{count / 1e12:.3g} TB"
    return f"{count / 1e9:.3g} GB" if count >= 1e8 else f"{math.ceil(count / 1e6)} MB"
