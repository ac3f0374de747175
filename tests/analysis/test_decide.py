"""analysis.statistics.decide: the Welch t-interval against scipy, TOST against statsmodels' ttost_ind, Holm
against statsmodels' multipletests, the minimum detectable effect against statsmodels' power
solver, and every decision rule at its boundary (p just below / at α after Holm, a reversal
significant or not, TOST at the margin, the paper's effect just inside / outside the interval)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sst
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower
from statsmodels.stats.weightstats import ttost_ind

from analysis.statistics.decide import (
    Comparison,
    Protocol,
    compare,
    decide,
    holm,
    settle,
    tost,
    welch_interval,
)

NAN = float("nan")
# three seeds a side, unequal spreads (Welch's dof is not n_a + n_b − 2)
A3 = [42.02, 41.96, 42.26]
B3 = [43.12, 43.16, 43.27]
PAIRS = [
    (A3, B3),
    ([1.0, 1.3, 1.1], [1.05, 1.25, 1.2]),
    ([0.0, 2.0], [3.0, 5.0]),
    ([1.0, 2.0, 4.0, 8.0], [2.0, 2.5, 2.7]),
    ([41.96, 42.02, 42.26, 42.1, 41.9], [42.09, 42.03, 42.43]),
]


# ------------------------------------------------------------------------- the t-interval
@pytest.mark.parametrize("a, b", PAIRS)
@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_welch_interval_is_scipys(a, b, level):
    want = sst.ttest_ind(a, b, equal_var=False).confidence_interval(level)
    assert welch_interval(a, b, level) == pytest.approx(tuple(want), rel=1e-10, abs=1e-12)


def test_the_t_interval_is_wider_than_a_normal_one_at_three_seeds():
    """The issue's point: at n = 3 the t quantile (Welch dof ≈ 3) is far above 1.96."""
    lo, hi = welch_interval(A3, B3)
    d = np.mean(A3) - np.mean(B3)
    se = math.sqrt(np.var(A3, ddof=1) / 3 + np.var(B3, ddof=1) / 3)
    assert (hi - d) / se > 2.7  # 1.96 would be a z interval
    assert welch_interval([1.0, 1.0], [2.0, 2.0]) == (-1.0, -1.0)  # no spread: the point
    with pytest.raises(ValueError, match="at least 2 values per side"):
        welch_interval([1.0], B3)


# -------------------------------------------------------------------------------- TOST
@pytest.mark.parametrize("a, b", PAIRS)
@pytest.mark.parametrize("low, upp", [(-0.5, 0.5), (-0.2, 0.4), (-3.0, 1.0), (-0.05, 0.05)])
def test_tost_is_statsmodels_ttost_ind(a, b, low, upp):
    got = tost(a, b, low, upp)
    p, (_, p1, df1), (_, p2, _) = ttost_ind(np.array(a), np.array(b), low, upp, usevar="unequal")
    assert got.p == pytest.approx(p, rel=1e-9, abs=1e-15)
    assert (got.p_low, got.p_upp) == pytest.approx((p1, p2), rel=1e-9, abs=1e-15)
    assert got.dof == pytest.approx(df1)
    assert got.p == max(got.p_low, got.p_upp)  # the larger one-sided p, never the smaller


def test_outside_the_margin_is_a_doubled_one_sided_test():
    # at a zero-width interval it is Welch's two-sided test
    a, b = PAIRS[3]
    eps = 1e-12
    assert tost(a, b, -eps, eps).p_outside == pytest.approx(
        sst.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-6
    )
    # far outside: the smaller of the opposite one-sided p-values, doubled
    t = tost([1.0, 1.1, 1.2], [3.0, 3.1, 3.2], -0.5, 0.5)
    assert t.p > 0.99 and t.p_outside == pytest.approx(2 * (1 - t.p_low))
    with pytest.raises(ValueError, match="low < upp"):
        tost(a, b, 0.5, -0.5)


# -------------------------------------------------------------------------------- Holm
@pytest.mark.parametrize(
    "p",
    [
        [0.01, 0.04, 0.03, 0.005],
        [0.049, 0.2, 0.6],
        [0.01, 0.01, 0.02, 0.5],  # ties in p
        [0.3, 0.4, 0.9, 0.95],  # caps at 1
        [0.0, 1.0],
        [0.049],
    ],
)
def test_holm_is_statsmodels_multipletests(p):
    want = multipletests(p, method="holm")[1]
    assert holm(p) == pytest.approx(want, abs=1e-15)


def test_holm_leaves_untested_comparisons_out_of_the_family():
    p = [0.01, NAN, 0.04, NAN, 0.03]
    got = holm(p)
    assert np.isnan(got[1]) and np.isnan(got[3])
    # the family is the three tested ones: m = 3, not 5
    assert got[[0, 2, 4]] == pytest.approx(multipletests([0.01, 0.04, 0.03], method="holm")[1])
    assert np.isnan(holm([NAN, NAN])).all() and holm([]).shape == (0,)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.5, 1.5])


