"""The ledger's LM checks pinned rule by rule (`analysis.ledger.checks`): which one-sided test each
claim registers (its sides, in the names the ledger prints, its metric and family), the runs
it names, its exact line, and the edges of the length-extrapolation rules (1×, 2×, 8×, a
missing base, the paper's interval).  The oracles are scipy's t-tests and intervals, the
paper's Table 3 numbers and small cases counted by hand (issue 39, the mutation score)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from analysis.ledger import checks as C
from analysis.ledger.compare import finish
from analysis.ledger.evidence import LMRun, Tier
from analysis.statistics.decide import settle
from lab.ladder.drift import INERT_TOL

#: Table 3 of the paper (FineWeb-Edu, % ppl change at 4×), as printed there
PAPER_DENSE = 201.0
PAPER_FIB = (-1.3, 2.8)  # the Fibonacci configurations' range
PAPER_WORDS = {
    "dense": "dense +201.0 %",
    "fib/coprime": "fib/coprime +2.8 %",
    "fib/fixed": "fib/fixed -1.2 %",
    "fib/stagger": "fib/stagger -1.3 % (W=12) / -1.3 % (W=8)",
    "pow2/fixed": "pow2/fixed +11.3 %",
}


def tier(*runs):
    return Tier("lm", "other", (2, 0), "t", lms=tuple(runs))


def ext_runs(label, tag, changes, f=4, base=40.0):
    """Runs whose ppl moves by ``changes`` (%) from 1× to ``f``×."""
    return [
        LMRun(f"{tag}{i}", label, ext={1: base, f: base * (1 + c / 100)})
        for i, c in enumerate(changes)
    ]


def pct(runs, f=4):
    """The runs' % change from 1× to f×, by the definition."""
    return [100.0 * (r.ext[f] / r.ext[1] - 1) for r in runs]


def welch(a, b):
    return st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue


def one(x, ref, alt="greater"):
    return st.ttest_1samp(x, ref, alternative=alt).pvalue


def holm_verdict(p_for, p_rev):
    """Holm (statsmodels) over every p of a claim's tests: held when each test for it is
    significant, did not hold on a significant reversal, else not shown."""
    from statsmodels.stats.multitest import multipletests

    adj = list(multipletests(list(p_for) + list(p_rev), method="holm")[1])
    k = len(p_for)
    if all(a < 0.05 for a in adj[:k]):
        return "held"
    return "did not hold" if any(a < 0.05 for a in adj[k:]) else "not shown"


def ps(p):
    return "; one-sided p " + ", ".join(f"{q:.2g}" for q in p)


def spec(f):
    """Each registered test: (its a, its b, the metric, the family it starts in)."""
    return [(t.a, t.b, t.comparison.protocol.metric, t.comparison.protocol.family)
            for t in f.tests]  # fmt: skip


def changes_line(ch, f=4):
    return f"ppl change 1× → {f}× (rungs recomputed): " + ", ".join(
        f"{k} {np.mean(v):+.1f} %" for k, v in sorted(ch.items())
    )


def paper_line(labels):
    shown = [PAPER_WORDS[k] for k in sorted(labels) if k in PAPER_WORDS]
    return "; the paper's at 4× (Table 3): " + ", ".join(shown) if shown else ""


# ------------------------------------------------------------------------- the one-sided test
def test_a_threshold_test_starts_in_the_threshold_family_one_sided_higher_is_better():
    a, b, c = C._above("x", "y", [0.3, 0.5, 0.4], 0.1)
    pr = c.protocol
    assert (a, b) == ("x", "y")
    assert (pr.family, pr.test, pr.sided, pr.metric, pr.paper_effect) == (
        "threshold", "welch", "one", "value", None
    )  # fmt: skip
    c2 = C._above("x", "y", [3.0, 4.0, 3.5], y=[1.0, 2.0, 1.2], metric="m", paper=0.7)[2]
    assert (c2.protocol.family, c2.protocol.metric, c2.protocol.paper_effect) == (
        "threshold", "m", 0.7
    )  # fmt: skip
    # higher is better: the gap is mean(x) − mean(y), and the claim's p the test that x is above
    assert c2.gap == pytest.approx(3.5 - 1.4)
    assert c2.p_raw == pytest.approx(welch([3.0, 4.0, 3.5], [1.0, 2.0, 1.2]))


