"""The paper's claims as it states them (issue 27, part 3), each check against an oracle of its
own: offset sets counted by brute force from the paper's base list, the paper's CSV tables read
with the csv module, an interaction's test from statsmodels' OLS, a two-proportion z-test by
hand, the paper's own Table 5 seeds."""

from __future__ import annotations

import csv
import math
import os

import numpy as np
import pytest
import tomllib
from scipy import stats as sst

from analysis.ledger import evidence as le
from analysis.ledger import ledger
from analysis.ledger.evidence import LMRun

REF = os.path.join(os.path.dirname(ledger.CLAIMS_PATH))
FIB = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]  # the paper's §2 list


def rows(name):
    with open(os.path.join(REF, name), newline="") as f:
        return list(csv.DictReader(f))


def toml_claims():
    with open(ledger.CLAIMS_PATH, "rb") as f:
        return {c["id"]: c for c in tomllib.load(f)["paper"]}


def entry(led, cid):
    (e,) = [e for e in led.entries if e.id == cid]
    return e


def stagger(L=16):
    return [0.5 + ell / (L - 1) for ell in range(L)]


def distances(alpha, W, T, base=FIB):
    """One layer's attended set by brute force: window 0..W and round(α·f) (half-to-even, in
    double) for W < d ≤ T − 1."""
    return set(range(W + 1)) | {round(alpha * f) for f in base if W < round(alpha * f) <= T - 1}


def build(runs, scale="other"):
    (tier,) = le.group_lms([(r, scale, {"steps": 500, "seq_len": 256}) for r in runs])
    return ledger.build(le.Evidence(tiers=[tier]))


EMPTY = ledger.build(le.Evidence())


# ------------------------------------------------------------------------------ coverage
def test_fixed_19_counted_beyond_the_window_as_the_paper_says():
    e = entry(EMPTY, "cov-fixed-19")
    for W in (6, 8, 10, 12):
        beyond = {d for d in distances(1.0, W, 1024) if d > W}
        assert e.stats["beyond_window"][W] == len(beyond)
    assert len({d for d in distances(1.0, 8, 1024) if d > 8}) == 10
    assert len(distances(1.0, 8, 1024)) == e.stats["window_counted_w8"] == 19  # window's 9 + 10
    assert e.verdict == "did not hold" and e.paper_contradicts


def test_stagger_4x_on_the_papers_16_layer_stack():
    e = entry(EMPTY, "cov-stagger-4x")
    union = set().union(*(distances(a, 8, 1024) for a in stagger()))
    assert e.stats["layers16"]["window counted"] == [19, len(union)] == [19, 133]
    beyond = [d for d in union if d > 8]
    assert e.stats["layers16"]["beyond the window"] == [10, len(beyond)] == [10, 124]
    fib25 = FIB + [FIB[-1] + FIB[-2]]
    while len(fib25) < 25:
        fib25.append(fib25[-1] + fib25[-2])
    u8 = set().union(*(distances(a, 8, 1024, fib25) for a in stagger(8)))
    assert e.stats["layers8_k25"] == [19, len(u8)] == [19, 75]  # the authors' script, beside
    assert e.verdict == "did not hold"


def test_the_fibonacci_base_adds_offsets_at_a_longer_length():
    e = entry(EMPTY, "t3-fib-no-new-offsets")
    for name, alphas in (
        ("fixed", [1.0] * 16),
        ("stagger", stagger()),
        ("coprime", [stagger()[(7 * ell) % 16] for ell in range(16)]),
    ):
        new = {
            i: sorted(distances(a, 8, 4096) - distances(a, 8, 1024))
            for i, a in enumerate(alphas)
            if distances(a, 8, 4096) - distances(a, 8, 1024)
        }
        assert e.stats[name] == {str(k): v for k, v in new.items()}
    assert e.stats["fixed"] == {} and len(e.stats["stagger"]) == 7
    assert sorted(int(k) for k in e.stats["coprime"])[:3] == [2, 4, 6]  # early layers (SPEC)
    assert e.verdict == "did not hold" and e.paper_contradicts


