"""A fit from a stable start that ends unstable on data that look bounded.

The output-error fit can carry a mode across the unit circle that the held-out
score cannot see: the held-out free run starts from an initial state solved by least
squares, which cancels a slowly growing mode over a few hundred samples (on the
first 90 % of the lightly damped cd_player_arm record, a real eigenvalue of 1.0096
grows 350-fold over the 614 held-out samples, and the model validates 80.2 %). The
saved model then diverges on longer records, and the refit on all the estimation
data keeps the drift.

Then the same structure is fitted again as a stable model (a `StableLinearSystem`,
what `--model stable` fits) from the drifted fit with its unstable eigenvalues
reflected into the unit disc and `B`, `D` estimated again (`stabilised_start`, as
for an unstable subspace start), and scored on the same held-out data; it is kept
when it validates within `STABLE_MARGIN` points of the unstable model, the margin
of the structure scan's preference for stable candidates. Where it validates
worse, the unstable model is kept, and the line says so: an unstable plant recorded
under feedback gives bounded data too. (From the subspace start instead, the stable
fit took 96 steps and 3.4 s warm on the record above and validated 78.8 %; from the
reflected fit, 21 steps, 1.0 s, 80.3 %.) The refit on all the estimation data
starts from a kept stable model as a `LinearSystem`
(`estimate.refit_on_estimation_data`). A start that is itself
unstable (the plant's mode, fitted over windows where it grows) is not a drift and
is left alone, as are `--model stable`, the prediction loss and config key
`fit.stabilise = false`.
"""

import dataclasses

from . import checks as fit_checks


@dataclasses.dataclass(frozen=True)
class StableRefit:
    """The unstable fit's and the stable refit's held-out mean fit % and the one
    kept."""

    unstable_radius: float  # max |eigenvalue| of the unstable fit
    unstable_fit: float
    stable_fit: float
    kept_stable: bool

    def line(self) -> str:
        """What happened, in one line (for the console and summary.md)."""
        head = (
            f"the fit from a stable start ended unstable (max |eigenvalue| "
            f"{self.unstable_radius:.4f}) on data that look bounded; refitted as a "
            f"stable model, it validates {self.stable_fit:.1f} % against "
            f"{self.unstable_fit:.1f} % on the held-out data"
        )
        if self.kept_stable:
            return (
                f"{head}: the stable model is kept (within "
                f"{fit_checks.STABLE_MARGIN:g} points; turn off with config key "
                "'fit.stabilise')"
            )
        return (
            f"{head}: the unstable model is kept (the stable one is more than "
            f"{fit_checks.STABLE_MARGIN:g} points worse: an unstable plant under "
            "feedback gives bounded data too)"
        )

    def metrics(self) -> dict:
        return dataclasses.asdict(self)


def drifted(fit_cfg: dict, begin, estimate, train, val) -> bool:
    """Whether the fit `estimate` from the start `begin` drifted unstable where a
    stable refit is worth trying (see the module docstring)."""
    return (
        val is not None
        and fit_cfg["model"] in ("linear", "neural")
        and fit_cfg["loss"] == "simulation"
        and fit_cfg["stabilise"]
        and estimate.window is None
        and fit_checks.spectral_radius(begin) < 1.0
        and fit_checks.spectral_radius(estimate.fitted) >= 1.0
        and fit_checks.looks_bounded(train)
    )


def stable_refit(fit_model, config: dict, estimate, train, val, progress):
    """`(estimate to keep, StableRefit)`: `fit_model(config, start, train, val,
    progress)` (`estimate.fit_model`) of a `StableLinearSystem` from the drifted
    fit with its unstable eigenvalues reflected into the unit disc and `B`, `D`
    estimated again (`stabilised_start`), kept when it validates within
    `STABLE_MARGIN` points of `estimate`."""
    from ..._sysid.order import held_out_fit
    from ..._sysid.stabilise import stabilised_start
    from ..._systems.stable import StableLinearSystem

    start = StableLinearSystem.from_linear(stabilised_start(estimate.fitted, train))
    stable = fit_model(config, start, train, val, progress)
    unstable_fit = held_out_fit(estimate.fitted, val)[1]
    stable_fit = held_out_fit(stable.fitted, val)[1]
    kept = stable_fit >= unstable_fit - fit_checks.STABLE_MARGIN
    said = StableRefit(
        fit_checks.spectral_radius(estimate.fitted), unstable_fit, stable_fit, kept
    )
    return (stable if kept else estimate), said
