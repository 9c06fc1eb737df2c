"""The lengths an output-error fit pads its records to (`padded_length`), so that
records of nearby lengths share one compiled program: the programs of a fit depend
on the record's length, and compiling them is most of a cold fit's time on records
of a few thousand samples. The padded steps are masked: they enter no sum."""

# Records up to this many samples are padded to it.
SHORTEST = 32


def padded_length(steps: int) -> int:
    """The length a record of `steps` samples is padded to: `SHORTEST`, or the
    smallest of 4, 5, 6 or 7 times a power of two that is at least `steps`, so at
    most a quarter more samples (e.g. 534 -> 640, 600 -> 640, 700 -> 768,
    801 -> 896, 6305 -> 7168)."""
    if steps <= SHORTEST:
        return SHORTEST
    power = 2 ** max(0, (steps - 1).bit_length() - 3)  # 4 * power < steps <= 8 * power
    return -(-steps // power) * power
