"""The rollout method of `fit`'s losses when the user gives none.

`rollout`'s own default solves a long linear recurrence by `Chunked` (stacked powers
of the state matrix and a block-Toeplitz input term), which runs fast but compiles
into about three times the program of a plain `lax.scan` (`Sequential`). A fit
compiles its loss several times over (the optimiser's chunk, where Levenberg–Marquardt
also differentiates it along every parameter direction, the validation loss and the
final predictions), and on short records that compilation is most of the fit's time,
while the scan's extra run time is small. So up to `SEQUENTIAL_STEPS` steps `fit`
rolls out with `Sequential()`; the result is the same up to round-off.
"""

from .._rollout.method import AbstractMethod, Sequential


# Up to this many steps per trajectory the scan saves more compilation than it
# costs in run time over a fit. Robot-arm record, 400 steps, order 6: the fit's XLA
# compilation 6.0-6.3 s of CPU against 6.8-7.7 s with `Chunked`; at 2000 steps a
# step of Levenberg–Marquardt ran about 0.08 s slower (docs/benchmarks.md).
SEQUENTIAL_STEPS = 1024


def fit_method(method: AbstractMethod | None, num_steps: int) -> AbstractMethod | None:
    """The rollout method of a fit's loss on trajectories of `num_steps` steps:
    `method` when given, else `Sequential()` up to `SEQUENTIAL_STEPS` steps and
    `None` (`rollout`'s default) beyond."""
    if method is not None or num_steps > SEQUENTIAL_STEPS:
        return method
    return Sequential()
