"""Our tables beside the published ones: :func:`with_paper` puts the paper's value and the
difference next to each of our numbers; :func:`published` names a published table's columns as
ours (Table 5's population std becomes ``std_pop``).

>>> from analysis.published.paperdb import load_final_ppl
>>> from analysis.published.paper import perplexity
>>> from analysis.tables.ppl import table1_from_final_ppl
>>> ours = table1_from_final_ppl(load_final_ppl("../shared/reference/fib.db"))      # doctest: +SKIP
>>> with_paper(ours.round(2), perplexity())                           # doctest: +SKIP
"""

from __future__ import annotations

import pandas as pd

from analysis.published import paper as _paper

__all__ = ["with_paper", "published", "for_report"]


def with_paper(
    ours: pd.DataFrame,
    paper: pd.DataFrame,
    on: list[str] | None = None,
    *,
    how: str = "left",
    suffix: str = "_paper",
    diff_suffix: str = "_diff",
    diff: bool = True,
    rest: bool = False,
) -> pd.DataFrame:
    """``ours`` with the published value next to each of its numbers.

    Rows are matched on the key columns ``on``; by default the columns both frames share that are
    not floating point (for Table 1: ``base``, ``schedule``, ``W``). Every other shared column
    ``c`` becomes three adjacent columns, where ours stood: ``c`` (ours), ``c_paper`` (published) and ``c_diff``
    (ours − published; ``diff=False`` leaves it out, for numbers measured on other data). Columns
    only in ``ours`` are kept after them; columns only in ``paper`` are dropped, or with
    ``rest=True`` kept last as ``c_paper`` (the paper's datasets when ours are others, its
    accuracies at distances we did not evaluate). ``how`` is the merge: ``"left"`` keeps exactly ``ours``' rows (a value the paper
    lacks is ``NaN``), ``"outer"`` adds the paper's rows we lack.

    >>> t = with_paper(table1_from_final_ppl(df).round(2), analysis.published.paper.perplexity())   # doctest: +SKIP
    >>> list(t.columns[3:6])                                               # doctest: +SKIP
    ['tinystories', 'tinystories_paper', 'tinystories_diff']
    """
    shared = [c for c in ours.columns if c in paper.columns]
    if on is None:
        on = [
            c
            for c in shared
            if not (pd.api.types.is_float_dtype(ours[c]) or pd.api.types.is_float_dtype(paper[c]))
        ]
    if not on:
        raise ValueError(
            "matching a table with the paper's: they share no key column to match rows on "
            f"(shared: {shared}); pass on=[...]"
        )
    for c in on:
        if c not in ours.columns or c not in paper.columns:
            raise ValueError(
                f"matching a table with the paper's: key column {c!r} is not in both; pass "
                f"on= columns both have ({shared})"
            )
    values = [c for c in shared if c not in on]
    only_paper = [c for c in paper.columns if c not in ours.columns] if rest else []
    if not values and not only_paper:
        raise ValueError(
            f"matching a table with the paper's: they share no value column beside the keys "
            f"{on}; compare tables of the same layout"
        )
    left, right = ours.copy(), paper[on + values + only_paper].copy()
    for c in on:  # e.g. W as int64 on one side and Int64 on the other
        if left[c].dtype != right[c].dtype:
            try:
                right[c] = right[c].astype(left[c].dtype)
            except (TypeError, ValueError):
                left[c], right[c] = left[c].astype(str), right[c].astype(str)
    if right.duplicated(on).any():
        raise ValueError(
            f"matching a table with the paper's: the published table repeats keys {on}; pass "
            f"on= columns that identify its rows"
        )
    right = right.rename(columns={c: c + suffix for c in values + only_paper})
    merged = left.merge(right, on=on, how=how, sort=False)
    cols = []  # ours in our order, each shared value followed by the paper's (and the diff)
    for c in ours.columns:
        cols.append(c)
        if c in values:
            cols.append(c + suffix)
            if diff:
                merged[c + diff_suffix] = merged[c] - merged[c + suffix]
                cols.append(c + diff_suffix)
    cols += [c + suffix for c in only_paper]
    out = merged[cols]
    out.attrs = dict(ours.attrs)  # our table's notes (duplicates, what is missing) stay with it
    return out


def published(n: int) -> pd.DataFrame:
    """The paper's Table ``n`` with its columns named as the tables built here name them, ready
    for :func:`with_paper`: Table 5's ``std`` (the population std, ddof 0) becomes ``std_pop``,
    so that it lines up with our ``std_pop`` and not with our sample ``std``."""
    t = _paper.paper_table(n)
    if n == 5:
        t = t.rename(columns={"std": "std_pop"})
    return t


def for_report(n: int) -> pd.DataFrame:
    """The paper's Table ``n`` as the reports set it beside ours: :func:`published` plus the
    derived values our tables carry, so that they line up row for row and column for column —
    Table 3's ``change_at_2x_percent`` (from its T = 1024 and 2048 perplexities, as ours is
    computed) and Table 4's ``fib/fixed - fib/stagger`` row (the gap per bin, as
    `analysis.tables.position.table4` appends it)."""
    t = published(n)
    if n == 3:
        t = t.copy()
        change = (t["ppl_T2048"] / t["ppl_T1024"] - 1.0) * 100.0
        t.insert(t.columns.get_loc("change_at_4x_percent"), "change_at_2x_percent", change)
    if n == 4:
        a, b = "fib/fixed", "fib/stagger"
        bins = [c for c in t.columns if c.startswith("b") and c[1:].isdigit()]
        rows = []
        for w in t["W"].unique():
            ra, rb = (
                t[(t["schedule"] == a) & (t["W"] == w)],
                t[(t["schedule"] == b) & (t["W"] == w)],
            )
            if len(ra) and len(rb):
                gap = ra[bins].to_numpy(dtype=float)[0] - rb[bins].to_numpy(dtype=float)[0]
                rows.append({"schedule": f"{a} - {b}", "W": w, **dict(zip(bins, gap))})
        t = pd.concat([t, pd.DataFrame(rows, columns=t.columns)], ignore_index=True)
    return t
