"""The ledger's LM checks read whole: each check's verdict, its line and its statistics on a
tier built by hand, the p-values against scipy (`analysis.ledger.checks`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from analysis.ledger import checks as C
from analysis.ledger.evidence import LMRun, Tier


def tier(*runs):
    return Tier("lm", "other", (2, 0), "t", lms=tuple(runs))


# ------------------------------------------------------------------------- the one-sided test
def test_a_threshold_rules_test_is_welchs_or_the_one_sample_t_with_its_reversal_against():
    def p(*a, **k):
        c = C._above("a", "b", *a, **k)[2]
        return c.p_raw, c.p_against

    a, b = [0.31, 0.35, 0.4], [0.1, 0.12]
    want = st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue
    rev = st.ttest_ind(a, b, equal_var=False, alternative="less").pvalue
    assert p(a, y=b) == pytest.approx((want, rev), rel=1e-12)
    assert p([3, 4], y=[1, 2])[0] == pytest.approx(  # two a side is enough; ints are values
        st.ttest_ind([3.0, 4.0], [1.0, 2.0], equal_var=False, alternative="greater").pvalue
    )
    # a spread on one side only is a test; spreads below 1 count
    assert p([0.2, 0.2], y=[0.1, 0.15])[0] == pytest.approx(
        st.ttest_ind([0.2, 0.2], [0.1, 0.15], equal_var=False, alternative="greater").pvalue
    )
    assert p([0.1, 0.15], y=[0.2, 0.2])[0] > 0.5
    for x, y in (([1.0], [0.0, 0.1]), ([0.0, 0.1], [1.0])):  # one value a side: no test
        assert not C._above("a", "b", x, y=y)[2].tested
    one = [0.02, 0.03, 0.05]
    c = C._above("a", "b", one, 0.01)[2]
    t = st.ttest_1samp(one, 0.01)
    assert c.p_raw == pytest.approx(st.ttest_1samp(one, 0.01, alternative="greater").pvalue)
    assert c.p_against == pytest.approx(st.ttest_1samp(one, 0.01, alternative="less").pvalue)
    ci = t.confidence_interval(0.95)
    assert c.ci == pytest.approx((ci.low - 0.01, ci.high - 0.01)) and c.n_b == 0
    assert not C._above("a", "b", [0.2], 0.0)[2].tested


# ------------------------------------------------------------------------- gain not long-range
def _binned(label, rows, tag):
    return [LMRun(f"{tag}{i}", label, 8, i, 40.0, bins=tuple(b)) for i, b in enumerate(rows)]


def test_a_gain_that_grows_along_the_window_did_not_hold():
    """Fixed's loss falls more slowly than the stagger's over bins 1…3: the gap grows, and
    Welch's one-sided test on the per-run slopes (scaled to the whole span) says so."""
    fx = [[3.0, 2.9, 2.85, 2.8], [3.0, 2.92, 2.86, 2.83], [3.0, 2.88, 2.84, 2.79]]
    stg = [[3.0, 2.8, 2.6, 2.4], [3.0, 2.82, 2.61, 2.43], [3.0, 2.79, 2.6, 2.39]]
    f = C._not_long_range(tier(*_binned("fib/fixed", fx, "f"), *_binned("fib/stagger", stg, "s")))
    x = np.arange(3)
    sf = [np.polyfit(x, r[1:], 1)[0] * 2 for r in fx]
    ss = [np.polyfit(x, r[1:], 1)[0] * 2 for r in stg]
    p = st.ttest_ind(sf, ss, equal_var=False, alternative="greater").pvalue
    rise = np.mean(sf) - np.mean(ss)
    late = (np.mean(fx, 0) - np.mean(stg, 0))[1:].mean()
    assert f.verdict == "did not hold" and f.evidence == ["f0", "f1", "f2", "s0", "s1", "s2"]
    assert f.stats == {
        "rise": pytest.approx(rise),
        "p_grows": pytest.approx(p),
        "test": "one-sided Welch on per-run slopes",
    }
    assert f.here == (
        f"fixed − stagger over bins 1…3: mean {late:+.3f} nats, change along the window "
        f"{rise:+.3f}; growth p {p:.2g} (a tie needs a margin the paper does not give)"
    )
    (t,) = f.tests  # the registered test refutes only: no p for the claim, one against it
    assert math.isnan(t.comparison.p_raw) and t.comparison.p_against == pytest.approx(p)
    # by hand: three points' slope is (last − first) / 2, times the span 2: last − first;
    # fixed −0.10, −0.09, −0.09 against the stagger's −0.40, −0.39, −0.40
    assert rise == pytest.approx((-0.28 / 3) - (-1.19 / 3), abs=1e-12)


