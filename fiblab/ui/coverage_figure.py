"""The coverage explorer's figure: the per-layer heatmap and the reachable share, as a PNG."""

from __future__ import annotations

import numpy as np
from matplotlib import patheffects
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter

from analysis.figures import style
from fiblab.ui.common import png

WIDTH = 980  # px: the explorer's controls are about this wide
_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000]


#: Colour levels of the heatmap: 1, 2, 3 and ≥ 4 attended distances in a bin (mostly 1: the
#: log bins are narrower than a rung step; wide bins inside a long window hold more).
LEVELS = ["1", "2", "3", "≥ 4"]
_CMAP = ListedColormap(["#3f8fa8", "#37659e", "#3b3f80", "#1f1a3a"])
_NORM = BoundaryNorm([0.5, 1.5, 2.5, 3.5, 4.5], _CMAP.N)


def _row_px(L: int) -> int:
    """Pixels per layer row: 20 for a few layers, down to 9 for the deepest stacks."""
    return int(min(20, max(9, 560 // max(L, 1))))


def _pin_labels(fig) -> None:
    """Fix every axis label where the first draw put it: matplotlib otherwise measures all tick
    labels (of shared axes too) on each draw to place them; with the layout frozen the places
    never change."""
    for a in fig.axes:
        for axis in (a.xaxis, a.yaxis):
            label = axis.label
            if label.get_text():
                xy = label.get_transform().transform(label.get_position())
                axis.set_label_coords(*a.transAxes.inverted().transform(xy))


class CoverageFigure:
    """The explorer's figure: the per-layer heatmap of attended distances (log distance axis,
    colour key: attended distances per bin, white: none) with the window W marked, and beside it the
    multi-hop reach after each layer (bars labelled by layer and value).  The figure and its
    layout are built once per (L, bin edges); later updates only swap data, which keeps a
    redraw to a few tens of ms."""

    def __init__(self):
        self._key = None

    def _build(self, edges: np.ndarray, L: int) -> None:
        row = _row_px(L)
        fig = style.figure(WIDTH, 120 + row * L)
        grid = fig.add_gridspec(1, 3, width_ratios=[68, 1.4, 24], wspace=0.04)
        ax = fig.add_subplot(grid[0, 0])
        cax = fig.add_subplot(grid[0, 1])
        ax2 = fig.add_subplot(grid[0, 2], sharey=ax)
        ax.grid(False)
        self.mesh = ax.pcolormesh(
            edges,
            np.arange(L + 1),
            np.full((L, len(edges) - 1), np.nan),
            cmap=_CMAP,
            norm=_NORM,
        )
        ax.set_xscale("log")
        ax.set_xlim(1, edges[-1])
        ticks = [t for t in _TICKS if t <= edges[-1]]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{t:,}" for t in ticks])
        ax.set_ylim(L, 0)
        every = max(1, -(-L // 24))
        ax.set_yticks(np.arange(L)[::every] + 0.5, [str(i) for i in range(L)][::every])
        ax.tick_params(axis="y", labelsize="small")
        ax.set_xlabel("distance δ = t − s (tokens, log scale)")
        ax.set_ylabel("layer")
        halo = [patheffects.withStroke(linewidth=3.2, foreground="white")]
        self.window_line = ax.axvline(1, color="#b2182b", lw=1.6, ls="--", path_effects=halo)
        self.window_text = ax.text(
            1,
            1.0,
            "",
            transform=ax.get_xaxis_transform(),
            ha="left",
            va="bottom",
            fontsize="small",
            color="#b2182b",
            fontweight="bold",
        )
        self.title = ax.set_title("", fontsize="medium", loc="left", pad=16)
        self._titles = [(ax, "left"), (ax2, "center")]
        bar = fig.colorbar(self.mesh, cax=cax)
        bar.set_ticks([1, 2, 3, 4], labels=LEVELS)
        bar.set_label("attended distances in the bin", fontsize="small")
        bar.ax.tick_params(labelsize="small", length=0)
        self.colorbar = bar
        self.bars = ax2.barh(np.arange(L) + 0.5, np.zeros(L), height=0.78, color="#0173b2")
        ax2.set_xlim(0, 1.0)
        ax2.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax2.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax2.tick_params(axis="y", labelleft=True, labelsize="small")
        ax2.grid(axis="y", visible=False)
        ax2.set_xlabel("reachable share of 0…T−1")
        ax2.set_ylabel("after layer")
        ax2.set_title("multi-hop reach", fontsize="medium", loc="center", pad=16)
        self.values = (
            [ax2.text(0, i + 0.5, "", va="center", ha="left", fontsize="x-small") for i in range(L)]
            if row >= 12
            else []
        )
        # the layout is solved once (with room for the longest labels), then frozen: a redraw
        # only moves data
        self.title.set_text("attended distances per layer — union 00000 of T = 000000")
        self.window_text.set_text(" W = 000")
        fig.canvas.draw()
        fig.set_layout_engine("none")
        _pin_labels(fig)
        for a, loc in self._titles:  # titles too: placing one measures the whole axes
            a.set_title(
                a.get_title(loc), loc=loc, fontsize="medium", pad=16, y=a.title.get_position()[1]
            )
        self.fig = fig

    def draw(self, report: dict) -> bytes:
        edges, counts = report["heatmap"]
        L = counts.shape[0]
        key = (L, tuple(edges))
        if key != self._key:
            self._build(edges, L)
            self._key = key
        self.mesh.set_array(np.where(counts > 0, np.minimum(counts, 4), np.nan).ravel())
        w = report["convention"]["window"]
        self.window_line.set_xdata([w + 0.5, w + 0.5])
        self.window_line.set_visible(w >= 1)
        self.window_text.set_x(w + 0.5)
        self.window_text.set_text(f" W = {w}" if w >= 1 else "")
        T = report["convention"]["seq_len"]
        self.title.set_text(
            f"attended distances per layer — union {report['union']} of T = {T:,} (window counted)"
        )
        for rect, r in zip(self.bars, report["reachable"]):
            rect.set_width(r)
        for text, r in zip(self.values, report["reachable"]):
            inside = r > 0.8
            text.set_x(r - 0.01 if inside else r + 0.01)
            text.set_ha("right" if inside else "left")
            text.set_color("white" if inside else "#333333")
            text.set_text(share_label(r))
        return png(self.fig)


def share_label(r: float) -> str:
    """A bar's share as text, never rounded onto a value it is not: 100 % only when every
    distance is reached, one decimal below 1 % and above 99 % (0.1 % is not "0 %", 99.6 % not
    "100 %")."""
    if r >= 1.0:
        return "100%"
    if r <= 0.0:
        return "0%"
    pct = 100 * r
    if pct < 0.05:
        return "<0.1%"
    if pct > 99.95:
        return ">99.9%"
    return f"{pct:.1f}%" if pct < 1 or pct > 99 else f"{pct:.0f}%"


def render_figure(report: dict) -> bytes:
    """PNG of `CoverageFigure` for one report."""
    return CoverageFigure().draw(report)
