"""Table 2 of probe records beside the paper's, as rows and as the text the front ends print.

`probes.grid.table2` summarises probe records per (depth, init); here the paper's values
(the one copy: ``analysis/reference/table2_retrieval_probe.csv`` through
:func:`analysis.published.paper.retrieval_probe`) are put beside each row where they apply — the blur
mechanism evaluated at exactly the paper's distances — and :func:`format_table2` lays the rows
out as text.  The CLI (`fiblab probe marked`), the probe panel and `benchmarks/table2_results.py`
print this.

    rows = table2_rows(records, "blur")     # [{depth, init, seeds, alpha_min, …, "paper": {…}}]
    print(format_table2(rows))
"""

from __future__ import annotations

from analysis.published import paper as _paper
from probes.grid import table2 as summarise

__all__ = ["PAPER_MECHANISM", "paper_cells", "beside_paper", "table2_rows", "format_table2"]

#: The mechanism the paper's Table 2 reports (learned α through the annealed blur gather).
PAPER_MECHANISM = "blur"


def paper_cells() -> dict[tuple[int, str], dict]:
    """The paper's Table 2 by (depth, init): ``alpha_min``, ``alpha_max`` and ``acc``
    {distance (text): accuracy}, as the probe rows name them."""
    t = _paper.retrieval_probe()
    dists = [c[len("acc_at_") :] for c in t.columns if c.startswith("acc_at_")]
    return {
        (int(r["depth"]), str(r["init"])): {
            "alpha_min": float(r["learned_alpha_min"]),
            "alpha_max": float(r["learned_alpha_max"]),
            "acc": {d: float(r[f"acc_at_{d}"]) for d in dists},
        }
        for _, r in t.iterrows()
    }


def beside_paper(rows: list[dict], mechanism: str = PAPER_MECHANISM) -> list[dict]:
    """``rows`` (`probes.grid.table2`) with a ``paper`` entry where the paper has the cell:
    the blur mechanism, evaluated at the paper's distances (in its order)."""
    if mechanism != PAPER_MECHANISM:
        return [dict(r) for r in rows]
    cells = paper_cells()
    out = []
    for r in rows:
        p = cells.get((r["depth"], r["init"]))
        row = dict(r)
        if p and list(r["acc"]) == list(p["acc"]):
            row["paper"] = p
        out.append(row)
    return out


def table2_rows(records, mechanism: str = PAPER_MECHANISM, paper: bool = True) -> list[dict]:
    """Table-2 rows of one mechanism's probe records, with the paper's values beside them
    (``paper=False``: without)."""
    rows = summarise(records, mechanism)
    return beside_paper(rows, mechanism) if paper else rows


def format_table2(rows: list[dict]) -> str:
    """The rows as a fixed-width text table: ours, then the paper's columns (``-`` where the
    paper has no value)."""
    if not rows:
        return "(no cells)"
    dists = list(rows[0]["acc"])
    accs = "".join(f"{'acc@' + d:>9}" for d in dists)
    lines = [
        f"{'depth':>5} {'init':<10}{'seeds':>6} {'alpha range':>13}{accs}   | "
        f"{'paper alpha':>11}{accs}{'s/cell':>8}"
    ]
    for r in rows:
        ours = "".join(f"{r['acc'][d]:>9.3f}" for d in dists)
        if "paper" in r:
            p = r["paper"]
            theirs = f"{p['alpha_min']:>5.2f}-{p['alpha_max']:<5.2f}" + "".join(
                f"{p['acc'][d]:>9.2f}" for d in dists
            )
        else:
            theirs = f"{'-':>11}" + "".join(f"{'-':>9}" for _ in dists)
        lines.append(
            f"{r['depth']:>5} {r['init']:<10}{r['seeds']:>6} "
            f"{r['alpha_min']:>6.3f}-{r['alpha_max']:<6.3f}{ours}   | {theirs}"
            f"{r['seconds']:>8.0f}"
        )
    return "\n".join(lines)
