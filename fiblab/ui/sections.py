"""The results panel's sections (notebook 05), built without widgets: each of the paper's tables
from the store beside the published one, Table 5's seed verdicts, and the paper's tables rebuilt
from the authors' ``fib.db`` — as dicts and the HTML `fiblab.ui.results.ResultsPanel` shows.

A section is ``{"title", "ours", "note", "message", "paper"}``: ``ours`` the frame built from the
store or None, ``message`` why it is missing, ``paper`` the published table (or None).
"""

from __future__ import annotations

import html
import os
import re

import pandas as pd

from analysis.statistics.assess import assess
from analysis.tables import beside as tables_paper
from analysis.tables import length as tables_length
from analysis.tables import position as tables_position
from analysis.tables import ppl as tables_ppl
from analysis.tables import probe as tables_probe
from analysis.tables import seeds as tables_seeds
from analysis.tables.comparable import TableUnavailable
from fiblab.ui.results_common import frame_html, note_html

__all__ = [
    "SECTION_TITLES",
    "DECIMALS",
    "PAPER_OF",
    "VERDICT_PAIR",
    "NO_DATA",
    "PANEL_CHOICES",
    "section",
    "missing",
    "store_sections",
    "seed_verdicts",
    "verdict_html",
    "section_html",
    "paper_db_view",
]

SECTION_TITLES = {
    "table1": "Table 1 — held-out perplexity (base × schedule × W; seeds averaged)",
    "table2": "Table 2 — the marked two-distance retrieval probe",
    "table3": "Table 3 — length extrapolation (ppl_T{L}: rungs recomputed for L, the paper's "
    "policy; frozen_ppl_T{L}: the training-length rung set)",
    "table3_blocks": "Table 3, position-matched — block j = positions [j·T, (j+1)·T) of the "
    "long windows",
    "table4": "Table 4 — mean NLL (nats) per position bin of the training window (last row: "
    "fixed − stagger)",
    "table5": "Table 5 — seeds: perplexity per seed, mean, std (sample) and std_pop (the "
    "paper's population std)",
}
#: Decimals each section's tables are shown with.
DECIMALS = {"table1": 2, "table2": 3, "table3": 2, "table3_blocks": 2, "table4": 3, "table5": 3}
#: The paper's table number beside each section (None: no published counterpart).
PAPER_OF = {"table1": 1, "table2": 2, "table3": 3, "table3_blocks": None, "table4": 4, "table5": 5}
#: The two configurations Table 5's verdict line compares (a beats b?).
VERDICT_PAIR = ("fib/stagger", "fib/fixed")
#: The first words of every section without data (what the tests and users look for).
NO_DATA = "no data in the store for this table"
#: What to do in the panel when a table needs another choice of one of its controls.
PANEL_CHOICES = {
    "dataset": "choose another dataset in the “dataset” menu above",
    "runs": "choose the runs to use in the “LM runs (finished)” list above",
}
#: What trains the language-model runs every LM table reads.
TRAIN_LM = (
    "train one in notebook 03 or with `fiblab train --preset cpu-stagger`, or run `fiblab demo`"
)


def section(key: str, build) -> dict:
    """One section: ``build()`` returns (frame, note); a table that cannot be built
    (`analysis.tables.comparable.TableUnavailable`: why, and what to run) or an empty frame becomes the
    section's message, and the notes of a built one (``attrs["notes"]``: duplicate runs
    resolved) join its note. Any other exception is a bug and reaches the panel's error."""
    n = PAPER_OF[key]
    sec = {
        "title": SECTION_TITLES[key],
        "ours": None,
        "note": None,
        "message": None,
        "paper": tables_paper.published(n) if n else None,
    }
    try:
        df, note = build()
        if df is None or df.empty:
            sec["message"] = (
                f"{NO_DATA}: the chosen runs and dataset give no rows; {PANEL_CHOICES['runs']}"
            )
        else:
            notes = [note] if note else []
            sec["ours"] = df
            sec["note"] = "; ".join(notes + list(df.attrs.get("notes", []))) or None
    except TableUnavailable as e:
        sec["message"] = f"{NO_DATA}: {panel_reason(e)}"
    return sec


def panel_reason(e: TableUnavailable) -> str:
    """Why a table is missing and what to do, as the panel says it: a fix that one of the
    panel's own controls makes (``e.choose``) names that control, not the command-line flag."""
    fix = PANEL_CHOICES.get(e.choose, e.fix)
    return f"{e.reason}; {fix}" if fix else e.reason


def missing(key: str, why: str) -> dict:
    """The section ``key`` with nothing to show, saying ``why`` (and what to do)."""

    def build():
        raise TableUnavailable(why)

    return section(key, build)


