"""The lengths an output-error fit pads its records to (`padded_length`), so that
records of nearby lengths share one compiled program: the programs of a fit depend
on the record's length, and compiling them is most of a cold fit's time on records
of a few thousand samples. The padded steps are masked: they enter no sum.

`shared_length` goes further: a record is padded to a length this machine has
compiled the same fit's programs for, when one is at most twice its own, so that a
file of another length runs the programs a first file compiled."""

from .._compile import known_shapes


# Records up to this many samples are padded to it.
SHORTEST = 32
# A known length is taken for at most this many times the record's samples: the
# padded steps cost arithmetic (simulated, then masked), a new program seconds of
# compiling whatever the length.
MOST_PADDING = 2
# Records longer than this are padded to their own bucket only: their arithmetic,
# not the compiling, is most of a fit's time.
LONGEST_SHARED = 2**14


def padded_length(steps: int) -> int:
    """The length a record of `steps` samples is padded to: `SHORTEST`, or the
    smallest of 4, 5, 6 or 7 times a power of two that is at least `steps`, so at
    most a quarter more samples (e.g. 534 -> 640, 600 -> 640, 700 -> 768,
    801 -> 896, 6305 -> 7168)."""
    if steps <= SHORTEST:
        return SHORTEST
    power = 2 ** max(0, (steps - 1).bit_length() - 3)  # 4 * power < steps <= 8 * power
    return -(-steps // power) * power


def shared_length(steps: int, signature: str) -> int:
    """The length a fit pads a record of `steps` samples to: the shortest length
    remembered for `signature` (the shapes of the fit's arrays but their length,
    `known_shapes`) between `steps` and `MOST_PADDING` times it, else
    `padded_length(steps)`; remembered for the next record. Records longer than
    `LONGEST_SHARED` get `padded_length(steps)`."""
    length = padded_length(steps)
    if steps <= LONGEST_SHARED:
        fitting = [n for n in known_shapes.known("length/" + signature) if steps <= n]
        fitting = [n for n in fitting if n <= MOST_PADDING * steps]
        length = min(fitting, default=length)
    known_shapes.remember("length/" + signature, length)
    return length
