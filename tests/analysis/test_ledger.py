"""The claims ledger: every paper claim once with one of four verdicts, the strongest evidence
decides, no evidence is "not tested here", the lab's findings never count for the paper, at-chance
results are labelled, and claims.json / `fiblab report --json` are strict JSON."""

import hashlib
import json
import math

import pytest
import tomllib
from fixture_store import smoke_store
from scipy import stats as sst

from analysis.experiments.demo import evidence as de
from analysis.ledger import evidence as le
from analysis.ledger import ledger
from analysis.ledger.evidence import LMRun
from analysis.ledger.families import family_of

FOUR = {"held", "did not hold", "not shown", "not tested here"}


def strict(text: str):
    def bad(x):
        raise ValueError(f"not JSON: {x}")

    return json.loads(text, parse_constant=bad)


def paper_ids() -> list[str]:
    """The paper claims' ids, read straight from the toml (not through analysis.ledger.ledger)."""
    with open(ledger.CLAIMS_PATH, "rb") as f:
        return [c["id"] for c in tomllib.load(f)["paper"]]


def rec(depth, init, acc, start, end, seed=0, steps=2500):
    """A marked-probe record: accuracies, and an α trajectory from ``start`` to ``end``."""
    return {
        "key": f"marked/blur/d{depth}/{init}/s{seed}/n{steps}/{sorted(acc)}",
        "task": "marked",
        "mechanism": "blur",
        "depth": depth,
        "init": init,
        "seed": seed,
        "steps": steps,
        "acc": {str(k): v for k, v in acc.items()},
        "alphas": end,
        "trajectory": [{"step": 0, "alphas": start}, {"step": steps, "alphas": end}],
    }


def probe_ev(*groups) -> le.Evidence:
    ev = le.Evidence()
    for records in groups:
        ev.tiers += le.group_probes(records, "test")
    return ev


def entry(led, cid):
    (e,) = [e for e in led.entries if e.id == cid]
    return e


# ------------------------------------------------------------------------------ the data
def test_every_paper_claim_appears_once_with_one_of_four_verdicts():
    ids = paper_ids()
    assert len(ids) == len(set(ids)) >= 30
    for must in (  # the list: orderings, tables, prose claims
        "t1-stagger-beats-fixed",
        "t1-coprime-ties-stagger",
        "t5-pow2-stagger-ties-learned",
        "t3-pow2-degrades",
        "t3-dense-degrades",
        "t2-inert-uniform",
        "cov-fixed-19",
        "cov-stagger-4x",
        "eff-learned-5x-latency",
        "t5-stagger-beats-learned",
    ):
        assert must in ids
    for ev in (le.Evidence(), probe_ev([rec(2, "uniform", {200: 0.0, 350: 0.0}, [1, 1], [1, 1])])):
        led = ledger.build(ev)
        got = [e.id for e in led.paper()]
        assert sorted(got) == sorted(ids)  # each exactly once
        assert {e.verdict for e in led.entries} <= FOUR
        assert sum(led.counts().values()) == len(ids)
        assert all(e.source == "lab" and e.id.startswith("lab-") for e in led.lab())


def test_a_claim_without_evidence_is_not_tested_here_with_why_and_what_would():
    led = ledger.build(le.Evidence())
    for cid in (
        "t1-stagger-beats-fixed",
        "t3-dense-degrades",
        "t2-inert-uniform",
        "eff-learned-5x-latency",
        "bat-lego-chance",
    ):
        e = entry(led, cid)
        assert e.verdict == "not tested here"
        assert e.why and e.decides and e.evidence["runs"] == []
    # coverage is computed, never "not tested": the paper says 19 beyond the window, there are
    # 10 (19 counts the window's 9, SPEC §9); the stagger's 4× holds only in the authors'
    # 8-layer, K=25 script, reported beside the paper's own 16-layer stack (7×)
    assert entry(led, "cov-fixed-19").verdict == "did not hold"
    e = entry(led, "cov-stagger-4x")
    assert e.verdict == "did not hold" and "19 → 133 (7.0×)" in e.here and "19 → 75" in e.here


