"""The study's settings and its decisions, as pure functions: which calibration rung is the study's
scale, how many seeds the stagger-vs-fixed comparison needs, and what fits in the time budget.

`fiblab demo --scale study` (`analysis.experiments.study.study`) runs two stages on the embedded corpus:

1. *Calibration of length extrapolation.* Dense RoPE attention, fixed α and the linear stagger
   (W = 12, the paper's W of Table 5) trained at T = 128 on a ladder of step counts; every rung
   is evaluated at 1×, 2× and 4× T. The recipe is the CPU presets' (cpu-small: d = 128, 4
   layers, 4096 tokens a step, peak LR 1e-3, 30 warm-up steps) with **no LR decay**
   (``min_lr_frac = 1``): the LR at a step then does not depend on the run's length, and since
   the batches are a pure function of (seed, step) a rung continued from the one below is
   bit for bit the run trained from scratch to its step count. Each rung is a run of its own,
   started from the lower rung's final checkpoint.
2. *Stagger vs fixed (and dense, learned, coprime, pow2-stagger)* at the chosen rung: a first
   batch of 5 seeds a side gives the seed-to-seed σ; `analysis.statistics.power` turns the paper's gap
   (stagger 2.5 % below fixed, Table 5 at W = 12) into the seeds needed for 80 % power, planned
   from σ's upper 95 % bound (`power.sigma_upper`) at the Holm family's first threshold
   (0.05 / the family's size): the power the study claims survives both an unlucky first
   batch and the multiplicity correction. It runs that many when the budget allows, otherwise
   what fits, and reports the power it had. Dense, learned and pow2-stagger get 3 seeds.
3. *Stagger vs fixed with longer training*, when the chosen rung is below the ladder's top: the
   first batch's stagger and fixed runs continued (exactly) to the top rung and compared again,
   so a gap seen at the chosen scale is checked on better-trained models. Its cost is within
   the worst-case estimate, which puts stage 2 at the top rung.

The rung rule (`chosen_rung`): dense *degrades measurably* at a rung when the mean over its seeds
of ppl(4T)/ppl(T) − 1 is at least ``min_rise`` (+10 %) and lies more than ``spread_k`` (2)
standard deviations of those seeds above zero (with one seed, the threshold alone). The chosen
scale is the smallest such rung; when none is, the study says so, runs stage 2 at the largest
rung and shows the curve as the evidence.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from analysis.statistics import power as P

__all__ = [
    "StudyScale",
    "STUDY_SCALES",
    "SCHEMES",
    "SEARCH_BEST",
    "search_best_alphas",
    "PAPER_GAP",
    "PRIOR_S_PER_STEP",
    "degradation",
    "rung_degrades",
    "chosen_rung",
    "StepTimes",
    "seeds_plan",
    "extra_seeds",
    "study_estimate",
]

#: stagger's relative gap below fixed in the paper (Table 5, W = 12: 42.08 vs 43.18 → 2.5 %).
PAPER_GAP = 0.025

#: The schemes the study trains, as model overrides on the base preset.
SCHEMES: dict[str, dict] = {
    "dense": {"model.attention": "dense"},
    "fixed": {"model.attention": "sparse", "model.schedule": "fixed"},
    "stagger": {"model.attention": "sparse", "model.schedule": "stagger"},
    "learned": {"model.attention": "sparse", "model.schedule": "learned"},
    "coprime": {"model.attention": "sparse", "model.schedule": "coprime"},
    # α per layer from `search_best_alphas` (`analysis.experiments.study.runner.study_config` sets them)
    "search-best": {"model.attention": "sparse"},
    "pow2-stagger": {
        "model.attention": "sparse",
        "model.schedule": "stagger",
        "model.base": "pow2",
    },
    # the scale study's depth cell (claims.toml [scale] depth): plain power-of-2 rungs
    "pow2-fixed": {"model.attention": "sparse", "model.schedule": "fixed", "model.base": "pow2"},
}

#: The lab's schedule search at the study's shape (L = 4, W = 12, K = 15, T = 128), declared
#: before its LM runs: ``fiblab search linear --objective distinct --layers 4 --window 12
#: --seq-len 128 --trials 200 --seed 0`` — its best trial (33 distinct distances, the linear
#: stagger's 31), α at the first and the last layer to 4 decimals, linear between.  Trained beside
#: the stagger as the lab's finding ``lab-search-best-vs-stagger`` (claims.toml): does a schedule
#: that reaches more distances also predict text better?  Never counted for the paper.
SEARCH_BEST = (1.2917, 1.0289)


def search_best_alphas(layers: int) -> tuple[float, ...]:
    """`SEARCH_BEST` over ``layers`` layers: the search space's linear ramp, first to last."""
    a, b = SEARCH_BEST
    if layers == 1:
        return (a,)
    return tuple(round(a + (b - a) * i / (layers - 1), 6) for i in range(layers))