def test_a_threshold_test_names_no_runs_of_its_own():
    """Its Pair carries empty run tuples and no W: the ledger counts it as its own test."""
    _, _, tests = C._tested([C._above("x", "y", [0.3, 0.5], 0.1)])
    (t,) = tests
    assert (t.a, t.b, t.W, t.ra, t.rb, t.decision) == ("x", "y", None, (), (), None)


# ------------------------------------------------------------------------- extrapolation edges
def test_no_extrapolated_length_no_finding():
    only_1x = [LMRun("d0", "dense", ext={1: 40.0}), LMRun("d1", "dense", ext={1: 41.0})]
    for cid in ("t3-dense-degrades", "t3-sparse-flat", "t3-pow2-degrades",
                "t3-coprime-less-robust"):  # fmt: skip
        assert C.LM_CHECKS[cid](tier(*only_1x)) is None
        assert C.LM_CHECKS[cid](tier(LMRun("x", "dense"))) is None


def test_at_twice_the_length_the_4x_claim_is_not_shown_with_no_interval():
    runs = ext_runs("dense", "d", [20.0, 30.0, 25.0], f=2)
    f = C.LM_CHECKS["t3-dense-degrades"](tier(*runs))
    x = pct(runs, 2)
    p = one(x, 10.0)
    assert f.verdict == "not shown" and f.evidence == ["d0", "d1", "d2"]
    assert f.here == (
        changes_line({"dense": x}, 2) + paper_line(["dense"])
        + "; the paper's +201 % vs ours: no interval (one run, or not at 4×)"
        + f" (vs +10 %{ps([p])})"
        + " (only 2× evaluated, the claim is at 4×)"
    )  # fmt: skip
    assert f.stats["factor"] == 2 and f.stats["dense"] == pytest.approx(25.0)
    assert (f.stats["magnitude"], f.stats["change_ci"]) == ("n/a", None)
    assert f.stats["paper_change"] == PAPER_DENSE
    assert f.tests == [] and f.style == "pairs"  # no registered test below 4×


def test_dense_degrades_at_4x_names_its_test_and_places_the_paper_in_our_interval():
    runs = ext_runs("dense", "d", [150.0, 200.0, 250.0])
    f = C.LM_CHECKS["t3-dense-degrades"](tier(*runs, LMRun("s", "fib/stagger")))
    x = pct(runs)
    lo, hi = st.t.interval(0.95, 2, loc=np.mean(x), scale=st.sem(x))
    assert lo <= PAPER_DENSE <= hi
    p, rev = one(x, 10.0), one(x, 10.0, "less")
    assert f.here == (
        changes_line({"dense": x}) + paper_line(["dense"])
        + f"; the paper's +201 % vs ours: inside our 95 % interval [{lo:+.1f}, {hi:+.1f}] %"
        + f" (vs +10 %{ps([p])})"
    )  # fmt: skip
    assert f.head == f.here and f.style == "own"
    assert f.evidence == ["d0", "d1", "d2"]
    assert f.stats["magnitude"] == "inside"
    assert f.stats["change_ci"] == pytest.approx([lo, hi])
    assert f.stats["dense"] == pytest.approx(200.0) and f.stats["factor"] == 4
    assert f.stats["p_for"] == [pytest.approx(p)] and f.stats["p_reversed"] == [pytest.approx(rev)]
    assert spec(f) == [("dense", "+10 %", "pct_change", "threshold")]
    # the magnitude rule reads the paper's size above the threshold: 201 − 10
    assert f.tests[0].comparison.protocol.paper_effect == pytest.approx(PAPER_DENSE - 10.0)
    # Holm over the claim's two tests (for, against), then the magnitude: 191 inside the gap's CI
    assert lo - 10.0 <= PAPER_DENSE - 10.0 <= hi - 10.0
    assert f.verdict == holm_verdict([p], [rev]) == "held"
    # the ledger's line names the test as the check registered it
    fin = finish(f, settle([t.comparison for t in f.tests]))
    assert fin.here.startswith(f.here + "; dense vs +10 %: held: dense past +10 %, p_Holm=")