# ------------------------------------------------------------------------------ strength
def test_inert_alpha_paper_scale_grid_beats_the_reduced_probe():
    """The issue's case: the reduced probe says inert, the paper-scale grid has α moved 0.4."""
    reduced = [
        rec(d, "uniform", {125: 0.0, 219: 0.0}, [1.0] * d, [1.01] * d, steps=600) for d in (2, 4)
    ]
    paper = [
        rec(2, "uniform", {200: 0.7, 350: 0.4}, [1.0, 1.0], [0.6, 1.0]),  # moved 0.4
        rec(4, "uniform", {200: 0.0, 350: 0.0}, [1.0] * 4, [1.0] * 4),
    ]
    alone = entry(ledger.build(probe_ev(reduced)), "t2-inert-uniform")
    assert alone.verdict == "held" and alone.evidence["scale"] == "reduced"
    e = entry(ledger.build(probe_ev(reduced, paper)), "t2-inert-uniform")
    assert e.verdict == "did not hold"
    assert e.evidence["scale"] == "paper"
    assert e.stats["drift"][2] == pytest.approx(0.4)
    assert [a["verdict"] for a in e.also] == ["held"]  # the weaker evidence, shown beside


def test_held_from_a_weak_grid_did_not_hold_from_the_strong_one_and_back():
    # demo-scale grid: uniform at depth 4 fails, staggered retrieves → "fails deep" held;
    # paper-scale grid: uniform at depth 4 retrieves 0.6 → did not hold
    weak = [
        rec(4, "uniform", {125: 0.0, 219: 0.01}, [1] * 4, [1] * 4, steps=600),
        rec(4, "staggered", {125: 0.9, 219: 0.0}, [0.55, 1.45], [0.55, 1.45], steps=600),
    ]
    strong = [rec(4, "uniform", {200: 0.6, 350: 0.0}, [1] * 4, [1] * 4)]
    assert entry(ledger.build(probe_ev(weak)), "t2-uniform-fails-deep").verdict == "held"
    assert entry(ledger.build(probe_ev(weak, strong)), "t2-uniform-fails-deep").verdict == (
        "did not hold"
    )
    # the other way round: the strong grid holds, the weak one does not
    weak2 = [rec(4, "uniform", {125: 0.7, 219: 0.0}, [1] * 4, [1] * 4, steps=600)]
    strong2 = [
        rec(4, "uniform", {200: 0.0, 350: 0.0}, [1] * 4, [1] * 4),
        rec(2, "staggered", {200: 0.99, 350: 0.0}, [0.55, 1.45], [0.56, 1.39]),
    ]
    assert entry(ledger.build(probe_ev(weak2, strong2)), "t2-uniform-fails-deep").verdict == "held"


def lm(name, label, ppl, W=8, seed=0, **kw):
    return LMRun(name=name, label=label, W=W, seed=seed, ppl=ppl, **kw)


def lm_tier(scale, runs, steps=200):
    (t,) = le.group_lms([(r, scale, {"steps": steps, "seq_len": 256}) for r in runs])
    return t


def test_study_runs_beat_the_demos_and_demo_runs_alone_cannot_decide():
    # the demo: stagger 2.6 % ahead, the paper's gap (ln 123.3/120.1 = 0.026 nats)
    demo = lm_tier(
        "demo",
        [
            lm("demo-st", "fib/stagger", 120.0),
            lm("demo-fx", "fib/fixed", 123.2),
            lm("demo-st2", "fib/stagger", 120.2, seed=1),
            lm("demo-fx2", "fib/fixed", 123.4, seed=1),
        ],
    )
    study = lm_tier(
        "study",
        [lm(f"study-st{s}", "fib/stagger", 50.0 + 0.1 * s, seed=s) for s in range(3)]
        + [lm(f"study-fx{s}", "fib/fixed", 49.0 + 0.1 * s, seed=s) for s in range(3)],
        steps=5000,
    )
    ev = le.Evidence(tiers=[demo])
    e = entry(ledger.build(ev), "t5-stagger-beats-fixed")
    # the demo's direction holds (p < 0.05) but its scale cannot decide: not shown, and why
    assert e.verdict == "not shown" and e.stats["raw_verdict"] == "held"
    assert "--scale study" in e.why
    ev = le.Evidence(tiers=[demo, study])
    e = entry(ledger.build(ev), "t5-stagger-beats-fixed")
    # the study: stagger 1 ppl behind at σ 0.1, a significant reversal
    assert e.verdict == "did not hold" and e.evidence["scale"] == "study"
    assert e.stats["direction"] == "b better" and e.stats["p_adjusted"] < 0.05
    assert set(e.evidence["runs"]) == {f"study-{c}{s}" for c in ("st", "fx") for s in range(3)}