def test_holm_is_not_bonferroni():
    """Step-down: the second smallest p is multiplied by m − 1, not m."""
    got = holm([0.01, 0.02, 0.04])
    assert got == pytest.approx([0.03, 0.04, 0.04])


# ------------------------------------------------------------- minimum detectable effect
@pytest.mark.parametrize("n_a, n_b", [(3, 3), (2, 3), (5, 3)])
@pytest.mark.parametrize("sided", ["two", "one"])
def test_mde_is_the_power_solvers_effect_times_sigma(n_a, n_b, sided):
    rng = np.random.default_rng(n_a * 10 + n_b)
    a, b = rng.normal(0, 1, n_a), rng.normal(0.3, 2, n_b)
    c = compare(a, b, Protocol("f", sided=sided))
    alt = "two-sided" if sided == "two" else "larger"
    d = TTestIndPower().solve_power(
        nobs1=n_a, ratio=n_b / n_a, alpha=0.05, power=0.8, alternative=alt
    )
    pooled = math.sqrt(
        ((n_a - 1) * np.var(a, ddof=1) + (n_b - 1) * np.var(b, ddof=1)) / (n_a + n_b - 2)
    )
    assert c.sigma == pytest.approx(pooled)
    assert c.mde == pytest.approx(d * pooled, rel=1e-5)


# ------------------------------------------------------------------------- the rules
def cmp(gap=1.0, p=0.01, against=None, test="welch", sided="two", paper=None, ci=(0.5, 1.5)):
    """A hand-made comparison: three seeds a side, the given gap, interval and p-values."""
    pr = Protocol("f", test, sided, 0.5 if test == "tost" else None, paper)
    return Comparison(pr, 3, 3, gap, 0.3, ci, p, against, 0.9)


ALPHA = 0.05
BELOW, AT = ALPHA * (1 - 1e-9), ALPHA  # p < α rejects; p = α does not


def test_held_at_p_just_below_alpha_not_at_alpha():
    assert decide(cmp(), BELOW).verdict == "held"
    d = decide(cmp(), AT)
    assert (d.verdict, d.reason, d.direction) == ("not shown", "not significant", "undetermined")
    assert "detect a gap of 0.9" in d.wording()


def test_a_reversal_is_did_not_hold_only_when_significant():
    d = decide(cmp(gap=-1.0, ci=(-1.5, -0.5)), BELOW)
    assert (d.verdict, d.reason, d.direction) == ("did not hold", "reversal", "b better")
    assert decide(cmp(gap=-1.0, ci=(-1.5, -0.5)), AT).verdict == "not shown"
    # a gap ≤ 0 without significance is not a "no"
    assert decide(cmp(gap=0.0, ci=(-1.0, 1.0), p=0.9), 0.9).verdict == "not shown"
    # one-sided: the registered test cannot see a reversal; its own test (p_against) does
    one = cmp(gap=-1.0, ci=(-1.5, -0.5), p=0.99, against=0.01, sided="one")
    assert decide(one, 0.99, BELOW).verdict == "did not hold"
    assert decide(one, 0.99, AT).verdict == "not shown"
    assert decide(cmp(sided="one", against=0.99), BELOW, 0.99).verdict == "held"


def test_the_papers_effect_just_inside_or_outside_the_interval():
    lo, hi = 0.5, 1.5
    inside = decide(cmp(paper=hi, ci=(lo, hi)), BELOW)
    assert (inside.verdict, inside.magnitude) == ("held", "inside")
    out = decide(cmp(paper=hi * (1 + 1e-9), ci=(lo, hi)), BELOW)
    assert (out.verdict, out.reason, out.magnitude) == (
        "did not hold",
        "magnitude not reproduced",
        "outside",
    )
    assert out.wording().startswith("did not hold: magnitude not reproduced")
    assert "the direction held" in out.wording()
    # below the interval too, and whatever the test said
    low = decide(cmp(paper=lo * (1 - 1e-9), ci=(lo, hi), p=0.3), 0.3)
    assert (low.verdict, low.magnitude, low.direction) == (
        "did not hold",
        "outside",
        "undetermined",
    )
    assert decide(cmp(paper=lo, ci=(lo, hi), p=0.3), 0.3).verdict == "not shown"
    # no paper effect registered: n/a, never decides
    assert decide(cmp(), BELOW).magnitude == "n/a"