#: Seconds per training step before any study run was measured: cpu-small at T = 128, 4096 tokens
#: a step, measured 0.54–0.62 s on the study's own quiet runs (2-core AMD EPYC; dense ≈ fixed,
#: attention is a small part of the step at T = 128).
PRIOR_S_PER_STEP = 0.55


@dataclass(frozen=True)
class StudyScale:
    """Every setting of one study size (`STUDY_SCALES`); see the module docstring."""

    seq_len: int = 128
    window: int = 12  # the paper's W of the seed table (Table 5)
    tokens_per_step: int = 4096
    # calibration steps. A 1500-step rung was measured once (dense +76 / +100 % at 4×) but does
    # not fit the 3 h budget at the measured step time, and 500 steps already qualify.
    ladder: tuple = (250, 500, 1000)
    calib_seeds: dict = field(
        default_factory=lambda: {"dense": (1, 2), "fixed": (1,), "stagger": (1,)}
    )
    factors: tuple = (1, 2, 4)
    # training-length windows per evaluation. None: all held-out windows, the basis the ledger
    # decides on, so the study's numbers and the ledger's are the same numbers.
    eval_limit: int | None = None
    min_rise: float = 0.10  # dense degradation at the top factor that counts as measurable
    spread_k: float = 2.0  # ... and by this many of its seeds' std above zero
    first_seeds: int = 5  # stagger and fixed: the batch that measures σ
    max_seeds: int = 10  # stagger and fixed: never more, whatever the power asks
    others: tuple = ("dense", "learned", "coprime", "pow2-stagger")
    other_seeds: int = 3
    # the lab's own arms (stage 4, at the chosen rung, only where the budget has room)
    lab: tuple = ("search-best",)
    lab_seeds: int = 5
    budget_s: float = 3 * 3600.0  # the whole study, estimated from measured step times
    preset: str | None = None  # base training preset (None: cpu-<scheme>)
    overrides: dict = field(default_factory=dict)
    eval_s: float = 5.0  # prior seconds per evaluation (all factors; measured 3–5 s quiet)
    prior_s_per_step: float = PRIOR_S_PER_STEP

    def __post_init__(self):
        if list(self.ladder) != sorted(set(self.ladder)) or not self.ladder:
            raise ValueError(
                f"ladder={self.ladder!r} must be increasing step counts, e.g. (250, 500)"
            )
        if self.first_seeds < 2:
            raise ValueError(f"first_seeds={self.first_seeds}: σ needs at least 2 seeds a side")


STUDY_SCALES: dict[str, StudyScale] = {
    # fp32 pinned: its runs must match the committed study's on any machine, whatever `auto`
    # would measure faster there (issue 41)
    "study": StudyScale(overrides={"precision": "fp32"}),
    # the test suite's: every stage, a tiny model, a couple of steps a rung, 2 seeds
    "study-smoke": StudyScale(
        seq_len=32,
        window=2,
        tokens_per_step=256,
        ladder=(2, 4),
        calib_seeds={"dense": (1, 2), "fixed": (1,), "stagger": (1,)},
        factors=(1, 2),
        eval_limit=4,
        first_seeds=2,
        max_seeds=3,
        others=("learned",),
        other_seeds=2,
        lab=(),
        budget_s=3600.0,
        preset="tiny",
        overrides={"model.vocab_size": 512, "val_tokens": 4096, "lr": 3e-3, "warmup": 1},
        eval_s=1.0,
        prior_s_per_step=0.05,
    ),
}


# --------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------
def degradation(ppl_by_factor: dict, factor: int) -> float:
    """ppl(factor·T) / ppl(T) − 1 (NaN when either is missing)."""
    a, b = ppl_by_factor.get(1), ppl_by_factor.get(factor)
    if a is None or b is None or not (a > 0) or not math.isfinite(b):
        return math.nan
    return b / a - 1


def rung_degrades(values, min_rise: float, spread_k: float) -> bool:
    """Whether dense's degradations at one rung (one per seed) are measurable: mean ≥
    ``min_rise`` and, with two seeds or more, mean − ``spread_k``·std > 0."""
    x = [v for v in values if v is not None and math.isfinite(v)]
    if not x:
        return False
    m = statistics.fmean(x)
    if m < min_rise:
        return False
    return len(x) < 2 or m - spread_k * statistics.stdev(x) > 0


def chosen_rung(curve: dict, min_rise: float = 0.10, spread_k: float = 2.0) -> tuple[int, bool]:
    """(steps, degrades) from ``curve`` = {steps: [dense degradation per seed]}: the smallest
    rung where dense degrades measurably (`rung_degrades`), else (the largest rung, False)."""
    if not curve:
        raise ValueError("the calibration curve is empty: train at least one rung")
    for steps in sorted(curve):
        if rung_degrades(curve[steps], min_rise, spread_k):
            return steps, True
    return max(curve), False