def test_a_tested_study_comparison_beats_one_seed_a_side_at_more_tokens():
    # the study's shape: its 1000-step calibration rung has one seed a scheme (stagger behind),
    # its 500-step comparison four seeds a side (stagger ahead by ~1 ppl, p << 0.05)
    top = lm_tier(
        "study",
        [
            lm("study-stagger-s1-1000", "fib/stagger", 27.0),
            lm("study-fixed-s1-1000", "fib/fixed", 26.0),
        ],
        steps=1000,
    )
    rung = lm_tier(
        "study",
        [lm(f"study-stagger-s{s}-500", "fib/stagger", 35.0 + 0.1 * s, seed=s) for s in range(4)]
        + [lm(f"study-fixed-s{s}-500", "fib/fixed", 36.0 + 0.1 * s, seed=s) for s in range(4)],
        steps=500,
    )
    assert top.rank > rung.rank  # more tokens: the stronger tier by rank alone
    e = entry(ledger.build(le.Evidence(tiers=[top, rung])), "t5-stagger-beats-fixed")
    assert e.verdict == "held" and e.stats["n_a"] == e.stats["n_b"] == 4
    assert all(r.endswith("-500") for r in e.evidence["runs"])
    # the single-seed reversal is shown beside, not hidden; one seed a side is no test, so
    # it is not shown (a reversal by one seed is no evidence against the claim)
    assert [a["verdict"] for a in e.also] == ["not shown"]
    assert "fewer than 2 seeds on a side, no test" in e.also[0]["here"]
    # with only the single-seed rung, it decides, and shows nothing
    e1 = entry(ledger.build(le.Evidence(tiers=[top])), "t5-stagger-beats-fixed")
    assert e1.verdict == "not shown" and e1.also == [] and e1.stats["direction"] == "not tested"


def test_lm_comparison_statistics_against_scipy_and_a_hand_count():
    st = [42.0, 42.1, 41.9]
    fx = [43.1, 43.3, 43.0]
    runs = [lm(f"st{i}", "fib/stagger", p, W=12, seed=i) for i, p in enumerate(st)]
    runs += [lm(f"fx{i}", "fib/fixed", p, W=12, seed=i) for i, p in enumerate(fx)]
    t = lm_tier("other", runs)
    e = entry(ledger.build(le.Evidence(tiers=[t])), "t5-stagger-beats-fixed")
    s = e.stats
    assert e.verdict == "held"
    assert s["mean_a"] == pytest.approx(42.0) and s["mean_b"] == pytest.approx(sum(fx) / 3)
    assert s["gap"] == pytest.approx(sum(fx) / 3 - 42.0)
    # pooled σ by hand: var(st) = 0.01, var(fx) = ((−0.033)² + 0.167² + (−0.133)²)/2
    m = sum(fx) / 3
    var_fx = sum((x - m) ** 2 for x in fx) / 2
    assert s["margin_sigma"] == pytest.approx(s["gap"] / math.sqrt((0.01 + var_fx) / 2))
    # the registered test: Welch two-sided on ln ppl; the only tested claim of its family here
    # (the other Table 5 claims have no runs), so Holm leaves its p as it is
    ls, lf = [math.log(x) for x in st], [math.log(x) for x in fx]
    tt = sst.ttest_ind(ls, lf, equal_var=False)
    assert s["p_raw"] == pytest.approx(tt.pvalue) and s["p_adjusted"] == s["p_raw"]
    # its family is the data's: every test on this tier's runs (here it is the only one)
    assert (s["family"], s["test"], s["metric"]) == (
        family_of("paper", t),
        "welch",
        "log_ppl",
    )
    lo, hi = tt.confidence_interval(0.95)  # of mean(a) − mean(b): the gap is its negative
    assert s["ci"] == pytest.approx([-hi, -lo])
    assert s["effect"] == pytest.approx(sum(lf) / 3 - sum(ls) / 3)
    assert s["ci"][0] <= s["paper_effect"] <= s["ci"][1] and s["magnitude"] == "inside"
    assert s["direction"] == "a better" and s["mde"] > 0
    assert 0 < s["power"] <= 1 and s["seeds_needed"] >= 2
    # a noisy pair: direction right, p large → not shown, with the power it had
    noisy = [
        lm("a0", "fib/stagger", 40.0),
        lm("a1", "fib/stagger", 45.0, seed=1),
        lm("b0", "fib/fixed", 41.0),
        lm("b1", "fib/fixed", 46.0, seed=1),
    ]
    e = entry(ledger.build(le.Evidence(tiers=[lm_tier("other", noisy)])), "t5-stagger-beats-fixed")
    assert e.verdict == "not shown" and e.stats["power"] < 0.8 and "power" in e.here
    assert e.stats["direction"] == "undetermined" and e.stats["magnitude"] == "inside"
    assert f"detect a gap of {e.stats['mde']:.3g}" in e.here
    # learned ahead of the stagger by one seed: no test, not shown (a gap ≤ 0 is not a "no")
    rev = [
        lm("l", "fib/learned", 122.8),
        lm("s0", "fib/stagger", 128.0),
        lm("s1", "fib/stagger", 128.6, seed=1),
    ]
    led = ledger.build(le.Evidence(tiers=[lm_tier("other", rev)]))
    e = entry(led, "t5-stagger-beats-learned")
    assert e.verdict == "not shown" and e.stats["gap"] < 0
    # one W only: Table 1's twin would be the same runs again, so it is not tested, and says so
    t1 = entry(led, "t1-stagger-beats-learned")
    assert t1.verdict == "not tested here" and "`t5-stagger-beats-learned`" in t1.why


