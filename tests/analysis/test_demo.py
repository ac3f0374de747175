"""The main job end to end at the smoke scale, and `fiblab report` on what it stored."""

import json
import math
import os
import re
import sqlite3
import statistics

import pytest

from fiblab.cli import main

VERDICTS = {"held", "did not hold", "not shown", "not tested here"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    args = [
        "demo",
        "--scale",
        "smoke",
        "--out",
        str(d / "report"),
        "--runs",
        str(d / "runs"),
        "--store",
        str(d / "runs" / "store.db"),
        "--quiet",
    ]
    assert main(args) == 0
    return d, args


def _tables(md: str) -> list[list[str]]:
    """Markdown tables as lists of rows (header and rule lines included)."""
    out, cur = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def test_demo_writes_a_report_with_tables_figures_and_claims(demo):
    d, _ = demo
    rep = d / "report"
    md = (rep / "report.md").read_text()
    assert "Precision: language models trained and evaluated in fp32; probe cells in fp32" in md
    tables = _tables(md)
    assert len(tables) >= 8
    assert all(len(t) >= 3 for t in tables)  # header, rule and at least a row
    for heading in (
        "## The paper's claims at this scale",
        "## Coverage and receptive field",
        "## Retrieval probe",
        "## Language models: held-out perplexity",
        "## Length extrapolation",
        "## Position-resolved loss",
    ):
        assert heading in md
    for png in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert (rep / png).stat().st_size > 2000
    assert "<table" in (rep / "report.html").read_text()
    doc = json.loads((rep / "claims.json").read_text())
    assert doc["protocol"] and len(doc["protocol_sha256"]) == 64  # the registered tests
    claims = doc["claims"]
    assert len(claims) >= 6
    assert {c["verdict"] for c in claims} <= VERDICTS
    # the two smoke LMs are evaluated at 1× and 2× under both rung policies
    assert "ppl_T128" in md and "frozen_ppl_T128" in md


def _table(md: str, first: str) -> list[dict]:
    """The Markdown table whose header begins with ``| first |``, as dicts of its text cells."""
    for t in _tables(md):
        if t[0].startswith(f"| {first} |"):
            head = [c.strip() for c in t[0].strip("|").split("|")]
            return [dict(zip(head, (c.strip() for c in r.strip("|").split("|")))) for r in t[2:]]
    raise AssertionError(f"no table with a first column {first!r}")


def test_demo_report_prints_the_stores_numbers(demo):
    """The held-out perplexity and seed tables of the report against the store's raw rows: each
    run's last whole-window evaluation at its training length, and their mean and std by hand."""
    d, _ = demo
    md = (d / "report" / "report.md").read_text()
    with sqlite3.connect(d / "runs" / "store.db") as c:
        rows = c.execute(
            "SELECT r.name, e.step, e.loss FROM evaluations e JOIN runs r ON r.id = e.run_id "
            "WHERE r.kind = 'lm' AND e.kind = 'recompute' AND e.context_len = 64"
        ).fetchall()
    c.close()
    last = {}
    for name, _step, loss in sorted(rows):
        last[name] = math.exp(loss)  # sorted by step: the last one wins
    assert sorted(last) == ["demo-tiny-s1-6", "demo-tiny-s2-6"]
    printed = _table(md, "run")
    assert sorted(r["run"] for r in printed) == sorted(last)
    for r in printed:
        assert r["step"] == "6" and r["seq_len"] == "64"
        assert abs(float(r["perplexity"]) - last[r["run"]]) <= 0.005 + 1e-9
    (seeds,) = _table(md, "config")  # one variant: fib/stagger over seeds 1 and 2
    assert seeds["n"] == "2"
    ppl = [last["demo-tiny-s1-6"], last["demo-tiny-s2-6"]]
    assert abs(float(seeds["seed1"]) - ppl[0]) <= 5e-4 + 1e-9
    assert abs(float(seeds["mean"]) - statistics.mean(ppl)) <= 5e-4 + 1e-9
    assert abs(float(seeds["std"]) - statistics.stdev(ppl)) <= 5e-4 + 1e-9
    assert "not available" not in md  # every section of the smoke run has its data


def _snapshot(path) -> dict:
    """Every row of the store's tables that training and evaluation write (timestamps too)."""
    with sqlite3.connect(path) as c:
        out = {
            t: c.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3").fetchall()
            for t in ("runs", "evaluations", "metrics", "alphas", "battery_results")
        }
    c.close()
    return out


def test_demo_battery_results_go_into_the_store(demo):
    """Each LM run's battery, as the demo saved it in the run folder (demo-eval.json), is in the
    store's battery table: n per chain length, seed 0, the count correct and the accuracy."""
    d, _ = demo
    saved = {}
    for p in (d / "runs").glob("demo-*/demo-eval.json"):
        doc = json.loads(p.read_text())
        saved[p.parent.name] = (doc["key"]["battery_n"], doc["battery"])
    assert saved and all("skipped" not in b for _, b in saved.values())
    with sqlite3.connect(d / "runs" / "store.db") as c:
        rows = c.execute(
            "SELECT r.name, b.task, b.n, b.seed, b.items, b.correct, b.accuracy, b.chance "
            "FROM battery_results b JOIN runs r ON r.id = b.run_id"
        ).fetchall()
    c.close()
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        (name, t) for name in saved for t in ("ruler_vt", "lego", "assoc_recall")
    )
    for name, task, n, seed, items, correct, acc, chance in rows:
        want_n, bat = saved[name]
        assert (n, seed, items, chance) == (want_n, 0, bat[task]["n"], bat[task]["chance"])
        assert correct == round(bat[task]["acc"] * items) and acc == correct / items
        assert abs(acc - bat[task]["acc"]) < 1e-6