def test_a_flat_gain_is_not_shown_and_no_gain_has_nothing_to_locate():
    fx = [[3.0, 2.9, 2.9, 2.9], [3.0, 2.92, 2.91, 2.93]]
    stg = [[3.0, 2.8, 2.81, 2.79], [3.0, 2.82, 2.8, 2.83]]
    flat = C._not_long_range(
        tier(*_binned("fib/fixed", fx, "f"), *_binned("fib/stagger", stg, "s"))
    )
    assert flat.verdict == "not shown" and flat.stats["p_grows"] >= 0.05
    assert flat.here.endswith(
        f"; growth p {flat.stats['p_grows']:.2g} (a tie needs a margin the paper does not give)"
    )
    # one run a side: no test, still a line
    one = C._not_long_range(
        tier(*_binned("fib/fixed", fx[:1], "f"), *_binned("fib/stagger", stg[:1], "s"))
    )
    assert one.verdict == "not shown" and one.here.endswith(
        "; no test (a tie needs a margin the paper does not give)"
    )
    assert math.isnan(one.stats["p_grows"])
    # the stagger behind everywhere (and exactly level): no gain to locate, no statistics
    for shift in (0.1, 0.0):
        worse = [[b + shift if j else b for j, b in enumerate(r)] for r in fx]
        g = C._not_long_range(
            tier(*_binned("fib/fixed", fx, "f"), *_binned("fib/stagger", worse, "s"))
        )
        assert (g.verdict, g.stats, g.evidence) == ("not shown", {}, ["f0", "f1", "s0", "s1"])
        assert g.here.startswith("fixed − stagger over bins 1…3: mean ")
        assert g.here.endswith(" (no gain here to locate)")
    # two bins (one after bin 0) give no slope; three give one
    short = C._not_long_range(
        tier(
            *_binned("fib/fixed", [[3, 2.9], [3, 2.8]], "f"),
            *_binned("fib/stagger", [[3, 2.7], [3, 2.6]], "s"),
        )
    )
    assert short is None
    three = C._not_long_range(
        tier(
            *_binned("fib/fixed", [[3, 2.9, 2.9], [3, 2.8, 2.85]], "f"),
            *_binned("fib/stagger", [[3, 2.7, 2.6], [3, 2.6, 2.5]], "s"),
        )
    )
    assert three is not None and three.here.startswith("fixed − stagger over bins 1…2: ")
    assert C._not_long_range(tier(*_binned("fib/fixed", fx, "f"))) is None  # no stagger


# ------------------------------------------------------------------------- learned α inert
def test_learned_alpha_is_inert_within_the_tolerance_and_the_largest_drift_decides():
    from lab.ladder.drift import INERT_TOL

    runs = [
        LMRun("a", "fib/learned", drift=0.001),
        LMRun("b", "fib/learned", drift=0.002),
        LMRun("b2", "fib/learned", drift=0.0015),
        LMRun("c", "fib/learned", drift=math.nan),
        LMRun("d", "fib/stagger"),
    ]
    f = C._lm_inert(tier(*runs))
    drifts = [0.001, 0.002, 0.0015]
    p = st.ttest_1samp(drifts, INERT_TOL, alternative="less").pvalue  # each run below the bound
    rev = st.ttest_1samp(drifts, INERT_TOL, alternative="greater").pvalue
    assert (f.verdict, f.evidence) == ("held" if 2 * p < 0.05 else "not shown", ["a", "b", "b2"])
    assert f.stats["drift"] == 0.002 and f.stats["p_for"] == [pytest.approx(p)]
    assert f.stats["p_reversed"] == [pytest.approx(rev)]
    assert f.here.startswith(
        f"largest |α − α_init| over layers and logged steps: 0.002 over 3 runs (inert: ≤ "
        f"{INERT_TOL}; every run is); one-sided p "
    )
    moved = C._lm_inert(
        tier(*runs, LMRun("e", "fib/learned", drift=0.2), LMRun("e2", "fib/learned", drift=0.25))
    )
    assert moved.stats["drift"] == 0.25 and moved.verdict != "held"
    assert "every run is not" in moved.here
    assert C._lm_inert(tier(runs[3], runs[4])) is None


