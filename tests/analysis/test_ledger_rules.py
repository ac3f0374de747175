"""Protocol version 2 (claims.toml's ``[protocol]``): one rule set for every claim kind.

The registered tier decides and the others are shown beside; the thresholds the code applies
are the registered ones and the hash covers them; a threshold rule joins its data's Holm family
and can conflict across tiers like a comparison.  Oracles: hand-built runs whose verdicts are
obvious by construction, statsmodels' Holm and scipy's t-tests."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sst
from statsmodels.stats.multitest import multipletests

from analysis.ledger import evidence as le
from analysis.ledger import ledger
from analysis.ledger.evidence import LMRun

BASE = math.log(42.0)


def runs(label, center, n, W=12, tag=None, spread=0.002, ext2=None):
    tag = tag or label.replace("/", "-")
    out = []
    for i in range(n):
        ppl = math.exp(center + spread * (i - (n - 1) / 2))
        ext = {1: ppl} if ext2 is None else {1: ppl, 2: ext2 * (1 + 0.01 * i)}
        out.append(LMRun(f"{tag}-s{i}", label, W, i, ppl, ext=ext))
    return out


def tiers(*groups, scale="study"):
    triples = [(r, scale, {"steps": s, "seq_len": 128}) for s, rs in groups for r in rs]
    return ledger.build(le.Evidence(tiers=le.group_lms(triples)))


def entry(led, cid):
    (e,) = [e for e in led.entries if e.id == cid]
    return e


def test_the_registered_tier_decides_even_beside_one_with_more_seeds():
    rule = ledger.load_rules()["tier"]
    assert rule == {"scale": "study", "steps": 500, "seq_len": 128}
    planned = runs("fib/stagger", BASE, 3, tag="p-st") + runs(
        "fib/fixed", BASE + 0.03, 3, tag="p-fx"
    )
    longer = runs("fib/stagger", BASE, 5, tag="l-st") + runs("fib/fixed", BASE, 5, tag="l-fx")
    e = entry(tiers((500, planned), (1000, longer)), "t5-stagger-beats-fixed")
    assert e.evidence["tier"].startswith("study: 6 LM runs, 500 steps, T=128")
    assert [a["tier"][:30] for a in e.also] == ["study: 10 LM runs, 1000 steps,"]
    # without a registered tier (another scale): the most seeds decide
    e = entry(tiers((500, planned), (1000, longer), scale="other"), "t5-stagger-beats-fixed")
    assert e.evidence["tier"].startswith("other: 10 LM runs, 1000 steps")


def test_a_threshold_rule_joins_its_datas_family_and_counts_each_shared_test_once():
    # dense at 2× far above the stagger and fixed; the stagger beats fixed by the paper's gap
    dense = runs("dense", math.log(60.0), 3, W=None, ext2=90.0)
    st = runs("fib/stagger", BASE, 3, ext2=40.0)
    fx = runs("fib/fixed", BASE + 0.0259, 3, tag="fx", ext2=41.0)
    led = tiers((500, dense + st + fx))
    behind = entry(led, "t3-dense-behind-at-2x")
    fam = behind.stats["family"]
    assert fam == entry(led, "t5-stagger-beats-fixed").stats["family"]
    assert fam.startswith("paper: study: 9 LM runs")
    # every p of the family, each test once, by hand: Holm over them equals the ledger's
    ln2 = {k: [math.log(r.ext[2]) for r in rs] for k, rs in
           (("dense", dense), ("fib/stagger", st), ("fib/fixed", fx))}  # fmt: skip
    one = [
        sst.ttest_ind(ln2["dense"], ln2[k], equal_var=False, alternative=alt).pvalue
        for k in ("fib/fixed", "fib/stagger")
        for alt in ("greater", "less")
    ]
    got = [p["p_adjusted"] for p in behind.stats["pairs"]]
    members = [e for e in led.paper() if e.stats.get("family") == fam]
    ps = []
    for e in members:
        for p in e.stats.get("pairs") or [e.stats]:
            ps += [p["p_raw"]] + ([p["p_against"]] if p.get("p_against") is not None else [])
    assert len(ps) > len(one)  # the comparisons of these runs are in it too
    assert behind.stats["p_for"] == pytest.approx([one[0], one[2]])
    assert all(g >= r for g, r in zip(got, [one[0], one[2]]))


def test_a_threshold_rule_conflicts_across_tiers_like_a_comparison():
    up = runs("dense", math.log(60.0), 3, W=None, ext2=90.0, tag="u-d") + runs(
        "fib/stagger", BASE, 3, ext2=40.0, tag="u-s"
    )
    down = runs("dense", math.log(60.0), 4, W=None, ext2=30.0, tag="d-d") + runs(
        "fib/stagger", BASE, 4, ext2=45.0, tag="d-s"
    )
    e = entry(tiers((500, up), (1000, down)), "t3-dense-behind-at-2x")
    assert e.verdict == "conflicting" and e.stats["raw_verdict"] == "held"
    assert [a["verdict"] for a in e.also] == ["did not hold"]


def test_every_threshold_the_code_applies_is_the_registered_one_and_the_hash_covers_them():
    from analysis.ledger import across, checks
    from lab.ladder.drift import INERT_TOL

    th = ledger.load_rules()["thresholds"]
    code = {
        "degrades": checks.DEGRADES,
        "little": checks.LITTLE,
        "same_tokens": checks.SAME_TOKENS,
        "frozen": checks.FROZEN,
        "inert": INERT_TOL,
        "retrieved": checks.RETRIEVED,
        "failed": checks.FAILED,
        "spread": checks.SPREAD,
        "seed_noise_factor": across.FACTOR,
    }
    assert {k: th[k] for k in code} == code
    assert checks.chance_band(0.5, 100) == pytest.approx(th["chance_se"] * math.sqrt(0.25 / 100))
    paper, lab = ledger.load_claims()
    rules = ledger.load_rules()
    base = ledger.protocol_sha256(ledger.protocol(paper + lab, rules))
    for edit in ({"tier": {**rules["tier"], "steps": 1000}},
                 {"thresholds": {**th, "spread": 0.6}},
                 {"confirmation": {**rules["confirmation"], "stagger": [1, 10]}}):  # fmt: skip
        other = ledger.protocol_sha256(ledger.protocol(paper + lab, {**rules, **edit}))
        assert other != base, edit


def test_holm_over_a_family_matches_statsmodels():
    # the family's adjusted p-values, read back from the entries, are statsmodels' Holm of the
    # raw ones (each test once)
    st = runs("fib/stagger", BASE, 4, spread=0.004)
    fx = runs("fib/fixed", BASE + 0.01, 4, tag="fx", spread=0.004)
    ln = runs("fib/learned", BASE + 0.006, 4, tag="ln", spread=0.004)
    led = tiers((500, st + fx + ln))
    seen = {}
    for e in led.paper():
        for p in e.stats.get("pairs") or ([e.stats] if "p_raw" in e.stats else []):
            key = tuple(sorted((p["a"], p["b"]))) if "a" in p else (e.id,)
            seen[key] = (p["p_raw"], p["p_adjusted"])
    raw = [v[0] for v in seen.values()]
    want = multipletests(raw, method="holm")[1]
    assert [v[1] for v in seen.values()] == pytest.approx(list(want))


def test_a_seeds_precision_twins_are_one_probe_cell_and_the_fp32_one_is_read():
    from analysis.ledger.evidence import read_grid, stored_grids

    grids = [g for g in stored_grids() if "probe-marked-paper" in g]
    assert len(grids) == 2  # the fp32 grid and its bf16 twin, the same 12 seeds' cells
    recs = [r for g in sorted(grids) for r in read_grid(g)]  # the bf16 file sorts first
    (tier,) = le.group_probes(recs, "both")
    assert len(tier.records) == 12  # was 24: each seed counted twice
    assert not any(str(r["key"]).endswith("/bf16") for r in tier.records)


def test_the_probe_rules_are_registered_with_the_codes_thresholds():
    from analysis.ledger import checks, exact
    from lab.ladder.drift import INERT_TOL

    claims = {c["id"]: c for c in ledger.load_claims()[0]}
    want = {
        "t2-inert-uniform": INERT_TOL,
        "t2-staggered-stays-spread": checks.SPREAD,
        "t2-uniform-fails-deep": checks.FAILED,
        "t2-staggered-retrieves": checks.RETRIEVED,
        "t2-depth8-unsolved": checks.FAILED,
    }
    for cid, v in want.items():
        assert claims[cid]["rule"]["threshold"] == v, cid
    assert ledger.load_rules()["thresholds"]["about"] == exact.ABOUT