def test_dense_degrades_outside_the_paper_and_beyond_4x_no_magnitude():
    runs = ext_runs("dense", "d", [20.0, 21.0, 22.0])
    f = C.LM_CHECKS["t3-dense-degrades"](tier(*runs))
    x = pct(runs)
    lo, hi = st.t.interval(0.95, 2, loc=np.mean(x), scale=st.sem(x))
    assert f.stats["magnitude"] == "outside"
    assert f"vs ours: outside our 95 % interval [{lo:+.1f}, {hi:+.1f}] % (vs +10 %" in f.here
    # at 8× there is no paper number to place: the test alone, no paper size registered
    eight = ext_runs("dense", "e", [20.0, 21.0, 22.0], f=8)
    g = C.LM_CHECKS["t3-dense-degrades"](tier(*eight))
    assert g.stats["factor"] == 8 and g.stats["magnitude"] == "n/a"
    assert g.stats["change_ci"] is None
    assert "vs ours: no interval (one run, or not at 4×) (vs +10 %" in g.here
    assert g.tests[0].comparison.protocol.paper_effect is None
    assert g.verdict == "held"  # 21 % above 10 %, p ≈ 0.004 (no magnitude to miss)
    assert one(pct(eight, 8), 10.0) < 0.025


def test_the_change_is_read_from_1x_else_the_runs_ppl_and_runs_without_the_cell_are_left_out():
    runs = [
        LMRun("a", "dense", ppl=39.0, ext={1: 40.0, 4: 80.0}),  # 1× measured: +100 %, not +105
        LMRun("b", "dense", ppl=40.0, ext={4: 60.0}),  # no 1×: from its ppl, +50 %
        LMRun("c", "dense", ppl=40.0, ext={1: 40.0, 2: 50.0}),  # no 4× cell: left out
        LMRun("d", "dense", ppl=math.nan, ext={4: 90.0}),  # no base at all: left out
        LMRun("e", "dense", ppl=0.0, ext={4: 90.0}),  # a zero base: left out
    ]
    ch = C._change(tier(*runs), 4)
    assert ch == {"dense": (pytest.approx(75.0), ["a", "b"], [pytest.approx(100.0),
                                                              pytest.approx(50.0)])}  # fmt: skip
    f = C.LM_CHECKS["t3-dense-degrades"](tier(*runs))
    assert f.evidence == ["a", "b"] and f.stats["dense"] == pytest.approx(75.0)
    assert C._fmax(tier(*runs)) == 4
    assert C._fmax(tier(LMRun("z", "dense", ext={1: 40.0, 2: 41.0}))) == 2
    assert C._fmax(tier(LMRun("z", "dense", ext={1: 40.0}))) is None


def test_the_papers_words_only_for_configurations_it_has():
    assert C._paper_words(["fib/coprime=stagger", "x"]) == ""
    assert C._paper_words([]) == ""
    assert C._paper_words(["pow2/fixed", "dense", "fib/stagger"]) == (
        "; the paper's at 4× (Table 3): dense +201.0 %, fib/stagger -1.3 % (W=12) / -1.3 % (W=8), "
        "pow2/fixed +11.3 %"
    )
    pc = C.paper_changes()
    assert pc["dense"] == [PAPER_DENSE] and pc["fib/stagger"] == [-1.3, -1.3]
    fib = [c for k, cs in pc.items() if k.startswith("fib/") for c in cs]
    assert (min(fib), max(fib)) == PAPER_FIB


def test_a_rule_may_give_only_its_verdict_and_runs():
    """The shortest rule result, (verdict, runs): no note, no stats of its own, no tests."""
    runs = ext_runs("dense", "d", [100.0, 100.0])
    f = C._extrap(tier(*runs), lambda ch, fmax: ("held", ["d0"]))
    want = changes_line({"dense": pct(runs)}) + paper_line(["dense"])
    assert (f.verdict, f.here, f.head, f.evidence) == ("held", want, want, ["d0"])
    assert f.stats == {"factor": 4, "dense": pytest.approx(100.0)} and f.tests == []
    assert C._extrap(tier(*runs), lambda ch, fmax: None) is None


# ------------------------------------------------------------------------- the paper's interval
def test_magnitude_is_the_t_interval_from_two_values_on_and_its_ends_count_inside():
    x = [10.0, 14.0]
    lo, hi = st.t.interval(0.95, 1, loc=12.0, scale=st.sem(x))
    assert C.magnitude(12.0, x) == ("inside", [pytest.approx(lo), pytest.approx(hi)])
    assert C.magnitude(hi + 1.0, x)[0] == "outside"
    assert C.magnitude(12.0, [12.0]) == ("n/a", None)
    # no spread: the interval is the point itself, which lies inside it (both ends count)
    assert C.magnitude(5.0, [5.0, 5.0, 5.0]) == ("inside", [5.0, 5.0])
    assert C.magnitude(5.0000001, [5.0, 5.0])[0] == "outside"


