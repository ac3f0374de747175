"""`fiblab demo --scale study`: every stage at smoke scale, reuse on a second run, the exact
continuation of a rung, the rung rule, the seeds plan and the budget cap (analysis.experiments.study.study*)."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from analysis.experiments.study import plan as SP
from analysis.statistics import power as P


def _strict(text: str):
    def bad(c):
        raise ValueError(f"non-JSON constant {c}")

    return json.loads(text, parse_constant=bad)


def _ckpt_mtimes(runs: str) -> dict:
    out = {}
    for d in os.listdir(runs):
        p = os.path.join(runs, d)
        if d.startswith("study-smoke-") and os.path.isdir(p):
            for f in os.listdir(p):
                if f.startswith("ckpt_") or f == "demo-eval.json":
                    out[os.path.join(d, f)] = os.path.getmtime(os.path.join(p, f))
    return out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from analysis.experiments.demo.job import run_demo

    root = tmp_path_factory.mktemp("study")
    runs, out = str(root / "runs"), str(root / "report")
    store = os.path.join(runs, "fiblab.db")
    lines = []
    first = run_demo("study-smoke", out, runs, store, quiet=True, log=lines.append)
    mtimes = _ckpt_mtimes(runs)
    second = run_demo("study-smoke", out, runs, store, quiet=True, log=lambda *a: None)
    return {
        "root": root,
        "runs": runs,
        "out": out,
        "store": store,
        "first": first,
        "second": second,
        "mtimes": mtimes,
        "log": lines,
    }


def _study_again(smoke, tmp_path, sc, prepare, log=lambda *a: None):
    """The study under settings ``sc`` on a copy of the smoke's runs (``prepare(runs)`` first)."""
    from analysis.experiments.study.study import run_study

    runs = str(tmp_path / "runs")
    shutil.copytree(smoke["runs"], runs)
    prepare(runs)
    res = run_study(
        "study-smoke",
        str(tmp_path / "rep"),
        runs,
        os.path.join(runs, "fiblab.db"),
        quiet=True,
        log=log,
        settings=sc,
    )
    return res, runs


def test_every_stage_runs(smoke):
    sc = SP.STUDY_SCALES["study-smoke"]
    res = smoke["first"]
    rows = res["calibration"]["rows"]
    lines = sum(len(v) for v in sc.calib_seeds.values())
    assert len(rows) == lines * len(sc.ladder)
    assert {r["steps"] for r in rows} == set(sc.ladder)
    for r in rows:  # every rung evaluated at every factor
        assert sorted(r["ppl"]) == list(sc.factors)
    cmp_ = res["comparison"]
    assert len(cmp_["runs"]["stagger"]) == len(cmp_["runs"]["fixed"]) >= sc.first_seeds
    assert len(cmp_["runs"]["learned"]) == sc.other_seeds
    assert res["calibration"]["chosen"] in sc.ladder
    claims = [v["claim"] for v in res["verdicts"]]
    assert "stagger beats fixed" in claims and len(claims) == len(set(claims))
    for f in ("report.md", "report.html", "study.json", "calibration.png", "claims.json"):
        assert os.path.exists(os.path.join(smoke["out"], f)), f
    with open(os.path.join(smoke["out"], "claims.json")) as f:  # the whole ledger, strict JSON
        doc = _strict(f.read())
    from analysis.ledger import ledger

    assert len(doc["claims"]) == len(ledger.load_claims()[0]) + len(ledger.load_claims()[1])
    assert len(doc["protocol_sha256"]) == 64
    assert any("budget:" in line for line in smoke["log"])  # printed before each stage


