"""Table 1: final held-out perplexity, base × schedule × W by dataset, in the paper's layout —
from the authors' final perplexities (:func:`table1_from_final_ppl`) or from our store (:func:`table1_from_store`).
"""

from __future__ import annotations

import pandas as pd

from analysis.published.paperdb import BASES, DATASETS, DEFAULT_SEED, SCHEDULES
from analysis.tables.comparable import comparable_rows
from analysis.tables.rows import config_label, finish_table, paper_order, rounded
from analysis.tables.runs import final_step_rows, lm_evals_and_variants, unavailable

__all__ = ["TABLE1_KEYS", "TABLE1_COLUMNS", "table1_from_final_ppl", "table1_from_store"]


#: Row keys of Table 1 in the paper's layout (the store's table adds ``variant``).
TABLE1_KEYS = ["base", "schedule", "W"]
#: Value columns of Table 1, in the paper's order.
TABLE1_COLUMNS = list(DATASETS.values())


def _is_matrix_code(code) -> bool:
    """``f01`` … ``f99``: the main run matrix (``g``/``h`` are seed replicates)."""
    return isinstance(code, str) and len(code) >= 2 and code[0] == "f" and code[1:].isdigit()


def table1_from_final_ppl(final_ppl: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Table 1 in the paper's layout from a long final-perplexity frame.

    ``final_ppl`` is what :func:`analysis.published.paperdb.load_final_ppl` returns (columns ``code``,
    ``base``, ``schedule``, ``W``, ``seed``, ``dataset``, ``ppl``; others are ignored). Only the
    main matrix is used: codes ``f01``, ``f02``, … (the paper has ``f01``–``f21``) with seed 42.

    Returns one row per (base, schedule, W) present, in the paper's order (fib before pow2;
    fixed, learned, stagger, coprime; W ascending), with columns ``base``, ``schedule``, ``W``
    (int), ``tinystories``, ``math``, ``fineweb_edu``, ``wikipedia`` (perplexity; ``NaN`` where
    a dataset is missing), index 0…n−1 — the layout of :func:`analysis.published.paper.perplexity`.
    ``decimals`` rounds the values (the paper prints 2).

    Raises ``ValueError`` if required columns are missing or a (base, schedule, W, dataset) cell
    has more than one value (e.g. a failed attempt that was not filtered out).
    """
    need = {"code", "base", "schedule", "W", "seed", "dataset", "ppl"}
    missing = sorted(need - set(final_ppl.columns))
    if missing:
        raise ValueError(f"table1_from_final_ppl needs columns {sorted(need)}; missing {missing}")
    df = final_ppl[
        final_ppl["code"].map(_is_matrix_code)
        & final_ppl["seed"].eq(DEFAULT_SEED).fillna(False).astype(bool)
        & final_ppl["base"].notna()
    ]
    keys = TABLE1_KEYS + ["dataset"]
    dup = df.duplicated(keys, keep=False)
    if dup.any():
        cells = df.loc[dup, keys + (["title"] if "title" in df.columns else [])]
        raise ValueError("more than one value per Table 1 cell:\n" + cells.to_string(index=False))
    wide = df.pivot(index=TABLE1_KEYS, columns="dataset", values="ppl").reset_index()
    wide.columns.name = None
    extra = [c for c in wide.columns if c not in TABLE1_KEYS and c not in TABLE1_COLUMNS]
    for col in TABLE1_COLUMNS:
        if col not in wide.columns:
            wide[col] = float("nan")
    wide = wide[TABLE1_KEYS + TABLE1_COLUMNS + sorted(extra)]
    base_rank = {b: i for i, b in enumerate(BASES)}
    sched_rank = {s: i for i, s in enumerate(SCHEDULES)}
    wide["W"] = wide["W"].astype("int64")
    wide = wide.assign(
        _b=wide["base"].map(lambda b: base_rank.get(b, len(base_rank))),
        _s=wide["schedule"].map(lambda s: sched_rank.get(s, len(sched_rank))),
    )
    wide = (
        wide.sort_values(["_b", "base", "_s", "schedule", "W"])
        .drop(columns=["_b", "_s"])
        .reset_index(drop=True)
    )
    values = [c for c in wide.columns if c not in TABLE1_KEYS]
    wide[values] = wide[values].astype(float)
    if decimals is not None:
        wide[values] = wide[values].round(decimals)
    return wide


def _dataset_order(names) -> list[str]:
    paper = [d for d in TABLE1_COLUMNS if d in set(names)]
    return paper + sorted(set(names) - set(paper))


def table1_from_store(
    store,
    *,
    seed: int | None = None,
    status: str | None = "done",
    runs=None,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """Table 1 (final held-out perplexity, base × schedule × W by dataset) from our store.

    Reads each sparse LM run's ``recompute`` evaluations at its training length at its last such step.
    ``seed`` keeps one seed; otherwise a cell is the arithmetic mean of the per-seed perplexities
    of one variant (one run per seed:
    see :mod:`analysis.tables.comparable`; ``duplicates`` says what to do with two runs of one variant
    and seed). Returns ``base``, ``schedule``, ``W``, ``variant`` (only when runs of one label
    differ in more than the seed: what tells the rows apart, e.g. ``steps=12``), one perplexity
    column per dataset present (the paper's four first, in its order, then others
    alphabetically), and ``seeds`` (distinct seeds in the row; a dataset a seed was not
    evaluated on is averaged over fewer); rows in the paper's order;
    ``attrs["notes"]`` lists the duplicates resolved. Dense runs have no window and are left out
    (see :func:`analysis.tables.length.table3_from_store`). ``runs`` restricts the table to
    those run names (see :func:`analysis.tables.runs.lm_runs`).
    :class:`analysis.tables.comparable.TableUnavailable` when no run has such an evaluation.
    """
    ev, variants = lm_evals_and_variants(store, status, runs)
    ev = ev[(ev["attention"] != "dense") & (ev["context_len"] == ev["seq_len"])]
    if seed is not None:
        ev = ev[ev["seed"] == seed]
    ev = final_step_rows(ev, {"recompute"})
    if ev.empty:
        raise unavailable("Table 1", "" if seed is None else f" with seed {seed}")
    ev, notes = comparable_rows(ev, variants, "Table 1", duplicates)
    cols = _dataset_order(ev["dataset"].unique())
    keys = TABLE1_KEYS + ["variant"]
    wide = ev.pivot_table(index=keys, columns="dataset", values="perplexity", aggfunc="mean")
    wide = wide.reset_index()
    wide.columns.name = None
    seeds = ev.groupby(keys)["seed"].nunique(dropna=False).rename("seeds").reset_index()
    wide = wide.merge(seeds, on=keys)[keys + cols + ["seeds"]]
    wide["W"] = wide["W"].astype("int64")
    wide["seeds"] = wide["seeds"].astype("int64")
    wide = paper_order(
        wide.assign(_l=[config_label(b, s) for b, s in zip(wide["base"], wide["schedule"])]), "_l"
    )
    return finish_table(rounded(wide.drop(columns="_l"), cols, decimals), notes)
