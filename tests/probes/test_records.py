"""The probe record round-trips through the JSONL and the store exactly; α drift has one
definition, so the report, the claims and the notebook agree; the paper's Table 2 has one copy."""

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from lab.ladder.drift import INERT_TOL, alpha_drift, is_inert, layer_drifts
from lab.lm.modelconfig import ModelConfig
from lab.store import Store
from lab.training.trainconfig import TrainConfig
from probes.grid import append_record, load_records
from probes.record import ProbeRecord, records_from_store
from probes.runner import run_cell
from probes.settings import SCALES, Cell

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.jsonl"))
TINY = replace(SCALES["tiny"], steps=9, log_every=3)


@pytest.fixture(scope="module")
def cells():
    """Two freshly trained records: blur (α moves) and dense (α NaN in every layer)."""
    return [
        run_cell(Cell("blur", 2, "staggered", 0), TINY, progress=False),
        run_cell(Cell("dense", 2, "-", 1), TINY, progress=False),
    ]


# ---------------------------------------------------------------------------------- the record
def test_record_is_the_jsonl_line_byte_for_byte(cells, tmp_path):
    for rec in cells:
        r = ProbeRecord.from_dict(rec)
        assert json.dumps(r.to_dict()) == json.dumps(rec)  # same keys, order and values
    path = tmp_path / "p.jsonl"
    for rec in cells:
        append_record(str(path), ProbeRecord.from_dict(rec).to_dict())
    back = [ProbeRecord.from_dict(d) for d in load_records(str(path))]
    assert back == [ProbeRecord.from_dict(rec) for rec in cells]
    assert math.isnan(back[1].alphas[0])  # dense: NaN, equal to itself here


def test_record_store_round_trip_is_exact(cells, tmp_path):
    with Store(tmp_path / "s.db") as st:
        for rec in cells:
            st.log_probe({**rec, "git_rev": "abc"})
        for rec in cells:
            want = ProbeRecord.from_dict({**rec, "git_rev": "abc"})
            got = ProbeRecord.from_store(st, rec["key"])
            assert got == want
            # field by field, against the dict run_cell returned (no tolerance)
            assert got.acc == rec["acc"] and got.seconds == rec["seconds"]
            assert got.steps == rec["steps"] and got.settings == rec["settings"]
            assert got.trajectory[0].step == 0
            assert [p.loss for p in got.loss] == [p["loss"] for p in rec["loss"]]
            assert got.extra == {"git_rev": "abc"}
        blur = ProbeRecord.from_store(st, cells[0]["key"])
        assert [list(p.alphas) for p in blur.trajectory] == [
            t["alphas"] for t in cells[0]["trajectory"]
        ]
        assert list(blur.alphas) == cells[0]["alphas"]
        assert records_from_store(st) == sorted(
            [ProbeRecord.from_dict({**r, "git_rev": "abc"}) for r in cells],
            key=lambda r: r.mechanism,  # the store's probe order: by task, mechanism, …
        )
        with pytest.raises(ValueError, match="no probe run named 'nope'"):
            ProbeRecord.from_store(st, "nope")


def test_record_equality_can_fail(cells):
    r = ProbeRecord.from_dict(cells[0])
    assert r != replace(r, seconds=r.seconds + 1e-9)
    assert r != replace(r, acc={**r.acc, "5": 0.5 if r.acc["5"] != 0.5 else 0.25})
    with pytest.raises(ValueError, match=r"lacks \['acc'\]"):
        ProbeRecord.from_dict({k: v for k, v in cells[0].items() if k != "acc"})


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_older_jsonl_files_still_load_and_round_trip(path, tmp_path):
    raw = load_records(str(path))
    recs = [ProbeRecord.from_dict(d) for d in raw]
    assert len(recs) == len(raw) > 0
    for d, r in zip(raw, recs):
        assert r.key == d["key"] and r.acc == d["acc"] and list(r.alphas) == d["alphas"]
        assert r.distance == d.get("distance") and r.task == d["task"]
        assert ProbeRecord.from_dict(r.to_dict()) == r
    with Store(tmp_path / "old.db") as st:
        for d in raw[:3]:
            st.log_probe(d)
        assert [ProbeRecord.from_store(st, d["key"]) for d in raw[:3]] == recs[:3]


# ------------------------------------------------------------------------------------ α drift
def test_drift_by_hand():
    points = [[1.0, 1.0, math.nan], [1.07, 0.98, math.nan], [1.02, 1.01, math.nan]]
    d = layer_drifts(points, [1.0, 1.0, math.nan])
    assert d.keys() == {0, 1}  # the dense layer has no α
    assert d[0] == pytest.approx(0.07) and d[1] == pytest.approx(0.02)
    assert alpha_drift(points) == pytest.approx(0.07)  # max over steps, not the final 0.02
    assert is_inert(alpha_drift(points)) is False and is_inert(0.05) is True
    assert math.isnan(alpha_drift(points, [1.0, None]))  # a start unknown: cannot tell
    assert is_inert(math.nan) is None
    assert alpha_drift([[math.nan, math.nan]]) == 0.0  # dense: no α moved
    assert INERT_TOL == 0.05
    with pytest.raises(ValueError, match="tol=-1"):
        is_inert(0.0, -1)


# the same runs, judged by the notebook's α panel, the report's table and the demo's claims:
# each moves 0.07 mid-run and ends within 0.02 of its start, or never leaves 0.03
LM_ALPHAS = {
    "lm-wander": {1: [1.0, 1.0], 50: [1.07, 0.99], 100: [1.02, 1.01]},
    "lm-still": {1: [1.0, 1.0], 50: [1.03, 0.99], 100: [1.02, 0.98]},
}
PROBE_TRAJ = {
    "probe-wander": [[1.0, 1.0], [1.08, 1.0], [1.01, 1.0]],
    "probe-still": [[1.0, 1.0], [1.02, 0.99], [1.01, 1.0]],
}


