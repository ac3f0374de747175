"""How long a training run still takes, from what its own process measured: training steps *and*
evaluations.

    seconds left = steps left × seconds per training step
                 + light evaluations left × seconds per light evaluation
                 + the final evaluation

* seconds per training step = the mean over the last `WINDOW` logged intervals of tokens per
  step ÷ ``tokens_per_s`` (`lab.training.train` logs it over each logging interval, checkpoint saves
  included, evaluations not): the wall time a step took, slow ones counted in full, on a machine
  whose load comes and goes.  Only this process's steps count: after a resume the old
  process's speed (another machine load, another kernel build) says nothing, so there is no
  estimate until the new process logs its first step.  Its first logged interval holds the
  first step's kernel build; it is left out once a later one exists.
* seconds per light evaluation = the mean ``eval_s`` logged (this process's, else an earlier
  one's of the same run: the same evaluation costs the same); before any was timed, a guess:
  a forward pass over the evaluation's tokens at a third of a training step's cost per token.
* the final evaluation = the light one's cost per token × the tokens it scores (the training
  process reports both counts, `lab.training.phases.eval_tokens`).

Light evaluations happen at every multiple of ``eval_every`` below the last step (`lab.training.train`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from lab.util.wording import duration

__all__ = ["Eta", "UNKNOWN", "evals_left", "estimate", "format_duration"]

WINDOW = 50  # logged intervals the step time is averaged over (the most recent ones)
FORWARD_SHARE = 1 / 3  # an evaluation token's cost / a training token's (forward vs fwd + bwd)


@dataclass(frozen=True)
class Eta:
    """A remaining-time estimate and its parts (NaN seconds: not known yet)."""

    seconds: float
    step_s: float  # seconds per training step
    steps_left: int
    evals_left: int
    eval_s: float  # seconds per light evaluation
    final_s: float  # seconds of the final evaluation
    evals_timed: bool  # False: the evaluation costs are the forward-pass guess

    @property
    def known(self) -> bool:
        return math.isfinite(self.seconds)

    def text(self) -> str:
        """'ETA 4m10s (300 steps + 2 evaluations + the final evaluation)', or why none yet."""
        if not self.known:
            return "ETA after this process's first logged step"
        parts = []
        if self.steps_left:
            parts.append(f"{self.steps_left:,} step{'' if self.steps_left == 1 else 's'}")
        if self.evals_left:
            parts.append(f"{self.evals_left} evaluation{'' if self.evals_left == 1 else 's'}")
        parts.append("the final evaluation")
        note = (
            ""
            if self.evals_timed
            else "; evaluation times guessed until one is timed"
            if self.evals_left
            else "; its time guessed"
        )
        return f"ETA {format_duration(self.seconds)} ({' + '.join(parts)}{note})"


UNKNOWN = Eta(math.nan, math.nan, 0, 0, math.nan, math.nan, False)


def evals_left(step: int, steps: int, eval_every: int) -> int:
    """Light evaluations still to come after ``step``: multiples of ``eval_every`` in
    (step, steps) — the last step gets the final (full) evaluation instead."""
    if not eval_every or eval_every < 1 or step >= steps - 1:
        return 0
    return max(0, (steps - 1) // eval_every - step // eval_every)


def estimate(
    step: int,
    steps: int,
    start_step: int,
    rates: list[tuple[int, float]],
    eval_times: list[tuple[int, float]],
    *,
    tokens_per_step: int,
    eval_every: int,
    light_tokens: int | None,
    full_tokens: int | None,
) -> Eta:
    """The estimate at ``step`` of a run of ``steps`` whose current process started at
    ``start_step``; ``rates`` are (step, tokens_per_s) and ``eval_times`` (step, eval_s) as the
    store has them, every process's (this function keeps the ones it may use)."""
    own = [v for s, v in sorted(rates) if s > start_step and v > 0 and math.isfinite(v)]
    if len(own) > 1:
        own = own[1:]  # the first interval holds the kernel build of the first step
    own = own[-WINDOW:]
    if not own:
        return UNKNOWN
    step_s = statistics.fmean(tokens_per_step / v for v in own)  # slow steps count in full
    timed = [(s, v) for s, v in sorted(eval_times) if v >= 0 and math.isfinite(v)]
    timed = [v for s, v in timed if s > start_step] or [v for _, v in timed]
    light = light_tokens or tokens_per_step
    if timed:
        eval_s = statistics.fmean(timed[-5:])
    else:
        eval_s = step_s * light / tokens_per_step * FORWARD_SHARE
    final_s = eval_s * (full_tokens / light) if full_tokens else eval_s
    steps_left = max(steps - step, 0)
    n_evals = evals_left(step, steps, eval_every)
    seconds = steps_left * step_s + n_evals * eval_s + final_s  # the final one runs at `steps`
    return Eta(seconds, step_s, steps_left, n_evals, eval_s, final_s, bool(timed))


def format_duration(s: float) -> str:
    """12s, 4m10s, 2h05m, 3d04h ('–' when unknown): `lab.util.wording.duration`."""
    return duration(s)
