"""Statistical power of the lab's seed comparisons: how many seeds a gap needs, and how much
power a comparison that was run actually had.

The lab compares two configurations by their per-seed values (held-out perplexity, probe
accuracy) with Welch's t-test (`analysis.statistics.stats.welch`). Before a study spends hours on seeds it
should know how many it needs: for a relative gap ``g`` (stagger 2.5 % below fixed) between means
near ``m`` with seed-to-seed standard deviation ``σ``, the standardised effect is
``d = g·m / σ`` (Cohen's d), and the power of a two-sample t-test with ``n_a`` and ``n_b`` seeds
is the probability that the noncentral t statistic (df = n_a + n_b − 2, noncentrality
``d·sqrt(n_a·n_b / (n_a + n_b))``) falls beyond the test's critical value. That is the textbook
equal-variance calculation statsmodels' ``TTestIndPower`` makes; with equal seed counts and
similar variances Welch's test has the same power to within a seed. The tests check it against
statsmodels and against a simulation of the t-test itself.

A "not shown" verdict reports the power its comparison had for the paper's effect, and the
smallest effect its seeds could have detected (`detectable_effect`, the minimum detectable
effect), so a reader can tell "no effect" from "too few seeds to see one".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize, stats

__all__ = [
    "detectable_effect_one",
    "effect_size",
    "power",
    "seeds_needed",
    "detectable_effect",
    "PowerPlan",
    "plan",
    "sigma_upper",
    "binomial_power",
    "binomial_tost_power",
    "tost_power",
    "contrast_tost_power",
    "tost_seeds_needed",
    "ALTERNATIVES",
]

#: ``two-sided``: a difference either way; ``larger``: the first mean above the second.
ALTERNATIVES = ("two-sided", "larger")


def effect_size(rel_gap: float, mean: float, sigma: float) -> float:
    """Cohen's d of a relative gap: ``rel_gap·mean / sigma`` (all as measured: 0.025 for 2.5 %).

    ``sigma`` is the per-seed standard deviation of one configuration (or the pooled one)."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma={sigma!r} must be a positive number (the seed-to-seed std)")
    return abs(rel_gap * mean) / sigma


def _check(n_a: int, n_b: int, alpha: float, alternative: str) -> None:
    if n_a < 2 or n_b < 2:
        raise ValueError(f"seeds ({n_a}, {n_b}): a t-test needs at least 2 per side")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} must lie in (0, 1), e.g. 0.05")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative={alternative!r} is unknown: use one of {ALTERNATIVES}")


def power(
    d: float, n_a: int, n_b: int | None = None, alpha: float = 0.05, alternative: str = "two-sided"
) -> float:
    """The probability that a two-sample t-test at level ``alpha`` with ``n_a`` and ``n_b``
    seeds (``n_b`` defaults to ``n_a``) rejects "no difference" when the true standardised gap
    is ``d``."""
    n_b = n_a if n_b is None else n_b
    _check(n_a, n_b, alpha, alternative)
    df = n_a + n_b - 2
    nc = abs(d) * math.sqrt(n_a * n_b / (n_a + n_b))
    if alternative == "larger":
        crit = stats.t.ppf(1 - alpha, df)
        return float(stats.nct.sf(crit, df, nc))
    crit = stats.t.ppf(1 - alpha / 2, df)
    lower = stats.nct.cdf(-crit, df, nc)  # scipy gives NaN for a large nc, where it is ≈ 0
    return float(stats.nct.sf(crit, df, nc) + (0.0 if math.isnan(lower) else lower))


def seeds_needed(
    d: float,
    target: float = 0.8,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    most: int = 10_000,
) -> int | None:
    """The fewest seeds per configuration (equal on both sides) whose test has at least
    ``target`` power for gap ``d``; None if even ``most`` seeds do not reach it (d ≈ 0)."""
    if not 0 < target < 1:
        raise ValueError(f"target={target!r} must lie in (0, 1), e.g. 0.8")
    # power grows with n: double up to the first n with enough power, then bisect below it
    # (never evaluating far beyond it, where the noncentral t's tail loses precision)
    lo, hi = 1, 2
    while power(d, hi, hi, alpha, alternative) < target:
        if hi >= most:
            return None
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(d, mid, mid, alpha, alternative) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def detectable_effect(
    n_a: int,
    n_b: int | None = None,
    target: float = 0.8,
    alpha: float = 0.05,
    alternative: str = "two-sided",
) -> float:
    """The minimum detectable effect: the smallest standardised gap d (in σ) that a test with
    ``n_a`` and ``n_b`` seeds rejects with probability ``target`` (the inverse of `power` in
    d). Multiply by the seed-to-seed σ for the gap in the measured units: a "not shown" with a
    detectable effect of 0.9σ says gaps much below 0.9σ were out of these seeds' reach."""
    n_b = n_a if n_b is None else n_b
    _check(n_a, n_b, alpha, alternative)
    if not alpha < target < 1:  # at d = 0 the power is the test's size, alpha
        raise ValueError(f"target={target!r} must lie in (alpha={alpha}, 1), e.g. 0.8")
    hi = 1.0
    while power(hi, n_a, n_b, alpha, alternative) < target:  # power rises with d: bracket it
        hi *= 2
    return float(
        optimize.brentq(lambda d: power(d, n_a, n_b, alpha, alternative) - target, 0.0, hi)
    )


