"""Which runs a table may average, and why a table cannot be built.

A table of our store averages only over runs of one variant (`lab.store.variant`: everything but the
seed alike), one run per seed. Runs that differ in anything else are separate rows: the row keeps
the paper's label (``fib/stagger``, its W) and its ``variant`` text names the fields that tell it
apart from the rows beside it (``steps=12`` vs ``steps=1500``). Two runs of one variant *and*
seed are duplicates: the newest finished one is used and the table says so in
``df.attrs["notes"]``, or, with ``duplicates="error"``, the table is not built and the error names
both runs and how to pick one.

`TableUnavailable` is the one way a table says it cannot be built from the data at hand: one
sentence on why, and what to run to get it.  Any other exception is a bug and is not caught by the
report or the notebook panels.
"""

from __future__ import annotations

import re

import pandas as pd

from lab.store.variant import SCHEME_FIELDS, Variant, describe, ordered, varying

__all__ = [
    "TableUnavailable",
    "DUPLICATES",
    "one_run_per_seed",
    "variant_labels",
    "comparable_rows",
    "natural_key",
]

#: What to do with two runs of one variant and seed: use the newest finished, or refuse.
DUPLICATES = ("newest", "error")


class TableUnavailable(ValueError):
    """A table that cannot be built from the data at hand. ``reason``: why, in one sentence;
    ``fix``: what to run (or pass) to get it. ``str(e)`` joins the two. ``choose``: the caller's
    choice that resolves it instead, when one does ("dataset", "runs"; "" otherwise), so that
    a front end can point at its own control (the results panel's dataset menu) rather than
    at the command-line flag ``fix`` names."""

    def __init__(self, reason: str, fix: str = "", choose: str = ""):
        self.reason, self.fix, self.choose = reason, fix, choose
        super().__init__(f"{reason}; {fix}" if fix else reason)


def _where(row) -> str:
    """``fib/stagger W=32, seed 0`` for a row of the runs frame (which has all three columns)."""
    w = row["W"]
    at = "" if w is None or pd.isna(w) else f" W={int(w)}"
    seed = row["seed"]
    s = "unknown" if seed is None or pd.isna(seed) else int(seed)
    return f"{row['config']}{at}, seed {s}"


def one_run_per_seed(
    ev: pd.DataFrame, table: str, duplicates: str = "newest"
) -> tuple[pd.DataFrame, list[str]]:
    """The rows of ``ev`` (an evaluation frame of :func:`analysis.tables.runs.lm_evals`: columns
    ``run``, ``variant_id``, ``seed``, ``finished_at``, ``config``, ``W``; oldest run first) of one
    run per (variant, seed): where several runs share both, the newest finished one (the later
    run on a tie). Returns the rows and one note per such choice naming the runs; with
    ``duplicates="error"`` raises :class:`TableUnavailable` naming them instead."""
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates={duplicates!r} must be one of {DUPLICATES}")
    if ev.empty:
        return ev, []
    runs = ev.drop_duplicates("run")[["run", "variant_id", "seed", "finished_at", "config", "W"]]
    runs = runs.assign(
        _order=range(len(runs)),
        _done=pd.to_datetime(runs["finished_at"], utc=True, errors="coerce"),
    )
    keep, notes = [], []
    for _, g in runs.groupby(["variant_id", "seed"], dropna=False, sort=False):
        g = g.sort_values(["_done", "_order"], na_position="first", kind="stable")
        newest = g.iloc[-1]
        keep.append(newest["run"])
        if len(g) == 1:
            continue
        others = ", ".join(repr(r) for r in g["run"].iloc[:-1])
        if duplicates == "error":
            raise TableUnavailable(
                f"{table}: runs {others} and {newest['run']!r} are the same variant and seed "
                f"({_where(newest)}), so averaging them would count one seed twice",
                "name the runs to use (`fiblab report RUN …`, or runs=[...])",
                choose="runs",
            )
        notes.append(
            f"runs {others} and {newest['run']!r} are the same variant and seed "
            f"({_where(newest)}): the newest finished, {newest['run']!r}, is used; name the "
            f"runs to use (`fiblab report RUN …`, or runs=[...]) to choose another"
        )
    return ev[ev["run"].isin(set(keep))], notes


def variant_labels(ev: pd.DataFrame, variants: dict[str, Variant], keys) -> pd.Series:
    """Per row of ``ev``, the text that tells its variant (column ``variant_id``) apart from the
    others of the table: the fields that differ between variants of one row label (``keys``,
    e.g. config and W), and the fields beyond the attention scheme (size, length, data, steps,
    recipe, precision) that differ anywhere in the table. ``""`` where nothing differs."""
    if len(ev) == 0:
        return pd.Series([], index=ev.index, dtype=object)
    ids = list(dict.fromkeys(ev["variant_id"]))
    context = [n for n in varying([variants[i] for i in ids]) if n not in SCHEME_FIELDS]
    names: dict[str, tuple] = {}
    for _, g in ev.groupby(list(keys), dropna=False, sort=False):
        group = list(dict.fromkeys(g["variant_id"]))
        within = varying([variants[i] for i in group])
        shown = list(within) + [n for n in context if n not in within]
        for i in group:
            names[i] = tuple(shown)
    text = {i: describe(variants[i], ordered(names[i])) for i in ids}
    return ev["variant_id"].map(text)


def comparable_rows(ev: pd.DataFrame, variants: dict, table: str, duplicates: str):
    """One run per (variant, seed) (`one_run_per_seed`) and each row's
    ``variant`` text (`variant_labels`); returns (rows, notes)."""
    ev, notes = one_run_per_seed(ev, table, duplicates)
    ev = ev.assign(variant=variant_labels(ev, variants, ["config", "W"]))
    return ev, notes


def natural_key(text) -> tuple:
    """Sort key of a variant text: numbers by value, so ``steps=300`` comes before
    ``steps=1500``."""
    parts = re.split(r"(\d+)", "" if text is None or text is pd.NA else str(text))
    # a split on a group alternates text (even places, maybe "") and digits (odd places), so
    # two keys only ever compare text with text and number with number
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))
