"""Peak memory of a 12-value fit sweep, sub-run by sub-run: repeated runs of one
structure reuse their compiled programs, so after the first few sub-runs (the
compilations) memory should stay flat.

    python benchmarks/measure_sweep_memory.py   # writes its run folder under a temp dir
"""

import resource
import tempfile

import dynsys


def main() -> None:
    peaks = []

    def echo(line: str) -> None:
        if line.startswith("sweep "):  # a sub-run starts
            peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    config = {
        "kind": "fit",
        "data": {"trajectories": 4, "length": 30},
        "sweep": {
            "key": "data.measurement_noise",
            "values": [0.01 * (k + 1) for k in range(12)],
        },
    }
    with tempfile.TemporaryDirectory() as root:
        dynsys.run_experiment(config, out_root=root, progress=False, echo=echo)
    peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    rounded = [round(p) for p in peaks]
    print("peak RSS (MB) before each sub-run and at the end:", rounded)
    growth = [b - a for a, b in zip(peaks[3:], peaks[4:])]
    print(
        "growth per sub-run after the third (MB):",
        [round(g, 1) for g in growth],
        f"mean {sum(growth) / len(growth):.2f}",
    )


if __name__ == "__main__":
    main()
