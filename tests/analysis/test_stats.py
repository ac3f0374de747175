"""Seed statistics against hand computation: means and spreads, the pooled std, Welch's t-test by
its formula (and a closed-form t tail at 2 degrees of freedom), the bootstrap interval against the
exact bootstrap distribution enumerated by brute force, and the plain-English verdicts (decided by
`analysis.statistics.decide`, whose rules tests/analysis/test_decide.py checks at their boundaries)."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from analysis.statistics.assess import assess, claim_kind, verdict
from analysis.statistics.power import detectable_effect
from analysis.statistics.stats import (
    bootstrap_ci,
    gap,
    margin,
    pooled_std,
    samples,
    summary,
    welch,
)

# hand table: a = 1, 2, 3 (mean 2, s² = 1); b = 4, 6, 8, 10 (mean 7, s² = 20/3)
A = [1.0, 2.0, 3.0]
B = [4.0, 6.0, 8.0, 10.0]


def test_describe_by_hand():
    d = summary([1.0, 2.0, float("nan"), 3.0])  # NaN is dropped
    assert d["n"] == 3 and d["mean"] == 2.0
    assert d["std"] == pytest.approx(1.0)  # √(2/2)
    assert d["std_pop"] == pytest.approx(math.sqrt(2 / 3))
    assert d["sem"] == pytest.approx(1 / math.sqrt(3))
    assert (d["min"], d["max"]) == (1.0, 3.0)
    one = summary([5.0])
    assert one["n"] == 1 and one["mean"] == 5.0 and math.isnan(one["std"])
    assert one["std_pop"] == 0.0
    with pytest.raises(ValueError, match="one-dimensional"):
        summary([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="sequence of numbers"):
        summary(["a", "b"])


def test_table5_matches_the_papers_row_by_hand():
    # fib/stagger at W = 12, seeds 42 43 44: mean 42.08, std 0.159 (ddof 1), 0.130 (ddof 0)
    from analysis.tables.seeds import table5

    x = [42.02, 41.96, 42.26]
    df = pd.DataFrame(
        {
            "config": ["fib/stagger"] * 3 + ["fib/fixed"] * 2,
            "W": [12] * 5,
            "seed": [42, 43, 44, 42, 43],
            "ppl": x + [43.12, 43.16],
        }
    )
    s = table5(df)
    assert list(s["config"]) == ["fib/stagger", "fib/fixed"]  # mean ascending
    row = s.iloc[0]
    ss = (42.02 - 42.08) ** 2 + (41.96 - 42.08) ** 2 + (42.26 - 42.08) ** 2  # 0.0504
    assert row["n"] == 3 and row["mean"] == pytest.approx(42.08)
    assert row["std"] == pytest.approx(math.sqrt(ss / 2))
    assert row["std_pop"] == pytest.approx(math.sqrt(ss / 3))
    assert s.iloc[1]["std"] == pytest.approx(0.04 / math.sqrt(2))
    assert list(samples(df, "config", "ppl")) == ["fib/stagger", "fib/fixed"]
    with pytest.raises(ValueError, match="lacks columns"):
        samples(df, "schedule", "ppl")


def test_pooled_std_by_hand():
    # (2·1 + 3·20/3) / (2 + 3) = 22/5
    assert pooled_std(A, B) == pytest.approx(math.sqrt(22 / 5))
    # a single value contributes nothing; three samples pool the same way
    assert pooled_std(A, B, [100.0]) == pytest.approx(math.sqrt(22 / 5))
    assert pooled_std(A, [0.0, 2.0], B) == pytest.approx(math.sqrt((2 + 2 + 20) / 6))
    assert math.isnan(pooled_std([1.0], [2.0]))


def test_gap_and_margin():
    assert gap(A, B) == 5.0  # lower is better: a beats b by 5
    assert gap(A, B, lower_is_better=False) == -5.0
    assert margin(A, B) == pytest.approx(5 / math.sqrt(22 / 5))
    assert margin(A, B, sigma=2.5) == 2.0
    assert math.isnan(margin([1.0], [2.0]))
    assert margin([1.0, 1.0], [2.0, 2.0]) == math.inf  # zero spread, non-zero gap


def test_welch_by_the_formula():
    r = welch(A, B)
    # t = (2 − 7)/√(1/3 + 5/3); dof = 2² / ((1/3)²/2 + (5/3)²/3) = 216/53
    assert r.t == pytest.approx(-5 / math.sqrt(2))
    assert r.dof == pytest.approx(216 / 53)
    assert r.p == pytest.approx(2 * st.t.sf(5 / math.sqrt(2), 216 / 53))
    ref = st.ttest_ind(A, B, equal_var=False)
    assert (r.t, r.p) == pytest.approx((ref.statistic, ref.pvalue))
    assert welch(A, B, "less").p == pytest.approx(r.p / 2)
    assert welch(A, B, "greater").p == pytest.approx(1 - r.p / 2)


def test_welch_two_dof_closed_form():
    # a = 0, 2; b = 3, 5: s² = 2 each, n = 2 → dof exactly 2, where the t tail is closed-form:
    # two-sided p = 1 − |t| / √(t² + 2)
    r = welch([0.0, 2.0], [3.0, 5.0])
    t = -3 / math.sqrt(2)
    assert r.t == pytest.approx(t) and r.dof == pytest.approx(2.0)
    assert r.p == pytest.approx(1 - abs(t) / math.sqrt(t * t + 2))


def test_welch_degenerate_and_too_few():
    r = welch([1.0, 1.0], [2.0, 2.0])
    assert r.t == -math.inf and r.p == 0.0
    assert welch([1.0, 1.0], [2.0, 2.0], "greater").p == 1.0
    r = welch([1.0, 1.0], [1.0, 1.0])
    assert math.isnan(r.t) and math.isnan(r.p)
    with pytest.raises(ValueError, match="at least 2 values per side.*add seeds"):
        welch([1.0], B)
    with pytest.raises(ValueError, match="alternative"):
        welch(A, B, "sideways")


def exact_bootstrap(a, b):
    """Every equally likely resample pair and its gap mean(b*) − mean(a*)."""
    ga = [np.mean(r) for r in itertools.product(a, repeat=len(a))]
    gb = [np.mean(r) for r in itertools.product(b, repeat=len(b))]
    return np.array([y - x for x in ga for y in gb])


def test_bootstrap_ci_against_the_exact_distribution():
    a, b = [1.0, 2.0, 4.0], [3.0, 5.0, 9.0]
    exact = exact_bootstrap(a, b)  # 27 × 27 outcomes
    lo, hi = bootstrap_ci(a, b, n=40_000, level=0.9, seed=3)
    # lo is a 5 % quantile and hi a 95 % one of the exact distribution (Monte Carlo slack 1 %)
    assert (exact < lo).mean() <= 0.05 + 0.01 and (exact <= lo).mean() >= 0.05 - 0.01
    assert (exact > hi).mean() <= 0.05 + 0.01 and (exact >= hi).mean() >= 0.05 - 0.01
    assert lo < gap(a, b) < hi
    assert bootstrap_ci(a, b, n=2000, seed=7) == bootstrap_ci(a, b, n=2000, seed=7)
    lo2, hi2 = bootstrap_ci(a, b, n=2000, seed=7, lower_is_better=False)
    assert (lo2, hi2) == pytest.approx(
        (-bootstrap_ci(a, b, n=2000, seed=7)[1], -bootstrap_ci(a, b, n=2000, seed=7)[0])
    )
    assert bootstrap_ci([2.0, 2.0], [5.0], n=100) == (3.0, 3.0)  # nothing to resample
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(a, b, level=95)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_ci(a, b, n=0)


def test_claim_kind():
    assert claim_kind("stagger beats fixed") == "beats"
    assert claim_kind("fib/stagger outperforms pow2/stagger") == "beats"
    assert claim_kind("stagger ties coprime") == "ties"
    assert claim_kind("pow2/stagger matches fib/learned") == "ties"
    with pytest.raises(ValueError, match="'A beats B' or 'A ties B'"):
        claim_kind("stagger versus fixed")


def test_verdict_beats_yes_with_numbers():
    a, b = [1.0, 1.2, 1.1], [3.0, 3.2, 3.1]  # gap 2, s = 0.1 each
    line = verdict(a, b, "stagger beats fixed")
    p = welch(a, b).p
    assert line.startswith("stagger beats fixed: yes, gap 2.00 = 20.0σ")
    assert f"Welch p={p:.1e}" in line and "n=3 vs 3" in line
    lo, hi = st.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)  # of mean a − mean b
    assert f"95% CI of the gap [{-hi:.2f}, {-lo:.2f}]" in line


def test_verdict_not_shown_no_and_ties():
    # dof = 2 example: gap 3, pooled σ √2 → 2.1σ, p = 0.168 → not significant
    line = verdict([0.0, 2.0], [3.0, 5.0], "a beats b")
    assert line.startswith("a beats b: not shown, gap 3.00 = 2.1σ (Welch p=0.17")
    # the gap these seeds detect with 80 % power: d (in σ) at 2 + 2 seeds × the pooled σ √2
    mde = detectable_effect(2, 2) * math.sqrt(2)
    assert line.endswith(f"; detectable with 80 % power: {mde:.2f}") and 7.9 < mde < 8.1
    # a reversal that is not significant is not shown, not "no"
    assert verdict([3.0, 5.0], [0.0, 2.0], "a beats b").startswith("a beats b: not shown, gap -3")
    # a significant one is
    assert verdict([3.0, 3.1, 3.2], [1.0, 1.1, 1.2], "a beats b").startswith(
        "a beats b: no, a significant reversal, gap -2.00"
    )
    # higher is better: the same numbers now favour a
    assert verdict([3.0, 5.1, 4.0], [0.0, 0.1, 0.2], "a beats b", lower_is_better=False).startswith(
        "a beats b: yes"
    )
    # a tie is shown by an equivalence test at a margin, never by a large p
    near = ([1.0, 1.3, 1.1], [1.05, 1.25, 1.2])
    assert verdict(*near, "a ties b").startswith("a ties b: not shown")
    assert verdict(*near, "a ties b", tie_margin=0.5).startswith("a ties b: yes")
    far = ([1.0, 1.1, 1.2], [3.0, 3.1, 3.2])
    assert verdict(*far, "a ties b").startswith("a ties b: no, outside the margin")
    assert verdict(*far, "a ties b", tie_margin=0.5).startswith("a ties b: no, outside the margin")
    assert "σ (given)" in verdict(A, B, "a beats b", sigma=1.0)


def test_verdict_too_few_seeds_has_no_p_value():
    line = verdict([42.0], [43.1, 43.2], "stagger beats fixed")
    assert line.startswith("stagger beats fixed: cannot tell, too few seeds (a has 1 value")
    assert "gap 1.15" in line and "no p-value" in line and "p=" not in line
    assert "no data" in verdict([], [1.0, 2.0], "a beats b")
    with pytest.raises(ValueError, match="kind"):
        verdict(A, B, "a beats b", kind="maybe")


def test_assess_carries_the_numbers_of_the_line():
    v = assess([0.0, 2.0], [3.0, 5.0], "a beats b")
    assert (v.answer, v.kind, v.n_a, v.n_b) == ("not shown", "beats", 2, 2)
    assert v.gap == 3.0 and v.margin == pytest.approx(3 / math.sqrt(2))
    assert v.p == pytest.approx(welch([0.0, 2.0], [3.0, 5.0]).p)
    lo, hi = st.ttest_ind([0.0, 2.0], [3.0, 5.0], equal_var=False).confidence_interval(0.95)
    assert v.ci == pytest.approx((-hi, -lo))
    assert v.decision.verdict == "not shown" and v.decision.p_adjusted == v.p
    assert str(v) == v.line == verdict([0.0, 2.0], [3.0, 5.0], "a beats b")
    few = assess([1.0], [2.0, 3.0], "a beats b")
    assert few.answer == "cannot tell" and math.isnan(few.p) and few.gap == 1.5
    assert assess([], [1.0], "a ties b").answer == "no data"
