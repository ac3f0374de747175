"""What the coverage explorer (notebook 01) writes, from an `explore` report: the union line, the
band / gaps / reach line, the per-layer table, the one-line summary, and the notes beside its
controls (the custom α list, why K is not used).  Pure functions: the explorer puts their strings
into its HTML widgets; tests read them directly."""

from __future__ import annotations

from collections.abc import Sequence

from fiblab.ui.common import html_table
from lab.ladder.offsets import powers_of_two
from lab.util.wording import plural

__all__ = [
    "alpha_text",
    "band_html",
    "layer_table_html",
    "rungs_note",
    "summary_line",
    "union_html",
]


def _fmt_list(xs: Sequence[int], limit: int = 8) -> str:
    if not xs:
        return "–"
    head = ", ".join(map(str, xs[:limit]))
    return head + (f", … (+{len(xs) - limit})" if len(xs) > limit else "")


def alpha_text(values: Sequence[float]) -> str:
    """How the custom α box lists values: 4 significant digits (the box shows, it does not round:
    the explorer keeps the exact values behind the text it wrote)."""
    return ", ".join(f"{a:.4g}" for a in values)


def rungs_note(base: str, seq_len) -> str:
    """Why the K box is disabled for ``base`` ('pow2' or 'custom'); empty for 'fib' (K is used)."""
    if base == "fib":
        return ""
    if base == "pow2":
        T = seq_len
        n = len(powers_of_two(T)) if isinstance(T, int) and T >= 2 else 0
        why = f"the power-of-2 base is 1, 2, 4, … < T ({plural(n, 'rung')})"
    else:
        why = "the custom base uses every distance it lists"
    return f"<small style='color:#555'><i>↑ K not used: {why}</i></small>"


def union_html(rep: dict) -> str:
    """The union count (CSS class ``fib-union-count``), with and beyond the window."""
    n, w = rep["union"], rep["convention"]["window"]
    out = (
        f"<b>union: <span class='fib-union-count'>{n}</span> distinct "
        f"distance{'' if n == 1 else 's'}</b> (window counted) · "
        f"{rep['union_beyond_window']} beyond W={w} (distances &gt; W)"
    )
    if rep["union_beyond_window"] == 0:  # the heatmap (distances > W) is then empty
        out += (
            f"<br><i class='fib-no-rungs'>no rung lands beyond the window: every α·f rounds "
            f"to a distance ≤ W={w} (the token itself or the window), so the heatmap is empty; "
            f"raise α or K</i>"
        )
    return out


def band_html(rep: dict) -> str:
    """Band coverage, the gaps (the widest five) and the reachable share after the last layer."""
    c = rep["convention"]
    gaps = rep["gaps"]
    uncovered = sum(b - a + 1 for a, b in gaps)
    widest = sorted(gaps, key=lambda g: g[0] - g[1])[:5]
    return (
        f"band ±{c['band']} covers <b>{100 * rep['band_coverage']:.1f}%</b> of 1..T−1 · "
        f"{plural(len(gaps), 'gap')} ({plural(uncovered, 'distance')})"
        + ("<br>widest gaps: " + ", ".join(f"{a}–{b}" for a, b in widest) if gaps else "")
        + f"<br>reachable after {'all ' if c['layers'] != 1 else ''}"
        f"{plural(c['layers'], 'layer')}: "
        f"<b>{100 * rep['reachable'][-1]:.1f}%</b> of 0..T−1"
    )


def layer_table_html(rep: dict) -> str:
    """One row per layer: α, set size, band coverage, reach after it, rungs new at 2T and 4T."""
    rows = []
    for ell, a in enumerate(rep["alphas"]):
        rows.append(
            [
                ell,
                f"{a:.3f}",
                rep["per_layer"][ell],
                f"{100 * rep['band_coverage_per_layer'][ell]:.1f}%",
                f"{100 * rep['reachable'][ell]:.1f}%",
                _fmt_list(rep["new_at"][2][ell]),
                _fmt_list(rep["new_at"][4][ell]),
            ]
        )
    return html_table(
        ["layer", "α", "|set|", "band", "reach after", "new rungs at 2T", "new rungs at 4T"],
        rows,
        "fib-layer-table",
    )


def summary_line(rep: dict) -> str:
    """One line: the union count and its convention (for logs and tests)."""
    c = rep["convention"]
    return (
        f"union {rep['union']} ({rep['union_beyond_window']} beyond "
        f"W={c['window']}), band {100 * rep['band_coverage']:.1f}%, reach "
        f"{100 * rep['reachable'][-1]:.1f}% | L={c['layers']} K={c['rungs']} "
        f"T={c['seq_len']} base={c['base']} rounding={c['rounding']}"
    )
