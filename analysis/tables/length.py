"""Table 3: perplexity against evaluation length (length extrapolation) under both rung policies,
with position-matched blocks — from our store or from the authors' ``lenextrap`` dump."""

from __future__ import annotations

import math

import pandas as pd

from analysis.tables.comparable import TableUnavailable, comparable_rows
from analysis.tables.rows import config_label, finish_table, paper_order, rounded
from analysis.tables.runs import (
    final_step_rows,
    lm_evals_and_variants,
    pick_dataset,
    same_tokens_basis,
    unavailable,
)
from lab.store.evalkind import EvalKind

__all__ = ["table3", "table3_from_store", "table3_from_lenextrap"]


def _policy_kind(text: str) -> EvalKind | None:
    """The kind if it is whole windows or a block under a rung policy (recompute / freeze)."""
    k = EvalKind.read(text)
    return k if k is not None and k.policy is not None else None


def _fmt_factor(k: float) -> str:
    return f"{k:g}"


def table3(long: pd.DataFrame, blocks: bool = True, decimals: int | None = None) -> pd.DataFrame:
    """Table 3 (perplexity against evaluation length) from a long frame.

    ``long`` has one row per run and measurement: ``model`` (config label), ``W`` (missing for
    dense), ``run``, ``train_len`` (the training length T), ``context_len``, ``policy``
    (``recompute``: rungs recomputed for the length, the paper's; ``freeze``: rungs of length T),
    ``block`` (missing: whole windows; j: positions [j·T, (j+1)·T) of each window) and ``ppl``.

    An optional ``variant`` column (text) splits a (model, W) into rows of different variants
    (:mod:`analysis.tables.comparable`), and an optional ``seed`` column makes ``seeds`` count distinct
    seeds rather than runs.

    Returns one row per (model, W[, variant]), seeds averaged, with columns ``model``, ``W``,
    [``variant``,] then

    - ``ppl_T{L}`` for every length L (whole windows, recomputed rungs),
    - ``change_at_{k}x_percent`` = 100·(ppl at k·T / ppl at T − 1), k the largest factor L/T in
      the table (NaN for a row not evaluated at k·T),
    - ``frozen_ppl_T{L}`` for L > T and ``frozen_change_at_{k}x_percent`` (same baseline: at L = T
      both policies attend the same distances; the frozen value at T is used only when the
      recomputed one is missing),
    - with ``blocks``: ``ppl_T{L}_block{j}`` and ``frozen_ppl_T{L}_block{j}``,
    - ``seeds`` (runs averaged).

    Rows: dense first, then the paper's base and schedule order, W ascending.
    """
    need = ["model", "W", "run", "train_len", "context_len", "policy", "block", "ppl"]
    missing = [c for c in need if c not in long.columns]
    if missing:
        raise ValueError(f"table3 needs columns {need}; missing {missing}")
    df = long.copy()
    df["W"] = df["W"].astype("Int64")
    df["block"] = df["block"].astype("Int64")
    keys = ["model", "W"] + (["variant"] if "variant" in df.columns else [])
    mixed = df.groupby(keys, dropna=False)["train_len"].nunique()
    if (mixed > 1).any():
        raise TableUnavailable(
            f"Table 3: runs of one configuration were trained at different lengths "
            f"({list(mixed[mixed > 1].index)}), so their extrapolation ratios differ",
            "name the runs of one training length (`fiblab report RUN …`, or runs=[...])",
            choose="runs",
        )
    groups = list(df.groupby(keys, dropna=False, sort=False))
    factors = df["context_len"] / df["train_len"]
    k = float(factors.max()) if len(df) else 1.0
    rows, order = [], {}
    for key, g in groups:
        T = int(g["train_len"].iloc[0])
        row = dict(zip(keys, key))

        def mean(policy, L, block=None, _g=g):
            sel = _g[(_g["policy"] == policy) & (_g["context_len"] == L)]
            sel = sel[sel["block"].isna()] if block is None else sel[sel["block"] == block]
            return float(sel["ppl"].mean()) if len(sel) else float("nan")

        whole = g[g["block"].isna()]
        for L in sorted(whole.loc[whole["policy"] == "recompute", "context_len"].unique()):
            row[f"ppl_T{L}"] = mean("recompute", L)
            order[f"ppl_T{L}"] = (0, L, 0)
        base = mean("recompute", T)
        if math.isnan(base):
            base = mean("freeze", T)
            if not math.isnan(base):
                row[f"ppl_T{T}"] = base
                order[f"ppl_T{T}"] = (0, T, 0)
        kname = _fmt_factor(k)
        top = int(round(k * T)) if (k * T).is_integer() else None
        row[f"change_at_{kname}x_percent"] = (
            100.0 * (mean("recompute", top) / base - 1.0) if top else float("nan")
        )
        order[f"change_at_{kname}x_percent"] = (1, 0, 0)
        frozen_ls = sorted(
            L for L in whole.loc[whole["policy"] == "freeze", "context_len"].unique() if L != T
        )
        for L in frozen_ls:
            row[f"frozen_ppl_T{L}"] = mean("freeze", L)
            order[f"frozen_ppl_T{L}"] = (2, L, 0)
        if frozen_ls:
            row[f"frozen_change_at_{kname}x_percent"] = (
                100.0 * (mean("freeze", top) / base - 1.0) if top else float("nan")
            )
            order[f"frozen_change_at_{kname}x_percent"] = (3, 0, 0)
        if blocks:
            blk = g[g["block"].notna()]
            for (policy, L, j), _ in blk.groupby(["policy", "context_len", "block"]):
                prefix = "" if policy == "recompute" else "frozen_"
                name = f"{prefix}ppl_T{L}_block{j}"
                row[name] = mean(policy, L, j)
                order[name] = (4 if policy == "recompute" else 5, L, j)
        row["seeds"] = int(g["seed" if "seed" in g.columns else "run"].nunique(dropna=False))
        rows.append(row)
    cols = keys + sorted(order, key=order.get) + ["seeds"]
    out = pd.DataFrame(rows, columns=cols)
    if out.empty:
        return out
    out["W"] = out["W"].astype("Int64")
    out["seeds"] = out["seeds"].astype("int64")
    out = paper_order(out, "model")
    values = [c for c in out.columns if c not in ("model", "W", "variant", "seeds")]
    out[values] = out[values].astype(float)
    return rounded(out, values, decimals)