# ------------------------------------------------------------------------- the one-sided family
def _one(v, ref):
    return st.ttest_1samp(v, ref, alternative="greater").pvalue


def _holm(ps):
    from statsmodels.stats.multitest import multipletests

    return list(multipletests(ps, method="holm")[1])


def _verdict(p_for, p_rev):
    """The rule, by hand: Holm over every p of the claim's tests (for and against, as for the
    comparisons), held when each test for it is significant, did not hold on a significant
    reversal (statsmodels' Holm the oracle)."""
    adj = _holm(list(p_for) + list(p_rev))
    k = len(p_for)
    if all(a < 0.05 for a in adj[:k]):
        return "held"
    return "did not hold" if any(a < 0.05 for a in adj[k:]) else "not shown"


def test_frozen_rungs_are_tested_inside_one_percent_either_way_at_the_longest_shared_length():
    """Per configuration, the % change recomputed / frozen at the longest length both have:
    TOST at ±1 % (p that it is below +1 %, p that it is above −1 %), reversals Holm."""
    runs = [
        # ext at 1, 2, 4 and frozen at 2, 4: the 4× cell is read (+0.2 %, +0.4 %, +0.3 %)
        LMRun("a0", "fib/stagger", ext={1: 40.0, 2: 41.0, 4: 40.08}, frozen={2: 41.0, 4: 40.0}),
        LMRun("a1", "fib/stagger", ext={1: 40.0, 4: 40.16}, frozen={4: 40.0}),
        LMRun("a2", "fib/stagger", ext={1: 40.0, 4: 40.12}, frozen={4: 40.0}),
        # only 2× shared: read there (−0.5 %, −0.25 %)
        LMRun("b0", "fib/fixed", ext={1: 40.0, 2: 39.8}, frozen={2: 40.0}),
        LMRun("b1", "fib/fixed", ext={1: 40.0, 2: 39.9}, frozen={2: 40.0}),
        # 1× alone is no extrapolation: neither a number nor an evidence run
        LMRun("c0", "fib/coprime", ext={1: 40.0}, frozen={1: 44.0}),
    ]
    f = C._frozen(tier(*runs))
    st_ = [100 * (40.08 / 40 - 1), 100 * (40.16 / 40 - 1), 100 * (40.12 / 40 - 1)]
    fx = [100 * (39.8 / 40 - 1), 100 * (39.9 / 40 - 1)]
    p_for = [
        _one([-x for x in fx], -1.0),
        _one(fx, -1.0),
        _one([-x for x in st_], -1.0),
        _one(st_, -1.0),
    ]
    p_rev = [
        _one(fx, 1.0),
        _one([-x for x in fx], 1.0),
        _one(st_, 1.0),
        _one([-x for x in st_], 1.0),
    ]
    assert f.stats["p_for"] == pytest.approx(p_for)
    assert f.stats["p_reversed"] == pytest.approx(p_rev)
    assert f.verdict == _verdict(p_for, p_rev)
    assert f.evidence == ["a0", "a1", "a2", "b0", "b1"]
    assert f.here == (
        "ppl(recomputed) / ppl(frozen) − 1 at the longest length: "
        f"fib/fixed {np.mean(fx):+.2f} %, fib/stagger {np.mean(st_):+.2f} %"
        "; one-sided p " + ", ".join(f"{p:.2g}" for p in p_for)
    )
    assert C._frozen(tier(runs[-1])) is None


