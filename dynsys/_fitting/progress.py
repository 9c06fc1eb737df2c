"""The progress bar of `train` and `fit`: "compiling…" until the first chunk of steps
returns, then the steps, with a rate and a time left measured from there."""

from typing import Any


class Progress:
    """A tqdm bar that does not count compilation as progress.

    The first dispatch of a training loop compiles its chunk of steps (seconds)
    and then runs it (milliseconds); a rate measured from the start would predict
    hours for a run of seconds. So the bar reads `fit: compiling…` (with the time
    spent) until the first chunk returns, and only then starts counting steps:
    the rate and the time left are measured from that moment (tqdm's `initial`).

    With `capped`, `num_steps` is a limit, not a plan (an optimiser that stops at
    its own tolerance: Levenberg–Marquardt, L-BFGS): the bar shows the steps run
    and the cap labelled as such, `fit: 7 steps (cap 200)`, without a time left.
    """

    def __init__(self, caller: str, num_steps: int, capped: bool):
        from tqdm.auto import tqdm

        self._tqdm = tqdm
        self.caller = caller
        self.num_steps = num_steps
        self.capped = capped
        self.counting = False
        self.bar: Any = tqdm(
            desc=f"{caller}: compiling…",
            bar_format="{desc} [{elapsed}]",
            mininterval=0.5,
            leave=False,
        )

    def update(self, ran: int, loss: float) -> None:
        """Count `ran` more steps, the last with loss `loss`."""
        if not self.counting:
            self.bar.close()
            self.bar = self._counting_bar(ran)
            self.counting = True
        else:
            self.bar.update(ran)
        self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)

    def _counting_bar(self, done: int):
        if self.capped:
            return self._tqdm(
                initial=done,
                desc=self.caller,
                unit="step",
                bar_format="{desc}: {n_fmt} steps (cap "
                f"{self.num_steps}) [{{elapsed}}, {{rate_fmt}}{{postfix}}]",
                mininterval=0.5,
                leave=True,
            )
        return self._tqdm(
            total=self.num_steps,
            initial=done,
            desc=self.caller,
            unit="step",
            mininterval=0.5,
            leave=True,
        )

    def close(self) -> None:
        self.bar.close()
