"""Decision rules for a claim about two configurations measured over seeds: when it *held*, *did
not hold*, or was *not shown* — rules a skeptical reviewer can sign.

Why these and not "p < 0.05 on each comparison":

- **A registered test.** Each claim names its test before the results (`Protocol`: the metric,
  the test, one- or two-sided, the margin of a tie, the paper's effect, its family); the ledger
  writes the protocol and its hash into claims.json, so a protocol changed after the results is
  a visible diff.
- **Multiplicity.** A table of claims tested at 5 % each finds one "win" in twenty by chance.
  The p-values of one family are adjusted together by Holm's step-down (`holm`), which controls
  the chance of any false verdict in the family at α without assuming independence.
- **Absence of evidence is not a tie.** A tie is shown only by an equivalence test (`tost`: two
  one-sided Welch tests that the difference lies inside ±margin); a large p of a difference
  test shows nothing.
- **Intervals that hold at three seeds.** The interval is Welch's t-interval of the difference
  (`welch_interval`, Welch–Satterthwaite degrees of freedom). A percentile bootstrap from three
  values a side resamples 27 means and ignores the t's heavy tails: [0.13, 0.48] where the
  t-interval is [0.003, 0.604].
- **Magnitude.** The paper reports a size; an interval that excludes it says the size was not
  reproduced, whatever the direction.
- **Not shown is quantified.** Every comparison carries its minimum detectable effect
  (`analysis.statistics.power.detectable_effect` × the pooled σ), so "not shown" separates "no effect"
  from "too few seeds to see one".

Units: a comparison's ``gap`` is how much ``a`` beats ``b``: mean(b) − mean(a) when lower is
better (perplexity, loss), mean(a) − mean(b) otherwise, in the units of the values given (the
ledger gives ln perplexity, nats per token). ``ci``, ``margin``, ``paper_effect`` and ``mde``
are in the same units and orientation.

Functions
---------
``welch_interval(a, b)``   Welch t-interval of mean(a) − mean(b).
``tost(a, b, low, upp)``   equivalence (and non-equivalence) of mean(a) − mean(b) to [low, upp].
``holm(p)``                Holm-adjusted p-values of a family (NaN: untested, not counted).
``compare(a, b, protocol)``  the raw `Comparison` of two samples under a protocol.
``compare_to(x, ref, protocol)``  the raw `Comparison` of one sample against a threshold.
``decide(c, p_adj, …)``    the `Decision` of one comparison at its adjusted p-values.
``settle(comparisons)``    Holm over one family's comparisons, then `decide` each.

One module past 450 lines on purpose: the tests, the adjustment, the verdict and the words that
state it (with the power they quote) change together, and a reviewer signs them in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from analysis.statistics.power import (
    contrast_tost_power,
    detectable_effect,
    detectable_effect_one,
    tost_seeds_needed,
)
from analysis.statistics.stats import as_sample, welch, welch_parts

__all__ = [
    "TESTS",
    "SIDES",
    "POWER",
    "welch_interval",
    "TostResult",
    "tost",
    "holm",
    "Protocol",
    "Comparison",
    "Decision",
    "compare",
    "compare_to",
    "decide",
    "settle",
]

#: ``welch``: a beats b (Welch's t-test); ``tost``: a ties b within ±margin (equivalence).
TESTS = ("welch", "tost")
#: ``two``: the test sees a difference either way (a reversal is the same test's finding);
#: ``one``: only the claimed direction (a reversal then needs its own test, `Comparison`).
SIDES = ("two", "one")
#: The power at which the minimum detectable effect is quoted.
POWER = 0.8


def welch_interval(a, b, level: float = 0.95) -> tuple[float, float]:
    """Welch's t-interval of mean(a) − mean(b): d ± t_{(1+level)/2, ν}·se, with
    se = √(s_a²/n_a + s_b²/n_b) and ν the Welch–Satterthwaite degrees of freedom (the interval
    scipy's ``ttest_ind(a, b, equal_var=False).confidence_interval(level)`` gives). Zero spread on
    both sides gives the point (d, d)."""
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must be in (0, 1), e.g. 0.95")
    d, se, dof, _, _ = welch_parts(a, b)
    if se == 0:
        return d, d
    h = float(_st.t.ppf((1 + level) / 2, dof)) * se
    return d - h, d + h


@dataclass(frozen=True)
class TostResult:
    """Two one-sided Welch tests of low < mean(a) − mean(b) < upp.

    ``p`` (the larger of ``p_low`` and ``p_upp``) < α shows the difference inside the interval:
    both one-sided nulls (d ≤ low, d ≥ upp) are rejected. ``p_outside`` < α shows it outside:
    the smaller of the two opposite one-sided p-values (d > upp, d < low), doubled because the
    side is read off the data."""

    p: float
    p_low: float  # H0: d ≤ low  vs  d > low
    p_upp: float  # H0: d ≥ upp  vs  d < upp
    p_outside: float
    dof: float


def tost(a, b, low: float, upp: float) -> TostResult:
    """Equivalence of two independent samples at [low, upp] (Welch, unequal variances), as
    statsmodels' ``ttost_ind(a, b, low, upp, usevar="unequal")``; plus the opposite test that
    the difference lies outside the interval (`TostResult`)."""
    if not low < upp:
        raise ValueError(f"the equivalence interval [{low}, {upp}] must have low < upp")
    d, se, dof, _, _ = welch_parts(a, b)
    if se == 0:  # no spread: the difference is known exactly
        p_low, p_upp = float(d <= low), float(d >= upp)
    else:
        p_low = float(_st.t.sf((d - low) / se, dof))
        p_upp = float(_st.t.cdf((d - upp) / se, dof))
    p_out = min(1.0, 2.0 * min(1.0 - p_low, 1.0 - p_upp))
    return TostResult(max(p_low, p_upp), p_low, p_upp, p_out, dof)


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (same order as given).

    Sorted ascending, the i-th smallest (i = 0…m−1) becomes max over j ≤ i of (m − j)·p₍ⱼ₎,
    capped at 1; rejecting where the adjusted p < α controls the family-wise error at α. NaN
    entries (comparisons not tested) stay NaN and do not count in m."""
    p = np.asarray(p, dtype=float).reshape(-1)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    if m == 0:
        return out
    if ((p[idx] < 0) | (p[idx] > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {p[idx].tolist()}")
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adj, 1.0)
    return out


@dataclass(frozen=True)
class Protocol:
    """How a claim is tested, fixed before the results (claims.toml registers it).

    ``metric`` names the values compared (the ledger: ``log_ppl``, ln perplexity). ``test``:
    ``welch`` (a beats b) or ``tost`` (a ties b within ±``margin``). ``sided``: `SIDES`.
    ``paper_effect``: the paper's gap in the metric's units (None: the claim is an ordering,
    not a size). ``family``: the claims whose p-values are Holm-adjusted together."""

    family: str
    test: str = "welch"
    sided: str = "two"
    margin: float | None = None
    paper_effect: float | None = None
    metric: str = "value"
    alpha: float = 0.05

    def __post_init__(self):
        if self.test not in TESTS:
            raise ValueError(f"test={self.test!r} must be one of {TESTS}")
        if self.sided not in SIDES:
            raise ValueError(f"sided={self.sided!r} must be one of {SIDES}")
        if self.margin is not None and not self.margin >= 0:
            raise ValueError(f"margin={self.margin!r} must be a number ≥ 0 (the tie's ±margin)")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha={self.alpha!r} must lie in (0, 1), e.g. 0.05")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Comparison:
    """Two samples compared under a protocol, before any multiplicity adjustment.

    ``p_raw``: the registered test's p (Welch two- or one-sided; TOST for a tie), NaN when no
    test was possible (fewer than two values on a side). ``p_against``: the test *against* the
    claim where the registered one cannot reject it — a tie's "outside the margin", a one-sided
    claim's reversal; None for a two-sided test (its own rejection may be a reversal). Both go
    into the family's Holm adjustment. ``ci``: the ``level`` Welch t-interval of ``gap``;
    ``sigma``: the pooled σ; ``mde``: the gap the test detects with `POWER` (80 %) at α.
    ``cells``: the seeds of each group of a contrast of more than two (the 2×2 interaction),
    whose power is not a two-sample one; empty for two samples."""

    protocol: Protocol
    n_a: int
    n_b: int
    gap: float
    sigma: float
    ci: tuple
    p_raw: float
    p_against: float | None
    mde: float
    level: float = 0.95
    cells: tuple = ()

    @property
    def tested(self) -> bool:
        """A test ran: two values a side and a p-value (none when both sides have no spread and
        the same mean)."""
        ps = [self.p_raw] + ([] if self.p_against is None else [self.p_against])
        sides = self.n_a >= 2 and (self.n_b >= 2 or self.n_b == 0)  # n_b 0: one sample
        return sides and any(not math.isnan(p) for p in ps)


def _pooled(xa: np.ndarray, xb: np.ndarray) -> float:
    dof = len(xa) + len(xb) - 2
    ss = ((xa - xa.mean()) ** 2).sum() + ((xb - xb.mean()) ** 2).sum()
    return math.sqrt(ss / dof) if dof > 0 else math.nan


def compare(
    a, b, protocol: Protocol, lower_is_better: bool = True, level: float = 0.95
) -> Comparison:
    """The registered test of ``a`` against ``b`` (see `Comparison`); with fewer than two values
    on a side there is no test (p NaN) and only the gap is reported."""
    xa, xb = as_sample(a, "a"), as_sample(b, "b")
    if not len(xa) or not len(xb):
        raise ValueError(f"compare needs values on both sides, got n={len(xa)} and n={len(xb)}")
    sign = -1.0 if lower_is_better else 1.0  # gap = sign · (mean(a) − mean(b))
    g = sign * float(xa.mean() - xb.mean())
    nan = math.nan
    if len(xa) < 2 or len(xb) < 2:
        return Comparison(protocol, len(xa), len(xb), g, nan, (nan, nan), nan, None, nan, level)
    lo, hi = welch_interval(xa, xb, level)
    ci = tuple(sorted((sign * lo + 0.0, sign * hi + 0.0)))  # + 0.0: no −0.0 in the output
    sigma = _pooled(xa, xb)
    against = None
    if protocol.test == "tost":
        m = protocol.margin or 0.0
        if m > 0:
            t = tost(xa, xb, -m, m)
            p, against = t.p, t.p_outside
        else:  # no margin registered: no equivalence test, a tie can only be refuted
            p, against = nan, welch(xa, xb).p
    elif protocol.sided == "two":
        p = welch(xa, xb).p
    else:
        better, worse = ("less", "greater") if lower_is_better else ("greater", "less")
        p, against = welch(xa, xb, better).p, welch(xa, xb, worse).p
    alt = "two-sided" if protocol.sided == "two" or protocol.test == "tost" else "larger"
    d = detectable_effect(len(xa), len(xb), POWER, protocol.alpha, alt)
    mde = d * sigma if math.isfinite(sigma) else nan
    return Comparison(protocol, len(xa), len(xb), g, sigma, ci, p, against, mde, level)


def compare_to(x, ref: float, protocol: Protocol, level: float = 0.95) -> Comparison:
    """One sample against a registered threshold: the claim mean(x) > ``ref`` (negate both for
    "below"), a one-sided one-sample t-test whose reversal, mean(x) < ``ref``, is the test
    against it.  ``gap`` = mean(x) − ref, ``ci`` its ``level`` t-interval, ``n_b`` 0.  The
    threshold rules of the ledger are tested this way, so they join their family's Holm
    adjustment and its magnitude rule (``paper_effect``: the paper's value minus ``ref``)."""
    xa = as_sample(x, "x")
    nan = math.nan
    if protocol.sided != "one" or protocol.test != "welch":
        raise ValueError("a threshold is tested one-sided (protocol sided='one', test='welch')")
    g = float(xa.mean() - ref)
    if len(xa) < 2:
        return Comparison(protocol, len(xa), 0, g, nan, (nan, nan), nan, None, nan, level)
    s = float(xa.std(ddof=1))
    if s == 0:
        p, against = (0.0, 1.0) if g > 0 else (1.0, 0.0) if g < 0 else (nan, nan)
        return Comparison(protocol, len(xa), 0, g, 0.0, (g, g), p, against, 0.0, level)
    se = s / math.sqrt(len(xa))
    t = g / se
    df = len(xa) - 1
    h = float(_st.t.ppf((1 + level) / 2, df)) * se
    ci = (g - h + 0.0, g + h + 0.0)
    p, against = float(_st.t.sf(t, df)), float(_st.t.cdf(t, df))
    mde = detectable_effect_one(len(xa), protocol.alpha, POWER) * s
    return Comparison(protocol, len(xa), 0, g, s, ci, p, against, mde, level)


@dataclass(frozen=True)
class Decision:
    """One comparison's verdict (``held`` / ``did not hold`` / ``not shown``), why
    (``reason``), and the numbers a reviewer checks.

    ``direction``: what the tests established — ``a better``, ``b better``, ``within margin``
    (a tie shown), ``undetermined`` (nothing shown) or ``not tested``. ``magnitude``:
    ``inside`` / ``outside`` (the paper's effect within the interval or not) or ``n/a``."""

    verdict: str
    reason: str
    direction: str
    magnitude: str
    p_adjusted: float
    p_against_adjusted: float | None
    comparison: Comparison

    @property
    def p_raw(self) -> float:
        return self.comparison.p_raw

    def stats(self) -> dict:
        """The record claims.json carries (NaN stays NaN here; `lab.util.jsonio` writes null)."""
        c, pr = self.comparison, self.comparison.protocol
        return {
            "p_raw": c.p_raw,
            "p_adjusted": self.p_adjusted,
            "p_against": c.p_against,
            "p_against_adjusted": self.p_against_adjusted,
            "family": pr.family,
            "test": pr.test,
            "sided": pr.sided,
            "metric": pr.metric,
            "effect": c.gap,
            "ci": list(c.ci),
            "direction": self.direction,
            "magnitude": self.magnitude,
            "paper_effect": pr.paper_effect,
            "margin": pr.margin,
            "mde": c.mde,
            "n_a": c.n_a,
            "n_b": c.n_b,
            "reason": self.reason,
        }

    def wording(self, digits: int = 3, a: str = "a", b: str = "b", ahead: str = "better") -> str:
        """One phrase: the verdict, why, and the p-values or interval behind it; ``a`` and ``b``
        name the arms (a reversal says which arm was ahead). ``ahead``: "better" where the
        registered direction is a better score (a beats b), "above" where it is only a larger
        value (a threshold rule's "a degrades more than b": its reversal is "b above a", not
        "b better"). A result not shown says the power of its test *as a lone test* — before
        any Holm adjustment, which lowers it in a family of many — to show a true tie
        (`tie_power`) or the gap it detects."""
        c, pr = self.comparison, self.comparison.protocol
        f = f"{{:.{digits}g}}"
        ci = f"[{f.format(c.ci[0])}, {f.format(c.ci[1])}]"
        p = f"p_Holm={_p(self.p_adjusted)} (raw {_p(c.p_raw)})"
        if self.reason == "untested":
            if min(c.n_a, c.n_b) < 2:
                return "not shown: fewer than 2 seeds on a side, no test"
            return "not shown: no spread on either side and no difference, no test"
        one = c.n_b == 0  # one sample against a threshold: a is past it or short of it

        def lead(x: str, y: str) -> str:  # x ahead of y in the registered direction
            return f"{x} better" if ahead == "better" else f"{x} {ahead} {y}"

        if self.reason == "significant":
            return f"held: {a} past {b}, {p}" if one else f"held: {lead(a, b)}, {p}"
        if self.reason == "within margin":
            return f"held: within ±{f.format(pr.margin)} (TOST {p})"
        if self.reason == "reversal":
            q = self.p_against_adjusted if c.p_against is not None else self.p_adjusted
            won = f"{a} short of {b}" if one else lead(b, a)
            return f"did not hold: {won}, a significant reversal (p_Holm={_p(q)})"
        if self.reason == "outside margin":
            return (
                f"did not hold: outside ±{f.format(pr.margin)}, "
                f"{lead(a, b) if c.gap > 0 else lead(b, a)} "
                f"(p_Holm={_p(self.p_against_adjusted)})"
            )
        if self.reason == "magnitude not reproduced":
            also = f"; the direction held, {p}" if self.direction == "a better" else ""
            return (
                f"did not hold: magnitude not reproduced, the paper's {f.format(pr.paper_effect)} "
                f"lies outside the {c.level:.0%} interval {ci}{also}"
            )
        if pr.test == "tost":
            tp = tie_power(c)
            if tp is None:
                return f"not shown: TOST {p}"
            need = "more than 1000" if tp[1] is None else str(tp[1])
            each = "a group" if c.cells else "a side"
            return (
                f"not shown: TOST {p}; as a lone test these seeds show a true tie within "
                f"±{f.format(pr.margin)} with power {tp[0]:.2f} ({need} {each} give "
                f"{POWER:.0%})"
            )
        return (
            f"not shown: {p}; as a lone test these seeds detect a gap of {f.format(c.mde)} with "
            f"{POWER:.0%} power"
        )


def tie_power(c: Comparison) -> tuple[float, int | None] | None:
    """(the power of ``c``'s equivalence test to show a true tie — difference 0 — inside its
    margin at these seeds and σ, the seeds a side (a group, for a contrast) that give `POWER`)
    as a lone test: at α/2, the level a lone tie faces (`settle` counts its two hypotheses),
    before any Holm adjustment over other tests; None for a comparison that is not a TOST with
    a margin and a finite σ. This, not the gap a Welch test would detect, is a tie's power: few
    seeds detect a large gap and still cannot show a tie
    (`analysis.statistics.power.contrast_tost_power`: a 2×2 interaction's, not a difference's)."""
    pr = c.protocol
    if pr.test != "tost" or not pr.margin or not (0 < c.sigma < math.inf) or min(c.n_a, c.n_b) < 2:
        return None
    level = pr.alpha / 2
    cells = c.cells or (c.n_a, c.n_b)
    got = contrast_tost_power(pr.margin, c.sigma, cells, level)
    return got, tost_seeds_needed(pr.margin, c.sigma, POWER, level, groups=len(cells))


def _p(p) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def _magnitude(c: Comparison) -> str:
    pe = c.protocol.paper_effect
    if pe is None or not c.tested or any(math.isnan(x) for x in c.ci):
        return "n/a"
    return "inside" if c.ci[0] <= pe <= c.ci[1] else "outside"


def decide(c: Comparison, p_adjusted: float, p_against_adjusted: float | None = None) -> Decision:
    """The verdict of one comparison at its (Holm-)adjusted p-values, α from its protocol.

    ``welch`` (a beats b): *did not hold* on a significant reversal (two-sided: the registered
    test significant with b ahead; one-sided: the reversal test), else *did not hold* when the
    interval excludes the paper's effect ("magnitude not reproduced"), else *held* when the
    registered test is significant with a ahead, else *not shown*. ``tost`` (a ties b): *held*
    when the equivalence test is significant, *did not hold* when the difference is
    significantly outside the margin, else *not shown*; the magnitude is reported, not used (a
    tie claims a bound, not the paper's small difference). No test (one seed a side): not shown.
    """
    pr, a = c.protocol, c.protocol.alpha
    mag = _magnitude(c)

    def out(verdict, reason, direction):
        return Decision(verdict, reason, direction, mag, p_adjusted, p_against_adjusted, c)

    if not c.tested:
        return out("not shown", "untested", "not tested")
    against = p_against_adjusted is not None and p_against_adjusted < a
    if pr.test == "tost":
        if p_adjusted < a:
            return out("held", "within margin", "within margin")
        if against:
            return out("did not hold", "outside margin", "a better" if c.gap > 0 else "b better")
        return out("not shown", "not significant", "undetermined")
    sig = p_adjusted < a
    if (pr.sided == "two" and sig and c.gap < 0) or (pr.sided == "one" and against):
        return out("did not hold", "reversal", "b better")
    direction = "a better" if sig and c.gap > 0 else "undetermined"
    if mag == "outside":
        return out("did not hold", "magnitude not reproduced", direction)
    if direction == "a better":
        return out("held", "significant", direction)
    return out("not shown", "not significant", direction)


def settle(comparisons: list[Comparison]) -> list[Decision]:
    """The decisions of one family: Holm over every p-value its tested comparisons produced
    (each registered test, and each test against a claim where there is one), then `decide`.

    Counting a tie's two tests (inside / outside the margin) as two hypotheses is conservative —
    they cannot both be false — but valid under any dependence, margin boundary included: a lone
    tie is shown when TOST's p < α/2 (its partner's p is then near 1)."""
    fams = {c.protocol.family for c in comparisons}
    if len(fams) > 1:
        raise ValueError(f"settle adjusts one family at a time, got {sorted(fams)}")
    p = [c.p_raw if c.tested else math.nan for c in comparisons]  # NaN: not in the family
    q = [c.p_against if c.tested and c.p_against is not None else math.nan for c in comparisons]
    adj = holm(p + q)
    n = len(comparisons)
    return [
        decide(c, float(adj[i]), None if c.p_against is None else float(adj[n + i]))
        for i, c in enumerate(comparisons)
    ]