def test_power_of_two_is_not_reach_matched():
    e = entry(EMPTY, "method-pow2-reach-matched")
    pow2 = [2**i for i in range(20) if 2**i <= 1023]
    for a in (0.5, 1.0, 1.5):
        assert e.stats["reach"][f"fib@{a:g}"] == max(distances(a, 8, 1024))
        assert e.stats["reach"][f"pow2@{a:g}"] == max(distances(a, 8, 1024, pow2))
    assert (e.stats["reach"]["fib@1"], e.stats["reach"]["pow2@1"]) == (987, 512)
    assert e.stats["rungs"] == {"fib": 15, "pow2": len(pow2)}
    assert e.verdict == "did not hold" and e.paper_contradicts


# ------------------------------------------------------------------------------ computed
def test_bool_mask_equals_the_gather_only_where_every_rung_is_an_integer():
    from analysis.ledger.exact import boolmask_gap

    # the gather interpolates only a fractional α·f: integer products (α = 1, 2) are identical
    assert boolmask_gap(1.0) < 1e-12 and boolmask_gap(2.0) < 1e-12
    e = entry(EMPTY, "method-boolmask-identical")
    # every stagger layer has a kept rung (W < round(α·f) ≤ T − 1 = 127) with a fraction
    frac = [
        any(W_ok and abs(a * f - round(a * f)) > 1e-9 for f in FIB for W_ok in [8 < a * f < 127])
        for a in stagger()
    ]
    assert e.stats["stagger_differ"] == sum(frac) == 16
    assert boolmask_gap(stagger()[1]) > 0.01
    assert e.stats["fixed"] < 1e-12 and e.verdict == "did not hold" and e.paper_contradicts


def test_attention_share_by_hand_at_the_papers_shape():
    e = entry(EMPTY, "setup-attention-minority")
    T, d, H, KV, D, ffn = 1024, 512, 8, 2, 64, 1366
    linear = 2 * T * (d * D * (2 * H + 2 * KV) + 3 * d * ffn)  # one layer, one sequence
    dense = 4 * D * H * T * (T + 1) // 2  # causal reads, 4·D FLOPs each per head
    assert e.stats["attn_share"]["dense"] == pytest.approx(dense / (dense + linear))
    assert 0.155 < dense / (dense + linear) < 0.165  # the authors' "about 16 %" (SPEC §8)
    assert e.verdict == "held"


# ------------------------------------------------------------------------------ length
def run(name, label, p1, p4, W=8, seed=0):
    return LMRun(name=name, label=label, W=W, seed=seed, ppl=p1, ext={1: p1, 4: p4})


def table3():
    return {
        (r["model"], r["W"]): (float(r["ppl_T1024"]), float(r["ppl_T4096"]))
        for r in rows("table3_length_extrapolation.csv")
    }


def test_all_sparse_variants_on_the_papers_own_table_3():
    from analysis.ledger.checks import LITTLE

    t3 = table3()
    fib = [float(r["change_at_4x_percent"]) for r in rows("table3_length_extrapolation.csv")]
    fib = [c for r, c in zip(rows("table3_length_extrapolation.csv"), fib) if "fib/" in r["model"]]
    assert LITTLE == max(fib) == 2.8  # the largest change the paper still calls mild
    one = [run(f"{m}{w}", m, *v) for (m, w), v in t3.items() if m != "dense"]
    e = entry(build(one), "t3-sparse-flat")
    # the paper's table has one run a configuration (two at two W for some): no test
    assert e.verdict == "not shown" and "no test" in e.here
    assert e.stats["inside_paper_range"]["pow2/fixed"] is False
    assert e.stats["paper_range"] == [min(fib), max(fib)]
    assert "pow2/fixed +11.3 %" in e.here and e.paper_contradicts
    # three seeds around each of the paper's numbers (±0.1 % of ppl at 4×): a test
    runs = [
        run(f"{m}{w}s{k}", m, p1, p4 * (1 + 0.001 * k), W=w, seed=k)
        for (m, w), (p1, p4) in t3.items()
        if m != "dense"
        for k in (-1, 0, 1)
    ]
    e = entry(build(runs), "t3-sparse-flat")
    assert e.verdict == "did not hold"  # pow2/fixed +11.3 %: the paper against its abstract
    # without the power-of-2 control every sparse model is significantly below +2.8 % except
    # the one at +2.8 % itself, which is not below it: not shown, never held by the means
    e = entry(build([r for r in runs if r.label != "pow2/fixed"]), "t3-sparse-flat")
    assert e.verdict == "not shown"
    # lowered by 1 % of ppl at 4×, every one of them is below: held
    low = [run(r.name, r.label, r.ppl, r.ext[4] * 0.99, W=r.W, seed=r.seed) for r in runs]
    e = entry(build([r for r in low if r.label != "pow2/fixed"]), "t3-sparse-flat")
    assert e.verdict == "held" and max(e.stats["p_for"]) < 0.05
    # a pow2 stagger at +5 % is a sparse variant too: the claim is about all of them
    ps = [run(f"ps{k}", "pow2/stagger", 40.0, 42.0 + 0.05 * k, seed=k) for k in range(3)]
    e = entry(build(low[:3] + ps), "t3-sparse-flat")
    assert e.verdict == "did not hold"


