"""The registered battery-at-chance confirmation (`analysis.experiments.study.battery_fresh`):
per task and configuration an exact binomial equivalence test with its "above" and "below"
hypotheses, Holm over all of them, decided only once every run has its row.  Oracles: the
one-sided tests from scipy's binomtest (TOST = the larger of the two, not statsmodels'
binom_tost), Holm by hand, a brute-force count of the TOST's rejection region, the battery's own
report for the scored counts."""

from __future__ import annotations

import os
import types

import pytest
from scipy.stats import binom, binomtest

from analysis.experiments.study import battery_fresh as B
from analysis.experiments.study import confirm as C
from analysis.experiments.study import fresh as F
from analysis.statistics.power import binomial_tost_power


def _holm(ps: list[float]) -> list[float]:
    """Holm's adjusted p-values by hand: sorted, (m − i)·p, running maximum, capped at 1."""
    order = sorted(range(len(ps)), key=ps.__getitem__)
    adj, top = [0.0] * len(ps), 0.0
    for i, j in enumerate(order):
        top = max(top, min(1.0, (len(ps) - i) * ps[j]))
        adj[j] = top
    return adj


@pytest.mark.parametrize("n, rate", [(300, 0.111), (300, 0.14), (2000, 0.5), (900, 0.09)])
def test_tost_power_is_the_mass_of_the_region_where_both_one_sided_tests_reject(n, rate):
    c, m, alpha = {300: 1 / 9, 2000: 0.5, 900: 1 / 12}[n], 0.03, 0.01
    region = [
        k
        for k in range(n + 1)
        if binomtest(k, n, c - m, alternative="greater").pvalue <= alpha
        and binomtest(k, n, c + m, alternative="less").pvalue <= alpha
    ]  # brute force
    want = sum(binom.pmf(k, n, rate) for k in region)
    assert binomial_tost_power(rate, n, c - m, c + m, alpha) == pytest.approx(want, abs=1e-12)
    assert binomial_tost_power(rate, 20, c - 0.001, c + 0.001, alpha) == 0.0  # none can reject


def _rows(counts: dict[str, list[tuple[int, int, int]]]) -> list[dict]:
    """Rows per scheme: (RULER, LEGO, recall) correct counts a run, at 300/300/100 items."""
    out = []
    for scheme, runs in counts.items():
        for i, (r, g, a) in enumerate(runs):
            tasks = {"ruler_vt": {"items": 300, "correct": r}, "lego": {"items": 300, "correct": g},
                     "assoc_recall": {"items": 100, "correct": a}}  # fmt: skip
            out.append({"name": f"{scheme}-{i}", "scheme": scheme, "step": 500, "tasks": tasks})
    return out


def test_the_45_hypotheses_their_holm_and_the_verdicts_by_the_registered_rule():
    proto = {**B.PROTOCOL, "margin": 0.05}
    # RULER at 1/9 on 2 × 300 items a scheme; LEGO far above 1/2 for "b"; recall: 100 items a
    # run, too few to show anything either way
    ordered = _rows({"a": [(33, 150, 8), (34, 152, 9)], "b": [(33, 200, 8), (32, 210, 9)]})
    cells = B.tests(ordered, proto)
    assert [(c["task"], c["scheme"]) for c in cells] == [
        (t, s) for t in B.TASKS for s in ("a", "b")
    ]
    raw = []
    for c in cells:
        ch = B.chance(c["task"])
        lo, up = ch - 0.05, ch + 0.05
        k, n = c["correct"], c["items"]
        p_lo = binomtest(k, n, lo, alternative="greater").pvalue
        p_up = binomtest(k, n, up, alternative="less").pvalue
        want = {"equivalent": max(p_lo, p_up),
                "above": binomtest(k, n, up, alternative="greater").pvalue,
                "below": binomtest(k, n, lo, alternative="less").pvalue}  # fmt: skip
        for h in ("equivalent", "above", "below"):
            assert c["p"][h] == pytest.approx(want[h], rel=1e-9)
            raw.append(want[h])
    adj = iter(_holm(raw))
    for c in cells:
        for h in ("equivalent", "above", "below"):
            a = next(adj)
            assert c["p_holm"][h] == pytest.approx(a, rel=1e-9)
            assert c["rejected"][h] == (a < 0.05)
    got = B.verdicts(cells)
    assert got == {"ruler_vt": "held", "lego": "did not hold", "assoc_recall": "not shown"}
    # below the margin decides too: LEGO far under 1/2 for "b", the rest as before
    low = B.tests(
        _rows({"a": [(33, 150, 8), (34, 152, 9)], "b": [(33, 90, 8), (32, 95, 9)]}), proto
    )
    assert [c["rejected"]["below"] for c in low if c["task"] == "lego"] == [False, True]
    assert B.verdicts(low)["lego"] == "did not hold"
    assert cells[0]["ci90"][0] < cells[0]["acc"] < cells[0]["ci90"][1]


def test_a_changed_battery_default_stops_the_decision(monkeypatch):
    """The protocol's text names the battery's defaults, which the hash does not cover: a
    change refuses `chance` (and so `decide`) rather than test the rows against another rate."""
    import probes.battery as PB

    assert B.chance("ruler_vt") == pytest.approx(1 / 9)
    monkeypatch.setattr(PB, "N_DISTRACTORS", 9)
    with pytest.raises(ValueError, match="defaults changed since battery-fresh was registered"):
        B.chance("ruler_vt")