def detectable_effect_one(n: int, alpha: float, target: float = 0.8) -> float:
    """The standardised gap (in σ) a one-sided one-sample t-test of ``n`` values detects with
    probability ``target`` at ``alpha`` (noncentral t; the one-sample twin of
    `detectable_effect`)."""
    df, crit = n - 1, float(stats.t.isf(alpha, n - 1))

    def reach(d: float) -> float:
        return float(stats.nct.sf(crit, df, d * math.sqrt(n)))

    hi = 1.0
    while reach(hi) < target:
        hi *= 2
    return float(optimize.brentq(lambda d: reach(d) - target, 0.0, hi))


def binomial_power(rate: float, items: int, chance: float, alpha: float) -> float:
    """The power of the exact one-sided binomial test of accuracy > ``chance`` on ``items``
    items at level ``alpha`` for a true accuracy ``rate``: P(X ≥ k) for the least k whose
    P₀(X ≥ k) ≤ alpha (the battery's chance test, `probes.battery_run.chance_test`)."""
    k = int(stats.binom.isf(alpha, items, chance)) + 1  # the least k: P0(X >= k) <= alpha
    return float(stats.binom.sf(k - 1, items, rate))


def binomial_tost_power(rate: float, items: int, low: float, upp: float, alpha: float) -> float:
    """The power of the exact binomial equivalence test (TOST: accuracy > ``low`` and < ``upp``,
    each one-sided at ``alpha``; statsmodels' ``binom_tost``) on ``items`` items for a true
    accuracy ``rate``: P(k_lo ≤ X ≤ k_hi), k_lo the least count with P_low(X ≥ k_lo) ≤ alpha and
    k_hi the greatest with P_upp(X ≤ k_hi) ≤ alpha (0 when no count rejects both)."""
    k_lo = int(stats.binom.isf(alpha, items, low)) + 1
    k_hi = int(stats.binom.ppf(alpha, items, upp))
    if stats.binom.cdf(k_hi, items, upp) > alpha:  # ppf gives the least k with cdf >= alpha
        k_hi -= 1
    if k_hi < k_lo:
        return 0.0
    return float(stats.binom.cdf(k_hi, items, rate) - stats.binom.cdf(k_lo - 1, items, rate))


def sigma_upper(sigma: float, df: int, level: float = 0.95) -> float:
    """The one-sided upper confidence bound of a standard deviation estimated with ``df``
    degrees of freedom: ``sigma·sqrt(df / χ²_{1−level}(df))``. A seed plan made from the σ of a
    first batch of 3–5 seeds is optimistic about as often as not; planned from this bound it has
    its power unless σ is in the worst ``1 − level`` of what such a batch shows."""
    if df < 1:
        raise ValueError(f"df={df!r}: a standard deviation needs at least 1 degree of freedom")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie in (0, 1), e.g. 0.95")
    return float(sigma * math.sqrt(df / stats.chi2.ppf(1 - level, df)))


def tost_power(
    margin: float, sigma: float, n_a: int, n_b: int | None = None, alpha: float = 0.05,
    diff: float = 0.0,
) -> float:  # fmt: skip
    """The probability that the equivalence test (TOST, two one-sided t-tests at level
    ``alpha``, pooled variance) shows |mean(a) − mean(b)| < ``margin`` when the true difference
    is ``diff`` and the seed-to-seed std is ``sigma`` — what a "ties" claim's seeds are planned
    from (`contrast_tost_power` of the two groups).  The tests check it against a simulation of
    statsmodels' ``ttost_ind`` (pooled).  The ledger decides a tie by Welch's TOST
    (`analysis.statistics.decide.tost`), whose power is a little lower at few seeds (≈ 0.035
    against 0.044 at 5 a side, α = 0.025, simulated): a plan should leave room."""
    n_b = n_a if n_b is None else n_b
    _check(n_a, n_b, alpha, "larger")
    return contrast_tost_power(margin, sigma, (n_a, n_b), alpha, diff)


