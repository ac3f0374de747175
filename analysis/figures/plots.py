"""Figures for the paper's results: each function takes tables or plain data, returns a matplotlib
``Figure`` and, given ``path``, also writes it as a PNG (parent folders are created).

Every figure is drawn in the lab's one style (`analysis.figures.style`: seaborn's theme, one colour per
configuration, an ordered palette for layers) at the pixel size it is saved and shown at, with
labelled axes (units in brackets) and a legend or a colour key.  Figures are built with
``matplotlib.figure.Figure`` directly, not through ``pyplot``: nothing is drawn on screen, no
global figure list grows, and saving works headless (Agg) with any backend selected. In a
notebook, ``display(fig)`` (or the figure as a cell's last value under the inline backend)
shows it.

Functions
---------
``perplexity_vs_window(table1)``      perplexity against W, one line per base/schedule
``extrapolation(table3)``             perplexity against evaluation length, both rung policies
``position_bins(table4)``             NLL per position bin, one line per schedule; gap rows apart
``alpha_trajectories(traj)``          α against step, one line per layer, one panel per run

The attended-set figures (rung heatmap, coverage and receptive-field curves) are
`analysis.figures.structure`.
"""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis.figures import style
from analysis.figures.style import CONFIG_COLORS

__all__ = [
    "perplexity_vs_window",
    "extrapolation",
    "position_bins",
    "alpha_trajectories",
    "scale_trend",
    "CONFIG_COLORS",
]


