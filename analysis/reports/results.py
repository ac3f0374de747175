"""What a results report holds: the paper's tables and figures for chosen runs, the published
values beside them.

    fiblab report [RUN …] [--store runs/fiblab.db] [--probes FILE.jsonl] --out reports/NAME [--json]

`build_report` reads the experiment store (LM runs: final perplexity, seed statistics, length
extrapolation under both rung policies with position-matched blocks, position bins, learned-α
trajectories; probe cells: Table 2) and returns an `analysis.reports.report.Report`; the main job's
report (coverage, claims) is `analysis.experiments.demo.report`. A table that cannot be built says why and
what to run (`analysis.tables.comparable.TableUnavailable`); every table is named, so that
``Report.records()`` (``--json``) gives them by name.
"""

from __future__ import annotations

import pandas as pd

from analysis.figures import plots, trajectories
from analysis.reports.report import Report
from analysis.tables import beside as tables_paper
from analysis.tables import length as tables_length
from analysis.tables import position as tables_position
from analysis.tables import ppl as tables_ppl
from analysis.tables import probe as tables_probe
from analysis.tables import runs as tables_store
from analysis.tables import seeds as tables_seeds
from analysis.tables.comparable import TableUnavailable
from lab.ladder.drift import INERT_TOL

__all__ = [
    "build_report",
    "lm_sections",
    "probe_section",
    "probe_section_from_records",
    "paper_db_section",
]

#: How a table says the paper's numbers sit beside ours (`tables_paper.with_paper`).
PAPER_BESIDE = (
    "`_paper`: the paper's {table} beside each row (FineWeb-Edu and the other published "
    "corpora: compare orderings and changes, not absolute values; — where the paper has no row)"
)


def _try(report: Report, what: str, fn) -> None:
    """Run one section; a table that cannot be built from the data at hand
    (`TableUnavailable`) says why and what to run instead of failing the report. Any
    other exception is a bug, and fails it."""
    try:
        fn()
    except TableUnavailable as e:
        report.text(f"*{what}: not available — {e}.*")


def _table(report: Report, df: pd.DataFrame, name: str, caption: str = "", decimals: int = 3):
    """One table, then its notes (``df.attrs["notes"]``: e.g. duplicate runs resolved)."""
    report.table(df, caption=caption, decimals=decimals, name=name)
    for note in df.attrs.get("notes", []):
        report.text(f"*Note: {note}.*")


# --------------------------------------------------------------------------------------------
# language-model sections
# --------------------------------------------------------------------------------------------
def final_ppl(store, runs=None) -> pd.DataFrame:
    """One row per LM run: config, W, seed, dataset, training length, step, held-out ppl."""
    ev = tables_store.lm_evals(store, runs=runs)
    ev = tables_store.final_step_rows(ev[ev["context_len"] == ev["seq_len"]], {"recompute"})
    cols = ["run", "config", "W", "seed", "dataset", "seq_len", "step", "perplexity", "tokens"]
    return ev[cols].sort_values(["dataset", "config", "seed"]).reset_index(drop=True)


def lm_sections(report: Report, store, runs=None, dataset: str | None = None) -> None:
    """Perplexity, seeds, extrapolation, position bins and α trajectories of LM runs."""
    fp = final_ppl(store, runs)
    if fp.empty:
        report.text(
            "*No finished language-model runs with a final evaluation in the store: train one "
            "(`fiblab train --preset cpu-stagger`, or notebook 03) or run `fiblab demo`, "
            "then report again.*"
        )
        return
    known = sorted(set(fp["dataset"]))
    if dataset is not None and dataset not in known:  # its tables were left out, silently
        raise ValueError(
            f"dataset {dataset!r} has no evaluation in the store: use one of {', '.join(known)}"
        )
    report.heading("Language models: held-out perplexity")
    report.table(
        fp,
        caption="final evaluation at the training length (whole non-overlapping "
        "windows; tokens = targets actually scored)",
        decimals=2,
        name="final_ppl",
    )
    _try(
        report,
        "seed statistics",
        lambda: _table(
            report,
            tables_paper.with_paper(
                tables_seeds.table5_from_store(store, dataset, runs=runs),
                tables_paper.for_report(5),
                on=["config"],
                diff=False,
            ),
            "table5",
            decimals=3,
            caption="per configuration over seeds (Table 5's layout; std = sample std, std_pop = "
            "the paper's population std); " + PAPER_BESIDE.format(table="Table 5 (W = 12)"),
        ),
    )
    _try(
        report,
        "Table 1 layout",
        lambda: _table(
            report,
            tables_paper.with_paper(
                tables_ppl.table1_from_store(store, runs=runs),
                tables_paper.for_report(1),
                on=["base", "schedule", "W"],
                diff=False,
                rest=True,
            ),
            "table1",
            decimals=2,
            caption="Table 1's layout (sparse runs; seeds of one variant averaged); "
            + PAPER_BESIDE.format(table="Table 1"),
        ),
    )

    report.heading("Length extrapolation")
    _try(report, "extrapolation", lambda: _extrapolation(report, store, runs, dataset))
    report.heading("Position-resolved loss")
    _try(report, "position bins", lambda: _position_bins(report, store, runs, dataset))
    _try(report, "α trajectories", lambda: _lm_alphas(report, store, runs))


