"""The ledger's rules where the other ledger tests left a planted bug alive (issue 39's mutation
score): probe records and LM runs ranked by what they lack, a probe cell's precision read from
the record itself, timing files named from the checkout whatever the working folder, the main
job's readers (α trajectory, skipped cells, the same-token basis), the registered-tier rule's
seeds and untested findings, and Holm over a tier's family with each shared test counted once.
Every expected number is worked out by hand or by scipy / statsmodels."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from scipy import stats as sst
from statsmodels.stats.multitest import multipletests

from analysis.experiments.demo import evidence as de
from analysis.ledger import evidence as le
from analysis.ledger import ledger
from analysis.ledger.checks import Finding, Pair
from analysis.ledger.evidence import LMRun
from analysis.ledger.families import adjust
from analysis.statistics.decide import Protocol, compare
from lab.store import Store

sys.path.insert(0, str(Path(__file__).parents[1]))
from fixture_store import write_fixture  # noqa: E402

BASE = math.log(42.0)


# --------------------------------------------------------------------------------------------
# evidence: ranking and reading
# --------------------------------------------------------------------------------------------
def test_a_probe_record_without_accuracies_is_reduced_not_an_error():
    assert le.probe_scale({"steps": 5000}) == "reduced"
    assert le.probe_scale({"acc": {}, "steps": 5000}) == "reduced"
    assert le.probe_scale({"acc": {200: 0.5, 350: 0.1}, "steps": 2499}) == "quick"
    assert le.probe_scale({"acc": {"200": 0.5, "350": 0.1}, "steps": 2500}) == "paper"


def _cell(precision_at, precision, seed=0):
    r = {"task": "marked", "mechanism": "blur", "depth": 2, "init": "uniform", "seed": seed,
         "steps": 2500, "acc": {"200": 0.5, "350": 0.25}}  # fmt: skip
    if precision_at == "record":
        r["precision"] = precision
    elif precision_at == "settings":
        r["settings"] = {"precision": precision}
    return r


def test_a_cells_bf16_twin_named_on_the_record_itself_gives_way_to_its_fp32_one():
    # the bf16 twin comes first and says its precision only at the record's top level; the
    # fp32 twin says nothing (fp32 by default): the fp32 one is the cell read
    bf16 = {**_cell("record", "bf16"), "acc": {"200": 0.9, "350": 0.9}}
    fp32 = _cell(None, None)
    (tier,) = le.group_probes([bf16, fp32], "here")
    assert tier.records == (fp32,)
    # in settings, the same
    bf16s = {**_cell("settings", "bf16"), "acc": {"200": 0.9, "350": 0.9}}
    (tier,) = le.group_probes([bf16s, fp32], "here")
    assert tier.records == (fp32,)
    # settings win over the record's own field: settings say fp32 → this one is read first
    both = {**_cell("record", "bf16"), "settings": {"precision": "fp32"}}
    (tier,) = le.group_probes([fp32 | {"precision": "bf16"}, both], "here")
    assert tier.records == (both,)


def test_a_timing_file_in_the_checkout_is_named_from_the_checkout_not_the_working_folder(
    tmp_path, monkeypatch
):
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    path = root / "benchmarks" / "attention-cpu.json"
    path.write_text(json.dumps([{"T": 64, "row": "mask", "fwd_ms": 1.5}]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(le, "CHECKOUT", str(root))
    monkeypatch.chdir(elsewhere)
    (tier,) = le.timing_tiers([str(path)])
    assert tier.setup == "attention timings, benchmarks/attention-cpu.json"
    assert tier.timings == ({"T": 64, "row": "mask", "fwd_ms": 1.5,
                             "source": "benchmarks/attention-cpu.json"},)  # fmt: skip


def test_the_dataset_picked_fineweb_first_else_the_first_by_name_else_none():
    assert le._pick(["wiki", "fineweb_edu", "bible"]) == "fineweb_edu"
    assert le._pick(["wiki", "bible", "wiki"]) == "bible"
    assert le._pick([]) is None


# --------------------------------------------------------------------------------------------
# the main job's readers (analysis.experiments.demo.evidence)
# --------------------------------------------------------------------------------------------
def _lm(schedule="learned", cells=None, **over):
    data = {"perplexity": {"ppl": 40.0}}
    if cells is not None:
        data["cells"] = cells
    lm = {
        "name": "demo-x-s0",
        "seed": 0,
        "window": 8,
        "train": {"alphas": [1.0, 1.05]},
        "eval": {"attention": "sparse", "schedule": schedule, "datasets": {"bible": data}},
    }
    lm.update(over)
    return lm


def test_the_drift_of_a_learned_run_is_read_from_its_logged_trajectory():
    # logged α per layer at two steps, started at 1.0 and 0.5: the largest |α − α_init| is
    # layer 2's 0.5 → 0.2 at the second step = 0.3, not the final α against 1 (0.05)
    traj = {"points": [[1.0, 0.6], [1.1, 0.2]], "init": [1.0, 0.5]}
    assert de.lm_drift(_lm(alpha_trajectory=traj)) == pytest.approx(0.3)
    assert de.demo_run(_lm(alpha_trajectory=traj)).drift == pytest.approx(0.3)
    # a trajectory without points: the final α against 1
    assert de.lm_drift(_lm(alpha_trajectory={"points": [], "init": [1.0, 0.5]})) == (
        pytest.approx(0.05)
    )
    assert de.lm_drift(_lm()) == pytest.approx(0.05)


def test_cells_skipped_or_without_a_perplexity_are_no_numbers():
    assert de.lm_cells(_lm()) == {}  # no cells at all
    cells = [
        {"factor": 1, "policy": "recompute", "ppl": 40.0},
        {"factor": 2, "policy": "recompute", "ppl": 44.0, "skipped": "too long"},
        {"factor": 4, "policy": "recompute", "ppl": None},
        {"factor": 4, "policy": "freeze"},
    ]
    assert de.lm_cells(_lm(cells=cells)) == {(1, "recompute"): cells[0]}


def _blocks(factor, policy, blocks, same=None):
    c = {"factor": factor, "policy": policy, "ppl": 50.0, "blocks": [{"ppl": p} for p in blocks]}
    if same is not None:
        c["same_tokens"] = [{"ppl": p} for p in same]
    return c


def test_the_same_token_change_by_hand_and_when_it_has_no_numbers():
    # two blocks: block 1 at 44 against the same tokens alone at 40 → +10 %
    two = _blocks(2, "recompute", [40.0, 44.0], [40.0, 40.0])
    assert de.extra_context(_lm(cells=[two])) == pytest.approx(10.0)
    # the default factor is the longest recomputed one (2×), not a frozen one at 4×
    frozen4 = _blocks(4, "freeze", [40.0, 60.0], [40.0, 40.0])
    assert de.extra_context(_lm(cells=[two, frozen4])) == pytest.approx(10.0)
    assert de.extra_context(_lm(cells=[two, frozen4]), factor=4) is None  # not recomputed
    # fewer same-token blocks than blocks: no number (not a mean over the blocks that pair up)
    short = _blocks(2, "recompute", [40.0, 44.0, 48.0], [40.0, 40.0])
    assert de.extra_context(_lm(cells=[short])) is None
    # one block only: nothing beyond the training length
    one = _blocks(2, "recompute", [40.0], [40.0])
    assert de.extra_context(_lm(cells=[one])) is None


def test_with_a_store_the_jobs_probe_records_join_the_stores_cells(tmp_path):
    path = str(tmp_path / "s.db")
    write_fixture(path)
    paper = _cell(None, None, seed=7)
    with Store(path) as st:
        ev = de.from_demo(None, [paper], [], store=st)
    tiers = {t.scale: t for t in ev.of("probe")}
    assert tiers["paper"].records == (paper,)


# --------------------------------------------------------------------------------------------
# the ledger: which tier decides
# --------------------------------------------------------------------------------------------
def _runs(label, center, n, W=12, tag=None, spread=0.004):
    tag = tag or label.replace("/", "-")
    return [
        LMRun(f"{tag}-s{i}", label, W, i, math.exp(center + spread * (i - (n - 1) / 2)))
        for i in range(n)
    ]


def _st_fx(tag, n_st, n_fx, gap=0.03):
    """``n_st`` fib/stagger runs at ln 42 and ``n_fx`` fib/fixed runs ``gap`` nats above."""
    st = _runs("fib/stagger", BASE, n_st, tag=f"{tag}-st")
    return st + _runs("fib/fixed", BASE + gap, n_fx, tag=f"{tag}-fx")


def _build(*groups):
    """A ledger of (scale, steps, runs) groups, each one tier (T=256: never the registered one)."""
    triples = [(r, scale, {"steps": s, "seq_len": 256}) for scale, s, rs in groups for r in rs]
    return ledger.build(le.Evidence(tiers=le.group_lms(triples)))


def _entry(led, cid):
    (e,) = [e for e in led.entries if e.id == cid]
    return e


def test_the_tier_decides_by_the_smaller_side_of_its_test_not_the_larger():
    # 1000 steps: 5 stagger runs but only 2 fixed (2 seeds on the smaller side); 500 steps: 3
    # and 3.  The 500-step tier has the most seeds where it counts
    lopsided, even = _st_fx("L", 5, 2), _st_fx("S", 3, 3)
    e = _entry(_build(("other", 1000, lopsided), ("other", 500, even)), "t5-stagger-beats-fixed")
    assert e.evidence["tier"] == "other: 6 LM runs, 500 steps, T=256, d_model None, None layers"
    assert [a["tier"] for a in e.also] == [
        "other: 7 LM runs, 1000 steps, T=256, d_model None, None layers"
    ]
    assert (e.stats["n_a"], e.stats["n_b"]) == (3, 3)


def test_a_tier_whose_runs_allow_no_test_never_decides_however_many_seeds():
    # 1000 steps: 5 seeds a side, every perplexity the same: no spread, no difference, no test
    flat = [LMRun(f"F-st-s{i}", "fib/stagger", 12, i, 42.0) for i in range(5)]
    flat += [LMRun(f"F-fx-s{i}", "fib/fixed", 12, i, 42.0) for i in range(5)]
    even = _st_fx("S", 3, 3)
    e = _entry(_build(("other", 1000, flat), ("other", 500, even)), "t5-stagger-beats-fixed")
    assert e.evidence["tier"].startswith("other: 6 LM runs, 500 steps")
    (beside,) = e.also
    assert beside["verdict"] == "not shown"
    assert "no spread on either side and no difference, no test" in beside["here"]


def test_a_demo_tier_never_decides_even_with_more_seeds():
    demo, other = _st_fx("D", 5, 5), _st_fx("O", 3, 3)
    e = _entry(_build(("demo", 1000, demo), ("other", 500, other)), "t5-stagger-beats-fixed")
    assert e.evidence["tier"].startswith("other: 6 LM runs, 500 steps") and e.why == ""
    assert [a["scale"] for a in e.also] == ["demo"]


def _pair(a, b, xa, xb, sided="two"):
    pr = Protocol("own", "welch", sided, metric="value")
    ra = tuple((f"{a}-s{i}", v) for i, v in enumerate(xa))
    rb = tuple((f"{b}-s{i}", v) for i, v in enumerate(xb))
    return Pair(a, b, None, ra, rb, compare(list(xa), list(xb), pr))


def _finding(*pairs):
    return Finding("not shown", "", [], tests=list(pairs))


def test_seeds_of_a_finding_and_a_tier_with_a_test_beats_one_without():
    none = Finding("not shown", "no runs", [])
    assert ledger._seeds(none) == 0
    lopsided = _finding(_pair("a", "b", [1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.2]))
    assert ledger._seeds(lopsided) == 2
    # a test at one W with 3 seeds a side and one at another W with 1: its smallest side is 1
    mixed = _finding(
        _pair("a", "b", [1.0, 1.1, 1.2], [2.0, 2.1, 2.2]), _pair("a", "b", [1.0], [2.0])
    )
    assert ledger._seeds(mixed) == 1 and not ledger._untested(mixed)
    untested = _finding(_pair("a", "b", [1.0], [2.0]))
    assert ledger._untested(untested) and not ledger._untested(none)
    first = le.Tier("lm", "other", (2, 1000), "longer")
    second = le.Tier("lm", "other", (2, 500), "shorter")
    # one seed somewhere is still more than no test at all: the second tier decides
    assert ledger._strongest([(first, none), (second, mixed)]) == 1
    # two tiers without a test: the stronger (first)
    assert ledger._strongest([(first, none), (second, none)]) == 0


def test_the_registered_tier_is_an_lm_tier_matching_every_field_of_the_rule():
    rule = {"scale": "study", "steps": 500, "seq_len": 128}
    lm = le.Tier("lm", "study", (3, 0), "x", steps=500, seq_len=128)
    assert ledger.registered_tier(lm, rule) is True
    assert ledger.registered_tier(lm, {**rule, "steps": 1000}) is False
    assert ledger.registered_tier(lm, None) is False  # no rule registered
    assert ledger.registered_tier(lm, {}) is False
    # a probe tier with the same fields is never the registered LM tier
    probe = le.Tier("probe", "study", (3, 0), "x", steps=500, seq_len=128)
    assert ledger.registered_tier(probe, rule) is False
    # a field the tier does not have: not the registered tier (not an error)
    assert ledger.registered_tier(lm, {**rule, "d_model": 512}) is False


def test_a_claims_file_without_a_protocol_table_has_no_rules(tmp_path):
    path = tmp_path / "claims.toml"
    path.write_text('[[paper]]\nid = "x"\n', encoding="utf-8")
    assert ledger.load_rules(str(path)) == {}
    assert ledger.load_rules()["version"] == 2


def test_a_table1_twin_decided_alone_says_what_evidence_it_lacks():
    twin = {"id": "t1-x", "claim": "c", "paper": "p", "where": "w", "kind": "lm-ppl",
            "seeds_claim": "t5-stagger-beats-fixed"}  # fmt: skip
    e = ledger.decide(twin, "paper", [], {})
    assert e.verdict == "not tested here"
    assert e.why == (
        "the evidence here has no finished LM runs of the configurations it compares (one setup)"
    )


def test_a_lab_finding_is_adjusted_in_the_labs_family_not_the_papers():

    custom = _runs("fib/custom", BASE, 3, tag="cu", spread=0.01)
    stagger = _runs("fib/stagger", BASE + 0.02, 3, tag="st", spread=0.01)
    e = _entry(_build(("other", 500, custom + stagger)), "lab-search-best-vs-stagger")
    label = "other: 6 LM runs, 500 steps, T=256, d_model None, None layers"
    assert e.source == "lab" and e.stats["family"] == f"lab: {label}"
    # alone in its family: Holm leaves scipy's Welch p as it is
    p = sst.ttest_ind([math.log(r.ppl) for r in custom], [math.log(r.ppl) for r in stagger],
                      equal_var=False).pvalue  # fmt: skip
    assert e.stats["p_raw"] == pytest.approx(p) and e.stats["p_adjusted"] == pytest.approx(p)


# --------------------------------------------------------------------------------------------
# families: Holm over a tier's tests, each shared test once
# --------------------------------------------------------------------------------------------
A = [1.00, 1.02, 1.04]
B = [1.10, 1.13, 1.16]
C = [1.03, 1.06, 1.09]
TIER = le.Tier("lm", "other", (2, 0), "9 LM runs")


def _stats(found, cid):
    (tier, f) = found[cid][0]
    return f.stats


def test_a_two_sided_welch_test_of_b_against_a_is_the_test_of_a_against_b():
    found = {
        "ab": [(TIER, _finding(_pair("a", "b", A, B)))],
        "ba": [(TIER, _finding(_pair("b", "a", B, A)))],
        "ac": [(TIER, _finding(_pair("a", "c", A, C)))],
    }
    adjust(found)  # no sources: every claim the paper's
    p_ab = sst.ttest_ind(A, B, equal_var=False).pvalue
    p_ac = sst.ttest_ind(A, C, equal_var=False).pvalue
    want = multipletests([p_ab, p_ac], method="holm")[1]  # two tests, not three
    assert _stats(found, "ab")["p_adjusted"] == pytest.approx(want[0])
    assert _stats(found, "ba")["p_adjusted"] == pytest.approx(want[0])
    assert _stats(found, "ac")["p_adjusted"] == pytest.approx(want[1])
    assert {_stats(found, c)["family"] for c in found} == {"paper: other: 9 LM runs"}
    assert _stats(found, "ab")["p_adjusted"] < 3 * p_ab  # would be 3·p counted twice


def test_one_sided_tests_in_opposite_directions_are_two_tests():
    found = {
        "ab": [(TIER, _finding(_pair("a", "b", A, B, sided="one")))],
        "ba": [(TIER, _finding(_pair("b", "a", B, A, sided="one")))],
    }
    adjust(found, {"ab": "paper", "ba": "paper"})
    less = sst.ttest_ind(A, B, equal_var=False, alternative="less").pvalue  # a lower: a better
    more = sst.ttest_ind(A, B, equal_var=False, alternative="greater").pvalue
    # each test and the test against it: a<b, b<a (= a>b), against a<b (a>b), against b<a (a<b)
    want = multipletests([less, more, more, less], method="holm")[1]
    ab, ba = _stats(found, "ab"), _stats(found, "ba")
    assert (ab["p_raw"], ab["p_against"]) == (pytest.approx(less), pytest.approx(more))
    assert ab["p_adjusted"] == pytest.approx(want[0]) == pytest.approx(4 * less)
    assert ba["p_against_adjusted"] == pytest.approx(want[3])
    # 4 · 0.0045 < 0.05: a ahead holds, and b ahead is refuted by the significant reversal
    assert [found[c][0][1].verdict for c in ("ab", "ba")] == ["held", "did not hold"]
    assert (ab["direction"], ba["reason"]) == ("a better", "reversal")


def test_the_papers_claims_and_the_labs_findings_are_two_families_on_one_tier():

    found = {
        "p": [(TIER, _finding(_pair("a", "b", A, B)))],
        "l": [(TIER, _finding(_pair("a", "c", A, C)))],
        "q": [(TIER, _finding(_pair("c", "b", C, B)))],
    }
    adjust(found, {"p": "paper", "l": "lab"})  # q not named: the paper's
    p_ab = sst.ttest_ind(A, B, equal_var=False).pvalue
    p_ac = sst.ttest_ind(A, C, equal_var=False).pvalue
    p_cb = sst.ttest_ind(C, B, equal_var=False).pvalue
    lab = _stats(found, "l")
    assert lab["family"] == "lab: other: 9 LM runs"
    assert lab["p_adjusted"] == pytest.approx(p_ac)  # alone in the lab's family
    want = multipletests([p_ab, p_cb], method="holm")[1]
    paper = "paper: other: 9 LM runs"
    assert _stats(found, "p")["family"] == _stats(found, "q")["family"] == paper
    assert _stats(found, "p")["p_adjusted"] == pytest.approx(want[0])
    assert _stats(found, "q")["p_adjusted"] == pytest.approx(want[1])