def test_the_ledger_decides_the_lm_claims_from_the_study_store(smoke):
    """study.json and the report carry the ledger's LM claims, each once, read straight from the
    claims file; smoke-scale runs decide nothing, so none of them is held or did not hold."""
    import tomllib

    from analysis.ledger import ledger

    with open(ledger.CLAIMS_PATH, "rb") as f:
        want = [
            c["id"]
            for c in tomllib.load(f)["paper"]
            if c["kind"].startswith("lm") or c["kind"] == "battery"
        ]
    got = smoke["first"]["ledger"]
    assert sorted(e["id"] for e in got) == sorted(want)
    assert {e["verdict"] for e in got} <= {"not shown", "not tested here"}
    shown = [e for e in got if e["verdict"] == "not shown"]
    assert shown and all(e["evidence"]["scale"] == "smoke" for e in shown)
    with open(os.path.join(smoke["out"], "report.md")) as f:
        md = f.read()
    assert "The claims ledger's language-model claims" in md and want[0] in md
    assert "The comparisons' runs" in md  # every stage-2 run, one row each
    # one verdict per claim: each comparison row with a registered claim carries the ledger's
    # verdict, the rung's own answer beside it; rows without a claim carry none
    by_id = {e["id"]: e["verdict"] + (f" ({e['label']})" if e.get("label") else "") for e in got}
    rows = smoke["first"]["verdicts"]
    assert any(v["id"] in by_id for v in rows)
    for v in rows:
        assert v["verdict"] == by_id.get(v["id"], "—"), v["claim"]
    assert "| claim | verdict | at the chosen rung |" in md


def test_second_run_reuses_everything(smoke):
    second = smoke["second"]
    assert second["trained"] == [] and second["evaluated"] == []
    assert len(second["reused"]) == len(smoke["first"]["trained"])
    assert _ckpt_mtimes(smoke["runs"]) == smoke["mtimes"]  # nothing rewritten
    assert second["comparison"]["plan"] == smoke["first"]["comparison"]["plan"]


def test_rungs_continue_exactly_and_runs_are_marked(smoke, tmp_path):
    """The 4-step rung was resumed from the 2-step one, and equals a run trained from scratch."""
    from analysis.experiments.study.runner import study_config
    from lab.store import Store
    from lab.training.checkpoint import latest_good_checkpoint
    from lab.training.train import train

    sc = SP.STUDY_SCALES["study-smoke"]
    name = "study-smoke-dense-s1-T32-4"
    with Store(smoke["store"]) as st:
        ev = st.events(name)
        assert "resume" in set(ev["kind"]) and "step 2" in set(ev["message"])
        for n in smoke["first"]["trained"]:
            assert st.config(n)["scale"] == "study"
    cfg = study_config(sc, "study-smoke", "dense", 1, 4, str(tmp_path))
    train(cfg, quiet=True)
    fresh = latest_good_checkpoint(os.path.join(str(tmp_path), name))["model"]
    cont = latest_good_checkpoint(os.path.join(smoke["runs"], name))["model"]
    assert fresh.keys() == cont.keys()
    for k in fresh:
        assert torch.equal(fresh[k], cont[k]), k


def test_results_json_is_strict(smoke):
    with open(os.path.join(smoke["out"], "study.json")) as f:
        data = _strict(f.read())
    assert data["scale"] == "study" and data["precision"] == "fp32"
    with open(os.path.join(smoke["out"], "report.md")) as f:
        assert "every run trained and evaluated in fp32" in f.read()
    assert data["comparison"]["plan"] is None or data["comparison"]["plan"]["seeds"] >= 2


