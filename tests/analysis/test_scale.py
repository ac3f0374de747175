"""The scale study (issue 40; claims.toml [scale]): registered before its runs, its stages and
cells what the registration says, its coverage differences a hand count, its hash apart from the
confirmation's, each finished run a committed row, and a second session training only what the
rows lack.  Oracles: the Fibonacci rule counted by hand, the frozen confirmation hash, the
smoke-sized recipe trained for real."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from analysis.experiments.study import confirm as C
from analysis.experiments.study import scale as S
from analysis.experiments.study import scale_probes as SPR
from analysis.experiments.study import scale_protocol as P
from analysis.experiments.study import scale_verdicts as V
from analysis.experiments.study.plan import STUDY_SCALES
from analysis.experiments.study.runner import study_config

FIB = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]


def beyond_window(alphas, T, W=12):
    """Distinct distances in (W, T) that any layer attends: round(α·f), half to even."""
    return {round(a * f) for a in alphas for f in FIB if W < round(a * f) < T}


def test_the_coverage_differences_are_a_hand_count():
    sc = P.load_scale()
    for (L, T), want in zip(sc["cells"], sc["coverage_difference"]):
        stagger = [0.5 + k / (L - 1) for k in range(L)]  # the linear stagger 0.5 … 1.5
        assert len(beyond_window(stagger, T)) - len(beyond_window([1.0] * L, T)) == want, (L, T)
    p = sc["paper_point"]
    stagger = [0.5 + k / 15 for k in range(16)]
    assert len(beyond_window(stagger, 1024)) - len(beyond_window([1.0], 1024)) == 110
    assert p["coverage_difference"] == 110


def test_the_stages_are_the_registered_cells_seed_by_seed():
    st = {s.name: s for s in P.stages()}
    assert list(st) == ["L8-T128", "L8-T128-depth", "L4-T512", "L8-T512"]
    assert all(s.cell != (4, 128) for s in st.values())  # the confirmation's runs are that point
    assert [len(s.runs) for s in st.values()] == [20, 15, 20, 20]
    assert st["L8-T128"].runs[:4] == (("stagger", 1), ("fixed", 1), ("stagger", 2), ("fixed", 2))
    assert {s for s, _ in st["L8-T128-depth"].runs} == {"coprime", "pow2-fixed", "pow2-stagger"}
    for s in st.values():
        assert len(set(s.runs)) == len(s.runs)
    cfg = study_config(P.cell_settings((8, 512)), "scale-L8", "pow2-fixed", 3, 500, "r", "fp32")
    m = cfg.model
    assert (m.n_layers, m.seq_len, m.window, m.base, m.schedule) == (8, 512, 12, "pow2", "fixed")
    assert cfg.micro_batch * m.seq_len == cfg.tokens_per_step == 4096
    assert cfg.name == "scale-L8-pow2-fixed-s3-T512-500" and cfg.precision == "fp32"


def test_the_scale_registration_leaves_the_confirmations_hash_alone():
    """The scale claims post-date the confirmation's freeze: its hash must not move."""
    with open(os.path.join(C.RESULTS_DIR, "registration.json")) as f:
        frozen = json.load(f)["protocol_sha256"]
    assert C.protocol_hash() == frozen
    sc = P.load_scale()
    base = P.protocol_hash(sc)
    changed = {**sc, "trend": {**sc["trend"], "covariance": "HC0"}}
    assert P.protocol_hash(changed) != base  # every field of [scale] is hashed
    assert P.protocol_hash({**sc, "steps": 1000}) != base


def test_register_once_and_refuse_a_changed_protocol(tmp_path, monkeypatch):
    out = str(tmp_path)
    with pytest.raises(ValueError, match="no registration"):
        P.check_registered(out)
    doc = P.register(out)
    assert P.check_registered(out)["protocol_sha256"] == doc["protocol_sha256"]
    assert [s["name"] for s in doc["stages"]][0] == "L8-T128"
    with pytest.raises(ValueError, match="frozen once"):
        P.register(out)
    real = P.load_scale()
    monkeypatch.setattr(P, "load_scale", lambda path=None: {**real, "steps": 250})
    with pytest.raises(ValueError, match="changed since it was frozen"):
        P.check_registered(out)