# ------------------------------------------------------------------------- sparse flat
def test_sparse_flat_tests_each_sparse_configuration_below_little_and_places_it_in_the_paper():
    stg = ext_runs("fib/stagger", "s", [0.5, 1.0, 0.8])
    fx = ext_runs("fib/fixed", "f", [3.5, 3.6, 3.4])
    same = ext_runs("fib/coprime=stagger", "c", [9.0, 9.5])  # the stagger's model: not compared
    dense = ext_runs("dense", "d", [150.0, 160.0])
    f = C.LM_CHECKS["t3-sparse-flat"](tier(*stg, *fx, *same, *dense))
    xs, xf = pct(stg), pct(fx)
    p = [one(xf, C.LITTLE, "less"), one(xs, C.LITTLE, "less")]  # fixed, stagger (sorted)
    ch = {"fib/stagger": xs, "fib/fixed": xf, "fib/coprime=stagger": pct(same), "dense": pct(dense)}
    assert f.here == (
        changes_line(ch) + paper_line(ch)
        + "; ours in the paper's Fibonacci range -1.3…+2.8 %: fib/fixed no, fib/stagger yes"
        + f" (each below +2.8 %, fib/fixed, fib/stagger{ps(p)})"
    )  # fmt: skip
    assert f.evidence == ["s0", "s1", "s2", "f0", "f1", "f2"]
    assert f.stats["inside_paper_range"] == {"fib/stagger": True, "fib/fixed": False}
    assert f.stats["paper_range"] == list(PAPER_FIB) and f.stats["little"] == 2.8
    assert f.stats["p_for"] == pytest.approx(p)
    assert spec(f) == [("fib/fixed", "−2.8 %", "-pct_change", "threshold"),
                       ("fib/stagger", "−2.8 %", "-pct_change", "threshold")]  # fmt: skip
    rev = [one(xf, C.LITTLE), one(xs, C.LITTLE)]
    assert f.stats["p_reversed"] == pytest.approx(rev)
    assert f.verdict == holm_verdict(p, rev) == "did not hold"  # fixed's +3.5 % is above 2.8 %


def test_sparse_flat_needs_a_sparse_configuration():
    only = ext_runs("dense", "d", [150.0, 160.0]) + ext_runs("fib/coprime=stagger", "c", [1, 2])
    assert C.LM_CHECKS["t3-sparse-flat"](tier(*only)) is None


# ------------------------------------------------------------------------- pow2, coprime
def test_pow2_degrades_is_welch_against_each_fibonacci_configuration():
    p2 = ext_runs("pow2/fixed", "p", [11.0, 12.0, 10.5])
    stg = ext_runs("fib/stagger", "s", [-1.0, -1.5, -1.2])
    fx = ext_runs("fib/fixed", "f", [-0.8, -1.4, -1.0])
    f = C.LM_CHECKS["t3-pow2-degrades"](tier(*stg, *p2, *fx, *ext_runs("dense", "d", [200.0])))
    x2, xs, xf = pct(p2), pct(stg), pct(fx)
    p = [welch(x2, xf), welch(x2, xs)]
    ch = {"pow2/fixed": x2, "fib/stagger": xs, "fib/fixed": xf, "dense": [200.0]}
    assert f.here == (
        changes_line(ch) + paper_line(ch)
        + f"; tested here: pow2/fixed above fib/fixed, fib/stagger{ps(p)}"
    )  # fmt: skip
    assert f.evidence == ["p0", "p1", "p2", "s0", "s1", "s2", "f0", "f1", "f2"]
    assert f.stats["p_for"] == pytest.approx(p)
    assert spec(f) == [("pow2/fixed", "fib/fixed", "pct_change", "threshold"),
                       ("pow2/fixed", "fib/stagger", "pct_change", "threshold")]  # fmt: skip
    assert f.verdict == "held"
    fin = finish(f, settle([t.comparison for t in f.tests]))
    assert "; pow2/fixed vs fib/fixed: held" in fin.here
    assert "; pow2/fixed vs fib/stagger: held" in fin.here
    assert C.LM_CHECKS["t3-pow2-degrades"](tier(*stg, *fx)) is None
    assert C.LM_CHECKS["t3-pow2-degrades"](tier(*p2)) is None