def _extrapolation(report: Report, store, runs, dataset) -> None:
    """Table 3's layout beside the paper's, its figure, and the position-matched blocks."""
    t3 = tables_length.table3_from_store(store, dataset, runs=runs, blocks=False)
    _table(
        report,
        tables_paper.with_paper(
            t3, tables_paper.for_report(3), on=["model", "W"], diff=False, rest=True
        ),
        "table3",
        decimals=2,
        caption="perplexity at each evaluation length; ppl_T{L}: "
        "rung set recomputed for L (the paper's policy), "
        "frozen_ppl_T{L}: the training-length rung set; "
        + PAPER_BESIDE.format(table="Table 3 (T = 1024 training)"),
    )
    report.figure(
        plots.extrapolation(t3, title="perplexity vs evaluation length"),
        "extrapolation",
        "solid: rungs recomputed; dashed: rungs frozen",
    )
    t3b = tables_length.table3_from_store(store, dataset, runs=runs, blocks=True)
    bcols = [c for c in t3b.columns if "_block" in c and not c.startswith("frozen")]
    if bcols:
        keys = [c for c in ("model", "W", "variant") if c in t3b.columns]
        report.table(
            t3b[keys + bcols],
            name="table3_blocks",
            decimals=2,
            caption="position-matched perplexity: block j = positions "
            "[j·T, (j+1)·T) of the long windows (block 0 sees exactly a "
            "training window's context)",
        )


def _position_bins(report: Report, store, runs, dataset) -> None:
    """Table 4's layout (NLL per position bin) beside the paper's, and its figure."""
    t4 = tables_position.table4_from_store(store, dataset, runs=runs)
    _table(
        report,
        tables_paper.with_paper(
            t4, tables_paper.for_report(4), on=["schedule", "W"], diff=False
        ),
        "table4",
        decimals=3,
        caption="mean NLL (nats) in the paper's 8 position bins "
        "of the training window; the last row is fixed − "
        "stagger; " + PAPER_BESIDE.format(table="Table 4 (W = 8)"),
    )
    report.figure(plots.position_bins(t4, title="NLL per position bin"), "position-bins")


def _lm_alphas(report: Report, store, runs) -> None:
    """Learned α of the LM runs: final range, inert or not, trajectories (none: no section)."""
    tr = trajectories.from_store(store, runs=runs, kinds=("lm",))
    if tr.empty:
        return
    report.heading("Learned α (language models)")
    report.table(
        trajectories.final_range(tr),
        decimals=3,
        caption="final α range per run",
        name="lm_alpha_range",
    )
    report.table(
        trajectories.inert(tr),
        decimals=3,
        caption=f"is each run's α within {INERT_TOL} of its init? (the paper's 'inert')",
        name="lm_alpha_inert",
    )
    report.figure(plots.alpha_trajectories(tr, title="learned α per layer"), "lm-alphas")


