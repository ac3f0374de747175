"""The claim verdicts and the numbers behind them, down to the text a user reads.

``verdict`` / ``assess`` against hand-made samples whose gap, σ and Welch p are known by hand
(zero-spread samples, the closed-form 2-dof tail), the decision rules at their exact boundaries
(p = α either way, a tie's margin; `analysis.statistics.decide` has its own tests in tests/analysis/test_decide.py),
every keyword reaching the line, the "no data" and "cannot tell" records,
the p-value's printed form; ``summary`` on 0, 1 and 2 values (no numpy warnings for a config with
one seed); ``gap`` / ``margin`` edge cases and the names the error messages give.
"""

import math
import re
import warnings

import pytest
from scipy import stats as sst

from analysis.statistics import decide
from analysis.statistics.assess import assess, verdict
from analysis.statistics.stats import WelchResult, gap, margin, summary, welch

NAN = float("nan")
A = [1.0, 2.0, 3.0]  # mean 2, s² = 1
B = [4.0, 6.0, 8.0, 10.0]  # mean 7, s² = 20/3; pooled σ = √(22/5)
# dof-2 pair: gap 3, pooled σ √2 (margin 2.1σ), two-sided p = 1 − |t|/√(t² + 2), t = −3/√2
P2_A, P2_B = [0.0, 2.0], [3.0, 5.0]
P2 = 1 - (3 / math.sqrt(2)) / math.sqrt(4.5 + 2)  # 0.16795
# a small gap, well inside the seed noise (margin ≈ 0.3σ, p ≈ 0.6)
NEAR_A, NEAR_B = [1.0, 1.3, 1.1], [1.05, 1.25, 1.2]
# five seeds a side with four irregular decimals
FIVE_A = [41.9637, 42.0171, 42.2614, 42.1083, 41.8942]
FIVE_B = [43.1215, 43.1577, 43.0496, 43.3128, 42.9681]


def _msg(text: str) -> str:
    return "^" + re.escape(text) + "$"


# ---------------------------------------------------------------------------------- summary


def test_describe_empty_and_one_value_give_nan_without_numpy_warnings():
    # a config whose seeds all diverged (NaN) or that has a single seed is routine in a table;
    # its summary must be NaN where undefined, and must not spray RuntimeWarnings at the user
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = summary([NAN, NAN])
        one = summary([5.0])
    assert empty["n"] == 0
    for k in ("mean", "std", "std_pop", "sem", "min", "max"):
        assert math.isnan(empty[k]), k
    assert (one["n"], one["mean"], one["std_pop"], one["min"], one["max"]) == (1, 5, 0, 5, 5)
    assert math.isnan(one["std"]) and math.isnan(one["sem"])


def test_describe_two_values_has_a_spread_and_a_standard_error():
    # 1, 3: s = √2 (ddof 1), population σ = 1, sem = √2/√2 = 1
    d = summary([1.0, 3.0])
    assert d["n"] == 2 and d["mean"] == 2.0
    assert d["std"] == pytest.approx(math.sqrt(2)) and d["std_pop"] == pytest.approx(1.0)
    assert d["sem"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "args, text",
    [
        ((["x"],), "sample must be a sequence of numbers, got ['x']"),
        ((["x"], "ppl of 'fib/stagger'"), "ppl of 'fib/stagger' must be a sequence of numbers"),
        (([[1.0], [2.0]], "loss"), "loss must be one-dimensional (one value per seed)"),
    ],
)
def test_describe_error_names_the_sample(args, text):
    with pytest.raises(ValueError) as e:
        summary(*args)
    assert str(e.value).startswith(text)


# ------------------------------------------------------------------------------ gap / margin


@pytest.mark.parametrize(
    "a, b, text",
    [
        (["x"], B, "a must be a sequence of numbers, got ['x']"),
        (A, ["y"], "b must be a sequence of numbers, got ['y']"),
        ([[1.0, 2.0]], B, "a must be one-dimensional (one value per seed), got shape (1, 2)"),
        (A, [[1.0, 2.0]], "b must be one-dimensional (one value per seed), got shape (1, 2)"),
        ([], B, "gap needs values on both sides, got n=0 and n=4"),
        (A, [NAN], "gap needs values on both sides, got n=3 and n=0"),
        ([], [], "gap needs values on both sides, got n=0 and n=0"),
    ],
)
def test_gap_refuses_bad_or_empty_sides_naming_them(a, b, text):
    for f in (gap, margin):
        with pytest.raises(ValueError, match=_msg(text)):
            f(a, b)