def test_a_small_budget_runs_fewer_seeds_and_reports_power(smoke, tmp_path):
    from analysis.experiments.study.study import PLAN_FILE

    def prepare(runs):
        os.remove(os.path.join(runs, f"study-smoke-{PLAN_FILE}"))  # decide the plan again
        for d in os.listdir(runs):  # learned not trained yet (a finished one would be reused)
            if d.startswith("study-smoke-learned-"):
                shutil.rmtree(os.path.join(runs, d))

    sc = replace(SP.STUDY_SCALES["study-smoke"], budget_s=0.001)
    res, _ = _study_again(smoke, tmp_path, sc, prepare)
    cmp_ = res["comparison"]
    assert cmp_["extra"] == 0 and cmp_["skipped"] == ["learned"]
    assert len(cmp_["runs"]["stagger"]) == sc.first_seeds and "learned" not in cmp_["runs"]
    pl = cmp_["plan"]
    if pl is not None:  # σ > 0: the power those seeds had for the paper's gap
        assert pl["seeds"] == sc.first_seeds
        from analysis.experiments.study.report import PAPER

        alpha = 0.05 / len(PAPER)  # Holm's first threshold in the study's family
        assert pl["alpha"] == pytest.approx(alpha)
        assert pl["achieved"] == pytest.approx(P.power(pl["d"], 2, 2, alpha))
        pu = cmp_["plan_sigma_upper"]  # the same seeds at σ's upper bound: less power
        assert pu["sigma"] > pl["sigma"] and pu["achieved"] < pl["achieved"]
    v = {x["claim"]: x for x in res["verdicts"]}
    assert v["stagger beats learned"]["answer"] == "not tested"
    assert res["trained"] == []  # everything it ran was already there


def test_stage_3_continues_stagger_and_fixed_to_the_top_rung(smoke, tmp_path):
    """With the chosen rung below the top (a rule every rung meets), stagger and fixed on the
    first batch's seeds are continued to the top rung and compared again there."""
    sc = replace(SP.STUDY_SCALES["study-smoke"], min_rise=-1e9, spread_k=-1e9)
    top = max(sc.ladder)

    def prepare(runs):  # the smoke's own stage 2 may have trained these at the top rung
        for s in ("stagger", "fixed"):
            for seed in range(2, sc.max_seeds + 1):
                shutil.rmtree(os.path.join(runs, f"study-smoke-{s}-s{seed}-T32-{top}"), True)

    lines = []
    res, runs = _study_again(smoke, tmp_path, sc, prepare, lines.append)
    assert res["calibration"]["chosen"] == min(sc.ladder) < top
    longer = res["longer"]
    assert longer["steps"] == top and not longer["skipped"]
    for s in ("stagger", "fixed"):
        assert [r["seed"] for r in longer["runs"][s]] == list(range(1, sc.first_seeds + 1))
        assert all(r["steps"] == top for r in longer["runs"][s])
    # seed 1's top rung is the calibration's (reused); seed 2's continues its chosen-rung run
    assert "study-smoke-stagger-s2-T32-4" in res["trained"]
    assert "study-smoke-stagger-s1-T32-4" not in res["trained"]
    from lab.store import Store

    with Store(os.path.join(runs, "fiblab.db")) as st:
        ev = st.events("study-smoke-fixed-s2-T32-4")
    assert "step 2" in set(ev["message"])  # resumed from the chosen rung's checkpoint
    v = {x["claim"]: x for x in res["verdicts"]}
    row = v[f"stagger beats fixed after {top} steps (exploratory)"]
    assert row["n_a"] == row["n_b"] == sc.first_seeds
    assert row["answer"].startswith("exploratory: ") and row["family"] == "exploratory"
    # the registered comparisons form one Holm family, the exploratory one stays out of it
    fam = [x for x in res["verdicts"] if x.get("family") == "study"]
    tested = [x for x in fam if x["p_raw"] == x["p_raw"]]  # NaN: untested, not in the family
    assert tested and all(x["p_adjusted"] >= x["p_raw"] for x in tested)
    from statsmodels.stats.multitest import multipletests

    extra = [x["p_against"] for x in tested if x["p_against"] is not None]  # ties' 2nd tests
    want = multipletests([x["p_raw"] for x in tested] + extra, method="holm")[1]
    assert [x["p_adjusted"] for x in tested] == pytest.approx(list(want[: len(tested)]))
    assert any("== 3." in line for line in lines)
    # the default smoke run's chosen rung is what its own rule gave; stage 3 only below the top
    first = smoke["first"]
    assert (first["longer"] is None) == (first["calibration"]["chosen"] == top)