def test_demo_rerun_reuses_finished_work(demo, capsys, monkeypatch):
    import analysis.experiments.demo.job
    import lab.evaluation.evalrun
    import lab.training.train

    d, args = demo
    run = d / "runs" / "demo-tiny-s1-6"
    files = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in run.iterdir()}
    rows = _snapshot(d / "runs" / "store.db")
    tables = _tables((d / "report" / "report.md").read_text())
    calls = []

    def counted(module, name):
        real = getattr(module, name)

        def spy(*a, **k):
            calls.append(name)
            return real(*a, **k)

        monkeypatch.setattr(module, name, spy)

    counted(lab.training.train, "train")
    counted(lab.evaluation.evalrun, "evaluate_run")
    counted(analysis.experiments.demo.job, "battery")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "demo-tiny-s1-6" in out and "trained earlier, evaluations reused" in out
    assert calls == []  # nothing trained, evaluated or scored again
    ckpts = sorted(os.listdir(run))
    assert any(c.startswith("ckpt") or c.endswith(".pt") for c in ckpts)
    # the probe cells were not retrained: one JSON line per cell, still
    lines = (d / "runs" / "demo-probe-20.jsonl").read_text().splitlines()
    assert len(lines) == 2
    # no file of the run rewritten (config.json, checkpoints, the saved evaluations) ...
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in run.iterdir()} == files
    # ... no store row added or rewritten, and the report's tables are the same numbers
    assert _snapshot(d / "runs" / "store.db") == rows
    assert _tables((d / "report" / "report.md").read_text()) == tables


def test_demo_rerun_fills_in_battery_rows_a_store_lacks(demo, capsys):
    """A store written before the battery had a table (its rows gone here) gets the battery
    results the run folders saved, on a re-run that scores nothing again."""
    d, args = demo
    path = d / "runs" / "store.db"
    with sqlite3.connect(path) as c:
        before = c.execute("SELECT * FROM battery_results ORDER BY 1, 2").fetchall()
        c.execute("DELETE FROM battery_results")
    c.close()
    assert before and main(args) == 0
    capsys.readouterr()
    with sqlite3.connect(path) as c:
        after = c.execute("SELECT * FROM battery_results ORDER BY 1, 2").fetchall()
    c.close()
    assert [r[:-1] for r in after] == [r[:-1] for r in before]  # all but logged_at


def test_report_command_on_the_demo_store(demo):
    d, _ = demo
    out = d / "rep2"
    assert (
        main(
            [
                "report",
                "--store",
                str(d / "runs" / "store.db"),
                "--out",
                str(out),
                "--title",
                "again",
            ]
        )
        == 0
    )
    md = (out / "report.md").read_text()
    assert md.startswith("# again")
    assert "demo-tiny-s1-6" in md and "demo-tiny-s2-6" in md
    assert "## Retrieval probe" in md  # probe cells come from the store


def test_report_names_a_missing_store(tmp_path, capsys):
    assert main(["report", "--store", str(tmp_path / "none.db"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_report_rebuilds_the_paper_tables_from_a_database(demo, tmp_path):
    from paperdb_fixture import build_fixture

    d, _ = demo
    db = build_fixture(tmp_path / "fib.db")
    out = tmp_path / "rep"
    assert (
        main(
            [
                "report",
                "--store",
                str(d / "runs" / "store.db"),
                "--out",
                str(out),
                "--paper-db",
                str(db),
            ]
        )
        == 0
    )
    md = (out / "report.md").read_text()
    assert "## The authors' results database, rebuilt" in md
    assert "fineweb_edu_paper" in md


def test_the_coverage_stage_reproduces_the_spec_counts():
    from analysis.experiments.demo.job import coverage_stage

    cov = coverage_stage(16, 1024)
    t = cov["table"].set_index("scheme")
    assert (t.loc["fixed", "union"], t.loc["stagger", "union"]) == (19, 133)  # SPEC §9
    assert t.loc["pow2", "union"] == 15
    # order independence at full depth: coprime and linear reach the same set
    assert cov["fractions"]["coprime"][-1] == cov["fractions"]["stagger"][-1]
