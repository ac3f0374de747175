"""Messages a user reads name the thing, the value and what to do next (issue 14, item 6): the
results panel's empty sections and verdict lines, its authors'-database box and export, the
report's missing sections, plot and override errors, and the notebooks' error line. Each is
asserted word for word, on stores built here whose contents say which message must appear."""

import pandas as pd
import pytest

from analysis.figures.plots import extrapolation
from analysis.reports.report import Report
from analysis.reports.results import lm_sections
from analysis.tables.comparable import TableUnavailable
from fiblab.ui.common import error_text
from fiblab.ui.results import ResultsPanel
from fiblab.ui.sections import panel_reason
from lab.store import Store
from lab.training.trainconfig import make_config

T = 64
TRAIN = "train one in notebook 03 or with `fiblab train --preset cpu-stagger`, or run `fiblab demo`"
EVAL = (
    "evaluate a trained run with `fiblab eval runs/NAME` (it logs the longer lengths and the "
    "position bins)"
)


def _config(schedule="stagger", seed=0) -> dict:
    model = dict(
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=512,
        seq_len=T,
        attention="sparse",
        base="fib",
        rungs=8,
        window=8,
        schedule=schedule,
    )
    return {"model": model, "seed": seed, "data": "bible", "steps": 10}


def _store(path, bins_on: str | None = None) -> str:
    """One finished fib/stagger run with final evaluations on bible and fineweb_edu, nothing
    beyond the training length; with ``bins_on``, position bins on that dataset only."""
    with Store(path) as s:
        s.start_run("r1", _config(), kind="lm", preset="tiny", seed=0, git_rev="t")
        for ds in ("bible", "fineweb_edu"):
            s.log_eval("r1", 10, ds, T, 3.0, 4096)
        if bins_on:
            for b in range(8):
                s.log_eval("r1", 10, bins_on, T, 3.0 - 0.01 * b, 512, kind=f"bin{b}")
        s.set_status("r1", "done")
    return str(path)


def _panel(store, tmp_path, **kw):
    return ResultsPanel(
        store, render=False, paper_db="", reports_dir=str(tmp_path / "rep"), name="m", **kw
    )


def test_an_empty_store_says_what_produces_each_table(tmp_path):
    path = tmp_path / "empty.db"
    Store(str(path)).close()
    panel = _panel(str(path), tmp_path)
    msgs = {k: s["message"] for k, s in panel.sections.items()}
    lm = f"no data in the store for this table: the store holds no finished language-model runs; {TRAIN}"
    assert msgs == {
        "table1": lm,
        "table3": lm,
        "table3_blocks": lm,
        "table4": lm,
        "table5": lm,
        "table2": "no data in the store for this table: the store holds no marked-probe "
        "results; run a probe grid in notebook 02 or with `fiblab probe marked`",
    }
    assert panel.verdicts == [
        "fib/stagger vs fib/fixed: no verdict, Table 5 (seeds) has no data; its section "
        "says what to run"
    ]
    for text in msgs.values():  # no internal names
        assert "_from_store" not in text and "is it Table" not in text


def test_a_run_without_long_evaluations_or_bins_is_told_to_evaluate(tmp_path):
    panel = _panel(_store(tmp_path / "s.db"), tmp_path)
    panel.dataset.value = "bible"
    msgs = {k: s["message"] for k, s in panel.sections.items()}
    assert msgs["table1"] is None and msgs["table5"] is None  # the final evaluations suffice
    assert msgs["table3"] == (
        "no data in the store for this table: Table 3 needs evaluations beyond the training "
        f"length, and none of the chosen runs has one on 'bible'; {EVAL}"
    )
    assert msgs["table3_blocks"] == (
        "no data in the store for this table: the position-matched blocks split Table 3's "
        "evaluations beyond the training length, and the chosen runs have none; evaluate a "
        "trained run with `fiblab eval runs/NAME` (it logs them)"
    )
    # no bins on any dataset: what to run, not "pick one of" an empty list
    assert msgs["table4"] == (
        "no data in the store for this table: Table 4 needs position-bin evaluations "
        f"(bin0 … bin7), and none of the chosen runs has one; {EVAL}"
    )
    panel.runs.value = ()
    assert panel.sections["table1"]["message"] == (
        "no data in the store for this table: no LM runs are selected; choose the runs to "
        "use in the “LM runs (finished)” list above"
    )