def test_a_tie_is_shown_only_by_an_equivalence_test_at_its_margin():
    """Wide seeds and a gap of 1: TOST at the registered ±0.013 nats cannot show a tie (the old
    rule read its large Welch p as one); tight seeds 0.005 apart: it can."""
    wide = [
        lm("c0", "fib/coprime", 40.0),
        lm("c1", "fib/coprime", 44.0, seed=1),
        lm("s0", "fib/stagger", 41.0),
        lm("s1", "fib/stagger", 43.0, seed=1),
    ]
    e = entry(ledger.build(le.Evidence(tiers=[lm_tier("other", wide)])), "t5-coprime-ties-stagger")
    assert e.verdict == "not shown"
    tight = [lm(f"c{i}", "fib/coprime", 42.0 + 0.01 * i, seed=i) for i in range(3)]
    tight += [lm(f"s{i}", "fib/stagger", 42.005 + 0.01 * i, seed=i) for i in range(3)]
    e = entry(ledger.build(le.Evidence(tiers=[lm_tier("other", tight)])), "t5-coprime-ties-stagger")
    assert e.verdict == "held" and e.stats["power"] >= 0.8
    assert (e.stats["test"], e.stats["margin"], e.stats["direction"]) == (
        "tost",
        0.013,
        "within margin",
    )


# ------------------------------------------------------------------------------ chance, lab
def test_at_chance_results_are_labelled_and_never_held():
    # nothing in the grid retrieves: the uniform init "failing" says nothing
    dead = [
        rec(4, "uniform", {200: 0.003, 350: 0.0}, [1] * 4, [1] * 4),
        rec(4, "staggered", {200: 0.004, 350: 0.002}, [0.55, 1.45], [0.55, 1.45]),
    ]
    e = entry(ledger.build(probe_ev(dead)), "t2-uniform-fails-deep")
    assert (e.verdict, e.label) == ("not shown", "at chance")
    bat = {
        "ruler_vt": {"acc": 0.12, "chance": 1 / 9, "n": 900},
        "lego": {"acc": 0.60, "chance": 0.5, "n": 900},
        "assoc_recall": {"acc": 0.09, "chance": 1 / 12, "n": 300},
    }
    t = lm_tier("other", [lm("x", "fib/fixed", 40.0, battery=bat)])
    led = ledger.build(le.Evidence(tiers=[t]))
    r = entry(led, "bat-ruler-chance")  # |0.12 − 0.111| < 3·sqrt((1/9)(8/9)/900) = 0.031
    assert (r.verdict, r.label) == ("not shown", "at chance")
    g = entry(led, "bat-lego-chance")  # |0.60 − 0.5| > 3·0.5/30 = 0.05
    assert g.verdict == "did not hold" and g.label is None
    # the paper's "recall is zero": at chance is a label, never "held" (a null is not shown)
    a = entry(led, "bat-assoc-recall-zero")  # |0.09 − 0.083| < 3·sqrt((1/12)(11/12)/300) = 0.048
    assert (a.verdict, a.label) == ("not shown", "at chance")
    recall = {**bat, "assoc_recall": {"acc": 0.20, "chance": 1 / 12, "n": 300}}
    t2 = lm_tier("other", [lm("x", "fib/fixed", 40.0, battery=recall)])
    assert entry(ledger.build(le.Evidence(tiers=[t2])), "bat-assoc-recall-zero").verdict == (
        "did not hold"
    )
    assert "(2 at chance)" in led.summary()
    assert all(e.verdict != "held" for e in led.entries if e.label == "at chance")


