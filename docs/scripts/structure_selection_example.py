"""The example of docs/structure-selection.md: an order scan on the CD-player arm
record (2 inputs, 2 outputs, lightly damped), and ARX models beside it.

Run from the repository root:

    python docs/scripts/structure_selection_example.py

Writes docs/figures/structure_order_scan.png and prints the scan's table.
"""

import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)

import dynsys  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    data = dynsys.load_dataset(
        ROOT / "data/real/cd_player_arm.csv", inputs=["u1", "u2"], outputs=["y1", "y2"]
    )
    train, val = data.split_time(1 / 3)
    started = time.perf_counter()
    scan = dynsys.select_order(train, orders=range(1, 11), val_data=val)
    print(f"scan: {time.perf_counter() - started:.1f} s")
    print(scan.markdown())
    print(f"chosen: order {scan.order}, feedthrough {scan.feedthrough}")
    singular_rule = dynsys.fit_subspace(train)
    fit = dynsys.compare(singular_rule, val).fit_percent
    print(
        f"singular-value rule: order {singular_rule.state_size}, "
        f"held-out fit % {[round(float(v), 1) for v in fit]}"
    )
    for na in (2, 4, 6):
        arx = dynsys.fit_arx(train, na=na, nb=na, nk=1)
        fit = dynsys.compare(arx, val).fit_percent
        print(
            f"ARX({na}, {na}, 1): state size {arx.state_size}, held-out fit % "
            f"{[round(float(v), 1) for v in fit]}"
        )
    fig = dynsys.plot.order_scan(scan, title="CD-player arm: order scan")
    out = ROOT / "docs/figures/structure_order_scan.png"
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
