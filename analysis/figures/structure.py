"""Figures of the attended sets themselves, before any training: which distances each layer
reads, how many distinct distances a scheme covers, and how much of the context a stack of
layers can reach.  Same contract as `analysis.figures.plots` (a ``Figure``; a PNG at ``path``).

``rung_heatmap(sets)``                layers × distance: which distances each layer attends
``coverage_curves(sets_by_scheme)``   distinct attended distances ≤ δ, against δ
``receptive_field_curves(fractions)`` share of distances reachable after each layer
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import PercentFormatter

from analysis.figures import style

__all__ = ["rung_heatmap", "coverage_curves", "receptive_field_curves"]


def rung_heatmap(
    sets: Sequence[Sequence[int]],
    seq_len: int | None = None,
    path=None,
    title: str | None = None,
    labels: Sequence[str] | None = None,
) -> Figure:
    """Which distances each layer attends: an image with one row per layer (layer 0 at the top)
    and one column per distance 0 … seq_len−1, 1 where attended (distances ≥ seq_len are
    ignored). ``sets`` is a list of per-layer distance lists (``ModelConfig.attended_sets()``,
    ``probes.coverage.layer_sets``); ``seq_len`` defaults to the largest distance + 1.

    Attended distances are dark on white (a two-entry colour key on the right). Each attended
    distance is also marked by a line at least one pixel wide over the image, so that none
    drops out of the picture when T is larger than the axes are wide (1,024 distances in about
    800 pixels: a plain image would skip every fifth column)."""
    sets = [list(s) for s in sets]
    if not sets:
        raise ValueError(
            "the rung heatmap got no layers (sets is empty): pass one list of attended "
            "distances per layer"
        )
    T = seq_len if seq_len is not None else max((max(s) for s in sets if s), default=0) + 1
    if T < 1:
        raise ValueError(f"the rung heatmap's seq_len={seq_len!r} must be at least 1")
    grid = np.zeros((len(sets), T))
    for i, s in enumerate(sets):
        for d in s:
            if 0 <= d < T:
                grid[i, d] = 1.0
    from matplotlib.colors import ListedColormap

    L = len(sets)
    fig, ax = style.panels(size=(900, 110 + 20 * min(L, 48)))
    ax = ax[0, 0]
    ax.grid(False)
    dark = "#1b3a5c"
    two = ListedColormap(["#ffffff", dark])
    ax.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        cmap=two,
        vmin=0,
        vmax=1,
        extent=(-0.5, T - 0.5, L - 0.5, -0.5),
    )
    ax.eventplot(
        [[d for d in s if 0 <= d < T] for s in sets],
        lineoffsets=range(L),
        linelengths=1.0,
        linewidths=1.0,
        colors=dark,
    )
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(L - 0.5, -0.5)
    every = max(1, -(-L // 24))
    names = list(labels) if labels is not None else [str(i) for i in range(L)]
    ax.set_yticks(range(L)[::every])
    ax.set_yticklabels(names[::every], fontsize="small")
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_color("#888888")
    style.legend_outside(
        ax,
        [
            Patch(facecolor=dark, label="attended"),
            Patch(facecolor="white", edgecolor="#888888", label="not attended"),
        ],
    )
    ax.set_xlabel("distance δ = t − s (tokens)")
    ax.set_ylabel("layer")
    ax.set_title(title or f"Attended distances per layer ({len(sets)} layers, T={T})")
    return style.save(fig, path)


def coverage_curves(
    sets_by_scheme: Mapping[str, Sequence[Sequence[int]]],
    seq_len: int,
    path=None,
    title: str | None = None,
) -> Figure:
    """Distinct-distance coverage: for each scheme, the number of distinct distances in
    0 … δ that some layer attends, against δ (a step curve ending at the union size). ``sets_by_
    scheme`` maps a name to its per-layer distance lists (e.g. ``probes.receptive_field.
    scheme_sets``)."""
    if not sets_by_scheme:
        raise ValueError("the coverage plot got no schemes: pass {name: per-layer distance lists}")
    fig, ax = style.panels()
    ax = ax[0, 0]
    x = np.arange(seq_len)
    for i, (name, sets) in enumerate(sets_by_scheme.items()):
        hit = np.zeros(seq_len, dtype=bool)
        for s in sets:
            idx = [d for d in s if 0 <= d < seq_len]
            hit[idx] = True
        y = np.cumsum(hit)
        ax.step(
            x, y, where="post", label=f"{name} ({int(y[-1])})", color=style.config_color(name, i)
        )
    ax.set_xlim(0, seq_len - 1)
    ax.set_xlabel("distance δ (tokens)")
    ax.set_ylabel("distinct attended distances ≤ δ")
    ax.set_title(title or f"Distinct-distance coverage (T={seq_len}, window counted)")
    style.legend(ax, len(sets_by_scheme), title="scheme (distinct distances)")
    return style.save(fig, path)


def receptive_field_curves(
    fractions: Mapping[str, Sequence[float]], path=None, title: str | None = None
) -> Figure:
    """Share of distances 0 … T−1 reachable after layers 1 … L, one line per scheme
    (``fractions`` maps a name to ``probes.receptive_field.reachable_fraction(...)`` or a
    ``receptive_report``'s ``reachable_fraction``)."""
    if not fractions:
        raise ValueError(
            "the receptive-field plot got no schemes: pass {name: reachable fractions}"
        )
    fig, ax = style.panels()
    ax = ax[0, 0]
    for i, (name, fr) in enumerate(fractions.items()):
        y = np.asarray(list(fr), dtype=float)
        ax.plot(
            np.arange(1, len(y) + 1), y, marker="o", label=name, color=style.config_color(name, i)
        )
    depth = max((len(list(fr)) for fr in fractions.values()), default=1)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlim(0.5, depth + 0.5)
    ax.set_xlabel("layers passed (path length ℓ)")
    ax.set_ylabel("share of distances 0…T−1 reachable")
    ax.set_ylim(-0.02, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_title(title or "Receptive field through the stack")
    style.legend(ax, len(fractions), title="scheme")
    return style.save(fig, path)
