"""The language-model claims about means are decided by a test (`analysis.ledger.checks`), never
by the means alone: one-sided t-tests against scipy, held only when every comparison is
significant, did not hold on a significant reversal, otherwise not shown."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.ledger import evidence as le
from analysis.ledger import ledger
from analysis.ledger.evidence import LMRun


def build(runs):
    (tier,) = le.group_lms([(r, "study", {"steps": 500, "seq_len": 128}) for r in runs])
    return ledger.build(le.Evidence(tiers=[tier]))


def entry(led, cid):
    (e,) = [e for e in led.entries if e.id == cid]
    return e


def bins_runs(fixed_bins, stagger_bins):
    out = [
        LMRun(f"fx{i}", "fib/fixed", 12, i, 40.0, bins=tuple(b)) for i, b in enumerate(fixed_bins)
    ]
    return out + [
        LMRun(f"st{i}", "fib/stagger", 12, i, 39.0, bins=tuple(b))
        for i, b in enumerate(stagger_bins)
    ]


def test_every_bin_needs_each_bins_one_sided_test():
    rng = np.random.default_rng(0)
    base = np.linspace(4.0, 3.0, 8)
    st = base + rng.normal(0, 0.002, size=(5, 8))
    fx = base + 0.02 + rng.normal(0, 0.002, size=(5, 8))
    e = entry(build(bins_runs(fx, st)), "t4-stagger-below-fixed-every-bin")
    want = [
        stats.ttest_ind(fx[:, j], st[:, j], equal_var=False, alternative="greater").pvalue
        for j in range(8)
    ]
    assert e.verdict == "held" and e.stats["p_for"] == pytest.approx(want)
    # bin 3's gap only 0.0001 nats, inside the seed noise: not shown (the old rule read the
    # signs of the means alone)
    fx2 = fx.copy()
    fx2[:, 3] = st[:, 3] + 0.0001 + rng.normal(0, 0.002, size=5)
    e = entry(build(bins_runs(fx2, st)), "t4-stagger-below-fixed-every-bin")
    assert e.verdict == "not shown"
    # bin 3 reversed clearly: did not hold (Holm over the 8 bins' reversal tests)
    fx3 = fx.copy()
    fx3[:, 3] = st[:, 3] - 0.05
    e = entry(build(bins_runs(fx3, st)), "t4-stagger-below-fixed-every-bin")
    against = [p["p_against_adjusted"] for p in e.stats["pairs"]]
    assert e.verdict == "did not hold" and min(against) < 0.05
    # one run a side: no test
    e = entry(build(bins_runs(fx[:1], st[:1])), "t4-stagger-below-fixed-every-bin")
    assert e.verdict == "not shown" and "no test" in e.here


def test_a_gain_that_grows_along_the_window_is_long_range():
    rng = np.random.default_rng(1)
    base = np.linspace(4.0, 3.0, 8)
    st = base + rng.normal(0, 0.001, size=(4, 8))
    grow = base + np.linspace(0.0, 0.07, 8) + rng.normal(0, 0.001, size=(4, 8))
    e = entry(build(bins_runs(grow, st)), "t4-gain-not-long-range")
    x = np.arange(7)
    sf = np.polyfit(x, grow[:, 1:].T, 1)[0]
    ss = np.polyfit(x, st[:, 1:].T, 1)[0]
    p = stats.ttest_ind(sf, ss, equal_var=False, alternative="greater").pvalue
    assert e.verdict == "did not hold" and e.stats["p_grows"] == pytest.approx(p)
    flat = base + 0.02 + rng.normal(0, 0.001, size=(4, 8))
    e = entry(build(bins_runs(flat, st)), "t4-gain-not-long-range")
    assert e.verdict == "not shown" and "margin" in e.here  # no tie without a margin


def ext_runs(label, ppl1, changes, extra=None):
    return [
        LMRun(
            f"{label}-{i}",
            label,
            None if label == "dense" else 12,
            i,
            ppl1,
            ext={1: ppl1, 2: ppl1 * (1 + c / 200), 4: ppl1 * (1 + c / 100)},
            **(extra or {}),
        )
        for i, c in enumerate(changes)
    ]


def test_dense_degrades_is_a_one_sample_test_against_ten_percent():
    x = [15.0, 16.5, 14.2]
    e = entry(build(ext_runs("dense", 30.0, x)), "t3-dense-degrades")
    p = stats.ttest_1samp(np.array(x), 10.0, alternative="greater").pvalue
    assert e.stats["p_for"] == pytest.approx([p], rel=1e-6)
    # the direction is shown (Holm over the test and its reversal: 2p); the size is the
    # paper's +201 %, far outside these runs' interval: did not hold, magnitude not reproduced
    assert e.stats["p_adjusted"] == pytest.approx(min(1.0, 2 * p), rel=1e-6)
    assert e.stats["direction"] == ("a better" if 2 * p < 0.05 else "undetermined")
    assert (e.verdict, e.label) == ("did not hold", "magnitude not reproduced")
    e = entry(build(ext_runs("dense", 30.0, [10.5, 9.0, 11.0])), "t3-dense-degrades")
    assert e.stats["direction"] == "undetermined"  # a mean of +10.2 % is not shown above +10 %
    e = entry(build(ext_runs("dense", 30.0, [2.0, 2.5, 1.8])), "t3-dense-degrades")
    assert (e.verdict, e.stats["reason"]) == ("did not hold", "reversal")  # below +10 %
    e = entry(build(ext_runs("dense", 30.0, [180.0, 230.0, 195.0])), "t3-dense-degrades")
    assert e.verdict == "held" and e.stats["magnitude"] == "inside"  # the paper's collapse


def test_pow2_coprime_and_dense_at_2x_are_welch_tests():
    fib = ext_runs("fib/fixed", 40.0, [1.0, 1.2, 0.9]) + ext_runs(
        "fib/stagger", 39.0, [0.5, 0.6, 0.4]
    )
    p2 = ext_runs("pow2/fixed", 41.0, [11.0, 11.5, 10.8])
    e = entry(build(fib + p2), "t3-pow2-degrades")
    assert e.verdict == "held" and len(e.stats["p_for"]) == 2
    co = ext_runs("fib/coprime", 39.5, [0.5, 0.7, 0.45])  # ≈ the stagger's
    e = entry(build(fib + co), "t3-coprime-less-robust")
    want = stats.ttest_ind(
        [0.5, 0.7, 0.45], [0.5, 0.6, 0.4], equal_var=False, alternative="greater"
    )
    assert e.verdict == "not shown" and e.stats["p_for"] == pytest.approx([want.pvalue], rel=1e-4)
    dense = ext_runs("dense", 30.0, [60.0, 62.0, 61.0])  # 2×: 30 · 1.305 ≈ 39.2 vs 39–40
    e = entry(build(fib + dense), "t3-dense-behind-at-2x")
    assert e.verdict in ("not shown", "did not hold") and len(e.stats["p_for"]) == 2
    far = ext_runs("dense", 30.0, [200.0, 210.0, 205.0])  # 2×: ≈ 60 vs 40
    e = entry(build(fib + far), "t3-dense-behind-at-2x")
    assert e.verdict == "held"


def test_lab_findings_are_tested_too():
    def st(label, vals):
        return [LMRun(f"{label}{i}", label, 12, i, 40.0, same_tokens=v) for i, v in enumerate(vals)]

    e = entry(
        build(st("fib/fixed", [-0.3, -0.2, -0.4]) + st("fib/stagger", [-0.1, 0.0, -0.2])),
        "lab-same-tokens-context",
    )
    assert e.verdict == "held"
    e = entry(build(st("fib/fixed", [0.9, 0.95, 1.1])), "lab-same-tokens-context")
    assert e.verdict == "not shown"

    def fr(label, vals):
        return [
            LMRun(
                f"{label}{i}",
                label,
                12,
                i,
                40.0,
                ext={1: 40.0, 4: 40.0 * (1 + v / 100)},
                frozen={4: 40.0},
            )
            for i, v in enumerate(vals)
        ]

    e = entry(build(fr("fib/stagger", [0.2, 0.3, 0.25])), "lab-frozen-rungs")
    assert e.verdict == "held" and len(e.stats["p_for"]) == 2  # inside ±1 %: both sides
    e = entry(build(fr("fib/stagger", [3.0, 3.2, 2.9])), "lab-frozen-rungs")
    assert e.verdict == "did not hold"
    assert math.isnan(e.stats["p_for"][0]) is False


def test_the_threshold_rules_are_registered_and_hashed(tmp_path):
    """Each threshold claim registers its test and threshold in claims.toml; the code applies
    the same numbers; claims.json's protocol carries them, so a changed threshold changes the
    hash."""
    from analysis.ledger import checks as LC
    from lab.ladder.drift import INERT_TOL

    claims = {c["id"]: c for c in ledger.load_claims()[0] + ledger.load_claims()[1]}
    want = {
        "t3-dense-degrades": LC.DEGRADES,
        "t3-sparse-flat": LC.LITTLE,
        "lm-learned-alpha-inert": INERT_TOL,
        "lab-same-tokens-context": 1.0,
        "lab-frozen-rungs": 1.0,
    }
    for cid, value in want.items():
        assert claims[cid]["rule"]["threshold"] == value, cid
    for cid in LC.LM_CHECKS:
        if not cid.startswith("bat-"):
            assert "test" in claims[cid]["rule"], cid
    proto = ledger.protocol(list(claims.values()))
    assert proto["t3-sparse-flat"] == {"rule": claims["t3-sparse-flat"]["rule"]}
    edited = dict(
        claims["t3-sparse-flat"], rule={**claims["t3-sparse-flat"]["rule"], "threshold": 3.0}
    )
    other = ledger.protocol([edited])
    assert ledger.protocol_sha256(other) != ledger.protocol_sha256(
        ledger.protocol([claims["t3-sparse-flat"]])
    )


def test_table_3s_two_claims_read_in_full_against_scipy():
    """t3-dense-degrades and t3-sparse-flat on one hand-built tier: every number of their
    lines and stats recomputed here (means by hand, the t-interval and the one-sided tests by
    scipy), the words whole."""
    dense, stagger = [15.0, 16.5, 14.2], [0.5, -0.3, 1.0]
    led = build(ext_runs("dense", 30.0, dense) + ext_runs("fib/stagger", 30.0, stagger))
    d, f = entry(led, "t3-dense-degrades"), entry(led, "t3-sparse-flat")
    m, s = np.mean(dense), np.std(dense, ddof=1)
    half = stats.t.ppf(0.975, 2) * s / math.sqrt(3)
    p_d = stats.ttest_1samp(dense, 10.0, alternative="greater").pvalue
    p_f = stats.ttest_1samp(stagger, 2.8, alternative="less").pvalue
    head = (
        f"ppl change 1× → 4× (rungs recomputed): dense {m:+.1f} %, fib/stagger "
        f"{np.mean(stagger):+.1f} %; the paper's at 4× (Table 3): dense +201.0 %, fib/stagger "
        "-1.3 % (W=12) / -1.3 % (W=8)"
    )
    assert (d.verdict, d.label) == ("did not hold", "magnitude not reproduced")
    assert d.here.startswith(
        f"{head}; the paper's +201 % vs ours: outside our 95 % interval "
        f"[{m - half:+.1f}, {m + half:+.1f}] % (vs +10 %; one-sided p {p_d:.2g}); dense vs +10 %: "
        "did not hold: magnitude not reproduced"
    )
    assert d.stats["change_ci"] == pytest.approx([m - half, m + half])  # the rise itself
    assert d.stats["ci"] == pytest.approx([m - half - 10, m + half - 10])  # past the +10 %
    assert (d.stats["paper_change"], d.stats["magnitude"]) == (201.0, "outside")
    assert d.stats["p_for"] == pytest.approx([p_d]) and d.stats["factor"] == 4
    assert d.stats["p_reversed"] == pytest.approx([1 - p_d])
    assert f.stats["p_adjusted"] >= p_f  # Holm over every test on these runs
    assert f.verdict == ("held" if f.stats["p_adjusted"] < 0.05 else "not shown")
    assert f.here.startswith(
        f"{head}; ours in the paper's Fibonacci range -1.3…+2.8 %: fib/stagger yes "
        f"(each below +2.8 %, fib/stagger; one-sided p {p_f:.2g}); fib/stagger vs −2.8 %: "
    )
    assert f.stats["paper_range"] == [-1.3, 2.8] and f.stats["little"] == 2.8
    assert f.stats["inside_paper_range"] == {"fib/stagger": True}
    assert f.stats["p_for"] == pytest.approx([p_f])