def test_a_table_on_another_dataset_points_at_the_panels_dataset_menu(tmp_path):
    panel = _panel(_store(tmp_path / "s.db", bins_on="fineweb_edu"), tmp_path)
    panel.dataset.value = "fineweb_edu"
    assert panel.sections["table4"]["ours"] is not None
    panel.dataset.value = "bible"
    assert panel.sections["table4"]["message"] == (
        "no data in the store for this table: Table 4 has no evaluations on dataset 'bible' "
        "in the store (it has ['fineweb_edu'] for this table); choose another dataset in the "
        "“dataset” menu above"
    )
    # the command line keeps its own fix
    e = TableUnavailable("why", "pass --dataset NAME", choose="dataset")
    assert str(e) == "why; pass --dataset NAME"
    assert panel_reason(e) == "why; choose another dataset in the “dataset” menu above"
    assert panel_reason(TableUnavailable("why", "run x")) == "why; run x"


def test_the_authors_database_box_and_export_say_what_to_do(tmp_path):
    panel = _panel(_store(tmp_path / "s.db"), tmp_path)
    fix = (
        "give the path of the authors&#x27; fib.db (a copy ships at "
        "../shared/reference/fib.db), or empty the box"
    )
    panel.paper_db.value = str(tmp_path / "none.db")
    assert f"no file at {tmp_path / 'none.db'}: {fix}" in panel.paper_box.value
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    panel.paper_db.value = str(junk)
    assert f"{junk} is not a readable SQLite database: file is not a database: {fix}" in (
        panel.paper_box.value
    )
    absent = ResultsPanel(str(tmp_path / "no" / "store.db"), render=False, paper_db="")
    with pytest.raises(ValueError) as info:
        absent.export()
    assert str(info.value) == (
        f"nothing to export: there is no store at {tmp_path / 'no' / 'store.db'} (no runs yet "
        "— run `fiblab demo` or notebook 03, then export)"
    )


def test_the_report_says_what_to_run_when_there_are_no_lm_runs(tmp_path):
    path = tmp_path / "empty.db"
    with Store(str(path)) as st:
        r = Report("x")
        lm_sections(r, st)
    assert r.blocks[-1].payload == (
        "*No finished language-model runs with a final evaluation in the store: train one "
        "(`fiblab train --preset cpu-stagger`, or notebook 03) or run `fiblab demo`, then "
        "report again.*"
    )


def test_plot_and_override_errors_name_the_value_and_the_fix():
    wrong = pd.DataFrame({"model": ["fib/fixed"], "b0": [3.0]})
    with pytest.raises(ValueError) as info:
        extrapolation(wrong)
    assert str(info.value) == (
        "the extrapolation plot needs Table 3's ppl_T{L} columns and the table has no ppl_T… "
        "column (it has ['model', 'b0']): pass Table 3"
    )
    for item, want in (
        ("lr=abc", "--override lr=abc: lr must be a number (e.g. lr=0.0003)"),
        (
            "model.window=abc",
            "--override model.window=abc: window must be an integer (e.g. model.window=8)",
        ),
        (
            "betas=abc",
            "--override betas=abc: betas must be 2 comma-separated numbers, got 1 "
            "(e.g. betas=0.9,0.95)",
        ),
    ):
        with pytest.raises(ValueError) as info:
            make_config("tiny", [item])
        assert str(info.value) == want
        assert "could not convert" not in str(info.value)


def test_the_error_line_tells_a_users_mistake_from_a_bug():
    assert error_text(ValueError("steps=-1 must be positive")) == "steps=-1 must be positive"
    assert error_text(FileNotFoundError(2, "No such file or directory", "x.db")) == (
        "[Errno 2] No such file or directory: 'x.db'"
    )
    assert error_text(KeyError("W")) == (
        "unexpected KeyError (a bug in fiblab: please report it with what you did): 'W'"
    )
