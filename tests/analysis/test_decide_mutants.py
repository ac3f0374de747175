"""analysis.statistics.decide at the edges its other tests leave open: the guards of every input (their
exact messages and the boundaries they let through), the degenerate samples (one seed, no
spread, a difference sitting exactly on the margin), the one-sided tests in both orientations,
the record claims.json carries key by key, and the full wording of every kind of decision.

Oracles: scipy's Welch test and interval, statsmodels' TTestIndPower and multipletests, and
numbers and phrases worked out by hand from the inputs (the hand-made comparisons below fix
every number a phrase quotes)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sst
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower

from analysis.statistics import decide as D
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
A = [1.3, 1.1, 1.2, 1.25]
B = [1.0, 1.05, 1.1]


def made(
    gap=1.0,
    p=0.00411,
    against=None,
    test="welch",
    sided="two",
    margin=None,
    paper=None,
    ci=(0.12345, 1.23456),
    mde=0.98765,
    level=0.95,
    n=(3, 3),
):
    """A hand-made comparison whose every number is chosen so that a phrase shows its digits:
    three significant digits (0.123, 1.23, 0.988) differ from four (0.1235, 1.235, 0.9877)."""
    pr = Protocol("f", test, sided, margin, paper)
    return Comparison(pr, n[0], n[1], gap, 0.3, ci, p, against, mde, level)


# ------------------------------------------------------------------------- welch_interval
@pytest.mark.parametrize("level", [0, 0.0, 1, 1.0, 1.5, -0.1])
def test_welch_interval_rejects_a_level_outside_the_open_unit_interval(level):
    """0 and 1 are not levels (1 would give ±inf), nor is anything beyond them."""
    with pytest.raises(ValueError, match=rf"^level={level!r} must be in \(0, 1\), e\.g\. 0\.95$"):
        welch_interval(A, B, level)


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")  # b has no spread
def test_welch_interval_with_a_standard_error_of_exactly_one():
    """se = 1 is an ordinary interval, not the zero-spread point: a = [0, 2] (s² = 2, /2 = 1)
    against a spreadless b gives d = −4, se = 1, ν = 1 and d ± t₀.₉₇₅,₁ = −4 ± 12.706."""
    a, b = [0.0, 2.0], [5.0, 5.0]
    want = sst.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    lo, hi = welch_interval(a, b)
    assert (lo, hi) == pytest.approx(tuple(want), rel=1e-10)
    assert (lo, hi) == pytest.approx((-4 - sst.t.ppf(0.975, 1), -4 + sst.t.ppf(0.975, 1)))
    assert hi - lo > 25


# ----------------------------------------------------------------------------------- tost
def test_tost_needs_a_proper_interval():
    """low = upp is no interval: refused with the bounds in the message."""
    with pytest.raises(
        ValueError, match=r"^the equivalence interval \[0\.5, 0\.5\] must have low < upp$"
    ):
        tost(A, B, 0.5, 0.5)


def test_tost_without_spread_on_the_bounds():
    """No spread: the difference is known exactly. Sitting on a bound it is not inside the open
    interval, so that bound's null (d ≤ low, or d ≥ upp) holds: its p is 1, and the tie is not
    shown; the difference is then (weakly) outside, p_outside = 0."""
    lo_edge = tost([1.0, 1.0], [2.0, 2.0], -1.0, 1.0)  # d = −1 = low
    assert (lo_edge.p_low, lo_edge.p_upp, lo_edge.p, lo_edge.p_outside) == (1.0, 0.0, 1.0, 0.0)
    up_edge = tost([2.0, 2.0], [1.0, 1.0], -1.0, 1.0)  # d = +1 = upp
    assert (up_edge.p_low, up_edge.p_upp, up_edge.p, up_edge.p_outside) == (0.0, 1.0, 1.0, 0.0)
    inside = tost([1.0, 1.0], [1.5, 1.5], -1.0, 1.0)  # d = −0.5, strictly inside
    assert (inside.p_low, inside.p_upp, inside.p, inside.p_outside) == (0.0, 0.0, 0.0, 1.0)


# ----------------------------------------------------------------------------------- holm
def test_holm_flattens_any_shape_into_one_family():
    """A 2-D table of p-values is one family of four, in reading order; a scalar is a family
    of one."""
    p = [[0.01, 0.04], [0.03, 0.005]]
    got = holm(p)
    assert got.shape == (4,)
    assert got == pytest.approx(multipletests(np.ravel(p), method="holm")[1], abs=1e-15)
    assert holm(0.03).tolist() == [0.03]


def test_holm_reads_none_as_untested():
    """None (no test) is NaN: left out of the family, so m = 2 here, not 3."""
    got = holm([0.01, None, 0.04])
    assert np.isnan(got[1])
    assert got[[0, 2]] == pytest.approx(multipletests([0.01, 0.04], method="holm")[1])
    assert got[[0, 2]] == pytest.approx([0.02, 0.04])


# ------------------------------------------------------------------------------- Protocol
@pytest.mark.parametrize(
    "kw, message",
    [
        ({"test": "t-test"}, r"^test='t-test' must be one of \('welch', 'tost'\)$"),
        ({"sided": "both"}, r"^sided='both' must be one of \('two', 'one'\)$"),
        ({"margin": -0.1}, r"^margin=-0\.1 must be a number ≥ 0 \(the tie's ±margin\)$"),
        ({"margin": NAN}, r"^margin=nan must be a number ≥ 0 \(the tie's ±margin\)$"),
        ({"alpha": 0.0}, r"^alpha=0\.0 must lie in \(0, 1\), e\.g\. 0\.05$"),
        ({"alpha": 1.0}, r"^alpha=1\.0 must lie in \(0, 1\), e\.g\. 0\.05$"),
        ({"alpha": 1.5}, r"^alpha=1\.5 must lie in \(0, 1\), e\.g\. 0\.05$"),
        ({"alpha": -0.05}, r"^alpha=-0\.05 must lie in \(0, 1\), e\.g\. 0\.05$"),
    ],
)
def test_protocol_refuses_what_it_cannot_test_and_says_why(kw, message):
    with pytest.raises(ValueError, match=message):
        Protocol("f", **kw)


def test_protocol_boundaries_it_accepts():
    """A zero margin is allowed (a tie that can only be refuted); α just inside (0, 1) is."""
    assert Protocol("f", "tost", margin=0.0).margin == 0.0
    assert Protocol("f", alpha=1e-9).alpha == 1e-9
    assert Protocol("f", alpha=0.999).alpha == 0.999


# -------------------------------------------------------------------------------- _pooled
def test_pooled_sigma_with_one_degree_of_freedom():
    """Two values and one: ss = (0−1)² + (2−1)² + 0 = 2 over n_a + n_b − 2 = 1 → √2."""
    assert D._pooled(np.array([0.0, 2.0]), np.array([5.0])) == pytest.approx(math.sqrt(2))


def test_pooled_sigma_without_degrees_of_freedom_is_a_quiet_nan():
    """One value a side leaves no degree of freedom: NaN, without dividing 0 by 0 (no
    RuntimeWarning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(D._pooled(np.array([1.0]), np.array([2.0])))


# -------------------------------------------------------------------------------- compare
@pytest.mark.parametrize(
    "a, b, message",
    [
        (["x", 1.0], [1.0, 2.0], r"^a must be a sequence of numbers"),
        ([1.0, 2.0], ["x", 1.0], r"^b must be a sequence of numbers"),
        ([[1.0, 2.0]], [1.0, 2.0], r"^a must be one-dimensional"),
        ([1.0, 2.0], [[1.0, 2.0]], r"^b must be one-dimensional"),
        ([], [1.0, 2.0], r"^compare needs values on both sides, got n=0 and n=2$"),
        ([1.0], [], r"^compare needs values on both sides, got n=1 and n=0$"),
        ([NAN], [1.0, 2.0], r"^compare needs values on both sides, got n=0 and n=2$"),
    ],
)
def test_compare_names_the_side_it_cannot_read(a, b, message):
    with pytest.raises(ValueError, match=message):
        compare(a, b, Protocol("f"))


def test_compare_with_one_seed_reports_the_gap_and_nothing_else():
    """Lower is better: gap = mean(b) − mean(a) = 2.5 − 1 = 1.5; no σ, interval, p or MDE."""
    c = compare([1.0], [2.0, 3.0], Protocol("f"), level=0.9)
    assert (c.n_a, c.n_b, c.gap, c.p_against, c.level) == (1, 2, 1.5, None, 0.9)
    assert all(math.isnan(x) for x in (c.sigma, c.ci[0], c.ci[1], c.p_raw, c.mde))
    assert len(c.ci) == 2 and not c.tested


def test_compare_keeps_the_level_it_was_given():
    """The interval at level 0.9 is scipy's 90 % Welch interval, turned into the gap's
    orientation (lower is better: the negated, swapped interval of mean(a) − mean(b))."""
    c = compare(A, B, Protocol("f"), level=0.9)
    lo, hi = sst.ttest_ind(A, B, equal_var=False).confidence_interval(0.9)
    assert c.level == 0.9
    assert c.ci == pytest.approx((-hi, -lo), rel=1e-10)


@pytest.mark.parametrize("lower_is_better", [True, False])
def test_one_sided_claim_tests_the_better_direction_and_its_reversal(lower_is_better):
    """One-sided: p_raw is Welch's one-sided test that a is better (lower if lower is better,
    higher otherwise); p_against the opposite one-sided test."""
    a, b = [1.0, 1.2, 1.1], [1.3, 1.5, 1.35, 1.6]
    c = compare(a, b, Protocol("f", sided="one"), lower_is_better=lower_is_better)
    better, worse = ("less", "greater") if lower_is_better else ("greater", "less")
    want_p = sst.ttest_ind(a, b, equal_var=False, alternative=better).pvalue
    want_against = sst.ttest_ind(a, b, equal_var=False, alternative=worse).pvalue
    assert c.p_raw == pytest.approx(want_p, rel=1e-9)
    assert c.p_against == pytest.approx(want_against, rel=1e-9)
    assert (c.p_raw < 0.05) == lower_is_better  # a is lower: better only if lower is better


def test_a_one_sided_tie_is_still_powered_as_a_two_sided_test():
    """TOST looks both ways whatever ``sided`` says: its MDE is the two-sided one."""
    c = compare(A, B, Protocol("f", "tost", "one", margin=0.2))
    d = TTestIndPower().solve_power(
        nobs1=len(A), ratio=len(B) / len(A), alpha=0.05, power=0.8, alternative="two-sided"
    )
    assert c.mde == pytest.approx(d * c.sigma, rel=1e-5)


def test_an_infinite_sigma_has_no_detectable_effect():
    """Values so spread that σ overflows to inf: the MDE is NaN (undefined), not inf."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        c = compare([1e308, -1e308], [0.0, 1.0], Protocol("f"))
    assert c.sigma == math.inf
    assert math.isnan(c.mde)


# ----------------------------------------------------------------------------- _magnitude
def test_magnitude_needs_a_test_and_a_finite_interval():
    """No spread and no difference: the interval is the point (0, 0) but no test ran, so the
    paper's 0 is not "inside". A tested comparison with a NaN interval says nothing either."""
    c = compare([1.0, 1.0], [1.0, 1.0], Protocol("f", paper_effect=0.0))
    assert not c.tested and c.ci == (0.0, 0.0)
    assert D._magnitude(c) == "n/a"
    assert decide(c, NAN).magnitude == "n/a"
    assert D._magnitude(made(paper=1.0, ci=(NAN, NAN))) == "n/a"
    assert D._magnitude(made(paper=1.0, ci=(0.5, 1.5))) == "inside"


# --------------------------------------------------------------------------------- decide
def test_decide_reasons_and_directions_of_each_branch():
    """The reason and direction strings each rule writes into claims.json."""
    untested = settle([compare([1.0], [2.0, 3.0], Protocol("f"))])[0]
    assert (untested.verdict, untested.reason, untested.direction) == (
        "not shown",
        "untested",
        "not tested",
    )
    held = decide(made(), 0.0123)
    assert (held.verdict, held.reason, held.direction) == ("held", "significant", "a better")
    tie = made(gap=0.01, test="tost", margin=0.2, p=0.001, against=0.99)
    d = decide(tie, 0.002, 0.99)
    assert (d.verdict, d.reason, d.direction) == ("held", "within margin", "within margin")
    d = decide(tie, 0.3, 0.99)
    assert (d.verdict, d.reason, d.direction) == ("not shown", "not significant", "undetermined")


def test_a_zero_gap_is_never_a_better_nor_a_reversal():
    """Significant but with a gap of exactly 0 (only a hand-made comparison can be): neither a
    reversal (gap < 0) nor a held claim (gap > 0) — not shown."""
    d = decide(made(gap=0.0, p=0.01, ci=(-0.5, 0.5)), 0.01)
    assert (d.verdict, d.reason, d.direction) == ("not shown", "not significant", "undetermined")
    tie = made(gap=0.0, test="tost", margin=0.2, p=0.99, against=0.001)
    d = decide(tie, 0.99, 0.002)
    assert (d.verdict, d.reason) == ("did not hold", "outside margin")
    assert d.direction != "a better"


# --------------------------------------------------------------------------------- settle
def test_settle_keeps_untested_comparisons_out_of_the_family_whatever_they_carry():
    """A comparison with one seed a side is untested even if it carries p-values: neither its
    p_raw nor its p_against joins the family, so the tested 0.01 stays 0.01 (m = 1)."""
    stray = Comparison(Protocol("f", sided="one"), 1, 3, 1.0, NAN, (NAN, NAN), 0.04, 0.04, NAN)
    tested = made(p=0.01, ci=(0.5, 1.5))
    d_tested, d_stray = settle([tested, stray])
    assert d_tested.p_adjusted == 0.01 and d_tested.verdict == "held"
    assert math.isnan(d_stray.p_adjusted) and math.isnan(d_stray.p_against_adjusted)
    assert d_stray.reason == "untested"


def test_settle_gives_no_adjusted_p_against_to_a_two_sided_test():
    """A two-sided test has no test against it: its p_against_adjusted is None, not NaN."""
    d1, d2 = settle([made(p=0.01), made(p=0.3)])
    assert d1.p_against_adjusted is None and d2.p_against_adjusted is None
    assert (d1.p_adjusted, d2.p_adjusted) == pytest.approx((0.02, 0.3))


def test_settle_pairs_each_comparison_with_its_own_test_against():
    """Two one-sided claims: a family of four, [p1, p2, q1, q2]; each decision gets its own
    adjusted p and adjusted p_against (statsmodels' Holm on the four)."""
    c1 = made(sided="one", p=0.001, against=0.999)
    c2 = made(sided="one", gap=-1.0, ci=(-1.5, -0.5), p=0.98, against=0.02)
    want = multipletests([0.001, 0.98, 0.999, 0.02], method="holm")[1]
    d1, d2 = settle([c1, c2])
    assert (d1.p_adjusted, d2.p_adjusted) == pytest.approx((want[0], want[1]))
    assert (d1.p_against_adjusted, d2.p_against_adjusted) == pytest.approx((want[2], want[3]))
    assert (d1.verdict, d2.verdict) == ("held", "not shown")  # 0.02·3 = 0.06 ≥ α


# ------------------------------------------------------------------------------------- _p
@pytest.mark.parametrize(
    "p, text",
    [
        (None, "n/a"),
        (NAN, "n/a"),
        (1.0, "1"),
        (0.03, "0.03"),
        (0.0123, "0.012"),
        (0.001, "0.001"),  # the boundary: still fixed-point
        (0.000999, "1.0e-03"),
        (0.0001234, "1.2e-04"),
        (0.0, "0.0e+00"),
    ],
)
def test_p_value_text(p, text):
    assert D._p(p) == text


# --------------------------------------------------------------------------------- wording
def test_wording_held():
    assert decide(made(), 0.0123).wording() == "held: a better, p_Holm=0.012 (raw 0.0041)"


def test_wording_names_the_arms_and_a_threshold_is_passed_not_beaten():
    """Named arms in the phrase; one sample against a threshold (n_b = 0) is past it or short
    of it — "better than +10 %" would not mean anything."""
    assert decide(made(), 0.0123).wording(a="fib/stagger", b="fib/fixed") == (
        "held: fib/stagger better, p_Holm=0.012 (raw 0.0041)"
    )
    rev = made(gap=-1.0, ci=(-1.5, -0.5))
    assert decide(rev, 0.0123).wording(a="fib/stagger", b="fib/fixed") == (
        "did not hold: fib/fixed better, a significant reversal (p_Holm=0.012)"
    )
    one = made(n=(3, 0))
    assert decide(one, 0.0123).wording(a="dense", b="+10 %") == (
        "held: dense past +10 %, p_Holm=0.012 (raw 0.0041)"
    )
    short = made(gap=-1.0, ci=(-1.5, -0.5), sided="one", p=0.99, against=0.0001, n=(3, 0))
    assert decide(short, 0.99, 0.0004).wording(a="dense", b="+10 %") == (
        "did not hold: dense short of +10 %, a significant reversal (p_Holm=4.0e-04)"
    )


def test_wording_of_a_larger_value_says_above_not_better():
    """A threshold rule between two configurations ("pow2/fixed degrades more than fib/fixed",
    its metric the % change at 4×) tests a larger value, not a better score: its reversal is
    "fib/fixed above pow2/fixed" — saying "fib/fixed better" would invert what the data show
    (the referee's D1: pow2/fixed changed −1.6 %, fib/fixed −1.1 %)."""
    rev = made(gap=-1.0, ci=(-1.5, -0.5), sided="one", p=0.99, against=0.0001)
    words = decide(rev, 0.99, 0.0004).wording(a="pow2/fixed", b="fib/fixed", ahead="above")
    assert words == (
        "did not hold: fib/fixed above pow2/fixed, a significant reversal (p_Holm=4.0e-04)"
    )
    assert decide(made(), 0.0123).wording(a="x", b="y", ahead="above") == (
        "held: x above y, p_Holm=0.012 (raw 0.0041)"
    )
    out = made(gap=-0.5, ci=(-0.6, -0.4), test="tost", margin=0.1, p=0.99, against=0.001)
    assert decide(out, 0.99, 0.002).wording(a="x", b="0", ahead="above") == (
        "did not hold: outside ±0.1, 0 above x (p_Holm=0.002)"
    )


def test_wording_tie_held_by_tost():
    tie = made(gap=0.01, test="tost", margin=0.12345, p=0.00411, against=0.99)
    assert decide(tie, 0.0123, 0.99).wording() == (
        "held: within ±0.123 (TOST p_Holm=0.012 (raw 0.0041))"
    )
    assert decide(tie, 0.0123, 0.99).wording(digits=2) == (
        "held: within ±0.12 (TOST p_Holm=0.012 (raw 0.0041))"
    )


def test_wording_two_sided_reversal_quotes_the_registered_tests_p():
    rev = made(gap=-1.0, ci=(-1.5, -0.5))
    assert decide(rev, 0.0123).wording() == (
        "did not hold: b better, a significant reversal (p_Holm=0.012)"
    )


def test_wording_one_sided_reversal_quotes_the_reversal_tests_p():
    rev = made(gap=-1.0, ci=(-1.5, -0.5), sided="one", p=0.99, against=0.0001)
    assert decide(rev, 0.99, 0.0004).wording() == (
        "did not hold: b better, a significant reversal (p_Holm=4.0e-04)"
    )


@pytest.mark.parametrize("gap, side", [(1.0, "a better"), (-1.0, "b better")])
def test_wording_tie_refuted_outside_the_margin(gap, side):
    far = made(gap=gap, test="tost", margin=0.12345, p=0.99, against=0.0001)
    assert decide(far, 0.99, 0.0004).wording() == (
        f"did not hold: outside ±0.123, {side} (p_Holm=4.0e-04)"
    )


def test_wording_magnitude_not_reproduced_with_the_direction_held():
    d = decide(made(paper=2.5), 0.0123)
    assert d.wording() == (
        "did not hold: magnitude not reproduced, the paper's 2.5 lies outside the 95% interval "
        "[0.123, 1.23]; the direction held, p_Holm=0.012 (raw 0.0041)"
    )


def test_wording_magnitude_not_reproduced_without_a_direction():
    d = decide(made(paper=-0.5, p=0.3, level=0.9), 0.6)
    assert d.direction == "undetermined"
    assert d.wording() == (
        "did not hold: magnitude not reproduced, the paper's -0.5 lies outside the 90% interval "
        "[0.123, 1.23]"
    )


def test_wording_not_shown_quotes_the_detectable_gap():
    assert decide(made(p=0.3), 0.6).wording() == (
        "not shown: p_Holm=0.6 (raw 0.3); as a lone test these seeds detect a gap of 0.988 with "
        "80% power"
    )


def test_wording_tie_not_shown_names_tost_and_gives_the_ties_power_not_a_gaps():
    """A tie not shown says how likely its seeds were, as a lone test, to show a true tie, and
    how many would (3 a side at σ 0.3 detect a gap of 0.988, yet almost never show a tie within
    ±0.2). A lone tie faces α/2 (`settle` counts its two hypotheses).  Oracle for the seeds:
    the textbook normal approximation of a TOST at difference 0 and level α/2 = 0.025,
    n = 2 (z_{1−α/2} + z_{1−β/2})² σ² / margin² ≈ 47.3, which the t distribution raises a
    little."""
    from scipy.stats import norm

    tie = made(gap=0.01, test="tost", margin=0.2, p=0.3, against=0.9)
    assert decide(tie, 0.6, 0.9).wording() == (
        "not shown: TOST p_Holm=0.6 (raw 0.3); as a lone test these seeds show a true tie within "
        "±0.2 with power 0.00 (49 a side give 80%)"
    )
    approx = 2 * (norm.isf(0.025) + norm.isf(0.1)) ** 2 * 0.3**2 / 0.2**2
    assert approx < 49 < approx + 2
    assert "a side" not in decide(made(gap=0.01, test="tost", p=0.3, against=0.9), 0.6).wording()


def test_a_contrasts_tie_power_is_the_contrasts_at_half_alpha():
    """A 2×2 interaction (``cells``: four groups) has its contrast's power, per group, at the
    level a lone tie faces (α/2) — not a difference's between its smallest groups."""
    from dataclasses import replace

    from analysis.ledger.across import interaction
    from analysis.statistics.power import contrast_tost_power

    tie = replace(made(gap=0.01, test="tost", margin=0.5, p=0.3, against=0.9), cells=(10, 10, 5, 5))
    power, need = D.tie_power(tie)
    assert power == contrast_tost_power(0.5, 0.3, (10, 10, 5, 5), 0.025)
    assert contrast_tost_power(0.5, 0.3, (need,) * 4, 0.025) >= 0.8
    assert contrast_tost_power(0.5, 0.3, (need - 1,) * 4, 0.025) < 0.8
    assert "a group give 80%" in decide(tie, 0.6, 0.9).wording()
    rng = np.random.default_rng(0)
    cells = {
        k: rng.normal(0, 0.01, n).tolist() for k, n in zip(("aF", "aS", "bF", "bS"), (10, 9, 5, 6))
    }
    assert interaction(cells, Protocol("f", "tost", margin=0.013)).cells == (10, 9, 5, 6)


def test_wording_untested_with_one_seed():
    d = settle([compare([1.0], [2.0, 3.0], Protocol("f"))])[0]
    assert d.wording() == "not shown: fewer than 2 seeds on a side, no test"
    d = settle([compare([1.0, 2.0, 3.0], [2.0], Protocol("f"))])[0]
    assert d.wording() == "not shown: fewer than 2 seeds on a side, no test"


def test_wording_untested_without_spread_or_difference():
    """Two seeds a side (enough for a test) but identical values: no test could run."""
    d = settle([compare([1.0, 1.0], [1.0, 1.0], Protocol("f"))])[0]
    assert d.wording() == "not shown: no spread on either side and no difference, no test"


# ------------------------------------------------------------------------------ the record
def test_the_claims_json_record_key_by_key():
    """Every key of `Decision.stats` with its value: a renamed key is a broken claims.json."""
    pr = Protocol("fam", "welch", "one", None, 1.2, "log_ppl")
    c = Comparison(pr, 3, 4, 1.0, 0.3, (0.5, 1.5), 0.01, 0.99, 0.9)
    d = decide(c, 0.02, 0.99)
    assert d.p_raw == 0.01
    assert d.stats() == {
        "p_raw": 0.01,
        "p_adjusted": 0.02,
        "p_against": 0.99,
        "p_against_adjusted": 0.99,
        "family": "fam",
        "test": "welch",
        "sided": "one",
        "metric": "log_ppl",
        "effect": 1.0,
        "ci": [0.5, 1.5],
        "direction": "a better",
        "magnitude": "inside",
        "paper_effect": 1.2,
        "margin": None,
        "mde": 0.9,
        "n_a": 3,
        "n_b": 4,
        "reason": "significant",
    }