# --------------------------------------------------------------------------------------------
# the budget
# --------------------------------------------------------------------------------------------
@dataclass
class StepTimes:
    """Seconds a step per scheme as measured on study runs (median of their tokens/s), with a
    prior where none was measured yet; `run_s` is a run's estimated cost with its evaluation."""

    tokens_per_step: int
    prior_s_per_step: float
    eval_s: float
    measured: dict = field(default_factory=dict)  # scheme -> [s/step, ...]
    evals: list = field(default_factory=list)  # measured seconds per evaluation

    def add(self, scheme: str, s_per_step: float) -> None:
        if s_per_step > 0 and math.isfinite(s_per_step):
            self.measured.setdefault(scheme, []).append(float(s_per_step))

    def s_per_step(self, scheme: str) -> float:
        if self.measured.get(scheme):
            return statistics.median(self.measured[scheme])
        every = [v for vs in self.measured.values() for v in vs]
        base = statistics.median(every) if every else self.prior_s_per_step
        # learned α interpolates its columns, yet measured no slower (0.52 vs 0.52 s/step
        # for the stagger on the first study's runs): one median for every scheme
        return base

    def eval_cost(self) -> float:
        return statistics.median(self.evals) if self.evals else self.eval_s

    def run_s(self, scheme: str, steps: int) -> float:
        return steps * self.s_per_step(scheme) + self.eval_cost()

    def to_json(self) -> dict:
        return {
            "s_per_step": {k: statistics.median(v) for k, v in self.measured.items()},
            "eval_s": self.eval_cost(),
            "prior_s_per_step": self.prior_s_per_step,
        }


def seeds_plan(
    stagger,
    fixed,
    seeds: int | None = None,
    rel_gap: float = PAPER_GAP,
    target: float = 0.8,
    alpha: float = 0.05,
    level: float | None = None,
) -> P.PowerPlan | None:
    """`analysis.statistics.power.plan` for the paper's gap from the measured per-seed perplexities: σ the
    pooled std of both sides — or, with ``level``, its upper confidence bound
    (`power.sigma_upper`, df = n_a + n_b − 2) — the gap relative to fixed's mean, the test at
    ``alpha`` (the study passes 0.05 / its Holm family's size); None when σ is not positive."""
    from analysis.statistics.stats import pooled_std

    sigma = pooled_std(stagger, fixed)
    if not (sigma > 0):
        return None
    if level is not None:
        sigma = P.sigma_upper(sigma, len(stagger) + len(fixed) - 2, level)
    mean = statistics.fmean(fixed)
    return P.plan(rel_gap, mean, sigma, seeds=seeds, target=target, alpha=alpha)


def extra_seeds(needed: int | None, have: int, most: int, pair_s: float, left_s: float) -> int:
    """Seeds to add to each of stagger and fixed: up to ``needed`` (None: out of reach, so as
    many as allowed) and ``most`` per side, as many as ``left_s`` seconds pay for at ``pair_s``
    a pair of runs."""
    want = (most if needed is None else min(needed, most)) - have
    if want <= 0:
        return 0
    fits = int(left_s // pair_s) if pair_s > 0 else want
    return max(0, min(want, fits))


def study_estimate(times: StepTimes, sc: StudyScale, steps: int | None = None, skip=()) -> dict:
    """Estimated seconds of each stage with stage 2 at ``steps`` (default the largest rung, the
    worst case): calibration (every line to the top rung, an evaluation a rung), the first
    batch's runs the calibration does not already hold, and the others (less ``skip``, the
    schemes that would repeat another's runs); no extra seeds."""
    top, steps = max(sc.ladder), steps or max(sc.ladder)
    lines = [(s, seed) for s, seeds in sc.calib_seeds.items() for seed in seeds]
    calib = sum(times.run_s(s, top) + (len(sc.ladder) - 1) * times.eval_cost() for s, _ in lines)
    have = {(s, seed) for s, seed in lines} if steps in sc.ladder else set()
    first = sum(
        times.run_s(s, steps)
        for s in ("stagger", "fixed")
        for seed in range(1, sc.first_seeds + 1)
        if (s, seed) not in have
    )
    others = sum(
        times.run_s(s, steps)
        for s in sc.others
        if s not in skip
        for seed in range(1, sc.other_seeds + 1)
        if (s, seed) not in have
    )
    lab = sum(times.run_s(s, steps) for s in sc.lab for _ in range(sc.lab_seeds))
    return {
        "calibration": calib,
        "first_batch": first,
        "others": others,
        "lab": lab,
        "total": calib + first + others + lab,
    }