def _need(df: pd.DataFrame, cols, who: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(
            f"the {who} plot: the frame lacks columns {missing} (it has {list(df.columns)}); "
            f"pass the table the plot is named for"
        )


def _variant(row: dict) -> str:
    """A row's variant text for its legend label (tables of several variants per config)."""
    v = row.get("variant")
    return f" ({v})" if isinstance(v, str) and v else ""


def perplexity_vs_window(
    table: pd.DataFrame, dataset: str = "fineweb_edu", path=None, title: str | None = None
) -> Figure:
    """Perplexity on ``dataset`` against the window W, one line per (base, schedule).

    ``table`` is Table-1-shaped (``base``, ``schedule``, ``W`` and a column per dataset:
    :func:`analysis.tables.ppl.table1`, :func:`~analysis.tables.ppl.table1_from_store` or
    :func:`analysis.published.paper.perplexity`). Lines are labelled ``base/schedule``, points sorted by W.
    """
    _need(table, ["base", "schedule", "W", dataset], "perplexity-vs-W")
    fig, ax = style.panels()
    ax = ax[0, 0]
    keys = ["base", "schedule"] + (["variant"] if "variant" in table.columns else [])
    for i, (key, g) in enumerate(table.groupby(keys, sort=False)):
        g = g.sort_values("W")
        label = f"{key[0]}/{key[1]}" + _variant(dict(zip(keys, key)))
        ax.plot(
            g["W"].to_numpy(dtype=float),
            g[dataset].to_numpy(dtype=float),
            marker="o",
            label=label,
            color=style.config_color(f"{key[0]}/{key[1]}", i),
        )
    ws = sorted({int(w) for w in table["W"].dropna()})
    if ws:
        ax.set_xticks(ws)
    ax.set_xlabel("window W (tokens)")
    ax.set_ylabel(f"held-out perplexity ({dataset})")
    ax.set_title(title or f"Held-out perplexity against window ({dataset})")
    style.legend(ax, len(ax.get_lines()), title="configuration")
    return style.save(fig, path)


_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
_PPL = re.compile(r"^(?P<frozen>frozen_)?ppl_T(?P<L>\d+)$")


def extrapolation(
    table: pd.DataFrame, path=None, relative: bool = False, title: str | None = None
) -> Figure:
    """Perplexity against evaluation length, one colour per row of a Table-3 frame
    (:func:`analysis.tables.length.table3_from_store`, :func:`~analysis.tables.length.table3_from_lenextrap` or
    :func:`analysis.published.paper.length_extrapolation`).

    The recomputed-rung curve (``ppl_T{L}``, the paper's policy) is solid; the frozen-rung curve
    (``frozen_ppl_T{L}``, drawn from the row's shortest length, where both policies agree) is
    dashed with open markers (visible where the two coincide). Colour follows the configuration,
    the marker the window W; the legend lists the rows and, apart, what solid and dashed mean.
    ``relative`` divides each curve by its value at the shortest length. Log-2 x axis, ticks at
    the evaluated lengths.
    """
    _need(table, ["model"], "extrapolation (Table 3)")
    full = sorted(
        (int(m["L"]), c) for c in table.columns if (m := _PPL.match(c)) and not m["frozen"]
    )
    frozen = sorted((int(m["L"]), c) for c in table.columns if (m := _PPL.match(c)) and m["frozen"])
    if not full:
        raise ValueError(
            f"the extrapolation plot needs Table 3's ppl_T{{L}} columns and the table has no "
            f"ppl_T… column (it has {list(table.columns)}): pass Table 3"
        )
    fig, ax = style.panels()
    ax = ax[0, 0]
    windows = sorted({int(w) for w in table["W"].dropna()}) if "W" in table.columns else []
    rows, any_frozen = [], False
    for i, r in enumerate(table.to_dict("records")):
        has_w = "W" in r and not pd.isna(r["W"])
        label = str(r["model"]) + (f" W={r['W']}" if has_w else "") + _variant(r)
        color = style.config_color(r["model"], i)
        marker = _MARKERS[windows.index(int(r["W"])) % len(_MARKERS)] if has_w else "o"
        pts = [(L, float(r[c])) for L, c in full if not pd.isna(r[c])]
        if not pts:
            continue
        x0, y0 = pts[0]
        scale = y0 if relative else 1.0
        ax.plot(
            [p[0] for p in pts],
            [p[1] / scale for p in pts],
            marker=marker,
            color=color,
            label=label,
            zorder=3,
        )
        rows.append(Line2D([], [], color=color, marker=marker, label=label))
        fz = [(L, float(r[c])) for L, c in frozen if not pd.isna(r[c]) and L > x0]
        if fz:
            any_frozen = True
            ax.plot(
                [x0] + [p[0] for p in fz],
                [y0 / scale] + [p[1] / scale for p in fz],
                marker=marker,
                markerfacecolor="white",
                linestyle="--",
                color=color,
                label=f"{label} (frozen rungs)",
                zorder=4,
            )
    ax.set_xscale("log", base=2)
    lengths = sorted({L for L, _ in full} | {L for L, _ in frozen})
    ax.set_xticks(lengths, [f"{L:,}" for L in lengths])
    ax.minorticks_off()
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(
        "perplexity ÷ perplexity at the shortest length" if relative else "held-out perplexity"
    )
    ax.set_title(
        title
        or "Length extrapolation"
        + (" (solid: rungs recomputed, dashed: frozen)" if any_frozen else "")
    )
    policies = []
    if any_frozen:  # what the two line styles mean
        policies = [
            Line2D([], [], color="#333333", label="rungs recomputed for the length"),
            Line2D([], [], color="#333333", ls="--", marker="o", mfc="white", label="rungs frozen"),
        ]
    style.legend(ax, len(rows) + len(policies), handles=rows + policies)
    return style.save(fig, path)


def position_bins(table: pd.DataFrame, path=None, title: str | None = None) -> Figure:
    """Mean NLL per position bin, one line per row of a Table-4 frame
    (:func:`analysis.tables.position.table4_from_store`, :func:`analysis.published.paper.position_nll`, …). Gap
    rows (``schedule`` of the form ``"a - b"``) go to a second panel below."""
    _need(table, ["schedule"], "position-bin (Table 4)")
    bins = sorted((int(c[1:]), c) for c in table.columns if re.fullmatch(r"b\d+", c))
    if not bins:
        raise ValueError(
            f"the position-bin plot needs Table 4's columns b0, b1, … and the table has none "
            f"(it has {list(table.columns)}): pass Table 4"
        )
    is_gap = table["schedule"].astype(str).str.contains(" - ", regex=False)
    if is_gap.any():  # the gap panel is the shorter one below
        fig = style.figure(style.PANEL[0], style.PANEL[1] + 260)
        axes = fig.subplots(
            2, 1, squeeze=False, sharex=True, height_ratios=[style.PANEL[1] - 60, 200]
        )
    else:
        fig, axes = style.panels()
    x = np.array([b for b, _ in bins])
    for panel, rows in enumerate([table[~is_gap], table[is_gap]][: 1 + int(is_gap.any())]):
        ax = axes[panel, 0]
        for i, r in enumerate(rows.to_dict("records")):
            label = str(r["schedule"]) + ("" if "W" not in r or pd.isna(r["W"]) else f" W={r['W']}")
            label += _variant(r)
            ax.plot(
                x,
                [float(r[c]) for _, c in bins],
                marker="o",
                label=label,
                color=style.config_color(r["schedule"], i) if panel == 0 else "#4d4d4d",
            )
        ax.set_xticks(x)
        ax.set_xticklabels([c for _, c in bins])
        ax.set_ylabel("NLL (nats/token)" if panel == 0 else "NLL difference (nats/token)")
        if panel == 1:
            ax.axhline(0.0, color="black", linewidth=0.8)
        style.legend(ax, len(ax.get_lines()) - panel, title="configuration" if panel == 0 else None)
    axes[-1, 0].set_xlabel("position bin of the training window (b0 = earliest positions)")
    axes[0, 0].set_title(title or "Loss by position in the window")
    return style.save(fig, path)


def alpha_trajectories(
    traj: pd.DataFrame,
    runs=None,
    path=None,
    show_init: bool = True,
    title: str | None = None,
    layers=None,
    drift: bool = False,
) -> Figure:
    """α against training step, one line per layer, one panel per run.

    ``traj`` is a trajectory frame (:func:`analysis.figures.trajectories.from_store` /
    :func:`~analysis.figures.trajectories.from_records`: ``run``, ``step``, ``layer``, ``alpha``, and
    ``alpha_init``); ``runs`` picks runs (default: all), ``layers`` layers (default: all).
    ``show_init`` marks each layer's start with a dotted line in its colour. Layers are coloured
    in order (an ordered palette per panel: dark = first layer, light = last); each panel's
    legend, right of it, names the layers (with more than 16, every few of them: the palette's
    order says the rest).

    ``drift``: plot α − α_init instead, on an axis fitted to the drift (a learned α that moves
    0.003 is a flat line on the α axis, which keeps a span of 0.2 so that small moves do not
    look large); each panel's label states the drift axis's span, so its scale is never
    mistaken for α's. Needs ``alpha_init``.
    """
    _need(traj, ["run", "step", "layer", "alpha"], "α trajectory")
    if drift:
        _need(traj, ["alpha_init"], "α drift")
    names = (
        list(dict.fromkeys(traj["run"]))
        if runs is None
        else ([runs] if isinstance(runs, str) else list(runs))
    )
    unknown = [r for r in names if r not in set(traj["run"])]
    if unknown or not names:
        raise ValueError(
            f"the α trajectory plot has no trajectory for runs {unknown or names} (the frame "
            f"has {sorted(set(traj['run']))[:10]}): name runs that logged α"
        )
    if layers is not None:
        layers = {int(k) for k in layers}
        traj = traj[traj["layer"].isin(layers)]
        empty = [r for r in names if not (traj["run"] == r).any()]
        if empty:
            raise ValueError(
                f"runs {empty} have none of layers {sorted(layers)}: pick layers they have"
            )
    fig, axes = style.panels(len(names), 1, size=(style.PANEL[0] + 40, 250))
    for ax, name in zip(axes[:, 0], names):
        g = traj[traj["run"] == name]
        shown = sorted(g["layer"].unique())
        has_init = False
        for layer, color in zip(shown, style.layer_colors(len(shown))):
            gl = g[g["layer"] == layer].sort_values("step")
            y = gl["alpha"].to_numpy(dtype=float)
            init = gl["alpha_init"].iloc[0] if "alpha_init" in gl.columns else None
            if drift:
                y = y - (float(init) if init is not None and pd.notna(init) else float("nan"))
            ax.plot(gl["step"].to_numpy(), y, color=color, label=f"layer {layer}")
            if show_init and not drift and init is not None and pd.notna(init):
                has_init = True
                ax.axhline(float(init), color=color, linestyle=":", linewidth=1.0)
        if drift:
            ax.axhline(0.0, color="#555555", linestyle=":", linewidth=1.0)
            style.min_span(ax, 1e-4)
            lo, hi = ax.get_ylim()
            ax.set_ylabel(f"α − α_init\n(axis {lo:+.2g} … {hi:+.2g})", fontsize="small")
        else:
            style.min_span(ax, 0.2)
            ax.set_ylabel("α")
        ax.set_title(name, fontsize="small")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        every = 1 if len(shown) <= 16 else -(-len(shown) // 8)
        keep = set(shown[::every]) | {shown[-1]}
        handles = [ln for ln in ax.get_lines() if ln.get_label() in {f"layer {k}" for k in keep}]
        if has_init:
            handles.append(Line2D([], [], color="#555555", ls=":", label="initial α"))
        style.legend_outside(ax, handles, ncol=2 if len(handles) > 9 else 1)
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    return style.save(fig, path)


def scale_trend(trend, paper_point: dict, path=None, caption: str | None = None) -> Figure:
    """The scale study's figure (issue 40): the stagger − fixed gap in ln ppl (positive: the
    stagger better) against the coverage difference, one point per cell with its 95 % Welch
    interval, the registered trend test's fitted gap over the cells' range, and the paper's
    (16, 1024) point marked — its gap is Table 5's, at the paper's shape, not a run of ours.
    ``trend``: an `analysis.statistics.trend.Trend`; ``caption``: the test in words."""
    fig, axes = style.panels(size=(style.PANEL[0], style.PANEL[1] + 40))
    ax = axes[0, 0]
    cells = list(trend.cells)
    x = np.array([c.coverage_difference for c in cells], float)
    y = np.array([c.gap for c in cells])
    err = np.array([[c.gap - c.ci[0] for c in cells], [c.ci[1] - c.gap for c in cells]])
    ax.errorbar(x, y, yerr=err, fmt="o", color=style.config_color("fib/stagger"), capsize=4,
                label="a cell of ours (L, T) · seeds: mean gap, 95 % interval")  # fmt: skip
    # labels above the upper whisker and below the lower one in turn, centred, or running away
    # from a neighbour closer than 8 distances: 22 and 27 would overprint each other
    order = sorted(cells, key=lambda c: c.coverage_difference)
    for i, c in enumerate(order):
        up, d = i % 2 == 0, c.coverage_difference
        near = min((o.coverage_difference - d for o in order if o is not c), key=abs, default=99)
        ha = "center" if abs(near) >= 8 else "right" if near > 0 else "left"
        dx = {"center": 0, "right": -3, "left": 3}[ha]
        ax.annotate(f"({c.cell[0]}, {c.cell[1]}) · {c.n_stagger}+{c.n_fixed}",
                    (d, c.ci[1] if up else c.ci[0]), textcoords="offset points",
                    xytext=(dx, 5 if up else -5), ha=ha, va="bottom" if up else "top",
                    fontsize="x-small")  # fmt: skip
    px, py = paper_point["coverage_difference"], paper_point["gap"]
    # the regression's own gap −(β + γ·Δcov/100), over our cells only: carried out to the
    # paper's coverage a fit the test did not show would read as a prediction there
    fit = f"registered trend fit: the gap changes {-trend.slope:+.4f} nats per 100 distances"
    inside = np.linspace(x.min(), x.max(), 20)
    ax.plot(inside, trend.fitted_gap(inside), ls="--", color="#4d4d4d", label=fit)
    ax.plot([px], [py], marker="*", ms=14, ls="none", color=style.config_color("dense"),
            label=f"the paper (L={paper_point['layers']}, T={paper_point['seq_len']}; "
            "Table 5, not our run)")  # fmt: skip
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xlim(0, max(px, x.max()) * 1.08)  # from no added coverage to past the paper's
    ax.set_xlabel("coverage difference: distinct distances beyond W, stagger − fixed")
    ax.set_ylabel("gap in ln ppl, fixed − stagger (nats)")
    ax.set_title("The stagger's gain against the coverage it adds", loc="left")
    if caption:  # under the axis label, inside the layout (an axes text: never overlapped)
        ax.text(0.0, -0.16, textwrap.fill(caption, 120), transform=ax.transAxes,
                fontsize="x-small", ha="left", va="top")  # fmt: skip
    ax.legend(fontsize="small", loc="upper left")
    return style.save(fig, path)