def _write(path):
    model = ModelConfig(
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=64,
        seq_len=64,
        window=8,
        rungs=8,
        schedule="learned",
    )
    with Store(path) as s:
        for name, steps in LM_ALPHAS.items():
            s.start_run(name, TrainConfig(model=model, seed=1).to_dict(), kind="lm", seed=1)
            for step, a in steps.items():
                s.log_alphas(name, step, a)
            s.set_status(name, "done")
        records = []
        for key, traj in PROBE_TRAJ.items():
            rec = {
                "key": key,
                "task": "marked",
                "mechanism": "blur",
                "depth": 2,
                "init": "uniform",
                "seed": 0,
                "steps": 20,
                "acc": {"200": 0.0, "350": 0.0},
                "alphas": traj[-1],
                "seconds": 1.0,
                "trajectory": [{"step": 10 * i, "alphas": a} for i, a in enumerate(traj)],
            }
            s.log_probe(rec)
            records.append(rec)
    return records


def test_report_claims_and_notebook_give_one_verdict(tmp_path):
    from analysis.experiments.demo.evidence import demo_run
    from analysis.experiments.demo.job import alpha_trajectory
    from analysis.figures import trajectories
    from fiblab.ui.results import AlphaExplorer
    from lab.ladder.drift import is_inert
    from probes.record import alpha_drift as record_drift

    path = str(tmp_path / "fiblab.db")
    records = _write(path)
    notebook = AlphaExplorer(path, runs=list(LM_ALPHAS) + list(PROBE_TRAJ), render=False)
    panel = notebook.inert.set_index("run")["inert"]
    with Store(path) as st:
        report = trajectories.inert(trajectories.from_store(st)).set_index("run")["inert"]
    want = {"lm-wander": False, "lm-still": True, "probe-wander": False, "probe-still": True}
    assert {r: bool(panel[r]) for r in want} == want == {r: bool(report[r]) for r in want}

    def lm(name):
        final = LM_ALPHAS[name][100]
        return {
            "name": name,
            "train": {"alphas": final},
            "eval": {
                "attention": "sparse",
                "schedule": "learned",
                "datasets": {"x": {"perplexity": {"ppl": 40.0}, "cells": [], "bins": None}},
            },
            "alpha_trajectory": alpha_trajectory(path, name),
        }

    # the ledger's checks (lm-learned-alpha-inert, the probe's uniform-init drift) judge the
    # job's runs and the probe records by these numbers and `is_inert`
    for name in LM_ALPHAS:
        assert is_inert(demo_run(lm(name)).drift) == want[name], name
    for rec in records:
        assert is_inert(record_drift(rec)) == want[rec["key"]], rec["key"]


# ------------------------------------------------------------------------------ Table 2, once
PAPER_TABLE2 = {  # the paper's Table 2, typed from the paper: (α min, α max, acc@200, acc@350)
    (2, "uniform"): (0.93, 1.03, 0.38, 0.23),
    (2, "staggered"): (0.56, 1.39, 0.99, 0.00),
    (4, "uniform"): (0.96, 1.01, 0.00, 0.00),
    (4, "staggered"): (0.55, 1.45, 0.88, 0.17),
    (8, "uniform"): (0.97, 1.02, 0.00, 0.00),
    (8, "staggered"): (0.55, 1.45, 0.04, 0.00),
}


def test_table2_paper_values_come_from_the_reference_copy():
    from analysis.tables.probe_table import paper_cells

    got = {
        k: (v["alpha_min"], v["alpha_max"], v["acc"]["200"], v["acc"]["350"])
        for k, v in paper_cells().items()
    }
    assert got == PAPER_TABLE2


def test_table2_has_no_other_copy_in_the_code():
    """No module restates the paper's Table 2 (a row such as 0.56 … 1.39 … 0.99)."""
    row = re.compile(r"0\.56\D{1,12}1\.39\D{1,12}0\.99")
    hits = [
        str(p.relative_to(ROOT))
        for pkg in ("lab", "probes", "analysis", "fiblab", "benchmarks")
        for p in (ROOT / pkg).rglob("*.py")
        if row.search(p.read_text(encoding="utf-8"))
    ]
    assert hits == []
    csv = (ROOT / "analysis" / "reference" / "table2_retrieval_probe.csv").read_text()
    assert row.search(csv)


def test_table2_rows_put_the_paper_beside_ours_only_where_it_applies():
    from analysis.tables.probe_table import format_table2, table2_rows

    records = load_records(str(ROOT / "benchmarks" / "results" / "probe-marked-paper.jsonl"))
    rows = table2_rows(records, "blur")
    assert len(rows) == 6 and all("paper" in r for r in rows)
    for r in rows:
        p = PAPER_TABLE2[(r["depth"], r["init"])]
        assert (r["paper"]["alpha_min"], r["paper"]["alpha_max"]) == p[:2]
        assert r["paper"]["acc"] == {"200": p[2], "350": p[3]}
    text = format_table2(rows)
    assert " 0.56-1.39 " in text and "     0.99" in text
    assert all("paper" not in r for r in table2_rows(records, "blur", paper=False))
    other = [{**r, "mechanism": "learned"} for r in records]
    assert all("paper" not in r for r in table2_rows(other, "learned"))
    moved = [{**r, "acc": {"201": 0.1, "350": 0.2}} for r in records]
    assert all("paper" not in r for r in table2_rows(moved, "blur"))
