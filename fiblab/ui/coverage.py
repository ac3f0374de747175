"""The coverage explorer (notebook 01): per-layer α sliders and live coverage outputs.

`explore(...)` is the pure compute step: per-layer attended sets, the union count with and
without the window, band coverage and gaps, the reachable share after each layer (multi-hop
receptive field) and the rungs that appear when the same α are used at 2× and 4× the length
(the paper's recompute policy: never trained at T).  `CoverageExplorer` holds the widgets, calls
`explore` on every change and writes the results into its output widgets; tests set a widget
value and read ``explorer.result``.

Schedules: ``fixed`` (α = 1), ``stagger`` (linear 0.5 → 1.5), ``coprime`` (the stagger's values
permuted by ℓ ↦ S·ℓ mod L), ``learned-init`` (a learned schedule's starting point: the stagger
clamped to [0.55, 1.45]) and ``custom`` (a comma list, or whatever the sliders say).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager

import ipywidgets as W
import numpy as np

from fiblab.ui.common import (
    error_widget,
    figure,
    guarded,
    html_table,
    image_widget,
    parse_numbers,
    png,
    set_png,
    show_error,
)
from lab.offsets import ROUNDINGS, Base, attended_distances
from lab.schedules import check_alphas, layer_alphas
from probes.coverage import coverage
from probes.receptive_field import reachable_fraction

SCHEDULE_OPTIONS = [
    ("fixed (α = 1)", "fixed"),
    ("linear stagger", "stagger"),
    ("coprime stagger", "coprime"),
    ("learned init (stagger, clamped)", "learned-init"),
    ("custom", "custom"),
]
ALPHA_RANGE = (0.5, 1.5)
ALPHA_STEP = 0.01
MAX_LAYERS = 48


def schedule_alphas(schedule: str, layers: int) -> list[float]:
    """Per-layer α of a named explorer schedule (``learned-init``: stagger clamped)."""
    if schedule == "learned-init":
        return layer_alphas("learned", layers, init="stagger")
    if schedule == "custom":
        raise ValueError("the custom schedule has no fixed values: give a list of alphas")
    return layer_alphas(schedule, layers)


def log_bins(seq_len: int, bins: int = 96) -> np.ndarray:
    """Integer bin edges over distances 1..T−1, log-spaced, each bin at least one distance."""
    edges = np.unique(np.round(np.geomspace(1, seq_len, bins + 1)).astype(np.int64))
    edges[-1] = seq_len
    return edges


def heatmap(sets: Sequence[Sequence[int]], seq_len: int, bins: int = 96):
    """(edges, counts): counts[ℓ, b] = attended distances of layer ℓ in [edges[b], edges[b+1])."""
    edges = log_bins(seq_len, bins)
    counts = np.stack([np.histogram([d for d in s if d > 0], bins=edges)[0] for s in sets])
    return edges, counts


def explore(
    alphas: Sequence[float],
    window: int = 8,
    seq_len: int = 1024,
    base: Base = "fib",
    rungs: int = 15,
    rounding: str = "round",
    band: int | None = None,
) -> dict:
    """Everything the explorer shows, for one per-layer α list and convention.

    Returns `probes.coverage.coverage`'s report plus ``reachable`` (share of 0..T−1 reachable
    after each layer), ``new_at`` ({2: [...], 4: [...]}, per layer the rungs a 2×/4× longer
    sequence adds, relative to T), ``heatmap`` (edges, counts) and ``seconds``.
    """
    t0 = time.perf_counter()
    report = coverage(list(alphas), window, seq_len, base, rungs, rounding, band, longer=2)
    sets = report["per_layer_sets"]
    current = [set(s) for s in sets]
    new_at = {2: report["beyond_reach"]}
    new_at[4] = [
        sorted(set(attended_distances(a, window, 4 * seq_len, base, rungs, rounding)) - cur)
        for a, cur in zip(alphas, current)
    ]
    report["new_at"] = new_at
    report["reachable"] = reachable_fraction(sets, seq_len)
    report["heatmap"] = heatmap(sets, seq_len)
    report["seconds"] = time.perf_counter() - t0
    return report


def _fmt_list(xs: Sequence[int], limit: int = 8) -> str:
    if not xs:
        return "–"
    head = ", ".join(map(str, xs[:limit]))
    return head + (f", … (+{len(xs) - limit})" if len(xs) > limit else "")


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


class CoverageExplorer:
    """Widgets for the coverage explorer; display the object (or ``.widget``) in a notebook.

    State for tests and code: ``alphas`` (the sliders), ``result`` (the last `explore` report),
    ``error`` (the message shown, or None), ``last_update_s`` / ``last_update_cpu_s`` (wall and
    CPU seconds of the last compute + render).
    """

    def __init__(
        self,
        schedule: str = "stagger",
        layers: int = 16,
        window: int = 8,
        rungs: int = 15,
        seq_len: int = 1024,
        base: str = "fib",
        rounding: str = "round",
        render: bool = True,
    ):
        self.render = render
        self._figure = CoverageFigure()
        self.result: dict | None = None
        self.error: str | None = None
        self.last_update_s = 0.0
        self.last_update_cpu_s = 0.0
        self.updates = 0
        self._hold = 0
        style = {"description_width": "initial"}
        self.schedule = W.Dropdown(
            options=SCHEDULE_OPTIONS, value=schedule, description="schedule", style=style
        )
        self.custom_alphas = W.Text(
            value="",
            description="custom α",
            continuous_update=False,
            placeholder="one α per layer: 0.5, 0.6, …",
            style=style,
            layout=W.Layout(width="420px"),
        )
        self.layers = W.BoundedIntText(
            value=layers,
            min=1,
            max=MAX_LAYERS,
            description="layers L",
            style=style,
            layout=W.Layout(width="150px"),
        )
        self.window = W.BoundedIntText(
            value=window,
            min=0,
            max=4096,
            description="window W",
            style=style,
            layout=W.Layout(width="150px"),
        )
        self.rungs = W.BoundedIntText(
            value=rungs,
            min=1,
            max=40,
            description="rungs K",
            style=style,
            layout=W.Layout(width="150px"),
        )
        self.seq_len = W.BoundedIntText(
            value=seq_len,
            min=2,
            max=65536,
            description="length T",
            style=style,
            layout=W.Layout(width="170px"),
        )
        self.base = W.Dropdown(
            options=[("Fibonacci", "fib"), ("power of 2", "pow2"), ("custom list", "custom")],
            value=base,
            description="base",
            style=style,
            layout=W.Layout(width="200px"),
        )
        self.custom_base = W.Text(
            value="1, 3, 9, 27, 81, 243, 729",
            description="custom base",
            continuous_update=False,
            style=style,
            layout=W.Layout(width="420px"),
        )
        self.rounding = W.Dropdown(
            options=list(ROUNDINGS),
            value=rounding,
            description="rounding",
            style=style,
            layout=W.Layout(width="200px"),
        )
        self.reset = W.Button(
            description="reset to schedule", icon="undo", layout=W.Layout(width="180px")
        )
        self.sliders: list[W.FloatSlider] = []
        self.slider_box = W.VBox()
        self.slider_box.add_class("fib-alpha-sliders")
        # outputs
        self.union_label = W.HTML()
        self.union_label.add_class("fib-union")
        self.band_label = W.HTML()
        self.band_label.add_class("fib-band")
        self.timing = W.HTML()
        self.timing.add_class("fib-timing")
        self.image = image_widget()
        self.table = W.HTML()
        self.error_box = error_widget()

        with self._batch(update=False):
            self._build_sliders(self._schedule_values())
        for w in (
            self.window,
            self.rungs,
            self.seq_len,
            self.base,
            self.custom_base,
            self.rounding,
        ):
            w.observe(self._on_setting, names="value")
        self.schedule.observe(self._on_schedule, names="value")
        self.custom_alphas.observe(self._on_custom_alphas, names="value")
        self.layers.observe(self._on_layers, names="value")
        self.reset.on_click(self._on_reset)
        self._sync_enabled()
        self.update()

        controls = W.VBox(
            [
                W.HBox([self.schedule, self.reset]),
                self.custom_alphas,
                W.HBox([self.layers, self.window, self.rungs, self.seq_len]),
                W.HBox([self.base, self.rounding]),
                self.custom_base,
            ]
        )
        self.widget = W.VBox(
            [
                controls,
                self.error_box,
                W.HBox([self.slider_box, W.VBox([self.union_label, self.band_label, self.timing])]),
                self.image,
                self.table,
            ]
        )
        self.widget.add_class("fib-coverage-explorer")

    # -- display -------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -- state ---------------------------------------------------------------------------------
    @property
    def alphas(self) -> list[float]:
        return [float(s.value) for s in self.sliders]

    def set_alpha(self, layer: int, value: float) -> None:
        """Move one slider (as a user would); the outputs update."""
        if not 0 <= layer < len(self.sliders):
            raise ValueError(
                f"layer={layer} is out of range: the explorer has "
                f"{len(self.sliders)} layers (0..{len(self.sliders) - 1})"
            )
        self.sliders[layer].value = value

    def base_value(self) -> Base:
        """The base the widgets select: 'fib', 'pow2' or the parsed custom list."""
        if self.base.value != "custom":
            return self.base.value
        vals = parse_numbers(self.custom_base.value, "custom base")
        return tuple(int(v) if float(v).is_integer() else v for v in vals)

    def _schedule_values(self) -> list[float]:
        if self.schedule.value == "custom":
            text = self.custom_alphas.value.strip()
            if text:
                return check_alphas(parse_numbers(text, "custom α"), self.layers.value)
            return [1.0] * self.layers.value
        return schedule_alphas(self.schedule.value, self.layers.value)

    @contextmanager
    def _batch(self, update: bool = True):
        """Hold updates while several widgets change; one update at the end."""
        self._hold += 1
        try:
            yield
        finally:
            self._hold -= 1
        if update and not self._hold:
            self.update()

    def _build_sliders(self, values: Sequence[float]) -> None:
        for s in self.sliders:
            s.unobserve(self._on_slider, names="value")
        lo, hi = ALPHA_RANGE
        self.sliders = []
        for ell, a in enumerate(values):
            s = W.FloatSlider(
                value=a,
                min=lo,
                max=hi,
                step=ALPHA_STEP,
                description=f"α{ell}",
                readout_format=".3f",
                continuous_update=False,
                layout=W.Layout(width="330px"),
            )
            s.add_class("fib-alpha")
            s.observe(self._on_slider, names="value")
            self.sliders.append(s)
        self.slider_box.children = tuple(self.sliders)

    def _set_sliders(self, values: Sequence[float]) -> None:
        with self._batch(update=False):
            if len(values) != len(self.sliders):
                self._build_sliders(values)
            else:
                for s, a in zip(self.sliders, values):
                    s.value = a

    def _sync_enabled(self) -> None:
        self.custom_alphas.disabled = self.schedule.value != "custom"
        self.custom_base.disabled = self.base.value != "custom"

    # -- handlers (errors go to the error widget) ----------------------------------------------
    def _on_slider(self, change) -> None:
        if not self._hold:
            self.update()

    def _on_setting(self, change) -> None:
        self._sync_enabled()
        if not self._hold:
            self.update()

    @guarded
    def _on_schedule(self, change) -> None:
        self._sync_enabled()
        if change["new"] == "custom" and not self.custom_alphas.value.strip():
            self.custom_alphas.value = ", ".join(f"{a:.4g}" for a in self.alphas)
            return
        with self._batch():
            self._set_sliders(self._schedule_values())

    @guarded
    def _on_custom_alphas(self, change) -> None:
        if self.schedule.value != "custom" or not change["new"].strip():
            return
        with self._batch():
            self._set_sliders(self._schedule_values())

    @guarded
    def _on_layers(self, change) -> None:
        L = change["new"]
        if self.schedule.value == "custom":  # keep what was set, pad with α = 1
            vals = (self.alphas + [1.0] * L)[:L]
            with self._batch():
                self._set_sliders(vals)
                with self._batch(update=False):
                    self.custom_alphas.value = ", ".join(f"{a:.4g}" for a in vals)
        else:
            with self._batch():
                self._set_sliders(schedule_alphas(self.schedule.value, L))

    @guarded
    def _on_reset(self, button=None) -> None:
        with self._batch():
            self._set_sliders(self._schedule_values())

    def reset_to_schedule(self) -> None:
        """The reset button's action."""
        self._on_reset()

    # -- the update ----------------------------------------------------------------------------
    def compute(self) -> dict:
        """`explore` for the current widget values (raises ValueError on bad input)."""
        return explore(
            self.alphas,
            self.window.value,
            self.seq_len.value,
            self.base_value(),
            self.rungs.value,
            self.rounding.value,
        )

    def update(self) -> bool:
        """Recompute and redraw; on bad input show the message and keep the last outputs."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            rep = self.compute()
            self._render(rep)
        except Exception as e:  # noqa: BLE001 - shown, never swallowed
            show_error(self, e)
            return False
        self.result = rep
        self.last_update_s = time.perf_counter() - t0
        self.last_update_cpu_s = time.process_time() - c0
        self.updates += 1
        self.timing.value = (
            f"<small>updated in {1000 * self.last_update_s:.0f} ms "
            f"(compute {1000 * rep['seconds']:.0f} ms)</small>"
        )
        show_error(self, None)
        return True

    def _render(self, rep: dict) -> None:
        c = rep["convention"]
        W_ = c["window"]
        self.union_label.value = (
            f"<b>union: <span class='fib-union-count'>{rep['union']}</span> distinct "
            f"distances</b> (window counted) · {rep['union_beyond_window']} beyond W={W_}"
        )
        gaps = rep["gaps"]
        uncovered = sum(b - a + 1 for a, b in gaps)
        widest = sorted(gaps, key=lambda g: g[0] - g[1])[:5]
        self.band_label.value = (
            f"band ±{c['band']} covers <b>{100 * rep['band_coverage']:.1f}%</b> of 1..T−1 · "
            f"{len(gaps)} gaps ({uncovered} distances)"
            + ("<br>widest gaps: " + ", ".join(f"{a}–{b}" for a, b in widest) if gaps else "")
            + f"<br>reachable after all {c['layers']} layers: "
            f"<b>{100 * rep['reachable'][-1]:.1f}%</b> of 0..T−1"
        )
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
        self.table.value = html_table(
            ["layer", "α", "|set|", "band", "reach after", "new rungs at 2T", "new rungs at 4T"],
            rows,
            "fib-layer-table",
        )
        if self.render:
            set_png(self.image, self._figure.draw(rep))

    def summary(self) -> str:
        """One line: the union count and its convention (for logs and tests)."""
        if self.result is None:
            return f"no result ({self.error})"
        c = self.result["convention"]
        return (
            f"union {self.result['union']} ({self.result['union_beyond_window']} beyond "
            f"W={c['window']}), band {100 * self.result['band_coverage']:.1f}%, reach "
            f"{100 * self.result['reachable'][-1]:.1f}% | L={c['layers']} K={c['rungs']} "
            f"T={c['seq_len']} base={c['base']} rounding={c['rounding']}"
        )