def test_margin_follows_the_direction_and_zero_noise():
    s = math.sqrt(22 / 5)
    assert margin(A, B, lower_is_better=False) == pytest.approx(-5 / s)
    assert margin(B, A, lower_is_better=False) == pytest.approx(5 / s)
    # zero spread on both sides: equal means are no margin at all, unequal ones an infinite one
    assert margin([1.0, 1.0], [1.0, 1.0]) == 0.0
    assert margin([2.0, 2.0], [1.0, 1.0]) == -math.inf
    assert margin([1.0, 2.0], [3.0, 4.0], sigma=0.0) == math.inf
    assert margin(A, A, sigma=0.0) == 0.0
    assert math.isnan(margin(A, B, sigma=NAN))


# ---------------------------------------------------------------------- verdict lines by hand


@pytest.mark.parametrize(
    "a, b, claim, kw, line",
    [
        # zero spread, equal means: no test at all (Welch has no p), so nothing is shown
        (
            [1.0, 1.0],
            [1.0, 1.0],
            "a ties b",
            {},
            "a ties b: not shown, gap 0.00 = 0.0σ (no margin to test a tie at; Welch p=n/a, 95% "
            "CI of the gap [0.00, 0.00]; n=2 vs 2); detectable with 80 % power: 0.00",
        ),
        (
            [1.0, 1.0],
            [1.0, 1.0],
            "a beats b",
            {},
            "a beats b: not shown, gap 0.00 = 0.0σ (Welch p=n/a, 95% CI of the gap [0.00, 0.00]; "
            "n=2 vs 2); detectable with 80 % power: 0.00",
        ),
        # … and with a margin the exact difference 0 lies inside it: a tie
        (
            [1.0, 1.0],
            [1.0, 1.0],
            "a ties b",
            {"tie_margin": 0.1},
            "a ties b: yes, gap 0.00 = 0.0σ (TOST p=0.0e+00 at ±0.10, 95% CI of the gap "
            "[0.00, 0.00]; n=2 vs 2)",
        ),
        # zero spread, a lower by 1: certain (p = 0), infinitely many σ
        (
            [1.0, 1.0],
            [2.0, 2.0],
            "a beats b",
            {},
            "a beats b: yes, gap 1.00 = infσ (Welch p=0.0e+00, 95% CI of the gap [1.00, 1.00]; "
            "n=2 vs 2)",
        ),
        (
            [1.0, 1.0],
            [2.0, 2.0],
            "a ties b",
            {},
            "a ties b: no, outside the margin, gap 1.00 = infσ (no margin to test a tie at; Welch "
            "p=0.0e+00, 95% CI of the gap [1.00, 1.00]; n=2 vs 2)",
        ),
        # a given σ of 2: 3 / 2 = 1.5σ, and the line says the σ was given
        (
            P2_A,
            P2_B,
            "a ties b",
            {"sigma": 2.0},
            "a ties b: not shown, gap 3.00 = 1.5σ (given) (no margin to test a tie at; Welch "
            "p=0.17, 95% CI of the gap [",
        ),
        # a given σ that is undefined (NaN): no margin to print
        (
            P2_A,
            P2_B,
            "a ties b",
            {"sigma": NAN},
            "a ties b: not shown, gap 3.00 = n/a (no margin to test a tie at; Welch p=0.17, 95% "
            "CI of the gap [",
        ),
        (
            P2_A,
            P2_B,
            "a beats b",
            {"sigma": NAN},
            "a beats b: not shown, gap 3.00 = n/a (Welch p=0.17, 95% CI of the gap [",
        ),
    ],
)
def test_verdict_line_by_hand(a, b, claim, kw, line):
    # a line ending in ")" or a number is the whole sentence; otherwise its head up to the interval
    got = verdict(a, b, claim, **kw)
    if line.endswith((")", "0")):
        assert got == line
    else:
        assert got.startswith(line), got