def test_dense_magnitude_against_our_interval():
    (paper,) = [
        float(r["change_at_4x_percent"])
        for r in rows("table3_length_extrapolation.csv")
        if r["model"] == "dense"
    ]
    x = [190.0, 215.0, 205.0]
    runs = [
        run(f"d{i}", "dense", 30.0, 30.0 * (1 + c / 100), W=None, seed=i) for i, c in enumerate(x)
    ]
    e = entry(build(runs), "t3-dense-degrades")
    h = sst.t.ppf(0.975, 2) * np.std(x, ddof=1) / math.sqrt(3)
    assert e.stats["change_ci"] == pytest.approx([np.mean(x) - h, np.mean(x) + h])
    assert (e.verdict, e.stats["magnitude"], e.stats["paper_change"]) == ("held", "inside", paper)
    # +20 %: degrades, but far from the paper's collapse: the paper states a size, so the
    # magnitude rule of every comparison applies (issue 39: it was "held" beside an interval
    # that excluded the paper's +201 %)
    runs = [run(f"d{i}", "dense", 30.0, 30.0 * (1.2 + 0.01 * i), W=None, seed=i) for i in range(3)]
    e = entry(build(runs), "t3-dense-degrades")
    assert (e.verdict, e.label, e.stats["magnitude"]) == (
        "did not hold",
        "magnitude not reproduced",
        "outside",
    )
    assert e.stats["direction"] == "a better"  # the direction is shown beside
    assert "the paper's +201 %" in e.here
    one = entry(build(runs[:1]), "t3-dense-degrades")
    assert one.stats["magnitude"] == "n/a"


def test_dense_paper_effect_is_the_gap_to_the_best_sparse_model():
    t1 = rows("table1_perplexity.csv")
    best = min(float(r["fineweb_edu"]) for r in t1)
    (dense,) = [v[0] for (m, _), v in table3().items() if m == "dense"]
    want = math.log(best / dense)  # 42.02 vs 33.37
    assert toml_claims()["dense-best-at-training-length"]["paper_effect"] == round(want, 4)


# ------------------------------------------------------------------------------ 2×2
def two_by_two(centers, spread=0.004, W=8, n=3):
    """Runs of the four cells at ln ppl center − spread, center, center + spread (n=3)."""
    out = []
    for label, c in centers.items():
        for i, k in enumerate((-1, 0, 1)[:n]):
            out.append(LMRun(f"{label}-{i}", label, W, i, math.exp(c + k * spread)))
    return out


def cells(aF, aS, bF, bS):
    return {"fib/fixed": aF, "fib/stagger": aS, "pow2/fixed": bF, "pow2/stagger": bS}