# --------------------------------------------------------------------------------------------
# probes, coverage, claims
# --------------------------------------------------------------------------------------------
def probe_section(
    report: Report,
    cells: pd.DataFrame,
    traj: pd.DataFrame | None = None,
    title: str = "Retrieval probe",
    note: str = "",
    mechanism: str = "blur",
) -> None:
    """Table 2 of probe cells (``tables_probe.probe_cells_from_records`` / ``…_from_store``:
    the marked task, one ``mechanism`` — the paper's table used ``blur``) and their α
    trajectories.  Never silent: cells of the marked task under other mechanisms, or none of
    the chosen one, are named in the report with how to show them."""
    marked = cells[cells["task"] == "marked"]
    others = sorted(set(marked["mechanism"]) - {mechanism})
    shift = cells.loc[cells["task"] == "shift", "run"].nunique()
    cells = marked[marked["mechanism"] == mechanism]
    if marked.empty and not shift:
        return
    report.heading(title)
    if note:
        report.text(note)
    if shift:  # never silent about cells the report leaves out (issue 42)
        report.text(
            f"The store also holds {shift} shift-task probe cell{'s' if shift != 1 else ''}; "
            f"this report does not tabulate them (its Table 2 is the marked task's)."
        )
    if marked.empty:
        return
    if others:
        report.text(
            f"Table 2 below shows the {mechanism!r} mechanism; this store also holds marked-task "
            f"cells of {', '.join(repr(m) for m in others)}, left out here (choose the mechanism "
            f"in notebook 05's panel, or `build_report(..., mechanism=…)`)."
        )
    if cells.empty:
        report.text(f"No marked-task cells of the {mechanism!r} mechanism: no Table 2.")
        return
    _try(
        report,
        "Table 2",
        lambda: report.table(
            tables_paper.with_paper(
                tables_probe.table2(cells, mechanism),
                tables_paper.for_report(2),
                on=["depth", "init"],
                diff=False,
                rest=True,
            ),
            decimals=3,
            caption="ours: α range over layers and seeds at the end, accuracy per distance "
            "(mean over seeds); `_paper`: the paper's Table 2 beside each row (T = 512, "
            "distances 200 and 350, 2,500 steps)",
            name="table2",
        ),
    )
    per = cells.pivot_table(
        index=["run", "depth", "init", "seed"],
        columns="distance",
        values="accuracy",
        aggfunc="first",
    )
    per.columns = [f"acc@{d}" for d in per.columns]
    per = per.reset_index()
    alphas = cells.drop_duplicates("run").set_index("run")["alphas"]
    per.insert(4, "final α", [", ".join(f"{a:.3f}" for a in alphas[r]) for r in per["run"]])
    report.table(
        per.drop(columns="run").sort_values(["depth", "init", "seed"]),
        decimals=3,
        caption="every cell",
        name="probe_cells",
    )
    if traj is not None:
        traj = traj[traj["run"].isin(set(cells["run"]))]
    if traj is not None and not traj.empty:
        report.figure(
            plots.alpha_trajectories(traj, title="learned α per layer during the probe"),
            "probe-alphas",
        )


def probe_section_from_records(report: Report, records: list[dict], **kw) -> None:
    if records:
        probe_section(
            report,
            tables_probe.probe_cells_from_records(records),
            trajectories.from_records(records),
            **kw,
        )


def paper_db_section(report: Report, db_path: str) -> None:
    """The paper's tables rebuilt from the authors' released results database (SPEC §7), each
    beside the published numbers: a check that the published tables follow from the data."""
    from analysis.published import paperdb

    report.heading("The authors' results database, rebuilt")
    report.text(
        f"Read from `{db_path}`. Columns `_paper` hold the published value and `_diff` "
        f"ours − published."
    )
    fp = paperdb.load_final_ppl(db_path)
    t1 = tables_paper.with_paper(tables_ppl.table1_from_final_ppl(fp, decimals=2), tables_paper.published(1))
    report.table(
        t1,
        decimals=2,
        caption="Table 1: final held-out perplexity at step 13,000",
        name="paperdb_table1",
    )
    report.figure(
        plots.perplexity_vs_window(
            tables_ppl.table1_from_final_ppl(fp), title="FineWeb-Edu perplexity vs W (authors' database)"
        ),
        "paperdb-ppl-vs-W",
    )
    _try(
        report,
        "Table 5",
        lambda: report.table(
            tables_paper.with_paper(
                tables_seeds.table5_from_final_ppl(fp, decimals=2), tables_paper.published(5)
            ),
            decimals=2,
            caption="Table 5: seed replication at W=12 (FineWeb-Edu)",
            name="paperdb_table5",
        ),
    )
    _try(
        report,
        "Table 2",
        lambda: report.table(
            tables_probe.table2_from_paperdb(paperdb.load_retrieval(db_path)),
            decimals=3,
            caption="Table 2 from the database's marked-probe rows",
            name="paperdb_table2",
        ),
    )


# --------------------------------------------------------------------------------------------
# whole reports
# --------------------------------------------------------------------------------------------
def build_report(
    store,
    runs=None,
    probe_records: list[dict] | None = None,
    title: str = "fiblab report",
    dataset: str | None = None,
    paper_db: str | None = None,
    claims=None,
    mechanism: str = "blur",
) -> Report:
    """Every table and figure for the chosen LM runs (default: all finished) and probe records
    (default: the probe cells in the store), Table 2 for probe ``mechanism``; with ``paper_db``
    (the authors' fib.db) also the paper's tables rebuilt from it; with ``claims`` (an
    `analysis.ledger.ledger.Ledger`) the claims ledger first."""
    r = Report(title)
    if claims is not None:
        from analysis.ledger.report import ledger_section

        ledger_section(r, claims)
    lm_sections(r, store, runs, dataset)
    if probe_records is not None:
        probe_section_from_records(r, probe_records, mechanism=mechanism)
    else:
        probes = store.probes()
        if len(probes):
            probe_section(
                r,
                tables_probe.probe_cells_from_store(probes),
                trajectories.from_store(store, kinds=("probe",)),
                mechanism=mechanism,
            )
    if paper_db:
        paper_db_section(r, paper_db)
    return r
