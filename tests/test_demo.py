"""The main job end to end at the smoke scale, and `fiblab report` on what it stored."""

import json
import os
import re

import pytest

from fiblab.cli import main

VERDICTS = {"held", "did not hold", "not shown", "not tested"}


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
    claims = json.loads((rep / "claims.json").read_text())
    assert len(claims) >= 6
    assert {c["verdict"] for c in claims} <= VERDICTS
    # the two smoke LMs are evaluated at 1× and 2× under both rung policies
    assert "ppl_T128" in md and "frozen_ppl_T128" in md


def test_demo_rerun_reuses_finished_work(demo, capsys):
    d, args = demo
    before = os.path.getmtime(d / "runs" / "demo-tiny-s1-6" / "config.json")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "demo-tiny-s1-6" in out
    ckpts = sorted(os.listdir(d / "runs" / "demo-tiny-s1-6"))
    assert any(c.startswith("ckpt") or c.endswith(".pt") for c in ckpts)
    # the probe cells were not retrained: one JSON line per cell, still
    lines = (d / "runs" / "demo-probe-20.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert os.path.getmtime(d / "runs" / "demo-tiny-s1-6" / "config.json") >= before


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
    from test_paperdb import build_fixture

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
