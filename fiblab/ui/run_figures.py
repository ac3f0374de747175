"""The live figures of notebooks 02 and 03, drawn in the lab's style (`analysis.figures.style`).

`probe_alphas(records, max_panels)` — α per layer over steps for a probe grid: the cells that
differ only in their seed share a panel, each layer's line is the mean over seeds with a band
from the lowest to the highest seed (seaborn's lineplot), layer ℓ has one colour in every panel
and one legend names them.  `training_curves(snapshot)` — a training run's loss (raw and a
running mean) with its held-out evaluations, and learned α per layer.

Both return a Figure sized in pixels; `fiblab.ui.probes.trajectory_png` and
`fiblab.ui.train.curves_png` render them to PNG.
"""

from __future__ import annotations

import math
import re
import textwrap

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from analysis.figures import style

__all__ = ["probe_alphas", "training_curves", "group_cells"]

_SEED = re.compile(r"/s\d+(?=/|$)")
#: The width of the two-panel training figure: narrower than a JupyterLab output area.
TWO_PANELS_PX = 900


def _alphas_of(rec: dict) -> list[tuple[int, list[float]]]:
    """(step, α per layer) of a record's trajectory, NaN for a missing α."""
    out = []
    for point in rec.get("trajectory") or []:
        alphas = [math.nan if a is None else float(a) for a in point.get("alphas") or []]
        out.append((int(point["step"]), alphas))
    return out


def _has_alpha(rec: dict) -> bool:
    return any(np.isfinite(a).any() for _, a in _alphas_of(rec) if a)


def group_cells(records: list[dict]) -> dict[str, list[dict]]:
    """Records with α, grouped by everything but the seed (the record key without ``/s{n}``),
    in first-seen order."""
    groups: dict[str, list[dict]] = {}
    for i, rec in enumerate(records):
        if not _has_alpha(rec):
            continue
        key = rec.get("key")
        key = (
            _SEED.sub("", key)
            if key
            else "/".join(
                str(rec.get(k)) for k in ("task", "mechanism", "depth", "init") if k in rec
            )
            or f"record{i}"
        )
        groups.setdefault(key, []).append(rec)
    return groups


def _title(key: str, recs: list[dict]) -> str:
    """A panel's name: mechanism, depth, trained distance, whether α is learned (and from which
    init) or fixed, and its seeds — a probe grid's fixed-α cells carry init "-"."""
    r = recs[0]
    seeds = sorted({x.get("seed") for x in recs if x.get("seed") is not None})
    init = r.get("init")
    parts = [
        str(r.get("mechanism", "")),
        f"depth {r.get('depth', '?')}",
        f"distance {r['distance']}" if r.get("distance") is not None else "",
        "fixed α" if init in (None, "-", "") else f"learned α, {init} init",
    ]
    tail = f"{len(seeds)} seeds" if len(seeds) > 1 else (f"seed {seeds[0]}" if seeds else "")
    return " · ".join(p for p in parts + [tail] if p)


def probe_alphas(records: list[dict], max_panels: int = 8):
    """α per layer against step for a probe grid, one panel per group of seeds (the first
    ``max_panels`` groups); a Figure."""
    groups = list(group_cells(records).items())[: max(1, max_panels)]
    n = max(1, len(groups))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    panel = max(270, 470 // cols)  # px; one panel alone is wider
    fig = style.figure(40 + panel * cols + 130, 40 + 235 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharey=True)).ravel()
    if not groups:
        axes[0].text(
            0.5,
            0.5,
            "no α to plot: dense cells have no α\n(a running cell appears once it logs its "
            "first step)",
            ha="center",
            va="center",
            transform=axes[0].transAxes,
        )
        for ax in axes:
            ax.axis("off")
        return fig
    depth = max(len(a) for _, recs in groups for r in recs for _, a in _alphas_of(r))
    palette = style.layer_colors(depth)
    titles = [_title(k, recs) for k, recs in groups]
    lo, hi = 0.45, 1.55
    any_band = any_init = False
    for ax, (key, recs), title in zip(axes, groups, titles):
        long = pd.DataFrame(
            [
                (step, layer, a, rec.get("seed", i))
                for i, rec in enumerate(recs)
                for step, alphas in _alphas_of(rec)
                for layer, a in enumerate(alphas)
                if math.isfinite(a)
            ],
            columns=["step", "layer", "alpha", "seed"],
        )
        style.seed_band(ax, long, "step", "alpha", "layer", palette)
        any_band |= long["seed"].nunique() > 1
        lo, hi = min(lo, long["alpha"].min() - 0.05), max(hi, long["alpha"].max() + 0.05)
        start = long[long["step"] == long["step"].min()]
        if len(start) and start["step"].iloc[0] == 0:
            any_init = True
            for layer, a in start.groupby("layer")["alpha"].mean().items():
                ax.axhline(a, color=palette[int(layer)], ls=":", lw=1.0, zorder=1)
        # wrapped to the panel's width (≈ 6.5 px a character at "small"): neighbours never overlap
        name = title if titles.count(title) == 1 else key
        ax.set_title(textwrap.fill(name, max(24, int(panel / 6.5))), fontsize="small")
        ax.set_xlabel("step")
        ax.set_ylabel("α")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))  # ≈ 270 px: 4 labels fit
        ax.tick_params(labelleft=True)
    for ax in axes[len(groups) :]:
        ax.axis("off")
    axes[0].set_ylim(lo, hi)
    handles = [Line2D([], [], color=c, lw=1.8, label=f"layer {i}") for i, c in enumerate(palette)]
    if any_band:
        handles.append(Line2D([], [], color="#777777", lw=1.8, label="mean over seeds"))
        handles.append(Patch(color="#777777", alpha=0.25, label="lowest–highest seed"))
    if any_init:
        handles.append(Line2D([], [], color="#555555", ls=":", label="initial α"))
    # the key sits below the title's row (a short title, the band's meaning in the key): the
    # legend never covers the title
    fig.legend(handles=handles, loc="outside right center", fontsize="small")
    fig.suptitle("α per layer during training", fontsize="medium")
    return fig