def test_coprime_less_robust_is_welch_of_coprime_above_the_stagger():
    co = ext_runs("fib/coprime", "c", [2.5, 3.1, 2.9])
    stg = ext_runs("fib/stagger", "s", [-1.0, -1.5, -1.2])
    f = C.LM_CHECKS["t3-coprime-less-robust"](tier(*stg, *co))
    xc, xs = pct(co), pct(stg)
    p = welch(xc, xs)
    ch = {"fib/coprime": xc, "fib/stagger": xs}
    assert (
        f.here
        == changes_line(ch) + paper_line(ch) + f"; tested here: coprime above stagger{ps([p])}"
    )
    assert f.evidence == ["c0", "c1", "c2", "s0", "s1", "s2"]
    assert f.stats["p_for"] == [pytest.approx(p)]
    assert spec(f) == [("fib/coprime", "fib/stagger", "pct_change", "threshold")]
    assert f.verdict == "held"
    assert C.LM_CHECKS["t3-coprime-less-robust"](tier(*co)) is None


# ------------------------------------------------------------------------- 2×, bins, slopes
def test_dense_behind_at_2x_registers_dense_above_each_on_ln_ppl():
    runs = [
        LMRun("d0", "dense", ext={2: 80.0}), LMRun("d1", "dense", ext={2: 90.0}),
        LMRun("s0", "fib/stagger", ext={2: 41.0}), LMRun("s1", "fib/stagger", ext={2: 42.0}),
        LMRun("f0", "fib/fixed", ext={2: 43.0}), LMRun("f1", "fib/fixed", ext={2: 44.5}),
    ]  # fmt: skip
    f = C._dense_behind_2x(tier(*runs))
    assert spec(f) == [("dense", "fib/fixed", "log_ppl", "threshold"),
                       ("dense", "fib/stagger", "log_ppl", "threshold")]  # fmt: skip
    assert f.head == f.here and f.style == "own"
    ln = lambda *v: [math.log(x) for x in v]  # noqa: E731
    assert f.tests[1].comparison.p_raw == pytest.approx(welch(ln(80, 90), ln(41, 42)))


def _binned(label, rows, tag):
    return [LMRun(f"{tag}{i}", label, bins=tuple(b)) for i, b in enumerate(rows)]


def test_every_bin_registers_fixed_above_the_stagger_per_bin():
    fx = [[3.0, 2.9, 2.8], [3.1, 2.95, 2.82], [3.05, 2.92, 2.83]]
    stg = [[2.5, 2.3, 2.2], [2.55, 2.32, 2.21], [2.52, 2.31, 2.23]]
    f = C._every_bin(tier(*_binned("fib/fixed", fx, "f"), *_binned("fib/stagger", stg, "s")))
    assert spec(f) == [("fib/fixed", "fib/stagger", f"nll_bin{j}", "threshold") for j in range(3)]
    assert f.head == f.here and f.style == "own"
    # integer losses read as numbers too
    g = C._every_bin(tier(*_binned("fib/fixed", [[3, 2], [4, 2]], "f"),
                          *_binned("fib/stagger", [[1, 1], [2, 1]], "s")))  # fmt: skip
    assert g.stats["gap"] == [2.0, 1.0]


def test_not_long_range_registers_the_stagger_slope_against_fixed():
    fx = [[3.0, 2.9, 2.85, 2.8], [3.0, 2.92, 2.86, 2.83], [3.0, 2.88, 2.84, 2.79]]
    stg = [[3.0, 2.8, 2.6, 2.4], [3.0, 2.82, 2.61, 2.43], [3.0, 2.79, 2.6, 2.39]]
    f = C._not_long_range(tier(*_binned("fib/fixed", fx, "f"), *_binned("fib/stagger", stg, "s")))
    assert spec(f) == [("fib/stagger", "fib/fixed", "slope", "threshold")]
    assert f.head == f.here and f.style == "own"
    fin = finish(f, settle([t.comparison for t in f.tests]))
    assert fin.here.startswith(f.here + "; fib/stagger vs fib/fixed: did not hold")


# ------------------------------------------------------------------------- α, same tokens, frozen
def test_learned_alpha_registers_minus_drift_above_minus_the_tolerance():
    runs = [LMRun(n, "fib/learned", drift=d) for n, d in (("a", 0.001), ("b", 0.002),
                                                           ("c", 0.0015))]  # fmt: skip
    f = C._lm_inert(tier(*runs))
    assert spec(f) == [("fib/learned", f"{INERT_TOL:g}", "-alpha_drift", "threshold")]
    assert f.head == f.here and f.style == "own" and len(f.tests) == 1
    p = one([0.001, 0.002, 0.0015], INERT_TOL, "less")
    assert f.tests[0].comparison.p_raw == pytest.approx(p)
    fin = finish(f, settle([t.comparison for t in f.tests]))
    assert fin.here.startswith(f.here + f"; fib/learned vs {INERT_TOL:g}: ")