def test_the_later_blocks_cost_is_tested_per_sparse_configuration_and_dense_only_shown():
    runs = [
        LMRun("s0", "fib/stagger", same_tokens=0.2),
        LMRun("s1", "fib/stagger", same_tokens=0.4),
        LMRun("f0", "fib/fixed", same_tokens=0.5),
        LMRun("f1", "fib/fixed", same_tokens=0.3),
        LMRun("d0", "dense", same_tokens=9.0),
        LMRun("x", "fib/fixed"),  # not measured
    ]
    f = C._same_tokens(tier(*runs))
    p_for = [_one([-0.5, -0.3], -1.0), _one([-0.2, -0.4], -1.0)]
    p_rev = [_one([0.5, 0.3], 1.0), _one([0.2, 0.4], 1.0)]
    assert f.stats["p_for"] == pytest.approx(p_for)
    assert f.stats["p_reversed"] == pytest.approx(p_rev)
    assert f.verdict == _verdict(p_for, p_rev)
    assert f.evidence == ["s0", "s1", "f0", "f1", "d0"]
    assert f.here == (
        "ppl of the later blocks vs the same tokens alone: dense +9.0 %, fib/fixed +0.4 %, "
        "fib/stagger +0.3 %; one-sided p " + ", ".join(f"{p:.2g}" for p in p_for)
    )
    assert C._same_tokens(tier(runs[4])) is None  # dense alone: nothing sparse to test


def test_dense_behind_at_twice_the_length_is_welch_on_ln_ppl_against_each_sparse_one():
    runs = [
        LMRun("d0", "dense", ext={2: 80.0}),
        LMRun("d1", "dense", ext={2: 90.0}),
        LMRun("s0", "fib/stagger", ext={2: 41.0}),
        LMRun("s1", "fib/stagger", ext={2: 42.0}),
        LMRun("p0", "pow2/fixed", ext={2: 45.0}),
        LMRun("p1", "pow2/fixed", ext={2: 47.0}),
        LMRun("n", "fib/fixed", ext={4: 40.0}),  # no 2× cell
    ]
    f = C._dense_behind_2x(tier(*runs))
    ln = {k: [math.log(v) for v in vs] for k, vs in
          {"dense": [80, 90], "fib/stagger": [41, 42], "pow2/fixed": [45, 47]}.items()}  # fmt: skip

    def welch(a, b):
        return st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue

    p_for = [welch(ln["dense"], ln[k]) for k in ("fib/stagger", "pow2/fixed")]
    p_rev = [welch(ln[k], ln["dense"]) for k in ("fib/stagger", "pow2/fixed")]
    assert f.stats["p_for"] == pytest.approx(p_for)
    assert f.stats["p_reversed"] == pytest.approx(p_rev)
    assert f.verdict == _verdict(p_for, p_rev)
    assert f.evidence == ["d0", "d1", "s0", "s1", "p0", "p1"]
    assert f.here == (
        "ppl at 2×: dense 85.00, fib/stagger 41.50, pow2/fixed 46.00 (dense above each"
        "; one-sided p " + ", ".join(f"{p:.2g}" for p in p_for) + ")"
    )
    two = C._dense_behind_2x(tier(*runs[:4]))  # one rival is enough
    assert two is not None and two.here.startswith("ppl at 2×: dense 85.00, fib/stagger 41.50 (")
    assert C._dense_behind_2x(tier(*runs[:2])) is None  # dense alone
    assert C._dense_behind_2x(tier(*runs[2:])) is None  # no dense


# ------------------------------------------------------------------------- bins, battery, family
def test_lower_loss_in_every_bin_is_one_welch_test_a_bin_all_of_them_needed():
    fx = [[3.0, 2.9, 2.8], [3.1, 2.95, 2.82], [3.05, 2.92, 2.83]]
    stg = [[2.5, 2.3, 2.2], [2.55, 2.32, 2.21], [2.52, 2.31, 2.23]]
    f = C._every_bin(tier(*_binned("fib/stagger", stg, "s"), *_binned("fib/fixed", fx, "f")))
    fa, sa = np.array(fx), np.array(stg)
    gap = fa.mean(0) - sa.mean(0)

    def welch(a, b):
        return st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue

    p_for = [welch(fa[:, j], sa[:, j]) for j in range(3)]
    p_rev = [welch(sa[:, j], fa[:, j]) for j in range(3)]
    assert f.verdict == _verdict(p_for, p_rev) == "held"
    assert f.evidence == ["f0", "f1", "f2", "s0", "s1", "s2"]  # fixed's runs first
    assert f.stats == {
        "gap": pytest.approx(list(gap)),
        "test": "one-sided t, intersection–union; Holm over the family of its data",
        "p_for": pytest.approx(p_for),
        "p_reversed": pytest.approx(p_rev),
    }
    assert f.here == "fixed − stagger NLL per bin (nats): " + ", ".join(
        f"{g:+.3f}" for g in gap
    ) + "; one-sided p " + ", ".join(f"{p:.2g}" for p in p_for)