@pytest.mark.parametrize(
    "p, text",
    [
        (0.5, "0.5"),
        (0.05, "0.05"),
        (0.0123, "0.012"),
        (0.001, "0.001"),  # the boundary still prints plainly
        (0.00099, "9.9e-04"),
        (0.00042, "4.2e-04"),
        (2e-05, "2.0e-05"),
        (0.0, "0.0e+00"),
        (NAN, "n/a"),
    ],
)
def test_the_p_value_prints_two_digits_then_scientific_below_a_thousandth(monkeypatch, p, text):
    # pin Welch's answer to exact p-values (a sample pair with p exactly 0.001 is not to be had)
    monkeypatch.setattr(decide, "welch", lambda a, b, alt="two-sided": WelchResult(-3.0, 4.0, p))
    v = assess(P2_A, P2_B, "a beats b")
    assert f"(Welch p={text}, " in v.line, v.line
    assert v.p == p or (math.isnan(p) and math.isnan(v.p))


# -------------------------------------------------------------------- the rules at the edges


def test_beats_is_decided_at_alpha_either_way():
    p = welch(P2_A, P2_B).p
    assert p == pytest.approx(P2)
    assert assess(P2_A, P2_B, "a beats b", alpha=p).answer == "not shown"  # p < α is strict
    assert assess(P2_A, P2_B, "a beats b", alpha=p * 1.0001).answer == "yes"
    # the reversed pair: "no" only once the reversal itself is significant
    assert assess(P2_B, P2_A, "a beats b", alpha=p).answer == "not shown"
    rev = assess(P2_B, P2_A, "a beats b", alpha=p * 1.0001)
    assert rev.answer == "no" and rev.decision.reason == "reversal"
    # through verdict's own alpha keyword
    assert verdict(P2_A, P2_B, "a beats b", alpha=0.2).startswith("a beats b: yes, gap 3.00")
    # a gap of zero is no win and no loss: not shown
    assert assess([1.0, 2.0, 3.0], [0.0, 2.0, 4.0], "a beats b").answer == "not shown"
    # a significant gap smaller than one unit is a win (gap 0.5, s = 0.01)
    small = assess([1.0, 1.01, 1.02], [1.5, 1.51, 1.52], "a beats b")
    assert small.answer == "yes" and small.gap == pytest.approx(0.5)


def test_beats_with_the_papers_effect_outside_the_interval_did_not_hold():
    small = ([1.0, 1.01, 1.02], [1.5, 1.51, 1.52])  # gap 0.5, t-interval ≈ [0.475, 0.525]
    lo, hi = assess(*small, "a beats b").ci
    inside = assess(*small, "a beats b", paper_effect=hi * 0.999)
    assert inside.answer == "yes" and inside.decision.magnitude == "inside"
    for pe in (hi * 1.001, lo * 0.999):  # a larger or a smaller effect than measured
        v = assess(*small, "a beats b", paper_effect=pe)
        assert v.answer == "no" and v.decision.magnitude == "outside"
        assert v.line.startswith("a beats b: no, magnitude not reproduced, gap 0.50")


def test_ties_need_an_equivalence_test_at_a_margin():
    v = assess(NEAR_A, NEAR_B, "a ties b")
    g = sum(NEAR_B) / 3 - sum(NEAR_A) / 3  # 0.0333, p ≈ 0.77: absence of evidence
    assert v.answer == "not shown" and v.gap == pytest.approx(g) and abs(v.margin) < 1
    # TOST at ±0.5 shows it; its p is the larger one-sided p (statsmodels' ttost_ind)
    t = assess(NEAR_A, NEAR_B, "a ties b", tie_margin=0.5)
    assert t.answer == "yes" and t.p == pytest.approx(decide.tost(NEAR_A, NEAR_B, -0.5, 0.5).p)
    # a margin the data cannot show: not shown
    assert assess(NEAR_A, NEAR_B, "a ties b", tie_margin=0.05).answer == "not shown"
    # significantly apart, with or without a margin: no tie
    assert assess(P2_A, P2_B, "a ties b", alpha=0.2).answer == "no"
    sig = assess([1.0, 1.2, 1.1], [3.0, 3.2, 3.1], "a ties b", tie_margin=1.0)
    assert sig.answer == "no" and sig.decision.reason == "outside margin"


# ------------------------------------------------------------- the records behind the lines


@pytest.mark.parametrize(
    "a, b, n_a, n_b", [([], [1.0, 2.0, 3.0], 0, 3), ([1.0, 2.0], [NAN, NAN], 2, 0)]
)
def test_no_data_record(a, b, n_a, n_b):
    v = assess(a, b, "stagger ties coprime")
    assert (v.claim, v.kind, v.answer, v.n_a, v.n_b) == (
        "stagger ties coprime",
        "ties",
        "no data",
        n_a,
        n_b,
    )
    assert all(math.isnan(x) for x in (v.gap, v.margin, v.p, *v.ci)) and len(v.ci) == 2
    assert v.line == f"stagger ties coprime: no data (n={n_a} vs {n_b})"


