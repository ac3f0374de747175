"""The claims ledger's evidence and records, each number worked out by hand: runs from the main
job's in-memory results (`analysis.experiments.demo.evidence.demo_run`, `from_demo`) and from a store
(`from_store` on tests/fixture_store.py), probe tiers, the tier a job's runs form, the shape of
every claims.json entry, the summary line, the claims file's checks and its written form."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from analysis.experiments.demo import evidence as de
from analysis.ledger import evidence as le


def cell(factor, policy, ppl, blocks=None, same=None):
    c = {"factor": factor, "policy": policy, "ppl": ppl}
    if blocks is not None:
        c["blocks"] = [{"ppl": p} for p in blocks]
        c["same_tokens"] = [{"ppl": p} for p in same]
    return c


def demo_lm(name="demo-cpu-stagger-s1-200", schedule="stagger", **over):
    lm = {
        "name": name,
        "seed": 1,
        "window": 12,
        "base": "pow2",
        "train": {"alphas": [1.0, 1.02]},
        "eval": {
            "attention": "sparse",
            "schedule": schedule,
            "datasets": {
                "bible": {
                    "perplexity": {"ppl": 40.0},
                    "cells": [
                        cell(1, "recompute", 40.0),
                        cell(2, "recompute", 41.0),
                        # blocks j ≥ 1 against the same tokens alone: +10 % and +30 % → +20 %
                        cell(4, "recompute", 42.0, [40.0, 44.0, 52.0], [40.0, 40.0, 40.0]),
                        cell(4, "freeze", 43.0),
                        {"factor": 8, "policy": "recompute", "skipped": "too long"},
                    ],
                    "bins": {"loss": [3.5, 3.25]},
                }
            },
        },
        "battery": {"ruler-vt": {"acc": 0.1, "chance": 0.11, "n": 100}},
    }
    lm.update(over)
    return lm


def test_a_demo_result_becomes_an_lm_run_field_by_field():
    r = de.demo_run(demo_lm())
    assert (r.name, r.label, r.W, r.seed) == ("demo-cpu-stagger-s1-200", "pow2/stagger", 12, 1)
    assert r.ppl == 40.0
    assert r.ext == {1: 40.0, 2: 41.0, 4: 42.0}  # the skipped 8× cell is no number
    assert r.frozen == {4: 43.0}
    assert r.same_tokens == pytest.approx(20.0)
    assert r.bins == (3.5, 3.25)
    assert r.drift is None  # not learned
    assert r.battery == {"ruler-vt": {"acc": 0.1, "chance": 0.11, "n": 100}}


def test_labels_drift_and_what_a_demo_result_may_lack():
    learned = de.demo_run(demo_lm(schedule="learned", base=None))
    assert learned.label == "fib/learned"  # no base: the Fibonacci one
    assert learned.drift == pytest.approx(0.02)  # final α [1.0, 1.02] against the start 1
    dense = demo_lm()
    dense["eval"]["attention"] = "dense"
    assert de.demo_run(dense).label == "dense"
    custom = de.demo_run(demo_lm(schedule=[0.9, 1.1]))
    assert custom.label == "pow2/custom"
    bare = demo_lm(battery={"skipped": "no tasks"})
    del bare["name"]
    data = bare["eval"]["datasets"]["bible"]
    data.update(perplexity=None, bins=None, cells=[])
    r = de.demo_run(bare)
    assert r.name == "stagger" and r.battery is None and r.bins is None
    assert math.isnan(r.ppl) and r.ext == {} and r.frozen == {} and r.same_tokens is None


def test_a_jobs_runs_form_one_tier_study_or_demo():
    demo = de.from_demo({"union": 1}, [], [demo_lm(), demo_lm(name="demo-cpu-fixed-s1-200")])
    (tier,) = demo.of("lm")
    assert (tier.scale, tier.decides, len(tier.lms)) == ("demo", False, 2)
    assert tier.rank == (le.LM_RANK["demo"], 0) and tier.setup == "2 LM runs of this job"
    assert demo.coverage == {"union": 1} and demo.sources == ["this job"]
    study = de.from_demo(None, [], [demo_lm(name="study-stagger-s1-T128-500")])
    (tier,) = study.of("lm")
    assert (tier.scale, tier.decides) == ("study", True)
    assert de.from_demo(None, [], []).of("lm") == []


def test_runs_read_back_from_a_store_field_by_field(tmp_path):
    """`from_store` on the tests' synthetic store (tests/fixture_store.py: losses written by
    hand, ppl = e^loss): each LMRun's numbers are the fixture's own, worked out here."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from fixture_store import write_fixture

    from lab.store import Store

    write_fixture(str(tmp_path / "s.db"))
    with Store(str(tmp_path / "s.db")) as st:
        ev = le.from_store(st)
    (tier,) = ev.of("lm")
    assert (tier.scale, tier.rank, tier.decides) == ("other", (le.LM_RANK["other"], 40 * 64), True)
    assert tier.setup == "6 LM runs, 40 steps, T=64, d_model 32, 4 layers"
    runs = {r.name: r for r in tier.lms}
    s1 = runs["smoke-stagger-s1"]  # loss 2.90 + 0.03 (seed 1); longer: −0.02·m, frozen −0.01·m
    assert (s1.label, s1.W, s1.seed) == ("fib/stagger", 8, 1)
    assert s1.ppl == pytest.approx(math.exp(2.93))
    assert s1.ext == pytest.approx({1: math.exp(2.93), 2: math.exp(2.89), 4: math.exp(2.85)})
    assert s1.frozen == pytest.approx({2: math.exp(2.91), 4: math.exp(2.89)})
    assert s1.bins == pytest.approx(tuple(2.93 + 0.6 - 0.08 * b for b in range(8)))
    assert s1.drift is None and s1.battery is None
    # learned: layer 0 moves 0.0015 a step from 0.55 to step 40 → drift 0.06
    assert runs["smoke-learned-s0"].drift == pytest.approx(0.06)
    d = runs["smoke-dense-s0"]  # dense grows +0.8 nats a factor, no frozen cells
    assert (d.label, d.W) == ("dense", None) and d.frozen == {}
    assert d.ext == pytest.approx({1: math.exp(2.7), 2: math.exp(3.5), 4: math.exp(5.1)})