def test_lab_findings_are_never_counted_in_the_papers_summary():
    led = ledger.build(le.Evidence())
    lab = led.lab()
    assert lab and entry(led, "lab-coprime-fewer-layers").verdict == "held"
    held_paper = sum(e.verdict == "held" for e in led.paper())
    assert led.counts()["held"] == held_paper
    assert f"{held_paper} held" in led.summary()
    assert f"claims ({len(paper_ids())})" in led.summary()
    assert sum(led.counts().values()) == len(paper_ids())


# ------------------------------------------------------------------------------ JSON, CLI
def test_claims_json_and_report_json_are_strict(tmp_path, capsys):
    from fiblab.cli import main
    from lab.store import Store

    path = smoke_store(str(tmp_path / "s.db"))
    with Store(path) as st:
        led = ledger.build(le.from_store(st, grids=le.stored_grids()))
    out = led.write_json(str(tmp_path / "c" / "claims.json"))
    doc = strict(open(out).read())
    claims = doc["claims"]
    # the registered protocol and its hash, so a protocol changed after results is a diff
    assert doc["protocol"]["t5-coprime-ties-stagger"] == {
        "family": "table5",
        "test": "tost",
        "sided": "two",
        "margin": 0.013,
        "paper_effect": -0.0024,
        "metric": "log_ppl",
        "alpha": 0.05,
    }
    canon = json.dumps(doc["protocol"], sort_keys=True, separators=(",", ":"))
    assert doc["protocol_sha256"] == hashlib.sha256(canon.encode()).hexdigest()
    for c in claims:
        assert {"id", "source", "claim", "verdict", "paper", "here", "evidence"} <= set(c)
        assert c["source"] in ("paper", "lab") and c["verdict"] in FOUR
    assert sorted(c["id"] for c in claims if c["source"] == "paper") == sorted(paper_ids())
    # the fixture: stagger 2.90/2.93 vs fixed 3.00/3.03 (loss), so stagger ahead; one W, so the
    # comparison is Table 5's claim and Table 1's twin is not tested (counted once)
    twin = [c for c in claims if c["id"] == "t1-stagger-beats-fixed"][0]
    assert twin["verdict"] == "not tested here" and "t5-stagger-beats-fixed" in twin["why"]
    t1 = [c for c in claims if c["id"] == "t5-stagger-beats-fixed"][0]
    assert t1["evidence"]["runs"] and t1["verdict"] in ("held", "not shown")
    assert t1["stats"]["mean_a"] < t1["stats"]["mean_b"]
    for k in ("p_raw", "p_adjusted", "family", "test", "ci", "direction", "magnitude", "mde"):
        assert k in t1["stats"], k
    assert (t1["stats"]["n_a"], t1["stats"]["n_b"]) == (2, 2)

    assert main(["report", "--store", path, "--json", "--out", str(tmp_path / "rep")]) == 0
    got = strict(capsys.readouterr().out)
    assert [c["id"] for c in got["claims"]] == [c["id"] for c in claims]
    assert got["claims_protocol_sha256"] == doc["protocol_sha256"]
    assert sum(r["paper_claims"] for r in got["claims_summary"]) == len(paper_ids())
    assert "ledger" in got and "claims_stats" in got
    strict((tmp_path / "rep" / "claims.json").read_text())
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## The paper's claims" in md and "the paper's claims (" in md


def test_power_of_a_large_effect_is_finite():
    """scipy's noncentral t lower tail is NaN at a large noncentrality; the power is then its
    upper tail (the lower one is below 1e-20), never NaN."""
    from analysis.statistics.power import power

    crit = sst.t.ppf(0.975, 4)
    nc = 9 * math.sqrt(1.5)
    upper = sst.nct.sf(crit, 4, nc)
    assert power(9, 3, 3) == pytest.approx(upper, abs=1e-12)
    assert 0.999 < power(9, 3, 3) <= 1.0


