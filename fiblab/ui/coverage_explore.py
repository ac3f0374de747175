"""The coverage explorer's compute step: `explore` and the explorer's named schedules.

`explore(...)` is pure: per-layer attended sets, the union count with and without the window,
band coverage and gaps, the reachable share after each layer (multi-hop receptive field), the
rungs that appear when the same α are used at 2× and 4× the length (the paper's recompute
policy: never trained at T) and the per-layer heatmap of attended distances over log bins.

Schedules: ``fixed`` (α = 1), ``stagger`` (linear 0.5 → 1.5), ``coprime`` (the stagger's values
permuted by ℓ ↦ S·ℓ mod L), ``learned-init`` (a learned schedule's starting point: the stagger
clamped to [0.55, 1.45]) and ``custom`` (a comma list, or whatever the sliders say).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from lab.ladder.offsets import Base, Ladder
from lab.ladder.plan import attended_distances
from lab.ladder.schedules import layer_alphas
from probes.coverage import coverage
from probes.receptive_field import reachable_fraction


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
    ladder = Ladder(window, base=base, rungs=rungs, rounding=rounding)
    report = coverage(list(alphas), seq_len, ladder, band=band, longer=2)
    sets = report["per_layer_sets"]
    current = [set(s) for s in sets]
    new_at = {2: report["beyond_reach"]}
    new_at[4] = [
        sorted(set(attended_distances(a, 4 * seq_len, ladder)) - cur)
        for a, cur in zip(alphas, current)
    ]
    report["new_at"] = new_at
    report["reachable"] = reachable_fraction(sets, seq_len)
    report["heatmap"] = heatmap(sets, seq_len)
    report["seconds"] = time.perf_counter() - t0
    return report