def test_probe_tiers_keep_blur_marked_cells_once_each_ranked_by_scale():
    def rec(steps, acc, seed=0, key=None, **over):
        r = {"task": "marked", "mechanism": "blur", "depth": 2, "init": "uniform", "seed": seed,
             "steps": steps, "acc": acc, **over}  # fmt: skip
        return {**r, "key": key} if key else r

    paper, quick = {"200": 0.5, "350": 0.1}, {"200": 0.4, "350": 0.2}
    recs = [
        rec(2500, paper),
        rec(2500, paper),  # the same cell again (no key: its fields): counted once
        rec(3000, paper, seed=1, key="k1"),
        rec(3000, paper, seed=2, key="k1"),  # the same key: the first kept
        rec(400, quick),
        rec(150, {"125": 0.9}),  # the demo's reduced probe
        rec(2500, paper, seed=5, mechanism="learned"),  # not Table 2's mechanism
        rec(2500, paper, seed=6, task="shift"),  # not the marked task
    ]
    tiers = {t.scale: t for t in le.group_probes(recs, "here")}
    assert set(tiers) == {"paper", "quick", "reduced"}
    p = tiers["paper"]
    assert len(p.records) == 2 and [r["seed"] for r in p.records] == [0, 1]
    assert p.rank == (le.PROBE_RANK["paper"], 3000)
    assert p.setup == "2 marked-probe cells, distances [200, 350], 2500/3000 steps (here)"
    assert tiers["quick"].rank == (le.PROBE_RANK["quick"], 400)
    assert tiers["reduced"].setup == "1 marked-probe cell, distances [125], 150 steps (here)"
    ranked = le.Evidence(tiers=list(tiers.values())).of("probe")
    assert [t.scale for t in ranked] == ["paper", "quick", "reduced"]