def test_report_of_named_runs_decides_on_those_runs_only(tmp_path, capsys):
    from fiblab.cli import main

    path = smoke_store(str(tmp_path / "s.db"))
    args = ["report", "--store", path, "--json", "--no-grids"]
    assert main(args + ["smoke-stagger-s0", "smoke-stagger-s1"]) == 0
    got = {c["id"]: c for c in strict(capsys.readouterr().out)["claims"]}
    assert got["t5-stagger-beats-fixed"]["verdict"] == "not tested here"  # no fixed run named
    assert main(args) == 0
    got = {c["id"]: c for c in strict(capsys.readouterr().out)["claims"]}
    assert got["t5-stagger-beats-fixed"]["verdict"] != "not tested here"
    # the fixture's two probe cells (40 steps, distances 200/350) are the only probe evidence
    assert got["t2-inert-uniform"]["evidence"]["scale"] == "quick"


def test_the_demos_report_says_what_its_scale_cannot_decide():
    from analysis.ledger.report import ledger_section
    from analysis.reports.report import Report

    def demo_lm(name, schedule, ppl, seed):
        return {
            "name": name,
            "seed": seed,
            "train": {"alphas": [1.0]},
            "eval": {
                "attention": "sparse",
                "schedule": schedule,
                "datasets": {"x": {"perplexity": {"ppl": ppl}, "cells": [], "bins": None}},
            },
        }

    lms = [
        demo_lm(f"demo-{s}-s{k}-200", s, p + k * 0.1, k)
        for s, p in (("stagger", 120.0), ("fixed", 123.2))  # the paper's 2.6 %
        for k in (0, 1)
    ]
    led = ledger.build(de.from_demo(None, [], lms))
    e = entry(led, "t5-stagger-beats-fixed")
    assert e.verdict == "not shown" and e.stats["raw_verdict"] == "held"
    assert e.evidence["scale"] == "demo"
    r = Report("t")
    ledger_section(r, led, "The paper's claims at this scale")
    md = r.markdown()
    assert "`t5-stagger-beats-fixed` — only demo-scale runs test it" in md
    assert "fiblab demo --scale study" in md and "benchmarks/results/probe-marked-paper" in md


def test_battery_rows_of_the_store_reader():
    """`Store.battery()` (fiblab battery's results: accuracy, items, chance, at_chance) read by
    the ledger: the last row of a run wins, its own chance test decides."""
    import pandas as pd

    class Fake:
        def battery(self):
            return pd.DataFrame(
                [
                    {
                        "run": "r",
                        "task": "lego",
                        "n": 10,
                        "items": 40,
                        "accuracy": 0.9,
                        "chance": 0.5,
                        "at_chance": False,
                    },
                    {
                        "run": "r",
                        "task": "lego",
                        "n": 100,
                        "items": 400,
                        "accuracy": 0.52,
                        "chance": 0.5,
                        "at_chance": True,
                    },
                    {
                        "run": "r",
                        "task": "ruler_vt",
                        "n": 100,
                        "items": 400,
                        "accuracy": 0.3,
                        "chance": 1 / 9,
                        "at_chance": False,
                    },
                ]
            )

    got = le.store_battery(Fake())
    assert got == {
        "r": {
            "lego": {"acc": 0.52, "chance": 0.5, "n": 400, "at_chance": True},
            "ruler_vt": {"acc": 0.3, "chance": 1 / 9, "n": 400, "at_chance": False},
        }
    }
    assert le.store_battery(object()) == {}  # a store of an older version: no battery
    t = lm_tier("other", [lm("r", "fib/fixed", 40.0, battery=got["r"])])
    led = ledger.build(le.Evidence(tiers=[t]))
    assert entry(led, "bat-lego-chance").label == "at chance"
    assert entry(led, "bat-ruler-chance").verdict == "did not hold"