def table3_from_store(
    store,
    dataset: str | None = None,
    *,
    status: str | None = "done",
    runs=None,
    blocks: bool = True,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table3` from our store: the ``recompute``, ``freeze`` and ``…:block{j}`` evaluations of
    every LM run (dense included) at its last step with such evaluations, on ``dataset`` (default:
    the only one, else ``fineweb_edu``). Only runs evaluated beyond their training length count,
    so that every column of a row averages the same seeds; the seeds of one variant are averaged,
    other variants are rows of their own (see :func:`analysis.tables.ppl.table1_from_store` for
    ``variant``, ``duplicates`` and ``attrs["notes"]``). ``runs`` restricts it to those names."""
    ev, variants = lm_evals_and_variants(store, status, runs)
    ev = same_tokens_basis(final_step_rows(ev, lambda k: _policy_kind(k) is not None))
    ds = pick_dataset(ev, dataset, "Table 3")
    ev = ev[ev["dataset"] == ds]
    longer = set(ev.loc[ev["context_len"] > ev["seq_len"], "run"])
    ev = ev[ev["run"].isin(longer)]
    if ev.empty:
        raise unavailable("Table 3", f" on {ds!r}")
    ev, notes = comparable_rows(ev, variants, "Table 3", duplicates)
    parsed = [_policy_kind(k) for k in ev["kind"]]
    long = pd.DataFrame(
        {
            "model": ev["config"].to_numpy(),
            "W": ev["W"].to_numpy(),
            "variant": ev["variant"].to_numpy(),
            "run": ev["run"].to_numpy(),
            "seed": ev["seed"].to_numpy(),
            "train_len": ev["seq_len"].to_numpy(),
            "context_len": ev["context_len"].to_numpy(),
            "policy": [p.policy for p in parsed],
            "block": pd.array([p.block for p in parsed], dtype="Int64"),
            "ppl": ev["perplexity"].to_numpy(),
        }
    )
    return finish_table(table3(long, blocks=blocks, decimals=decimals), notes)


def table3_from_lenextrap(
    lenextrap: pd.DataFrame,
    dataset: str = "fineweb_edu",
    train_len: int = 1024,
    runs=None,
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table3` from the authors' length dump (:func:`analysis.published.paper.lenextrap`): every run
    (or those named in ``runs``) on ``dataset``, trained at ``train_len``; recomputed rungs only
    (their policy). The paper's Table 3 is 7 of these rows."""
    df = lenextrap[lenextrap["dataset"] == dataset]
    if runs is not None:
        df = df[df["run"].isin(list(runs))]
    if df.empty:
        raise ValueError(
            f"the authors' length-extrapolation dump has no rows for dataset={dataset!r}"
            + ("" if runs is None else f" and runs={list(runs)}")
            + f" (datasets: {sorted(set(lenextrap['dataset']))}): choose one of those"
        )
    model = [
        config_label(b, s, "dense" if pd.isna(b) else "sparse")
        for b, s in zip(df["base"], df["schedule"])
    ]
    long = pd.DataFrame(
        {
            "model": model,
            "W": df["W"].to_numpy(),
            "run": df["run"].to_numpy(),
            "train_len": train_len,
            "context_len": df["length"].to_numpy(),
            "policy": "recompute",
            "block": pd.array([pd.NA] * len(df), dtype="Int64"),
            "ppl": df["ppl"].to_numpy(),
        }
    )
    return table3(long, blocks=False, decimals=decimals)