def test_register_then_score_run_by_run_on_its_own_items_then_decide(tmp_path, monkeypatch):
    from lab.training.checkpoint import save_checkpoint

    out, runs = str(tmp_path / "bf"), tmp_path / "runs"
    names = ["fixed-1", "stagger-1", "fixed-2", "stagger-2"]
    conf = [{"scheme": n.split("-")[0], "seed": i, "setup": {"steps": 500}, "run": {"name": n}}
            for i, n in enumerate(names)]  # fmt: skip
    monkeypatch.setattr(C, "read_rows", lambda *a: conf)
    with pytest.raises(ValueError, match="--register"):
        B.run_score(out, str(runs))
    reg = B.register(out, conf)
    assert reg["runs"] == names and reg["protocol_sha256"] == B.protocol_hash()
    assert "ruler_vt" in reg["power"] and "alpha/45" in reg["power"]
    with pytest.raises(ValueError, match="registered already"):
        B.register(out, conf)
    for n in names:
        save_checkpoint(str(runs / n), 500, {"step": 500}, keep=1)
    seen = []

    def fake(folder, place, protocol=B.PROTOCOL):
        seen.append((os.path.basename(folder), place))
        tasks = {t: {"items": B.items_per_run(t), "correct": round(B.chance(t) * B.items_per_run(t)),
                     "acc": B.chance(t)} for t in B.TASKS}  # fmt: skip
        return {"item_seed": 1000 + place, "step": 500, "tasks": tasks}

    monkeypatch.setattr(B, "score", fake)
    B.run_score(out, str(runs), limit=1, log=lambda *a: None)
    doc = B.decide(out)
    assert doc["verdict"] == "pending" and "1 of 4" in doc["why"]
    assert "pending" in open(os.path.join(out, "report.md")).read()
    B.run_score(out, str(runs), log=lambda *a: None)
    assert seen == [(n, i) for i, n in enumerate(names)]  # each run its own item seed
    assert [r["item_seed"] for r in F.rows(out)] == [1000, 1001, 1002, 1003]
    doc = B.decide(out)
    # exactly at chance, two runs a scheme: every task shown inside chance ± 0.02 after Holm
    assert doc["verdicts"] == {t: "held" for t in B.TASKS}
    assert all(c["p_holm"]["above"] == 1.0 for c in doc["cells"])
    page = open(os.path.join(out, "report.md")).read()
    assert "## RULER: **held**" in page and "| fixed | 2 | 6000 |" in page
    monkeypatch.setitem(B.PROTOCOL, "margin", 0.03)
    with pytest.raises(ValueError, match="changed since it was frozen"):
        B.decide(out)


def test_a_run_is_scored_on_its_own_seed_with_the_batterys_own_counts(monkeypatch):
    """`score` on a tiny model: the counts are the battery's for seed_base + place (RULER and
    LEGO at n a cell, recall alone at recall_n), the step the checkpoint's."""
    import torch

    import lab.publish.export as E
    from lab.lm.model import build_model
    from probes.battery import run_battery

    torch.manual_seed(0)
    model = build_model("tiny")
    vocab = model.cfg.vocab_size
    cfg = types.SimpleNamespace(model=types.SimpleNamespace(vocab_size=vocab))
    monkeypatch.setattr(E, "run_model", lambda *a, **k: types.SimpleNamespace(
        model=model, config=cfg, step=7))  # fmt: skip
    proto = {**B.PROTOCOL, "n": 6, "recall_n": 10, "seed_base": 40}
    row = B.score("unused", 2, proto)
    full = run_battery(model, vocab, n=6, seed=42)
    alone = run_battery(model, vocab, n=10, seed=42, hops=(), lengths=())
    assert row["item_seed"] == 42 and row["step"] == 7
    assert row["tasks"]["ruler_vt"]["items"] == 18 and row["tasks"]["assoc_recall"]["items"] == 10
    assert row["tasks"]["ruler_vt"]["acc"] == pytest.approx(full["ruler_vt"]["acc"], abs=1e-6)
    assert row["tasks"]["lego"]["acc"] == pytest.approx(full["lego"]["acc"], abs=1e-6)
    assert row["tasks"]["assoc_recall"]["acc"] == pytest.approx(
        alone["assoc_recall"]["acc"], abs=1e-6
    )
    assert row["tasks"]["lego"]["correct"] == round(full["lego"]["acc"] * 18)


@pytest.mark.parametrize(
    "module, argv",
    [("confirm", []), ("scale", ["--stage", "L8-T128-W8"]), ("battery_fresh", ["--score"]),
     ("recall_fresh", ["--score"])],
)  # fmt: skip
@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_limit_below_one_is_refused_in_one_line_before_anything_runs(
    module, argv, limit, capsys, monkeypatch
):
    """Every registered study's command line: ``--limit -1`` would slice off the last run
    silently and 0 would do nothing; both end in one line and exit code 2, nothing started."""
    import importlib

    mod = importlib.import_module(f"analysis.experiments.study.{module}")
    started = []
    for name in ("run_confirmation", "run_stage", "run_score"):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, lambda *a, **k: started.append(name))
    assert mod.main([*argv, "--limit", limit]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--limit={limit}" in err[0] and "pass 1 or more" in err[0]
    assert started == []