def test_scales_of_runs_and_probe_records():
    assert le.lm_scale("study-stagger-s1-T128-3000", {"scale": "study"}) == "study"
    assert le.lm_scale("x", {"scale": "study"}) == "study"
    assert le.lm_scale("study-smoke-fixed-s1-T32-4", {"scale": "study"}) == "smoke"
    assert le.lm_scale("demo-cpu-fixed-s42-200", {"steps": 200}) == "demo"
    assert le.lm_scale("mine", {"steps": 13000, "model": {"d_model": 512}}) == "paper"
    assert le.lm_scale("mine", {"steps": 500}) == "other"
    assert le.probe_scale({"acc": {"200": 0, "350": 0}, "steps": 2500}) == "paper"
    assert le.probe_scale({"acc": {"200": 0, "350": 0}, "steps": 400}) == "quick"
    assert le.probe_scale({"acc": {"125": 0, "219": 0}, "steps": 2500}) == "reduced"
    demo = lm_tier("demo", [lm("a", "fib/fixed", 1.0)])
    study = lm_tier("study", [lm("b", "fib/fixed", 1.0)], steps=10)
    other = lm_tier("other", [lm("c", "fib/fixed", 1.0)], steps=10**6)
    assert [t.scale for t in le.Evidence(tiers=[demo, other, study]).of("lm")] == [
        "study",
        "other",
        "demo",
    ]
    assert not demo.decides and study.decides


def test_the_efficiency_claim_from_a_stored_timing_by_hand(tmp_path):
    """Learned over integer-offset forward time at T=1024, per implementation, from a timing
    file: reported beside, never held (the paper's cost is its own GPU gather)."""
    rows = [
        {"T": 1024, "row": "dense", "fwd_ms": 8.0},
        {"T": 1024, "row": "mask", "fwd_ms": 10.0},
        {"T": 1024, "row": "torch shift", "fwd_ms": 8.0},
        {"T": 1024, "row": "torch interp", "fwd_ms": 12.0},
        {"T": 1024, "row": "cpp shift", "fwd_ms": 1.0},
        {"T": 1024, "row": "cpp interp", "fwd_ms": 1.1},
        {"T": 1024, "row": "cpp interp.77", "fwd_ms": 1.3},  # preferred: every rung blends
        {"T": 4096, "row": "torch interp", "fwd_ms": 99.0},
    ]
    path = tmp_path / "attention-x.json"
    path.write_text(json.dumps(rows))
    ev = le.Evidence(tiers=le.timing_tiers([str(path)]))
    e = entry(ledger.build(ev), "eff-learned-5x-latency")
    assert e.verdict == "not shown" and e.evidence["scale"] == "benchmark"
    assert e.stats["T"] == 1024
    assert e.stats["torch_learned_over_integer"] == pytest.approx(12.0 / 8.0)
    assert e.stats["cpp_learned_over_integer"] == pytest.approx(1.3 / 1.0)
    assert e.stats["torch_learned_over_mask"] == pytest.approx(1.2)
    assert "1.30× (fused C++, α = 0.77)" in e.here and "1.50× (PyTorch, α = 1)" in e.here
    # without a timing it is not tested here; the checkout's stored file is found
    assert entry(ledger.build(le.Evidence()), "eff-learned-5x-latency").verdict == (
        "not tested here"
    )
    assert any(p.endswith("attention-cpu.json") for p in le.stored_timings())


def test_a_coprime_run_that_is_the_stagger_is_not_compared_as_coprime():
    four = {"n_layers": 4, "schedule": "coprime", "coprime_stride": None}
    assert le.run_label("fib/coprime", four) == "fib/coprime=stagger"
    assert le.run_label("fib/coprime", {**four, "n_layers": 16}) == "fib/coprime"
    assert le.run_label("fib/coprime", {**four, "coprime_stride": 3}) == "fib/coprime"
    assert le.run_label("fib/stagger", {**four, "schedule": "stagger"}) == "fib/stagger"
    assert le.run_label("fib/coprime", {}) == "fib/coprime"  # depth unknown: as stored
    # runs under that label give "coprime ties stagger" no evidence
    st = [lm(f"st{s}", "fib/stagger", 35.0 + 0.1 * s, seed=s) for s in range(3)]
    same = [lm(f"cp{s}", "fib/coprime=stagger", 35.0 + 0.1 * s, seed=s) for s in range(3)]
    e = entry(
        ledger.build(le.Evidence(tiers=[lm_tier("study", st + same)])), "t5-coprime-ties-stagger"
    )
    assert e.verdict == "not tested here"
