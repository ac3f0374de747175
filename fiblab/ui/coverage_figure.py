"""The coverage explorer's figure: the per-layer heatmap and the reachable share, as a PNG."""

from __future__ import annotations

import numpy as np

from fiblab.ui.common import figure, png


class CoverageFigure:
    """The explorer's figure: the per-layer heatmap of attended distances (log distance axis)
    and the reachable share after each layer.  The matplotlib figure is built once per (L, bin
    edges) and later updates only swap its data, which keeps a redraw to a few tens of ms."""

    def __init__(self):
        self._key = None

    def _build(self, edges: np.ndarray, L: int) -> None:
        fig = figure(10.5, 1.1 + 0.16 * max(L, 6))
        ax = fig.add_axes([0.06, 0.2, 0.64, 0.68])
        ax2 = fig.add_axes([0.78, 0.2, 0.2, 0.68])
        self.mesh = ax.pcolormesh(
            edges,
            np.arange(L + 1),
            np.full((L, len(edges) - 1), np.nan),
            cmap="viridis",
            vmin=1,
            vmax=2,
        )
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xlim(1, edges[-1])
        ax.set_ylim(L, 0)
        ax.set_yticks(
            np.arange(L)[:: max(1, L // 8)] + 0.5, [str(i) for i in range(L)][:: max(1, L // 8)]
        )
        ax.set_xlabel("distance δ (log scale); colour: attended distances per bin")
        ax.set_ylabel("layer")
        self.window_line = ax.axvline(1, color="crimson", lw=0.8, ls="--")
        self.title = ax.set_title("", fontsize=10)
        self.bars = ax2.barh(np.arange(L) + 0.5, np.zeros(L), height=0.8, color="#4c72b0")
        ax2.set_ylim(L, 0)
        ax2.set_xlim(0, 1)
        ax2.set_yticks([])
        ax2.set_xlabel("reachable share of 0..T−1")
        ax2.set_title("multi-hop reach after layer", fontsize=10)
        self.fig = fig

    def draw(self, report: dict) -> bytes:
        edges, counts = report["heatmap"]
        L = counts.shape[0]
        key = (L, tuple(edges))
        if key != self._key:
            self._build(edges, L)
            self._key = key
        self.mesh.set_array(np.where(counts > 0, counts, np.nan).ravel())
        self.mesh.set_clim(1, max(2, int(counts.max())))
        w = report["convention"]["window"]
        self.window_line.set_xdata([w + 0.5, w + 0.5])
        self.window_line.set_visible(w >= 1)
        self.title.set_text(
            f"attended distances per layer — union {report['union']} "
            f"(window counted), dashed line: W = {w}"
        )
        for rect, r in zip(self.bars, report["reachable"]):
            rect.set_width(r)
        return png(self.fig)


def render_figure(report: dict) -> bytes:
    """PNG of `CoverageFigure` for one report."""
    return CoverageFigure().draw(report)