def test_the_cli_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(P, "RESULTS_DIR", str(tmp_path))
    assert S.main(["--stage", "L8-T128"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no registration" in err[0] and "--register" in err[0]


def test_trend_runs_join_the_confirmations_point():
    sc = P.load_scale()
    rows = [
        {"stage": "L8-T128", "cell": [8, 128], "scheme": "stagger", "seed": 1,
         "run": {"ppl": 40.0}},
        {"stage": "L8-T128", "cell": [8, 128], "scheme": "fixed", "seed": 1,
         "run": {"ppl": None}},
        {"stage": "L8-T128-depth", "cell": [8, 128], "scheme": "coprime", "seed": 1,
         "run": {"ppl": 39.0}},
    ]  # fmt: skip
    conf = [{"scheme": "stagger", "seed": 11, "run": {"ppl": 41.0}},
            {"scheme": "dense", "seed": 4, "run": {"ppl": 43.0}}]  # fmt: skip
    got = V.trend_runs(rows, conf, sc)
    assert got[0] == ((8, 128), 27, "stagger", 40.0)
    assert got[1][:3] == ((8, 128), 27, "fixed") and math.isnan(got[1][3])
    assert got[2] == ((4, 128), 13, "stagger", 41.0) and len(got) == 3


def _synthetic_rows(sc, stage_names, rng):
    """A committed row for every planned run of ``stage_names`` (ppl only: what the trend reads)."""
    out = []
    for st in P.stages(sc):
        if st.name in stage_names:
            for scheme, seed in st.runs:
                ppl = float(37.0 * math.exp(rng.normal(0, 0.01)))
                out.append({"stage": st.name, "cell": list(st.cell), "scheme": scheme,
                            "seed": seed, "run": {"ppl": ppl}})  # fmt: skip
    return out


def test_decide_tests_nothing_until_every_planned_run_is_committed(tmp_path, monkeypatch):
    """On part of the plan every verdict is "pending", naming what is in, and no statistic is
    computed (an interim look is not what was registered); once the trend's cells are all in,
    the registered test runs on all of them, while the depth claims still wait for theirs."""
    out = str(tmp_path)
    with open(os.path.join(P.RESULTS_DIR, P.REGISTRATION)) as f:
        reg = f.read()
    with open(os.path.join(out, P.REGISTRATION), "w") as f:
        f.write(reg)
    sc = P.load_scale()
    rng = np.random.default_rng(0)
    rows = _synthetic_rows(sc, {"L8-T128"}, rng)
    rows += _synthetic_rows(sc, {"L8-T128-depth"}, rng)[:5]
    for r in rows:
        with open(os.path.join(out, P.ROWS), "a") as f:
            f.write(json.dumps(r) + "\n")
    import analysis.statistics.trend as T

    def no_test(runs):
        raise AssertionError("a test ran on part of the plan")

    monkeypatch.setattr(T, "trend_test", no_test)
    got = V.decide(out)
    assert P.missing(rows, sc) == {"L8-T128": 0, "L8-T128-depth": 10, "L4-T512": 20, "L8-T512": 20}
    assert got["trend"]["verdict"] == "pending" and set(got["trend"]) == {"verdict", "why"}
    assert "L4-T512 0 of 20" in got["trend"]["why"] and "L8-T128 " not in got["trend"]["why"]
    assert {v["verdict"] for v in got["depth"].values()} == {"pending"}
    assert set(got["depth"]) == set(sc["depth"]["claims"])
    assert "L8-T128-depth 5 of 15" in got["depth"]["t1-pow2-fixed-weakest"]["why"]
    assert got["landscape"]["verdict"] == "pending"  # no landscape rows here
    assert got["battery"][sc["recall"]["claim"]]["verdict"] == "pending"
    assert {"bat-ruler-chance", "bat-lego-chance"} <= set(got["battery"])  # a decided one's keys
    assert json.load(open(os.path.join(out, "claims.json")))["trend"]["verdict"] == "pending"
    page = open(os.path.join(out, "report.md")).read()
    assert "| `L8-T512` | 0 | 20 |" in page and "| `L8-T128-depth` | 5 | 15 |" in page
    assert "**pending**: the trend test is computed once" in page and V.FIGURE not in page

    monkeypatch.undo()
    more = _synthetic_rows(sc, {"L4-T512", "L8-T512"}, rng)
    with open(os.path.join(out, P.ROWS), "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in more)
    got = V.decide(out)
    assert got["trend"]["verdict"] in ("held", "did not hold", "not shown")
    assert got["trend"]["n_runs"] == 60 + 20  # three cells' 20 each, the confirmation's 20
    assert os.path.exists(os.path.join(out, "trend.png"))
    page = open(os.path.join(out, "report.md")).read()
    assert f"![the stagger's gain against coverage]({V.FIGURE})" in page
    assert got["trend"]["caption"] in page and f"**{got['trend']['verdict']}**" in page
    for c in got["trend"]["cells"]:  # one row a cell, its gap as decided
        assert f"| ({c['cell'][0]}, {c['cell'][1]}) | {c['coverage_difference']} | " in page
        assert f"{c['n_stagger']} + {c['n_fixed']} | {c['gap']:+.4f} |" in page
    assert {v["verdict"] for v in got["depth"].values()} == {"pending"}


def test_a_stage_trains_commits_each_row_and_resumes_elsewhere(tmp_path):
    out, runs = str(tmp_path / "results"), str(tmp_path / "runs")
    P.register(out)
    sc = {**P.load_scale(), "steps": 2, "cells": [[4, 128], [2, 32]],
          "coverage_difference": [13, 0], "order": ["L2-T32", "L2-T32-depth"],
          "schemes": {"stagger": [1, 2], "fixed": [1, 1]},
          "depth": {**P.load_scale()["depth"], "cell": [2, 32],
                    "schemes": {"pow2-fixed": [1, 1]}}}  # fmt: skip
    smoke = STUDY_SCALES["study-smoke"]
    said = []
    quiet = dict(out_dir=out, log=lambda *a, **k: said.append(" ".join(map(str, a))), scale=sc,
                 settings=smoke)  # fmt: skip
    got = S.run_stage("L2-T32", limit=2, runs_dir=runs, **quiet)
    assert any(x.startswith("≈ ") and " h for 2 runs (a step now: fixed " in x for x in said)
    assert [(r["scheme"], r["seed"]) for r in got] == [("stagger", 1), ("fixed", 1)]
    disk = P.read_rows(out)
    assert disk == json.loads(json.dumps(got)) and disk[0]["cell"] == [2, 32]
    assert disk[0]["run"]["name"] == "scale-L2-stagger-s1-T32-2"
    assert disk[0]["setup"]["n_layers"] == 2 and math.isfinite(disk[0]["run"]["ppl"])
    again = S.run_stage("L2-T32", runs_dir=str(tmp_path / "elsewhere"), **quiet)
    assert [(r["scheme"], r["seed"]) for r in again][2:] == [("stagger", 2)]
    with pytest.raises(ValueError, match="unknown"):
        S.run_stage("L9-T9", runs_dir=runs, **quiet)


def test_the_landscape_rule_is_a_one_sided_t_of_the_rises_against_the_seed_noise():
    from scipy import stats

    conf = [{"scheme": s, "seed": k, "run": {"ppl": p}}
            for s, ps in (("fixed", [41.0, 41.5, 42.0, 41.2]), ("learned", [41.3, 40.9]))
            for k, p in enumerate(ps)]  # fmt: skip
    logs = {
        s: np.log([r["run"]["ppl"] for r in conf if r["scheme"] == s]) for s in ("fixed", "learned")
    }
    sigma = math.sqrt(sum(((v - v.mean()) ** 2).sum() for v in logs.values()) / (4 - 1 + 2 - 1))

    def rows(rises):
        return [
            {"scheme": ("fixed", "learned")[i % 2],
             "points": [{"loss": 3.7}, {"loss": 3.7 + r}, {"loss": 3.7 + r / 2}]}
            for i, r in enumerate(rises)
        ]  # fmt: skip

    flat = [0.001, 0.002, 0.0015, 0.003]
    got = SPR.landscape_verdict(rows(flat), conf)
    assert got["sigma"] == pytest.approx(sigma) and got["rises"] == pytest.approx(flat)
    want = stats.ttest_1samp(flat, sigma, alternative="less").pvalue
    assert got["p"] == pytest.approx(want) and got["verdict"] == "held"
    # its words carry the numbers a reader checks (the report's "here" column)
    assert f"mean {np.mean(flat):.4f} nats" in got["here"] and f"σ {sigma:.4f}" in got["here"]
    # each scheme apart beside it (the fixed runs must not speak for the learned): a reading
    learned = flat[1::2]
    assert got["schemes"]["learned"]["mean_rise"] == pytest.approx(np.mean(learned))
    assert got["schemes"]["learned"]["p"] == pytest.approx(
        stats.ttest_1samp(learned, sigma, alternative="less").pvalue
    )
    assert f"learned mean {np.mean(learned):.4f} over 2 runs, 0 above σ" in got["here"]
    steep = [0.2, 0.3, 0.25, 0.4]
    got = SPR.landscape_verdict(rows(steep), conf)
    assert got["p_against"] == pytest.approx(
        stats.ttest_1samp(steep, sigma, alternative="greater").pvalue
    )
    assert got["verdict"] == "did not hold"
    assert SPR.landscape_verdict(rows([0.1]), conf)["verdict"] == "not tested here"


# ----------------------------------------------------------------------------------- amendments
def test_an_amendment_is_hashed_apart_and_frozen_once(tmp_path, monkeypatch):
    """[amendment.w8-tie] leaves the [scale] and confirmation hashes alone (tested above), hashes
    its own table, its claims' tests and the [scale] hash it amends, is frozen once, after
    [scale] and before its runs, and may name only claims [scale] left undecided."""
    from analysis.statistics.power import tost_power, tost_seeds_needed

    ams = P.load_amendments()
    am = ams["w8-tie"]
    assert am["claims"] == ["t1-coprime-ties-stagger"] and am["window"] == 8
    # the hashed plan is what the power functions give for its registered σ
    pl = am["plan"]
    n = tost_seeds_needed(pl["margin"], pl["sigma_ln"], pl["target"], pl["alpha"])
    assert n == pl["seeds_needed"] == am["schemes"]["coprime"][1] == am["schemes"]["stagger"][1]
    assert round(tost_power(pl["margin"], pl["sigma_ln"], n, n, pl["alpha"]), 2) == pl["power"]
    (st,) = [s for s in P.amendment_stages() if s.amendment == "w8-tie"]
    assert st.name == "L8-T128-W8" and st.cell == (8, 128)
    assert st.runs[:3] == (("coprime", 1), ("stagger", 1), ("coprime", 2)) and len(st.runs) == 38
    h = P.amendment_hash("w8-tie", "ab" * 32)
    assert h != P.amendment_hash("w8-tie", "cd" * 32)  # the [scale] it amends is hashed in
    assert h != P.amendment_hash("w8-tie", "ab" * 32, {"w8-tie": {**am, "window": 16}})
    assert h != P.amendment_hash("w8-tie", "ab" * 32, {"w8-tie": {**am, "rationale": "x"}})
    out = str(tmp_path)
    scale_hash = P.register(out)["protocol_sha256"]
    doc = P.register_amendment("w8-tie", out, scale_hash)
    assert doc["stage"]["name"] == "L8-T128-W8" and doc["amends_sha256"] == scale_hash
    got = P.check_amendment("w8-tie", out, scale_hash)
    assert got["protocol_sha256"] == doc["protocol_sha256"]
    with pytest.raises(ValueError, match="frozen once"):
        P.register_amendment("w8-tie", out, scale_hash)
    with pytest.raises(ValueError, match="unknown"):
        P.register_amendment("w9", out, scale_hash)
    changed = {"w8-tie": {**am, "schemes": {"coprime": [1, 9], "stagger": [1, 9]}}}
    monkeypatch.setattr(P, "load_amendments", lambda path=None: changed)
    with pytest.raises(ValueError, match="changed since it was frozen"):
        P.check_amendment("w8-tie", out, scale_hash)
    # a claim [scale] decided (the committed claims.json) cannot be decided again
    with (
        open(os.path.join(P.RESULTS_DIR, "claims.json")) as f,
        open(os.path.join(out, "claims.json"), "w") as g,
    ):
        g.write(f.read())
    again = {"t5": {**am, "claims": ["t5-coprime-ties-stagger"]}}
    monkeypatch.setattr(P, "load_amendments", lambda path=None: again)
    with pytest.raises(ValueError, match="decided already"):
        P.register_amendment("t5", out, scale_hash)
    cfg = study_config(P.cell_settings((8, 128), window=8), "scale-w8-L8", "coprime", 1, 500,
                       "r", "fp32")  # fmt: skip
    assert (cfg.model.window, cfg.model.n_layers, cfg.model.schedule) == (8, 8, "coprime")


def test_an_amendments_stage_trains_at_its_window_into_its_own_folder(tmp_path, monkeypatch):
    out, runs = str(tmp_path / "results"), str(tmp_path / "runs")
    smoke = {"t": {"amends": "scale", "cell": [2, 32], "window": 1, "steps": 2,
                   "precision": "fp32", "prefix": "scale-t", "schemes": {"coprime": [1, 1]},
                   "claims": ["t1-coprime-ties-stagger"]}}  # fmt: skip
    monkeypatch.setattr(P, "load_amendments", lambda path=None: smoke)
    quiet = dict(out_dir=out, log=lambda *a: None, settings=STUDY_SCALES["study-smoke"])
    scale_hash = P.register(out)["protocol_sha256"]
    with pytest.raises(ValueError, match="register-amendment t"):
        S.run_stage("L2-T32-W1", runs_dir=runs, **quiet)  # not frozen yet: nothing trains
    P.register_amendment("t", out, scale_hash)
    (row,) = S.run_stage("L2-T32-W1", runs_dir=runs, **quiet)
    assert row["run"]["W"] == 1 and row["run"]["name"] == "scale-t-L2-coprime-s1-T32-2"
    assert row["stage"] == "L2-T32-W1" and row["setup"]["n_layers"] == 2
    assert P.amendment_rows(P.amendment_folder("t", out)) == [json.loads(json.dumps(row))]
    assert P.read_rows(out) == []  # [scale]'s rows untouched


def _w8_rows(template: dict, spread: float, shift: float, rng) -> list[dict]:
    """A row for each planned W = 8 run, built from a committed depth-cell row: ln ppl drawn
    around 37 (coprime ``shift`` nats above stagger), every factor's perplexity moved alike."""
    import copy

    out = []
    for scheme, seed in next(s for s in P.amendment_stages() if s.amendment == "w8-tie").runs:
        x = copy.deepcopy(template)
        ppl = 37.0 * math.exp(rng.normal(shift if scheme == "coprime" else 0.0, spread))
        f = ppl / x["run"]["ppl"]
        x.update(stage="L8-T128-W8", scheme=scheme, seed=seed)
        x["run"].update(W=8, seed=seed, label=f"fib/{scheme}", ppl=ppl,
                        name=f"scale-w8-L8-{scheme}-s{seed}-T128-500")  # fmt: skip
        x["run"]["ext"] = {k: v * f for k, v in x["run"]["ext"].items()}
        out.append(x)
    return out


def _decide_with(out: str, rows: list[dict]) -> dict:
    path = os.path.join(P.amendment_folder("w8-tie", out), P.ROWS)
    with open(path, "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in rows)
    return V.decide(out)


def test_an_amendment_decides_its_claim_on_its_own_runs_alone(tmp_path, monkeypatch):
    """The committed [scale] rows plus synthetic W = 8 rows: "pending" while unregistered or
    short of its plan; then t1-coprime-ties-stagger is the claim's registered TOST on the W = 8
    runs alone (oracle: statsmodels' Welch TOST at α/2), every depth claim as [scale] decided
    it; rows outside the plan, or a changed table, are errors, not "pending"."""
    from statsmodels.stats.weightstats import ttost_ind

    from analysis.ledger import verdict_words as VW

    out = str(tmp_path)
    for name in (P.REGISTRATION, P.ROWS):
        with open(os.path.join(P.RESULTS_DIR, name)) as f, open(os.path.join(out, name), "w") as g:
            g.write(f.read())
    template = next(r for r in P.read_rows(out) if r["scheme"] == "coprime")
    before = V.decide(out)
    assert "not registered" in before["amendments"]["w8-tie"]["t1-coprime-ties-stagger"]["why"]
    P.register_amendment("w8-tie", out, P.check_registered(out)["protocol_sha256"])
    rows = _w8_rows(template, 0.004, 0.0, np.random.default_rng(3))
    part = _decide_with(out, rows[:-1])["amendments"]["w8-tie"]["t1-coprime-ties-stagger"]
    assert part["verdict"] == "pending" and "37 of 38" in part["why"]
    got = _decide_with(out, rows)
    (only,) = got["amendments"]["w8-tie"].items()
    log = {k: [math.log(r["run"]["ppl"]) for r in rows if r["scheme"] == k]
           for k in ("coprime", "stagger")}  # fmt: skip
    p = ttost_ind(log["coprime"], log["stagger"], -0.013, 0.013, usevar="unequal")[0]
    assert p < 0.025 and only == ("t1-coprime-ties-stagger", only[1])
    assert only[1]["verdict"] == "held" and "at W=8" in only[1]["here"]
    assert "(n=19) vs" in only[1]["here"] and "own power for a true tie" in only[1]["here"]
    assert got["depth"] == before["depth"]  # never re-decided with these runs
    (t1,) = [c for c in VW.lm_claims(got) if c["id"] == "t1-coprime-ties-stagger"]
    assert t1["verdict"] == "held" and t1["here"].startswith("amendment `w8-tie` (SHA-256")
    far = _decide_with(out, _w8_rows(template, 0.004, 0.05, np.random.default_rng(4)))
    assert far["amendments"]["w8-tie"]["t1-coprime-ties-stagger"]["verdict"] == "did not hold"
    with pytest.raises(ValueError, match="outside its plan"):
        _decide_with(out, rows + rows[:1])  # a row merged twice
    moved = [dict(r, run={**r["run"], "W": 12}) if i == 0 else r for i, r in enumerate(rows)]
    with pytest.raises(ValueError, match="outside its plan"):
        _decide_with(out, moved)
    am = P.load_amendments()["w8-tie"]
    monkeypatch.setattr(P, "load_amendments", lambda path=None: {"w8-tie": {**am, "steps": 250}})
    with pytest.raises(ValueError, match="changed since it was frozen"):
        _decide_with(out, rows)


def test_the_committed_report_is_the_committed_verdicts_in_their_own_words():
    """``report.md`` is what `report` writes from the committed claims.json (never re-decided),
    each claim's row carrying that file's verdict and label, word for word."""
    doc = V.committed()
    with open(os.path.join(P.RESULTS_DIR, "report.md"), encoding="utf-8") as f:
        page = f.read()
    assert page == V.report(doc)
    assert f"{doc['runs']} of the {doc['planned']} runs its four stages plan committed" in page
    # decided from every committed row: a row committed without re-deciding leaves it stale
    assert doc["runs"] == len(P.read_rows()), "python -m analysis.experiments.study.scale --decide"
    parts = [doc["depth"], *doc["amendments"].values(), doc["battery"],
             {"lm-alpha-flat-landscape": doc["landscape"]}]  # fmt: skip
    for part in parts:
        for cid, v in part.items():
            label = f" ({v['label']})" if v.get("label") else ""
            assert (
                f'| <code style="white-space:nowrap">{cid}</code> | **{v["verdict"]}**{label} | '
                in page
            ), cid
    # a decided trend's figure is committed beside the report that links it
    if doc["trend"].get("cells"):
        assert f"]({V.FIGURE})" in page
        assert os.path.getsize(os.path.join(P.RESULTS_DIR, V.FIGURE)) > 10_000


def test_a_claim_row_breaks_at_semicolons_of_prose_not_of_inline_code():
    """The table's "here" cell reads a clause a line, and a semicolon inside backticks stays in
    its span (a ``<br>`` there would print literally).  Oracle: the row written by hand."""
    why = "gap 0.31 nats; p = 0.002; rule `a; b` met; done"
    (row,) = V._claims_table({"c1": {"verdict": "held", "why": why}})[2:]
    assert row == (
        '| <code style="white-space:nowrap">c1</code> | **held** | '
        "gap 0.31 nats;<br>p = 0.002;<br>rule `a; b` met;<br>done |"
    )


def test_a_claim_row_knows_commonmark_code_spans_of_any_length_and_a_lone_backtick():
    """A span opened by two backticks ends at the next two (a single one inside is code), and a
    backtick nobody closes is a literal character: the prose after it still breaks.  Oracle: the
    cells written by hand, read against CommonMark's code-span rule."""
    cell = V._clause_lines
    assert cell("x; ``a`b; c``; y") == "x;<br>``a`b; c``;<br>y"
    assert cell("it's 5` wide; then") == "it's 5` wide;<br>then"
    assert cell("```a``; b```; c") == "```a``; b```;<br>c"
    assert cell("``a; b`; c") == "``a;<br>b`;<br>c"  # two opened, one closes nothing


def test_the_plan_prints_every_stage_and_amendment_with_what_it_lacks():
    """`plan_lines` from step times given by hand (the oracle: steps × time + one evaluation a
    run, per stage's missing runs)."""
    sc = P.load_scale()
    stages = P.stages(sc) + P.amendment_stages()
    times = {(st.cell, s): 0.5 for st in stages for s, _ in st.runs}
    lines = S.plan_lines(times, sc, eval_s=10.0)
    assert [ln.split()[0] for ln in lines] == [st.name for st in stages]
    (w8,) = [ln for ln in lines if ln.startswith("L8-T128-W8")]
    have = len(P.amendment_rows(P.amendment_folder("w8-tie", P.RESULTS_DIR)))
    todo = 38 - have
    assert f"{todo} of 38 runs to train" in w8
    assert f"≈ {todo * (0.5 * 500 + 10.0) / 3600:.1f} h" in w8


def test_a_stage_says_its_time_before_it_trains_and_how_to_split_it():
    """`stage_estimate` against a hand count: steps × the step time + 15 s an evaluation."""
    todo = [("coprime", 1), ("stagger", 1)] * 19
    line = S.stage_estimate(todo, {"coprime": 0.58, "stagger": 0.58}, 500)
    total = 38 * (0.58 * 500 + 15)  # 11,590 s
    assert line.startswith(f"≈ {total / 3600:.1f} h for 38 runs (a step now: coprime 0.58 s")
    assert f"--limit {int(9000 // (total / 38))}" in line  # 29 runs fit 2.5 h
    assert "--limit" not in S.stage_estimate(todo[:4], {"coprime": 0.58, "stagger": 0.58}, 500)


def test_decide_refuses_when_the_confirmation_it_reads_is_not_its_frozen_protocol(
    tmp_path, monkeypatch
):
    """The landscape and the battery read the confirmation's runs: a changed confirmation
    protocol stops the decision with the confirmation's own message."""
    out = str(tmp_path)
    for name in (P.REGISTRATION, P.ROWS):
        with open(os.path.join(P.RESULTS_DIR, name)) as f, open(os.path.join(out, name), "w") as g:
            g.write(f.read())
    monkeypatch.setattr(C, "protocol_hash", lambda *a, **k: "0" * 64)
    with pytest.raises(ValueError, match="changed since it was frozen"):
        V.decide(out)


def test_a_side_study_names_the_confirmation_runs_it_has_no_row_for(tmp_path, monkeypatch):
    """`missing` is what a resumed --landscape / --recall restores and scores, one run at a
    time: the landscape reads fixed and learned runs, the battery every run; a committed row
    takes its run off the list (oracle: the rows written by hand)."""
    conf = [{"scheme": s, "seed": n, "run": {"name": f"{s}-{n}"}}
            for s in ("stagger", "fixed", "learned") for n in (1, 2)]  # fmt: skip
    monkeypatch.setattr(SPR.confirm, "read_rows", lambda *a: conf)
    out = str(tmp_path)
    assert SPR.missing(out, "landscape") == ["fixed-1", "fixed-2", "learned-1", "learned-2"]
    assert len(SPR.missing(out, "recall")) == 6
    with open(os.path.join(out, SPR.LANDSCAPE), "w") as f:
        f.write(json.dumps({"name": "fixed-2", "points": []}) + "\n")
    with open(os.path.join(out, SPR.RECALL), "w") as f:
        f.write(json.dumps({"name": "stagger-1", "battery": {}}) + "\n")
    assert SPR.missing(out, "landscape") == ["fixed-1", "learned-1", "learned-2"]
    assert "stagger-1" not in SPR.missing(out, "recall") and len(SPR.missing(out, "recall")) == 5


def test_the_battery_scores_only_the_named_run_so_each_row_is_committed_alone(
    tmp_path, monkeypatch
):
    """`scale --recall` restores and scores one run a call (`names`): the first call after the
    landscape, which left fifteen checkpoints here, must not score them all in one uncommitted
    go.  Oracle: the rows written, against the one name passed."""
    import types

    import probes.battery_run as BR
    from lab.training.checkpoint import save_checkpoint

    conf = [{"scheme": "fixed", "seed": n, "setup": {"steps": 500}, "run": {"name": f"fixed-{n}"}}
            for n in (1, 2, 3, 4)]  # fmt: skip
    monkeypatch.setattr(SPR.confirm, "read_rows", lambda *a: conf)
    runs = tmp_path / "runs"
    for r, step in zip(conf, (500, 500, 500, 250)):  # fixed-4: a restore killed part-way
        save_checkpoint(str(runs / r["run"]["name"]), step, {"step": step}, keep=1)
    scored = []

    def score_run(folder, n, seed):
        scored.append(os.path.basename(folder))
        row = types.SimpleNamespace(task="assoc_recall", accuracy=0.1, chance=1 / 12, items=n,
                                    at_chance=True, p_value=0.5)  # fmt: skip
        return types.SimpleNamespace(rows=[row])

    monkeypatch.setattr(BR, "score_run", score_run)
    out = str(tmp_path / "out")
    os.makedirs(out)
    SPR.run_recall(out, str(runs), log=lambda *a: None, names={"fixed-2"})
    assert scored == ["fixed-2"] and [r["name"] for r in SPR.recall_rows(out)] == ["fixed-2"]
    said = []
    SPR.run_recall(out, str(runs), log=said.append)  # no names: every one not yet scored
    assert scored == ["fixed-2", "fixed-1", "fixed-3"]  # not the part-trained fixed-4
    assert any("fixed-4: no finished checkpoint" in s for s in said)


def test_the_battery_family_reading_counts_runs_above_chance_raw_and_after_holm():
    """Beside the registered per-run rule: how many runs are above chance at 0.05 raw and after
    Holm over the runs.  Oracle: Holm by hand (sorted p-values against 0.05 / (m − i), stopping
    at the first that fails) and a hand count; the report says it under the battery's table."""
    ps = [0.004, 0.03, 0.2, 0.0009, 0.6, 0.012]  # sorted: .0009 .004 .012 .03 .2 .6
    rows = [{"name": f"r{i}", "battery": {"assoc_recall": {
        "acc": 0.1 + i / 100, "chance": 1 / 12, "n": 100, "at_chance": p >= 0.05, "p": p}}}
        for i, p in enumerate(ps)]  # fmt: skip
    fam = SPR.recall_family(rows)["assoc_recall"]
    # Holm by hand: .0009 < .05/6, .004 < .05/5, .012 < .05/4, then .03 > .05/3 stops it
    assert fam["above_raw"] == 4 and fam["above_holm"] == 3
    assert fam["runs"] == 6 and fam["familywise_at_chance"] == pytest.approx(1 - 0.95**6)
    assert fam["mean_acc"] == pytest.approx(0.125)
    assert (fam["min_acc"], fam["max_acc"]) == pytest.approx((0.1, 0.15))
    page = "\n".join(V._family_lines({"assoc_recall": fam}))
    assert "| associative recall | 4 / 3 of 6 | 0.125 (0.100–0.150; 100 items) | 0.083 |" in page
    assert "not a verdict" in page and f"probability {1 - 0.95**6:.2f}" in page
    assert V._family_lines({}) == []