@pytest.mark.parametrize(
    "a, b, few, g, n_a, n_b",
    [
        ([1.0], [2.0], "a has 1 value and b has 1 value", 1.0, 1, 1),
        ([1.0, 2.0], [4.0], "b has 1 value", 2.5, 2, 1),
        ([4.0, NAN], [1.0, 2.0, 3.0], "a has 1 value", -2.0, 1, 3),  # NaN is no value
    ],
)
def test_cannot_tell_record_names_the_short_sides(a, b, few, g, n_a, n_b):
    v = assess(a, b, "fib beats pow2")
    assert v.line == (
        f"fib beats pow2: cannot tell, too few seeds ({few}; need at least 2 per side for a "
        f"spread): gap {g:.2f}, no p-value (n={n_a} vs {n_b})"
    )
    assert (v.claim, v.kind, v.answer, v.n_a, v.n_b) == (
        "fib beats pow2",
        "beats",
        "cannot tell",
        n_a,
        n_b,
    )
    assert v.gap == g
    assert all(math.isnan(x) for x in (v.margin, v.p, *v.ci)) and len(v.ci) == 2


def test_full_record_carries_claim_kind_and_given_sigma():
    v = assess(P2_A, P2_B, "stagger matches fixed", sigma=2.0)
    assert (v.claim, v.kind, v.n_a, v.n_b) == ("stagger matches fixed", "ties", 2, 2)
    # no margin: no equivalence test (p NaN); the test against the tie is Welch's
    assert v.margin == 1.5 and math.isnan(v.p)
    assert v.decision.comparison.p_against == pytest.approx(P2)


@pytest.mark.parametrize(
    "a, b, text",
    [
        (["x"], B, "a must be a sequence of numbers, got ['x']"),
        (A, ["y"], "b must be a sequence of numbers, got ['y']"),
        ([[1.0, 2.0]], B, "a must be one-dimensional (one value per seed), got shape (1, 2)"),
        (A, [[1.0, 2.0]], "b must be one-dimensional (one value per seed), got shape (1, 2)"),
    ],
)
def test_assess_and_verdict_name_the_bad_side(a, b, text):
    for f in (assess, verdict):
        with pytest.raises(ValueError, match=_msg(text)):
            f(a, b, "a beats b")


# ------------------------------------------------- the Welch t-interval the line reports


def test_the_interval_is_welchs_t_interval():
    v = assess(FIVE_A, FIVE_B, "a beats b")
    lo, hi = sst.ttest_ind(FIVE_A, FIVE_B, equal_var=False).confidence_interval(0.95)
    assert v.ci == pytest.approx((-hi, -lo))  # the gap is mean(b) − mean(a)
    assert verdict(FIVE_A, FIVE_B, "a beats b") == v.line
    up = assess(FIVE_A, FIVE_B, "a beats b", lower_is_better=False)
    assert up.ci == pytest.approx((lo, hi))
    assert up.ci[0] < up.gap < up.ci[1] < 0 and up.answer == "no"  # a significant reversal


@pytest.mark.parametrize("kw", [{}, {"level": 0.8}, {"lower_is_better": False}, {"level": 0.99}])
def test_verdict_passes_every_setting_to_the_line(kw):
    level = kw.get("level", 0.95)
    sign = -1 if kw.get("lower_is_better", True) else 1
    lo, hi = sorted(
        sign * x for x in sst.ttest_ind(FIVE_A, FIVE_B, equal_var=False).confidence_interval(level)
    )
    line = verdict(FIVE_A, FIVE_B, "a beats b", digits=6, **kw)
    assert f"{level:.0%} CI of the gap [{lo:.6f}, {hi:.6f}]" in line, line
    g = gap(FIVE_A, FIVE_B, kw.get("lower_is_better", True))
    assert f"gap {g:.6f} = " in line


def test_verdict_digits():
    assert verdict(P2_A, P2_B, "a beats b", digits=3).startswith(
        "a beats b: not shown, gap 3.000 = 2.1σ (Welch p=0.17"
    )
    assert verdict([1.0], [3.0], "a beats b", digits=0).endswith("gap 2, no p-value (n=1 vs 1)")