def test_the_family_rule_held_only_when_every_part_holds_and_reversals_are_holm_adjusted():
    from analysis.statistics.decide import Comparison, Protocol

    def part(p, against, gap=1.0):
        pr = Protocol(C.THRESHOLD_FAMILY, "welch", "one")
        return ("a", "b", Comparison(pr, 3, 3, gap, 1.0, (gap - 1, gap + 1), p, against, 0.5))

    for ps in ([(0.01, 0.9), (0.012, 0.8)], [(0.01, 0.9), (0.02, 0.8)], [(0.5, 0.03), (0.5, 0.5)],
               [(0.5, 0.01)], [(0.5, 0.05)], [(0.001, 0.99)]):  # fmt: skip
        want = _verdict([p for p, _ in ps], [q for _, q in ps])
        assert C._tested([part(p, q) for p, q in ps])[0] == want, ps
    assert C._tested([part(0.01, 0.9), part(0.012, 0.8)])[0] == "held"  # Holm: 0.04, 0.036
    assert C._tested([part(0.01, 0.9), part(0.02, 0.8)])[0] == "not shown"  # 0.05 is not < 0.05
    assert C._tested([part(0.5, 0.01)])[0] == "did not hold"  # Holm over two: 0.02
    verdict, stats, tests = C._tested([part(math.nan, 0.001)])  # no test for it: no verdict
    assert verdict == "did not hold" and math.isnan(stats["p_for"][0]) and len(tests) == 1
    assert C._tested([])[:2] == (
        "not shown",
        {
            "test": "one-sided t, intersection–union; Holm over the family of its data",
            "p_for": [],
            "p_reversed": [],
        },
    )
    assert C._p_words({"p_for": [0.012, 0.3]}) == "; one-sided p 0.012, 0.3"
    for none in ({}, {"p_for": []}, {"p_for": [0.01, math.nan]}):
        assert C._p_words(none) == "; no test (fewer than 2 runs a side, or no spread)"


def test_a_battery_task_at_chance_is_not_shown_and_above_it_did_not_hold():
    n, ch = 900, 0.25
    tol = 3 * math.sqrt(ch * (1 - ch) / n)  # 0.0433
    at = [LMRun(f"r{i}", "fib/stagger", battery={"vt": {"acc": a, "chance": ch, "n": n}})
          for i, a in enumerate((0.25, ch + tol))]  # fmt: skip
    f = C._battery(tier(*at, LMRun("x", "dense")), "vt")
    assert (f.verdict, f.label, f.evidence) == ("not shown", C.AT_CHANCE, ["r0", "r1"])
    assert f.here == (
        f"accuracy 0.250–{ch + tol:.3f} over 2 runs vs chance 0.250 (±{tol:.3f} = 3 standard "
        f"errors, n=900)"
    )
    above = LMRun("r2", "fib/stagger", battery={"vt": {"acc": 0.4, "chance": ch, "n": n}})
    g = C._battery(tier(*at, above), "vt")
    assert (g.verdict, g.label, g.evidence) == ("did not hold", None, ["r0", "r1", "r2"])
    assert g.here.startswith("accuracy 0.250–0.400 over 3 runs vs chance 0.250")
    # the battery's own chance test decides where the store has one, whatever the band says
    own = LMRun(
        "r3", "fib/stagger", battery={"vt": {"acc": 0.4, "chance": ch, "n": n, "at_chance": True}}
    )
    assert C._battery(tier(own), "vt").verdict == "not shown"
    off = LMRun(
        "r4", "fib/stagger", battery={"vt": {"acc": 0.25, "chance": ch, "n": n, "at_chance": False}}
    )
    assert C._battery(tier(off), "vt").verdict == "did not hold"
    assert C._battery(tier(*at), "lego") is None
    assert C.chance_band(0.5, 100) == pytest.approx(0.15)
