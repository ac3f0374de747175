"""What every table's rows share: the paper's name of a configuration, the paper's row order,
the notes under a table, and rounding (which runs a row averages: `analysis.tables.comparable`)."""

from __future__ import annotations

import pandas as pd

from analysis.published.paperdb import BASES, SCHEDULES
from analysis.tables.comparable import natural_key
from lab.ladder.schemes import paper_label

__all__ = ["config_label", "paper_order", "finish_table", "rounded"]


def config_label(base, schedule, attention: str = "sparse") -> str:
    """The paper's name of a configuration (`lab.ladder.schemes.paper_label`): ``"dense"``, or
    ``"base/schedule"`` such as ``"fib/stagger"``; a custom base or schedule (a list) is
    called ``custom``."""
    return paper_label(base, schedule, attention)


def _rank(label: str) -> tuple:
    """Sort key of a config label: dense first, then the paper's base and schedule order."""
    if label == "dense":
        return (-1, -1, "")
    base, _, sched = str(label).partition("/")
    b = BASES.index(base) if base in BASES else len(BASES)
    s = SCHEDULES.index(sched) if sched in SCHEDULES else len(SCHEDULES)
    return (b, s, str(label))


def paper_order(df: pd.DataFrame, label: str) -> pd.DataFrame:
    """Rows in the paper's order: by config (:func:`_rank`), then W (missing first), then the
    variant text (numbers by value)."""
    keys = df[label].map(_rank)
    w = df["W"].astype("Float64").fillna(-1.0) if "W" in df.columns else 0
    v = df["variant"].map(natural_key) if "variant" in df.columns else 0
    out = df.assign(_k=keys, _w=w, _v=v).sort_values(["_k", "_w", "_v"], kind="stable")
    return out.drop(columns=["_k", "_w", "_v"]).reset_index(drop=True)


def finish_table(out: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """The ``variant`` column only where some row needs it; the notes in ``attrs``."""
    if "variant" in out.columns and not any(not pd.isna(v) and str(v) for v in out["variant"]):
        out = out.drop(columns="variant")
    out.attrs["notes"] = list(notes)
    return out


def rounded(df: pd.DataFrame, cols, decimals: int | None) -> pd.DataFrame:
    """``df`` with ``cols`` rounded to ``decimals`` in place (unchanged when None)."""
    if decimals is not None and len(cols):
        df[list(cols)] = df[list(cols)].astype(float).round(decimals)
    return df