def test_additivity_against_an_ols_interaction():
    import statsmodels.api as sm

    base = math.log(43.0)
    c = cells(base, base - 0.036, base + 0.016, base + 0.016 - 0.030)  # interaction +0.006
    runs = two_by_two(c, spread=0.002)
    e = entry(build(runs), "t1-stagger-and-base-additive")
    y = np.array([math.log(r.ppl) for r in runs])
    isA = np.array([r.label.startswith("fib") for r in runs], float)
    isS = np.array([r.label.endswith("stagger") for r in runs], float)
    fit = sm.OLS(y, sm.add_constant(np.column_stack([isA, isS, isA * isS]))).fit()
    # equal n and spread in every cell: Welch's se and dof are the OLS interaction's
    eff, se, dof = -fit.params[3], fit.bse[3], fit.df_resid
    assert e.stats["effect"] == pytest.approx(eff) == pytest.approx(0.006)
    lo, hi = fit.conf_int()[3]
    assert e.stats["ci"] == pytest.approx([-hi, -lo])
    p = max(sst.t.sf((eff + 0.013) / se, dof), sst.t.cdf((eff - 0.013) / se, dof))
    assert e.stats["p_raw"] == pytest.approx(p)
    assert (e.verdict, e.stats["family"], e.stats["test"]) == ("held", "additivity", "tost")
    assert e.stats["magnitude"] == "inside"  # the paper's +0.0091
    # the stagger gains nothing on fib (redundant with the base): outside the margin
    c = cells(base, base - 0.0, base + 0.016, base + 0.016 - 0.030)
    e = entry(build(two_by_two(c)), "t1-stagger-and-base-additive")
    assert e.verdict == "did not hold" and e.stats["direction"] == "b better"
    # wide seeds: not shown; one seed a cell (the paper's own W=8 numbers): no test
    assert entry(build(two_by_two(c, 0.05)), "t1-stagger-and-base-additive").verdict == (
        "not shown"
    )
    t1 = {
        (r["base"], r["schedule"], r["W"]): r["fineweb_edu"] for r in rows("table1_perplexity.csv")
    }
    paper = {
        f"{b}/{s}": math.log(float(t1[(b, s, "8")]))
        for b in ("fib", "pow2")
        for s in ("fixed", "stagger")
    }
    e = entry(build(two_by_two(paper, n=1)), "t1-stagger-and-base-additive")
    want = (paper["fib/fixed"] - paper["fib/stagger"]) - (
        paper["pow2/fixed"] - paper["pow2/stagger"]
    )
    assert e.stats["effect"] == pytest.approx(want) and round(want, 4) == 0.0091
    assert e.verdict == "not shown" and e.stats["direction"] == "not tested"
    assert toml_claims()["t1-stagger-and-base-additive"]["paper_effect"] == round(want, 4)


# ------------------------------------------------------------------------------ seeds
def table5_runs(scale=1.0):
    """Table 5's seeds as runs (W=12); ``scale`` stretches each config's ln-ppl spread."""
    out = []
    for r in rows("table5_seeds_w12.csv"):
        v = [math.log(float(r[k])) for k in ("seed42", "seed43", "seed44") if r[k]]
        m = sum(v) / len(v)
        for i, x in enumerate(v):
            out.append(
                LMRun(f"{r['config']}-{i}", r["config"], 12, i, math.exp(m + scale * (x - m)))
            )
    return out


def test_seed_noise_on_the_papers_own_seeds_and_beside_them():
    groups = []
    for r in rows("table5_seeds_w12.csv"):
        groups.append([math.log(float(r[k])) for k in ("seed42", "seed43", "seed44") if r[k]])
    ss = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in groups)
    dof = sum(len(g) - 1 for g in groups)
    sp = math.sqrt(ss / dof)
    assert (dof, round(sp, 4)) == (9, 0.0038)
    e = entry(build(table5_runs()), "t5-seed-noise-small")
    assert e.stats["paper_sigma"] == pytest.approx(sp) and e.stats["sigma"] == pytest.approx(sp)
    lo = sp * math.sqrt(dof / sst.chi2.ppf(0.975, dof))
    hi = sp * math.sqrt(dof / sst.chi2.ppf(0.025, dof))
    assert e.stats["ci"] == pytest.approx([lo, hi])
    assert sp / 2 <= lo and hi <= 2 * sp and e.verdict == "held"  # the paper passes its own
    e = entry(build(table5_runs(5.0)), "t5-seed-noise-small")  # five times the spread
    assert e.verdict == "did not hold" and e.label == "magnitude not reproduced"
    assert "noisier" in e.here
    few = [r for r in table5_runs() if r.label in ("fib/stagger", "fib/fixed") and r.seed < 2]
    assert entry(build(few), "t5-seed-noise-small").verdict == "not shown"  # dof 2


# ------------------------------------------------------------------------------ battery
def test_battery_separation_against_a_two_proportion_z_test():
    def bat(acc, n=400, chance=0.5):
        return {"lego": {"acc": acc, "chance": chance, "n": n}}

    def runs(a, b):
        return [
            LMRun("x", "fib/fixed", 8, 0, 40.0, battery=bat(a)),
            LMRun("y", "fib/stagger", 8, 0, 39.0, battery=bat(b)),
        ]

    e = entry(build(runs(0.60, 0.53)), "bat-no-separation")
    p1, p2 = 0.60, 0.53
    pool = (p1 + p2) / 2
    z = (p1 - p2) / math.sqrt(pool * (1 - pool) * (2 / 400))
    assert e.stats["p_adjusted"]["lego"] == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    assert e.verdict == "did not hold"
    e = entry(build(runs(0.50, 0.51)), "bat-no-separation")
    assert (e.verdict, e.label) == ("not shown", "at chance")
    e = entry(build(runs(0.70, 0.70)), "bat-no-separation")
    assert (e.verdict, e.label) == ("not shown", None)


