"""The paper's tables rebuilt from results, and side-by-side comparison with the published ones.

>>> from analysis.paperdb import load_final_ppl
>>> from analysis.paper import perplexity
>>> ours = table1(load_final_ppl("../shared/reference/fib.db"))      # doctest: +SKIP
>>> with_paper(ours.round(2), perplexity())                           # doctest: +SKIP
"""
from __future__ import annotations

import pandas as pd

from .paperdb import BASES, DATASETS, DEFAULT_SEED, SCHEDULES

__all__ = ["TABLE1_KEYS", "TABLE1_COLUMNS", "table1", "with_paper"]

#: Row keys of Table 1.
TABLE1_KEYS = ["base", "schedule", "W"]
#: Value columns of Table 1, in the paper's order.
TABLE1_COLUMNS = list(DATASETS.values())


def _is_matrix_code(code) -> bool:
    """``f01`` … ``f99``: the main run matrix (``g``/``h`` are seed replicates)."""
    return isinstance(code, str) and len(code) >= 2 and code[0] == "f" and code[1:].isdigit()


def table1(final_ppl: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Table 1 in the paper's layout from a long final-perplexity frame.

    ``final_ppl`` is what :func:`analysis.paperdb.load_final_ppl` returns (columns ``code``,
    ``base``, ``schedule``, ``W``, ``seed``, ``dataset``, ``ppl``; others are ignored). Only the
    main matrix is used: codes ``f01``–``f21`` with seed 42.

    Returns one row per (base, schedule, W) present, in the paper's order (fib before pow2;
    fixed, learned, stagger, coprime; W ascending), with columns ``base``, ``schedule``, ``W``
    (int), ``tinystories``, ``math``, ``fineweb_edu``, ``wikipedia`` (perplexity; ``NaN`` where
    a dataset is missing), index 0…n−1 — the layout of :func:`analysis.paper.perplexity`.
    ``decimals`` rounds the values (the paper prints 2).

    Raises ``ValueError`` if required columns are missing or a (base, schedule, W, dataset) cell
    has more than one value (e.g. a failed attempt that was not filtered out).
    """
    need = {"code", "base", "schedule", "W", "seed", "dataset", "ppl"}
    missing = sorted(need - set(final_ppl.columns))
    if missing:
        raise ValueError(f"table1 needs columns {sorted(need)}; missing {missing}")
    df = final_ppl[final_ppl["code"].map(_is_matrix_code)
                   & final_ppl["seed"].eq(DEFAULT_SEED).fillna(False).astype(bool)
                   & final_ppl["base"].notna()]
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
    wide = wide.assign(_b=wide["base"].map(lambda b: base_rank.get(b, len(base_rank))),
                       _s=wide["schedule"].map(lambda s: sched_rank.get(s, len(sched_rank))))
    wide = (wide.sort_values(["_b", "base", "_s", "schedule", "W"])
                .drop(columns=["_b", "_s"]).reset_index(drop=True))
    values = [c for c in wide.columns if c not in TABLE1_KEYS]
    wide[values] = wide[values].astype(float)
    if decimals is not None:
        wide[values] = wide[values].round(decimals)
    return wide


def with_paper(ours: pd.DataFrame, paper: pd.DataFrame, on: list[str] | None = None, *,
               how: str = "left", suffix: str = "_paper", diff_suffix: str = "_diff") -> pd.DataFrame:
    """``ours`` with the published value next to each of its numbers.

    Rows are matched on the key columns ``on``; by default the columns both frames share that are
    not floating point (for Table 1: ``base``, ``schedule``, ``W``). Every other shared column
    ``c`` becomes three adjacent columns: ``c`` (ours), ``c_paper`` (published) and ``c_diff``
    (ours − published). Columns only in ``ours`` are kept after them; columns only in ``paper``
    are dropped. ``how`` is the merge: ``"left"`` keeps exactly ``ours``' rows (a value the paper
    lacks is ``NaN``), ``"outer"`` adds the paper's rows we lack.

    >>> t = with_paper(table1(df).round(2), analysis.paper.perplexity())   # doctest: +SKIP
    >>> list(t.columns[3:6])                                               # doctest: +SKIP
    ['tinystories', 'tinystories_paper', 'tinystories_diff']
    """
    shared = [c for c in ours.columns if c in paper.columns]
    if on is None:
        on = [c for c in shared if not (pd.api.types.is_float_dtype(ours[c])
                                        or pd.api.types.is_float_dtype(paper[c]))]
    if not on:
        raise ValueError("with_paper: no key columns to match rows on; pass on=[...]")
    for c in on:
        if c not in ours.columns or c not in paper.columns:
            raise ValueError(f"with_paper: key column {c!r} is not in both frames")
    values = [c for c in shared if c not in on]
    if not values:
        raise ValueError("with_paper: the frames share no value columns")
    left, right = ours.copy(), paper[on + values].copy()
    for c in on:  # e.g. W as int64 on one side and Int64 on the other
        if left[c].dtype != right[c].dtype:
            try:
                right[c] = right[c].astype(left[c].dtype)
            except (TypeError, ValueError):
                left[c], right[c] = left[c].astype(str), right[c].astype(str)
    if right.duplicated(on).any():
        raise ValueError(f"with_paper: the published table has repeated keys {on}")
    right = right.rename(columns={c: c + suffix for c in values})
    merged = left.merge(right, on=on, how=how, sort=False)
    cols = list(on)
    for c in values:
        merged[c + diff_suffix] = merged[c] - merged[c + suffix]
        cols += [c, c + suffix, c + diff_suffix]
    cols += [c for c in ours.columns if c not in cols]
    return merged[cols]