def test_coprime_that_is_the_stagger_at_this_depth_is_not_run(smoke, tmp_path):
    """The smoke's 2-layer model: coprime's α are the stagger's, so the study says so and runs
    nothing for it; its verdict is "not tested" with that reason."""
    sc = replace(SP.STUDY_SCALES["study-smoke"], others=("coprime",))
    res, runs = _study_again(smoke, tmp_path, sc, lambda runs: None)
    cmp_ = res["comparison"]
    assert "coprime" in cmp_["same"] and "coprime" not in cmp_["runs"]
    assert not any(d.startswith("study-smoke-coprime-") for d in os.listdir(runs))
    v = {x["claim"]: x for x in res["verdicts"]}
    assert v["coprime ties stagger"]["answer"] == "not tested"
    assert "is the linear stagger" in v["coprime ties stagger"]["here"]


def test_cli_accepts_the_study_scales_and_keeps_the_default():
    from analysis.experiments.demo.job import SCALES
    from fiblab.cli.parser import build_parser

    a = build_parser().parse_args(["demo", "--scale", "study"])
    assert a.scale == "study" and a.out is None
    assert build_parser().parse_args(["demo"]).scale == "full"
    full = SCALES["full"]  # the default demo's runs are unchanged
    assert full.lm_steps == 200 and len(full.lm_runs) == 6 and full.factors == (1, 2, 4)
    with pytest.raises(ValueError, match="ladder"):
        SP.StudyScale(ladder=(500, 250))


def test_the_study_keeps_the_precision_it_started_in(tmp_path, cpu_profile):
    """A study resolves its precision once and records it; continued on a machine whose `auto`
    answers otherwise, it keeps the recorded one (and says so), so no comparison mixes
    precisions.  A study from before the record takes its runs' checkpoint precision."""
    from analysis.experiments.study.precision import PRECISION_FILE, study_precision
    from analysis.experiments.study.runner import study_config
    from lab.training.checkpoint import save_checkpoint

    runs, said = tmp_path / "runs", []
    assert study_precision(str(runs), "study", "auto", said.append) == "fp32"  # either CPU
    rec = json.loads((runs / f"study-{PRECISION_FILE}").read_text())
    assert rec["precision"] == "fp32" and "cores" in rec["machine"] and said == []
    (runs / f"study-{PRECISION_FILE}").write_text(json.dumps({"precision": "bf16", "machine": "M"}))
    assert study_precision(str(runs), "study", "auto", said.append) == "bf16"
    assert len(said) == 1 and "continuing in bf16" in said[0] and "(M)" in said[0]
    old = tmp_path / "old"
    save_checkpoint(
        str(old / "study-fixed-s1-T128-250"), 250, {"step": 250, "precision": "bf16"}, 1
    )
    assert study_precision(str(old), "study", "fp32", said.append) == "bf16"
    assert json.loads((old / f"study-{PRECISION_FILE}").read_text())["precision"] == "bf16"
    assert study_precision(str(old), "other", "fp32", said.append) == "fp32"  # not its runs
    sc = SP.STUDY_SCALES["study-smoke"]
    assert study_config(sc, "study", "fixed", 1, 4, str(runs), "bf16").precision == "bf16"