def test_battery_tasks_the_lab_lacks_say_so():
    for cid in ("bat-lambada-low", "bat-cloze-low", "bat-blimp-89"):
        e = entry(EMPTY, cid)
        assert (
            e.verdict == "not tested here" and "RULER-VT, LEGO and associative recall only" in e.why
        )


# ------------------------------------------------------------------------------ the paper
def test_the_papers_own_contradictions_are_flagged_and_shown(tmp_path):
    t2 = rows("table2_retrieval_probe.csv")
    worst = max(abs(1 - float(r[k])) for r in t2 if r["init"] == "uniform"
                for k in ("learned_alpha_min", "learned_alpha_max"))  # fmt: skip
    assert worst > 0.05  # Table 2 against §4.4's "within 0.05"
    t5 = {r["config"]: r for r in rows("table5_seeds_w12.csv")}
    ln = [[math.log(float(t5[c][k])) for k in ("seed42", "seed43", "seed44")]
          for c in ("pow2/stagger", "fib/fixed")]  # fmt: skip
    p = sst.ttest_ind(*ln, equal_var=False).pvalue
    assert 0.05 < p < 0.1
    flagged = {e.id: e.paper_contradicts for e in EMPTY.contradicted()}
    assert "0.93" in flagged["t2-inert-uniform"]
    assert f"p = {p:.2f}" in flagged["t5-pow2-stagger-beats-fixed"]
    assert "+11.3 %" in flagged["t3-sparse-flat"]
    assert set(flagged) == {c for c, v in toml_claims().items() if v.get("paper_contradicts")}
    assert f"{len(flagged)} contradicted by the paper's own numbers" in EMPTY.summary()
    doc = EMPTY.document()
    got = {c["id"]: c["paper_contradicts"] for c in doc["claims"] if c["paper_contradicts"]}
    assert got == flagged
    from analysis.ledger.report import ledger_section
    from analysis.reports.report import Report

    r = Report("t")
    ledger_section(r, EMPTY)
    md = r.markdown()
    assert "Where the paper's own numbers contradict it" in md
    assert all(f"`{cid}`" in md for cid in flagged)


def test_every_table1_twin_names_its_table5_claim_and_the_same_comparison():
    claims = toml_claims()
    twins = {c["id"]: c for c in claims.values() if c.get("seeds_claim")}
    assert len(twins) == 4
    for c in twins.values():
        t5 = claims[c["seeds_claim"]]
        assert c["compare"][:3] == t5["compare"][:3]
        assert (c["compare"][3], t5["compare"][3]) == ("grid", "seeds")
    # no other t1/t5 pair compares the same two configurations
    pairs = [tuple(c["compare"][:3]) for c in claims.values() if c.get("compare")]
    repeated = {p for p in pairs if pairs.count(p) > 1}
    assert repeated == {tuple(c["compare"][:3]) for c in twins.values()}


def test_new_claims_say_where_and_what_would_test_them():
    want = {
        "t1-stagger-and-base-additive",
        "t5-seed-noise-small",
        "t3-fib-no-new-offsets",
        "lm-alpha-flat-landscape",
        "method-pow2-reach-matched",
        "method-one-gather",
        "method-boolmask-identical",
        "setup-attention-minority",
        "bat-assoc-recall-zero",
        "bat-lambada-low",
        "bat-cloze-low",
        "bat-blimp-89",
        "bat-no-separation",
    }
    claims = toml_claims()
    assert want <= set(claims) and len(claims) == 48
    for cid in want:
        c = claims[cid]
        assert c["where"] and c["paper"] and c["decides"] and c["claim"]
    for cid in ("method-one-gather", "lm-alpha-flat-landscape"):
        e = entry(EMPTY, cid)
        assert e.verdict == "not tested here" and e.why == claims[cid]["why_untested"]