def test_every_entry_says_where_its_verdict_comes_from_in_one_shape(tmp_path):
    """claims.json's contract, entry by entry, on a ledger built from the synthetic store and a
    demo tier beside it: ``evidence`` is {tier, scale, runs}, each weaker tier in ``also`` is
    {tier, scale, verdict, label, here}; computed claims say so (``computed`` / ``exact``),
    untested ones name no tier; a demo tier's held stays a measured ``raw_verdict`` only."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from fixture_store import write_fixture

    from analysis.ledger import ledger
    from lab.store import Store

    write_fixture(str(tmp_path / "s.db"))
    with Store(str(tmp_path / "s.db")) as st:
        ev = le.from_store(st)
    led = ledger.build(ev)
    kinds = set()
    for e in led.entries:
        assert set(e.evidence) == {"tier", "scale", "runs"}, e.id
        assert isinstance(e.evidence["runs"], list), e.id
        for a in e.also:
            assert set(a) == {"tier", "scale", "verdict", "label", "here"}, e.id
        if e.kind in ledger.COMPUTED:
            assert (e.evidence["tier"], e.evidence["scale"]) == ("computed", "exact"), e.id
        elif e.verdict == "not tested here":
            assert e.evidence == {"tier": None, "scale": None, "runs": []}, e.id
            assert e.why, e.id  # and says why
        else:
            assert e.evidence["tier"].startswith(f"{e.evidence['scale']}: "), e.id
        kinds.add(e.verdict)
    assert {"not tested here", "held"} <= kinds
    # the same runs as a demo tier (too small to decide): a held becomes not shown, the measured
    # verdict kept, the numbers and runs shown as they were
    (tier,) = ev.of("lm")
    demo = le.Evidence(tiers=[replace(tier, scale="demo", decides=False)])
    small = {e.id: e for e in ledger.build(demo).entries}
    big = {e.id: e for e in led.entries}
    decided = [
        i for i, e in big.items() if e.verdict in ledger.DECISIVE and e.kind.startswith("lm")
    ]
    assert decided
    for i in decided:
        s, v = small[i], big[i].verdict
        assert s.verdict == "not shown" and s.stats["raw_verdict"] == v, i
        assert s.here == big[i].here and s.evidence["runs"] == big[i].evidence["runs"], i
        assert f"only demo-scale runs test it (as measured: {v})" in s.why, i


def _entry(i, verdict, source="paper", label=None, why="", contradicts=""):
    from analysis.ledger.ledger import Entry

    return Entry(i, source, "c", "p", "w", "lm-ppl", verdict, "h", label=label, why=why,
                 paper_contradicts=contradicts)  # fmt: skip


def test_the_summary_line_and_what_cannot_be_decided_by_hand():
    from analysis.ledger.ledger import VERDICTS, Ledger

    led = Ledger(
        [
            _entry("a", "held"),
            _entry("b", "not shown", label="at chance"),
            _entry("c", "not shown", why="only demo-scale runs test it"),
            _entry("d", "not tested here", contradicts="Table 2 says otherwise"),
            _entry("e", "held", source="lab"),
        ]
    )
    counts = {v: 0 for v in VERDICTS} | {"held": 1, "not shown": 2, "not tested here": 1}
    assert led.counts() == counts
    parts = ", ".join(
        f"{n} {v}" + (" (1 at chance)" if v == "not shown" else "") for v, n in counts.items()
    )
    assert led.summary() == (
        f"the paper's claims (4): {parts}; 1 contradicted by the paper's own numbers; "
        "the lab's own findings (1) are not counted"
    )
    assert [e.id for e in led.cannot_decide()] == ["c", "d"]
    quiet = Ledger([_entry("a", "held")])
    assert quiet.summary() == (
        "the paper's claims (1): "
        + ", ".join(f"{int(v == 'held')} {v}" for v in VERDICTS)
        + "; the lab's own findings (0) are not counted"
    )


def test_claims_files_name_their_duplicate_ids_and_may_lack_a_section(tmp_path):
    from analysis.ledger.ledger import load_claims

    one = 'id = "x"\nkind = "coverage"\nclaim = "c"\n'
    p = tmp_path / "paper-only.toml"
    p.write_text(f"[[paper]]\n{one}")
    assert [c["id"] for c in load_claims(str(p))[0]] == ["x"] and load_claims(str(p))[1] == []
    p.write_text(f"[[lab]]\n{one}")
    assert load_claims(str(p))[0] == [] and [c["id"] for c in load_claims(str(p))[1]] == ["x"]
    p.write_text(f"[[paper]]\n{one}\n[[lab]]\n{one}")  # twice: once in each section
    with pytest.raises(ValueError, match=r"claim ids \['x'\] appear more than once; give each"):
        load_claims(str(p))


def test_claims_json_is_written_whole_with_one_space_indents(tmp_path):
    from analysis.ledger.ledger import Ledger

    path = Ledger([_entry("a", "held")]).write_json(str(tmp_path / "claims.json"))
    text = open(path, encoding="utf-8").read()
    assert text.splitlines()[1].startswith(' "') and not text.splitlines()[1].startswith("  ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims.json"]  # no temp file left