def store_sections(st, sel: list[str], ds, mech, have_runs: bool) -> dict[str, dict]:
    """Every section of the open store ``st`` (None: no store) for the LM runs ``sel``, dataset
    ``ds`` and Table-2 mechanism ``mech``; ``have_runs``: whether any LM run is offered at all
    (it words the message when none is selected)."""
    out: dict[str, dict] = {}
    if st is None or not sel:
        why = (
            f"the store holds no finished language-model runs; {TRAIN_LM}"
            if not have_runs
            else f"no LM runs are selected; {PANEL_CHOICES['runs']}"
        )
        for key in ("table1", "table3", "table3_blocks", "table4", "table5"):
            out[key] = missing(key, why)
    else:
        out["table1"] = section(
            "table1", lambda: (tables_ppl.table1_from_store(st, runs=sel), None)
        )
        t3 = None

        def table3():
            nonlocal t3
            t3 = tables_length.table3_from_store(st, ds, runs=sel, blocks=True)
            whole = [c for c in t3.columns if "_block" not in c]
            return t3[whole], None

        def table3_blocks():
            if t3 is None:
                raise TableUnavailable(
                    "the position-matched blocks split Table 3's evaluations beyond the "
                    "training length, and the chosen runs have none",
                    "evaluate a trained run with `fiblab eval runs/NAME` (it logs them)",
                )
            blk = [c for c in t3.columns if "_block" in c]
            if not blk:
                raise TableUnavailable(
                    "no position-matched block evaluations in the store",
                    "evaluate a run with `fiblab eval runs/NAME` (it logs them)",
                )
            keys = [c for c in ("model", "W", "variant") if c in t3.columns]
            return t3[keys + blk + ["seeds"]], None

        out["table3"] = section("table3", table3)
        out["table3_blocks"] = section("table3_blocks", table3_blocks)
        out["table4"] = section(
            "table4", lambda: (tables_position.table4_from_store(st, ds, runs=sel), None)
        )
        out["table5"] = section(
            "table5", lambda: (tables_seeds.table5_from_store(st, ds, runs=sel), None)
        )
    others = untabulated_probes(st.probes()) if st is not None else ""
    if st is None or mech is None:
        out["table2"] = missing(
            "table2",
            "the store holds no marked-probe results"
            + (f"; {others}" if others else "")
            + "; run a probe grid in notebook 02 or with `fiblab probe marked`",
        )
    else:

        def table2():
            t2, note = _table2(st, mech)
            return t2, "; ".join(n for n in (note, others) if n) or None

        out["table2"] = section("table2", table2)
    return out


def untabulated_probes(probes: pd.DataFrame) -> str:
    """What the store holds that Table 2 (the marked task's) does not show, in words: "the store
    also holds 8 shift-task cells, which Table 2 does not show (notebook 02 does)", or ""."""
    if probes is None or probes.empty:
        return ""
    counts = probes[probes["task"] != "marked"].groupby("task")["run"].nunique()
    if counts.empty:
        return ""
    what = ", ".join(f"{n} {task}-task cell{'s' * (n != 1)}" for task, n in counts.items())
    return f"the store also holds {what}, which Table 2 does not show (notebook 02 does)"


def _table2(st, mech):
    cells = tables_probe.probe_cells_from_store(st.probes("marked"))
    cells = cells[cells["mechanism"] == mech]
    steps = sorted(int(s) for s in cells["steps"].dropna().unique())
    note = None
    if len(steps) > 1:
        note = f"cells of {mech} were trained for {steps} steps: showing the {steps[-1]}-step cells"
    t2 = tables_probe.table2(cells, mech, "marked", steps=steps[-1] if len(steps) > 1 else None)
    return t2, note


def seed_verdicts(t5: pd.DataFrame | None) -> tuple[list[str], list]:
    """Table 5's verdict lines on "fib/stagger beats fib/fixed" per W (and variant) and their
    `analysis.statistics.assess.Verdict` objects: Welch's t-test where both have at least two seeds."""
    verdicts, assessments = [], []
    a_name, b_name = VERDICT_PAIR
    if t5 is None or t5.empty:
        return [
            f"{a_name} vs {b_name}: no verdict, Table 5 (seeds) has no data; "
            f"its section says what to run"
        ], assessments
    seed_cols = [c for c in t5.columns if re.fullmatch(r"seed\d+", c)]
    # rows of other variants (column "variant": e.g. steps=12) are compared only with
    # the other configuration's row of the same variant text
    var = t5["variant"] if "variant" in t5.columns else pd.Series("", index=t5.index)

    def values(config, w, v):
        rows = t5[(t5["config"] == config) & (t5["W"] == w) & (var == v)]
        return [] if rows.empty else [float(x) for x in rows.iloc[0][seed_cols] if not pd.isna(x)]

    windows = sorted(
        {
            (int(w), v)
            for c, w, v in zip(t5["config"], t5["W"], var)
            if c in VERDICT_PAIR and not pd.isna(w)
        }
    )
    for w, vt in windows:
        a, b = values(a_name, w, vt), values(b_name, w, vt)
        at = f"at W={w}" + (f" ({vt})" if vt else "")
        if len(a) >= 2 and len(b) >= 2:
            v = assess(a, b, f"{a_name} beats {b_name} {at}")
            assessments.append(v)
            verdicts.append(v.line)
        else:
            verdicts.append(
                f"{a_name} vs {b_name} {at}: no verdict, it needs at least 2 seeds "
                f"of each (have {len(a)} and {len(b)}); train more seeds (a preset's "
                f"name with -s<seed>, e.g. `fiblab train --preset cpu-fixed-s43`) or select "
                f"them in the list above"
            )
    if not windows:
        verdicts = [
            f"{a_name} vs {b_name}: no verdict, the selected runs include neither; select "
            f"runs of both in the list above, or train them (`fiblab train --preset "
            f"cpu-stagger`, `--preset cpu-fixed`)"
        ]
    return verdicts, assessments


