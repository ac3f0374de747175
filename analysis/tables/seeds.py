"""Table 5: one configuration over seeds (per-seed perplexity, mean, sample and population std) —
from our store or from the authors' final perplexities."""

from __future__ import annotations

import pandas as pd

from analysis.statistics.stats import as_sample, summary
from analysis.tables.comparable import TableUnavailable, comparable_rows
from analysis.tables.rows import config_label, finish_table, rounded
from analysis.tables.runs import final_step_rows, lm_evals_and_variants, pick_dataset, unavailable

__all__ = ["table5", "table5_from_store", "table5_from_final_ppl"]


def table5(long: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Table 5 (one configuration over seeds) from a long frame with columns ``config``, ``W``,
    ``seed`` and ``ppl``.

    One row per (config, W): ``config``, ``W``, ``seed{s}`` for every seed in the table (NaN
    where a config lacks it), ``n``, ``mean``, ``std`` (sample, ddof 1; NaN for one seed),
    ``std_pop`` (population, ddof 0: the paper's). An optional ``variant`` column (text) splits a
    (config, W) into rows of different variants, shown after ``W``. Rows by W, then mean
    ascending (the paper's order). ``ValueError`` when a (config, W[, variant], seed) has two
    values.
    """
    need = ["config", "W", "seed", "ppl"]
    missing = [c for c in need if c not in long.columns]
    if missing:
        raise ValueError(f"table5 needs columns {need}; missing {missing}")
    df = long.copy()
    df["W"] = df["W"].astype("Int64")
    keys = ["config", "W"] + (["variant"] if "variant" in df.columns else [])
    dup = df.duplicated(keys + ["seed"], keep=False)
    if dup.any():
        raise ValueError(
            f"Table 5 has more than one value per ({', '.join(keys)}, seed); keep one run "
            f"per seed (analysis.tables.comparable.one_run_per_seed):\n"
            + df.loc[dup].to_string(index=False)
        )
    seeds = sorted(int(s) for s in df["seed"].dropna().unique())
    rows = []
    for key, g in df.groupby(keys, dropna=False, sort=False):
        config = key[0]
        x = as_sample(g["ppl"].to_numpy(), f"ppl of {config}")
        row = dict(zip(keys, key))
        for s in seeds:
            v = g.loc[g["seed"] == s, "ppl"]
            row[f"seed{s}"] = float(v.iloc[0]) if len(v) else float("nan")
        d = summary(x)  # the one definition of a sample's n, mean, std (ddof 1), σ_pop
        row.update({k: d[k] for k in ("n", "mean", "std", "std_pop")})
        rows.append(row)
    cols = keys + [f"seed{s}" for s in seeds] + ["n", "mean", "std", "std_pop"]
    out = pd.DataFrame(rows, columns=cols)
    out["W"] = out["W"].astype("Int64")
    out["n"] = out["n"].astype("int64")
    out = (
        out.assign(_w=out["W"].astype("Float64").fillna(-1.0))
        .sort_values(["_w", "mean"], kind="stable")
        .drop(columns="_w")
        .reset_index(drop=True)
    )
    values = [c for c in cols if c not in ("config", "W", "variant", "n")]
    out[values] = out[values].astype(float)
    return rounded(out, values, decimals)


def table5_from_store(
    store,
    dataset: str | None = None,
    W: int | None = None,
    *,
    status: str | None = "done",
    runs=None,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table5` from our store: each LM run's ``recompute`` evaluation at its training length and
    last step on ``dataset`` (default: the only one, else ``fineweb_edu``); ``W`` keeps one
    window (dense runs, which have none, are kept only when ``W`` is None). The seeds of one
    variant are a row; other variants are rows of their own (see
    :func:`analysis.tables.ppl.table1_from_store` for ``variant``, ``duplicates`` and
    ``attrs["notes"]``). ``runs`` restricts it to those names."""
    ev, variants = lm_evals_and_variants(store, status, runs)
    ev = final_step_rows(ev[ev["context_len"] == ev["seq_len"]], {"recompute"})
    ds = pick_dataset(ev, dataset, "Table 5")
    ev = ev[ev["dataset"] == ds]
    if W is not None:
        ev = ev[ev["W"] == W]
        if ev.empty:
            raise unavailable("Table 5", f" with W={W} on {ds!r}")
    if ev["seed"].isna().any():
        raise TableUnavailable(
            "Table 5 lists runs by seed, and the configs of runs "
            f"{sorted(ev.loc[ev['seed'].isna(), 'run'].unique())} record none",
            "leave them out by naming the runs to use (`fiblab report RUN …`, or runs=[...])",
            choose="runs",
        )
    ev, notes = comparable_rows(ev, variants, "Table 5", duplicates)
    long = pd.DataFrame(
        {
            "config": ev["config"].to_numpy(),
            "W": ev["W"].to_numpy(),
            "variant": ev["variant"].to_numpy(),
            "seed": ev["seed"].to_numpy(),
            "ppl": ev["perplexity"].to_numpy(),
        }
    )
    return finish_table(table5(long, decimals=decimals), notes)


def table5_from_final_ppl(
    final_ppl: pd.DataFrame,
    dataset: str = "fineweb_edu",
    W: int | None = 12,
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table5` from the authors' final perplexities (:func:`analysis.published.paperdb.load_final_ppl`:
    main matrix and seed replicates alike) on ``dataset``; ``W`` keeps one window (the paper's
    Table 5 is W = 12)."""
    need = {"base", "schedule", "W", "seed", "dataset", "ppl"}
    missing = sorted(need - set(final_ppl.columns))
    if missing:
        raise ValueError(f"table5_from_final_ppl needs columns {sorted(need)}; missing {missing}")
    df = final_ppl[(final_ppl["dataset"] == dataset) & final_ppl["base"].notna()]
    if W is not None:
        df = df[df["W"] == W]
    long = pd.DataFrame(
        {
            "config": [config_label(b, s) for b, s in zip(df["base"], df["schedule"])],
            "W": df["W"].to_numpy(),
            "seed": df["seed"].to_numpy(),
            "ppl": df["ppl"].to_numpy(),
        }
    )
    return table5(long, decimals=decimals)
