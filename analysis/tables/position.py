"""Table 4: mean NLL per position bin of the training window, with the fixed − stagger gap —
from our store or from the authors' ``posloss`` dump."""

from __future__ import annotations

import pandas as pd

from analysis.tables.comparable import comparable_rows
from analysis.tables.rows import config_label, finish_table, paper_order, rounded
from analysis.tables.runs import final_step_rows, lm_evals_and_variants, pick_dataset
from lab.store.evalkind import EvalKind, Family

__all__ = ["table4", "table4_from_store", "table4_from_posloss"]


def _bin_kind(text: str) -> EvalKind | None:
    k = EvalKind.read(text)
    return k if k is not None and k.family is Family.BIN else None


def table4(
    long: pd.DataFrame, gap=("fib/fixed", "fib/stagger"), decimals: int | None = None
) -> pd.DataFrame:
    """Table 4 (mean NLL per position bin) from a long frame.

    ``long`` has columns ``schedule`` (config label), ``W``, ``run``, ``bin`` (0 = earliest
    positions) and ``nll``; an optional ``variant`` (text) splits a (schedule, W) into rows of
    different variants, an optional ``seed`` makes ``seeds`` count distinct seeds rather than
    runs. Returns one row per (schedule, W[, variant]), seeds averaged: ``schedule``, ``W``,
    [``variant``,] ``b0`` … ``b{n−1}``, ``seeds``; in the paper's order. ``gap=(a, b)`` appends,
    for each W (and variant) where both are present, a row ``schedule = "a - b"`` holding a − b
    per bin (positive: b has the lower loss; the paper's fixed − stagger ≈ +0.035 nats);
    ``None`` adds none.
    """
    need = ["schedule", "W", "run", "bin", "nll"]
    missing = [c for c in need if c not in long.columns]
    if missing:
        raise ValueError(
            f"Table 4 needs a long frame with columns {need}; this one lacks {missing}: "
            f"build it with table4_from_store or table4_from_posloss"
        )
    df = long.copy()
    df["W"] = df["W"].astype("Int64")
    keys = ["schedule", "W"] + (["variant"] if "variant" in df.columns else [])
    bins = sorted(int(b) for b in df["bin"].unique())
    cols = [f"b{b}" for b in bins]
    if df.empty:
        return pd.DataFrame(columns=keys + cols + ["seeds"])
    wide = df.pivot_table(index=keys, columns="bin", values="nll", aggfunc="mean", dropna=False)
    wide.columns = [f"b{int(b)}" for b in wide.columns]
    wide = wide.reset_index()
    who = "seed" if "seed" in df.columns else "run"
    seeds = df.groupby(keys, dropna=False)[who].nunique(dropna=False).rename("seeds")
    wide = wide.merge(seeds.reset_index(), on=keys)
    wide = wide.dropna(subset=cols, how="all")
    wide = paper_order(wide[keys + cols + ["seeds"]], "schedule")
    wide["seeds"] = wide["seeds"].astype("Int64")
    if gap is not None:
        a, b = gap
        extra = []
        rest = keys[2:]  # the variant, when there is one: a gap pairs rows of one variant text
        for _, row in wide[wide["schedule"] == a].iterrows():
            w = row["W"]
            same = (wide["W"].isna() if pd.isna(w) else wide["W"] == w) & (wide["schedule"] == b)
            for k in rest:
                same &= wide[k] == row[k]
            rb = wide[same]
            if len(rb):
                diff = row[cols].to_numpy(dtype=float) - rb[cols].to_numpy(dtype=float)[0]
                extra.append(
                    {
                        "schedule": f"{a} - {b}",
                        "W": w,
                        **{k: row[k] for k in rest},
                        **dict(zip(cols, diff)),
                        "seeds": pd.NA,
                    }
                )
        if extra:
            gaps = pd.DataFrame(extra, columns=wide.columns)
            gaps["W"] = gaps["W"].astype("Int64")
            gaps["seeds"] = gaps["seeds"].astype("Int64")
            wide = pd.concat([wide, gaps], ignore_index=True)
    wide[cols] = wide[cols].astype(float)
    return rounded(wide, cols, decimals)


def table4_from_store(
    store,
    dataset: str | None = None,
    *,
    gap=("fib/fixed", "fib/stagger"),
    status: str | None = "done",
    runs=None,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table4` from our store: each LM run's ``bin{b}`` evaluations at its training length
    and its last step with such evaluations, on ``dataset`` (default: the only one, else
    ``fineweb_edu``); the loss column is the bin's mean NLL. The seeds of one variant are
    averaged, other variants are rows of their own, and a gap row pairs only rows of one variant
    text (see :func:`analysis.tables.ppl.table1_from_store` for ``variant``, ``duplicates`` and
    ``attrs["notes"]``). ``runs`` restricts it to those names."""
    ev, variants = lm_evals_and_variants(store, status, runs)
    ev = ev[ev["context_len"] == ev["seq_len"]]
    ev = final_step_rows(ev, lambda k: _bin_kind(k) is not None)
    ds = pick_dataset(ev, dataset, "Table 4")
    ev = ev[ev["dataset"] == ds]
    ev, notes = comparable_rows(ev, variants, "Table 4", duplicates)
    long = pd.DataFrame(
        {
            "schedule": ev["config"].to_numpy(),
            "W": ev["W"].to_numpy(),
            "variant": ev["variant"].to_numpy(),
            "run": ev["run"].to_numpy(),
            "seed": ev["seed"].to_numpy(),
            "bin": [_bin_kind(k).bin for k in ev["kind"]],
            "nll": ev["loss"].to_numpy(),
        }
    )
    return finish_table(table4(long, gap=gap, decimals=decimals), notes)


def table4_from_posloss(
    posloss: pd.DataFrame,
    dataset: str = "fineweb_edu",
    W: int | None = 8,
    gap=("fib/fixed", "fib/stagger"),
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table4` from the authors' binned position dump (:func:`analysis.published.paper.posloss`) on
    ``dataset``; ``W`` keeps one window (the paper's Table 4 is W = 8, fixed and stagger)."""
    df = posloss[posloss["dataset"] == dataset]
    if W is not None:
        df = df[df["W"] == W]
    if df.empty:
        have = sorted(set(posloss["dataset"]))
        raise ValueError(
            f"the authors' position-bin dump has no rows for dataset={dataset!r}, W={W!r} "
            f"(datasets: {have}): choose one of those"
        )
    long = pd.DataFrame(
        {
            "schedule": [config_label(b, s) for b, s in zip(df["base"], df["schedule"])],
            "W": df["W"].to_numpy(),
            "run": df["run"].to_numpy(),
            "bin": df["bin"].to_numpy(),
            "nll": df["nll"].to_numpy(),
        }
    )
    return table4(long, gap=gap, decimals=decimals)