def verdict_html(verdicts: list[str]) -> str:
    """The verdict lines as the panel's list."""
    return (
        "<div><b>verdict (Welch's t-test on perplexity over seeds)"
        "</b><ul>" + "".join(f"<li>{html.escape(v)}</li>" for v in verdicts) + "</ul></div>"
    )


def section_html(key: str, sec: dict) -> str:
    """One section as HTML: ours (or why not) beside the paper's table."""
    d = DECIMALS[key]
    parts = [f"<h4>{html.escape(sec['title'])}</h4>"]
    if sec["ours"] is None:
        ours = note_html(sec["message"], "fib-no-data")
    else:
        ours = frame_html(sec["ours"], d, f"fib-ours-{key}")
        if sec["note"]:
            ours += note_html(sec["note"])
    # min-width:0 lets a flex item shrink below its table's width, so a wide table scrolls in
    # its own box (frame_html) instead of pushing the panel sideways
    item = "<div style='min-width:0;max-width:100%'>"
    parts.append(
        "<div style='display:flex;gap:2em;flex-wrap:wrap;align-items:"
        f"flex-start'>{item}<b>this store</b>" + ours + "</div>"
    )
    if sec["paper"] is not None:
        parts.append(f"{item}<b>the paper</b>{frame_html(sec['paper'], d)}</div>")
    parts.append("</div>")
    return "".join(parts)


_PAPER_DB_FIX = (
    "give the path of the authors' fib.db (a copy ships at ../shared/reference/fib.db), "
    "or empty the box"
)


def paper_db_view(path: str | None) -> tuple[dict[str, dict], str | None, str]:
    """The paper's tables rebuilt from the authors' database at ``path`` (None: no path given),
    beside the published ones: ({key: {"title", "table", "message"}}, the path read or None, the
    HTML to show)."""
    from analysis.published import paperdb

    if path is None:
        return (
            {},
            None,
            note_html(
                "no database given: the paper's tables are shown "
                "beside ours above; give the path of the authors' "
                "fib.db to rebuild them from their data"
            ),
        )
    if not os.path.isfile(path):
        return (
            {},
            None,
            note_html(f"no file at {path}: {_PAPER_DB_FIX}", "fib-no-data"),
        )
    try:
        fp = paperdb.load_final_ppl(path)
    except ValueError as e:  # paperdb's message names the file and what is wrong with it
        return {}, None, note_html(f"{e}: {_PAPER_DB_FIX}", "fib-no-data")
    builders = {
        "table1": (
            "Table 1 from fib.db (_paper: published, _diff: rebuilt − published)",
            lambda: tables_paper.with_paper(
                tables_ppl.table1_from_final_ppl(fp, decimals=2), tables_paper.published(1)
            ),
            2,
        ),
        "table5": (
            "Table 5 from fib.db (W=12, FineWeb-Edu)",
            lambda: tables_paper.with_paper(
                tables_seeds.table5_from_final_ppl(fp, decimals=2), tables_paper.published(5)
            ),
            2,
        ),
        "table2": (
            "Table 2 from fib.db's marked-probe rows",
            lambda: tables_probe.table2_from_paperdb(paperdb.load_retrieval(path)),
            3,
        ),
    }
    sections: dict[str, dict] = {}
    parts = [f"<div>read from <code>{html.escape(path)}</code></div>"]
    for key, (title, build, d) in builders.items():
        try:
            df, msg = build(), None
        except TableUnavailable as e:
            df, msg = None, panel_reason(e)
        sections[key] = {"title": title, "table": df, "message": msg}
        parts.append(
            f"<h4>{html.escape(title)}</h4>"
            + (
                frame_html(df, d)
                if df is not None
                else note_html(f"not available: {msg}", "fib-no-data")
            )
        )
    return sections, path, "".join(parts)