def test_tie_rules_at_their_boundaries():
    tie = cmp(gap=0.1, test="tost", p=0.01, against=0.99, ci=(-0.2, 0.4), paper=0.0)
    assert decide(tie, BELOW, 0.99).verdict == "held"
    assert decide(tie, BELOW, 0.99).direction == "within margin"
    assert decide(tie, AT, 0.99).verdict == "not shown"
    far = cmp(gap=1.0, test="tost", p=0.99, against=0.01, ci=(0.7, 1.3), paper=0.0)
    d = decide(far, 0.99, BELOW)
    assert (d.verdict, d.reason, d.direction) == ("did not hold", "outside margin", "a better")
    assert decide(far, 0.99, AT).verdict == "not shown"
    # a tie's magnitude is reported, not used: the paper's small gap outside a tight interval
    # inside the margin is still a tie
    assert decide(far, 0.99, AT).magnitude == "outside"


def test_untested_comparisons_are_not_shown():
    one = compare([1.0], [2.0, 2.1], Protocol("f"))
    assert not one.tested and math.isnan(one.p_raw)
    d = settle([one])[0]
    assert (d.verdict, d.direction, d.magnitude) == ("not shown", "not tested", "n/a")
    assert math.isnan(d.p_adjusted)


def tost_margin(a, b, p):
    """The margin m at which TOST(a, b, −m, m) has p-value ``p`` (d > 0: the upper test binds;
    p_upp = cdf((d − m)/se) = p ⇔ m = d − se·t⁻¹(p))."""
    d = np.mean(a) - np.mean(b)
    se = math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))
    nu = tost(a, b, -1, 1).dof
    return abs(d) - se * sst.t.ppf(p, nu)


def test_tost_at_the_margin_with_its_family_of_two():
    """A lone tie is a family of two tests (equivalent, or outside the margin), both counted by
    Holm: it is shown when TOST's p < α/2 (its partner's p is near 1)."""
    a, b = [1.3, 1.1, 1.2], [1.0, 1.05, 1.1]
    for p_target, want in ((ALPHA / 2 * 0.999, "held"), (ALPHA / 2 * 1.001, "not shown")):
        m = tost_margin(a, b, p_target)
        c = compare(a, b, Protocol("f", "tost", margin=m))
        assert c.p_raw == pytest.approx(p_target, rel=1e-6)
        assert settle([c])[0].verdict == want
    # at α (not α/2) the margin decides only when nothing else is in the family
    m = tost_margin(a, b, ALPHA * 0.999)
    c = compare(a, b, Protocol("f", "tost", margin=m))
    assert decide(c, c.p_raw).verdict == "held"
    assert settle([c])[0].verdict == "not shown"


def test_settle_applies_holm_across_the_family():
    """p = 0.049 alone holds; beside 0.03 (Holm: 0.03·2 = 0.06, then max(0.06, 0.049)) it
    does not, nor does the 0.03; a Bonferroni would give 0.098 and 0.06."""
    alone = settle([cmp(p=0.049)])[0]
    assert alone.verdict == "held" and alone.p_adjusted == 0.049
    d1, d2 = settle([cmp(p=0.049), cmp(p=0.03)])
    assert (d1.verdict, d2.verdict) == ("not shown", "not shown")
    assert (d1.p_adjusted, d2.p_adjusted) == pytest.approx((0.06, 0.06))
    # three comparisons where Holm rejects what Bonferroni would not: 0.01·3, 0.02·2, 0.03·1
    ds = settle([cmp(p=0.02), cmp(p=0.01), cmp(p=0.024)])
    assert [d.verdict for d in ds] == ["held", "held", "held"]
    assert [d.p_adjusted for d in ds] == pytest.approx([0.04, 0.03, 0.04])
    # an untested comparison does not count
    untested = Comparison(Protocol("f"), 1, 3, 1.0, NAN, (NAN, NAN), NAN, None, NAN)
    assert settle([cmp(p=0.049), untested])[0].verdict == "held"
    with pytest.raises(ValueError, match="one family"):
        settle([cmp(), Comparison(Protocol("g"), 3, 3, 1, 1, (0, 2), 0.01, None, 1)])


def test_the_decision_record_for_claims_json():
    c = compare(A3, B3, Protocol("table5", paper_effect=1.10, metric="ppl"))
    (d,) = settle([c])
    s = d.stats()
    for k in ("p_raw", "p_adjusted", "family", "test", "ci", "direction", "magnitude", "mde"):
        assert k in s
    assert (s["n_a"], s["n_b"], s["family"], s["test"]) == (3, 3, "table5", "welch")
    lo, hi = sst.ttest_ind(A3, B3, equal_var=False).confidence_interval(0.95)
    assert s["ci"] == pytest.approx([-hi, -lo])  # of the gap: a better, positive
    assert s["p_raw"] == pytest.approx(sst.ttest_ind(A3, B3, equal_var=False).pvalue)
    assert (d.verdict, s["direction"], s["magnitude"]) == ("held", "a better", "inside")