def test_same_tokens_registers_each_sparse_configuration_below_one_percent():
    runs = [
        LMRun("s0", "fib/stagger", same_tokens=0.2), LMRun("s1", "fib/stagger", same_tokens=0.4),
        LMRun("f0", "fib/fixed", same_tokens=0.5), LMRun("f1", "fib/fixed", same_tokens=0.3),
        LMRun("d0", "dense", same_tokens=9.0),
    ]  # fmt: skip
    f = C._same_tokens(tier(*runs))
    assert spec(f) == [("fib/fixed", "−1 %", "-pct_change", "threshold"),
                       ("fib/stagger", "−1 %", "-pct_change", "threshold")]  # fmt: skip
    assert f.head == f.here and f.style == "own"
    assert [t.comparison.p_raw for t in f.tests] == pytest.approx(
        [one([0.5, 0.3], 1.0, "less"), one([0.2, 0.4], 1.0, "less")]
    )


def test_frozen_registers_both_sides_of_one_percent_per_configuration():
    runs = [
        LMRun("a0", "fib/stagger", ext={1: 40.0, 4: 40.08}, frozen={4: 40.0}),
        LMRun("a1", "fib/stagger", ext={1: 40.0, 4: 40.16}, frozen={4: 40.0}),
        LMRun("b0", "fib/fixed", ext={1: 40.0, 2: 39.8}, frozen={2: 40.0}),
        LMRun("b1", "fib/fixed", ext={1: 40.0, 2: 39.9}, frozen={2: 40.0}),
    ]
    f = C._frozen(tier(*runs))
    assert spec(f) == [
        ("fib/fixed", "+1 %", "-pct_change", "threshold"),
        ("fib/fixed", "−1 %", "pct_change", "threshold"),
        ("fib/stagger", "+1 %", "-pct_change", "threshold"),
        ("fib/stagger", "−1 %", "pct_change", "threshold"),
    ]
    assert f.head == f.here and f.style == "own"
    fx = [100 * (39.8 / 40 - 1), 100 * (39.9 / 40 - 1)]
    assert f.tests[0].comparison.p_raw == pytest.approx(one(fx, 1.0, "less"))
    assert f.tests[1].comparison.p_raw == pytest.approx(one(fx, -1.0))


# ------------------------------------------------------------------------- battery
def test_a_battery_accuracy_exactly_three_standard_errors_off_is_still_at_chance():
    # chance 1/2 over 36 items: 3 · √(¼ / 36) = 3 / 12 = 0.25 exactly; 0.75 lies on the band's edge
    run = LMRun("r", "fib/stagger", battery={"vt": {"acc": 0.75, "chance": 0.5, "n": 36}})
    f = C._battery(tier(run), "vt")
    assert (f.verdict, f.label) == ("not shown", C.AT_CHANCE)
    assert f.here == (
        "accuracy 0.750–0.750 over 1 runs vs chance 0.500 (±0.250 = 3 standard errors, n=36)"
    )
    off = LMRun("q", "fib/stagger", battery={"vt": {"acc": 0.7501, "chance": 0.5, "n": 36}})
    assert C._battery(tier(off), "vt").verdict == "did not hold"


def test_a_battery_decided_by_its_binomial_test_says_so_not_the_band():
    """Where the store carries the battery's own test (``at_chance``) it decides, and the line
    says how many runs it put above chance — a run inside the 3-standard-error band can still
    be above by it (the scale study's RULER: every run inside ±0.054, one above at p 0.035)."""
    from scipy.stats import binomtest

    k, n, ch = 44, 300, 1 / 9  # 0.147: inside 1/9 ± 0.054, above chance by the binomial test
    p = binomtest(k, n, ch, alternative="greater").pvalue
    assert p < 0.05 and abs(k / n - ch) <= C.chance_band(ch, n)
    runs = [
        LMRun("a", "fib/stagger", battery={"vt": {"acc": k / n, "chance": ch, "n": n, "at_chance": p >= 0.05}}),
        LMRun("b", "fib/fixed", battery={"vt": {"acc": 0.11, "chance": ch, "n": n, "at_chance": True}}),
    ]  # fmt: skip
    f = C._battery(tier(*runs), "vt")
    assert f.verdict == "did not hold"
    assert f.here == (
        "accuracy 0.110–0.147 over 2 runs vs chance 0.111 (n=300): 1 of 2 runs above chance by "
        "the battery's one-sided binomial test at 0.05, each run on its own (no control over the "
        "runs' family)"
    )