def contrast_tost_power(
    margin: float, sigma: float, cells, alpha: float = 0.05, diff: float = 0.0
) -> float:
    """The TOST power of a contrast of group means with coefficients ±1 — a − b over two groups
    (``cells`` = (n_a, n_b)), or the 2×2 interaction (aF − aS) − (bF − bS) over four — whose
    groups have ``cells`` seeds each and a common std ``sigma``.  Exact (Owen's integral, no
    simulation): with k = σ·√(Σ 1/n_i), df = Σ n_i − groups and the pooled sample std
    s = σ·√(v/df), v ~ χ²(df), the test passes iff |D − diff| stays inside ±(margin − t·s·k/σ);
    integrate the normal probability of that over v.  A 2×2 with 10, 10, 5, 5 seeds has a k
    1.4 times a 10-vs-5 difference's: its power is not that difference's."""
    from scipy import integrate

    cells = tuple(int(n) for n in cells)
    if len(cells) < 2 or min(cells) < 2:
        raise ValueError(f"seeds {cells}: a contrast needs 2 or more groups of at least 2 seeds")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} must lie in (0, 1), e.g. 0.05")
    if not (sigma > 0 and margin > 0):
        raise ValueError(f"sigma={sigma!r} and margin={margin!r} must be positive")
    df = sum(cells) - len(cells)
    k = sigma * math.sqrt(sum(1 / n for n in cells))
    t = stats.t.ppf(1 - alpha, df)
    v_max = df * (margin / (t * k)) ** 2  # beyond it the acceptance interval is empty

    def inside(v: float) -> float:
        h = margin - t * k * math.sqrt(v / df)  # half-width of D's acceptance interval
        return (stats.norm.cdf((h - diff) / k) - stats.norm.cdf((-h - diff) / k)) * (
            stats.chi2.pdf(v, df)
        )

    # χ²(df) has no mass to speak of beyond its 1 − 1e-12 quantile: a far upper limit would
    # make quad miss the mass near df altogether (many seeds, a wide margin)
    top = min(v_max, float(stats.chi2.ppf(1 - 1e-12, df)))
    points = [df] if df < top else None
    got, _ = integrate.quad(inside, 0.0, top, limit=200, points=points)
    return float(min(1.0, max(0.0, got)))


def tost_seeds_needed(
    margin: float, sigma: float, target: float = 0.8, alpha: float = 0.05, most: int = 1000,
    groups: int = 2,
) -> int | None:  # fmt: skip
    """The fewest seeds a group (equal groups: 2 for a difference, 4 for a 2×2 interaction)
    whose TOST shows a true tie (difference 0) inside ±``margin`` with at least ``target``
    power; None beyond ``most``."""
    for n in range(2, most + 1):  # power rises with n; a tie needs tens of seeds at most here
        if contrast_tost_power(margin, sigma, (n,) * groups, alpha) >= target:
            return n
    return None


@dataclass(frozen=True)
class PowerPlan:
    """How a seed comparison stands against an effect of a given size."""

    rel_gap: float  # the effect looked for, relative (0.025: 2.5 %)
    mean: float  # the mean it is relative to
    sigma: float  # seed-to-seed std measured
    d: float  # Cohen's d = rel_gap·mean / sigma
    alpha: float
    target: float
    needed: int | None  # seeds per configuration for `target` power (None: out of reach)
    seeds: int | None  # seeds per configuration run (None: not run yet)
    achieved: float | None  # power with `seeds` (None: not run yet)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def plan(
    rel_gap: float,
    mean: float,
    sigma: float,
    seeds: int | None = None,
    target: float = 0.8,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    seeds_b: int | None = None,
) -> PowerPlan:
    """The seeds an effect needs and, when ``seeds`` were run (``seeds_b`` on the other side,
    default the same), the power they had — with both sides' counts, not the smaller twice (3
    learned runs against 10 fixed ones have more power than 3 against 3)."""
    d = effect_size(rel_gap, mean, sigma)
    needed = seeds_needed(d, target, alpha, alternative)
    n_b = seeds if seeds_b is None else seeds_b
    ok = seeds and seeds >= 2 and n_b and n_b >= 2
    achieved = power(d, seeds, n_b, alpha, alternative) if ok else None
    return PowerPlan(rel_gap, mean, sigma, d, alpha, target, needed, seeds, achieved)