def _running_mean(y: np.ndarray, k: int) -> np.ndarray:
    """Centred mean over ``k`` neighbouring values (fewer at the ends: no lag on a steep
    curve)."""
    c = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(len(y))
    lo = np.maximum(idx - k // 2, 0)
    hi = np.minimum(idx + k - k // 2, len(y))
    return (c[hi] - c[lo]) / (hi - lo)


def training_curves(s: dict):
    """Loss over steps (raw, its running mean, held-out evaluations as ln perplexity) and, for a
    learned-α run, α per layer; a Figure of 640 (one panel) or 900 (two) × 300 px — within a
    JupyterLab output area beside the default side bar (≈ 970 px), legend included."""
    alphas = s["alphas"]
    has_alpha = not alphas.empty
    fig = style.figure(TWO_PANELS_PX if has_alpha else 640, 300)
    axes = fig.subplots(1, 2 if has_alpha else 1, squeeze=False).ravel()
    ax = axes[0]
    lc = s["loss_curve"]
    step = lc["step"].to_numpy(dtype=float)
    value = lc["value"].to_numpy(dtype=float)
    k = max(1, len(value) // 20)
    if k > 1:
        ax.plot(step, value, lw=0.8, alpha=0.35, color="#0173b2", label="train loss")
        ax.plot(
            step,
            _running_mean(value, k),
            lw=1.8,
            color="#0173b2",
            label=f"train loss, mean of {k} logged steps",
        )
    else:
        ax.plot(
            step,
            value,
            lw=1.4,
            marker="o" if len(value) < 10 else None,
            color="#0173b2",
            label="train loss",
        )
    ev = s["evals"]
    if len(ev):
        kind = ev["kind"].astype(str) if "kind" in ev.columns else pd.Series("light", ev.index)
        multi = "dataset" in ev.columns and ev["dataset"].nunique() > 1
        for j, (name, marker) in enumerate((("light", "o"), ("recompute", "D"))):
            sel = ev[kind == name]
            for d, g in sel.groupby("dataset") if "dataset" in sel.columns else [("", sel)]:
                what = "periodic" if name == "light" else "full"
                ax.plot(
                    g["step"],
                    np.log(g["perplexity"].astype(float)),
                    marker,
                    ms=5,
                    color="#de8f05" if not multi else style.config_color(d, j),
                    label=f"held-out loss, {what} eval" + (f" ({d})" if multi else ""),
                    zorder=3,
                )
    for a in axes:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(fontsize="small", loc="upper right")
    ax.set_title(f"{s['name']} — {s['state']}", fontsize="medium", loc="left")
    if has_alpha:
        palette = style.layer_colors(len(alphas.columns))
        for color, layer in zip(palette, alphas.columns):
            axes[1].plot(alphas.index, alphas[layer], lw=1.4, color=color, label=f"layer {layer}")
        style.min_span(axes[1], 0.2)
        axes[1].set_xlabel("step")
        axes[1].set_ylabel("α")
        axes[1].set_title("learned α per layer", fontsize="medium", loc="left")
        lines = axes[1].get_lines()
        every = 1 if len(lines) <= 16 else -(-len(lines) // 8)
        keep = lines[::every] if lines[-1] in lines[::every] else lines[::every] + [lines[-1]]
        style.legend_outside(axes[1], keep, ncol=2 if len(keep) > 9 else 1)
    return fig