def test_window_nll_is_each_windows_cross_entropy_and_the_noise_is_paired(smoke):
    """A run's per-window NLL against windows scored one by one with torch's cross-entropy in
    float64; its exp(mean) against the run's evaluation over every window; and every stage-2
    perplexity comparison gets its evaluation and seed noise."""
    import torch.nn.functional as F

    from analysis.experiments.study.windows import comparison_noise, window_nll
    from lab.evaluation.evalrun import open_run
    from lab.evaluation.evaluate import heldout_perplexity, heldout_splits

    cmp_ = smoke["first"]["comparison"]
    row = cmp_["runs"]["stagger"][0]
    run_dir = os.path.join(smoke["runs"], row["name"])
    per = window_nll(run_dir)
    r = open_run(run_dir, log=lambda *a: None)
    T = r.model.cfg.seq_len
    toks = next(iter(heldout_splits(r.data).values()))
    assert len(per) == (len(toks) - 1) // T
    model = r.model.double().eval()
    for w in (0, len(per) - 1):
        ids = torch.as_tensor(np.asarray(toks[w * T : w * T + T + 1], dtype=np.int64))
        with torch.no_grad():
            logits = model(ids[None, :-1])
        logits = logits[0] if isinstance(logits, (tuple, list)) else logits
        ce = F.cross_entropy(logits[0].double(), ids[1:]).item()
        assert per[w] == pytest.approx(ce, rel=1e-5)
    whole = heldout_perplexity(open_run(run_dir, log=lambda *a: None).model, toks, T)
    assert math.exp(per.mean()) == pytest.approx(whole.ppl, rel=1e-6)
    assert os.path.exists(os.path.join(run_dir, f"window-nll-{r.step}.npy"))  # kept
    noise = comparison_noise(
        cmp_["runs"], [("stagger beats fixed", "stagger", "fixed")], smoke["runs"]
    )
    v = noise["stagger beats fixed"]
    assert v["eval"]["windows"] == len(per) and v["eval"]["se"] > 0 and v["seed_se"] > 0
    # its seed noise is Welch's SE of each run's ln ppl over every window (scipy's t)
    from scipy import stats

    ln = {
        s: [window_nll(os.path.join(smoke["runs"], x["name"])).mean() for x in cmp_["runs"][s]]
        for s in ("stagger", "fixed")
    }
    t = stats.ttest_ind(ln["fixed"], ln["stagger"], equal_var=False).statistic
    gap = np.mean(ln["fixed"]) - np.mean(ln["stagger"])
    assert v["seed_se"] == pytest.approx(gap / t, rel=1e-9)
    assert v["eval"]["gap"] == pytest.approx(gap, abs=1e-12)


def test_stage_4_trains_the_searchs_best_beside_the_stagger(smoke, tmp_path):
    """The lab's arm: the search's best schedule (its α per layer in every run's config) at the
    chosen rung, its seeds reused on a second look, and the ledger's lab finding comparing it
    with the stagger there — in study.json and in the report, apart from the paper's claims."""
    sc = replace(SP.STUDY_SCALES["study-smoke"], lab=("search-best",), lab_seeds=2)
    lines = []
    res, runs = _study_again(smoke, tmp_path, sc, lambda runs: None, lines.append)
    lab = res["lab"]
    rows = lab["runs"]["search-best"]
    assert [r["seed"] for r in rows] == [1, 2] and lab["steps"] == res["calibration"]["chosen"]
    from lab.store import Store

    with Store(os.path.join(runs, "fiblab.db")) as st:
        cfg = st.config(rows[0]["name"])
    layers = cfg["model"]["n_layers"]
    assert tuple(cfg["model"]["schedule"]) == pytest.approx(SP.search_best_alphas(layers))
    assert lab["alphas"]["search-best"] == pytest.approx(list(SP.search_best_alphas(layers)))
    assert any("== 4." in line for line in lines)
    (e,) = [e for e in res["lab_ledger"] if e["id"] == "lab-search-best-vs-stagger"]
    assert e["source"] == "lab" and e["verdict"] == "not shown"  # smoke runs decide nothing
    assert "fib/custom" in e["here"] and "fib/stagger" in e["here"]
    assert all(x["source"] == "paper" for x in res["ledger"])  # never among the paper's
    with open(os.path.join(str(tmp_path / "rep"), "report.md")) as f:
        md = f.read()
    assert "The lab's own findings on these runs" in md and "lab-search-best-vs-stagger" in md
