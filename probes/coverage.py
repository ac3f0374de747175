"""Distinct-distance coverage of a stack of sparse layers.

For per-layer α (a schedule or a custom list) and a convention (base, W, K, T, rounding), each layer
attends an integer set of distances (its `lab.ladder.plan.ColumnPlan`, via `lab.ladder.plan.layer_sets`).  This module counts:

    per_layer             |set| of each layer, window included
    union                 distinct distances attended by any layer, window included
    union_beyond_window   the same, distances > W only
    layers_per_distance   how many layers attend each distance 0..T−1
    band_coverage         share of distances 1..T−1 within ±b of some attended distance (the
                          paper's "soft band"; b defaults to W), per layer and for the union
    gaps                  maximal runs of distances 1..T−1 outside every band
    beyond_reach          per layer, the rungs a longer sequence (``longer`` × T) would add: never
                          trained at length T

Reference numbers (SPEC §9, reproduced by the tests): L=8, K=25, W=8, round, window counted:
fixed 19, stagger 75 (the paper's "19 → about 75"); L=16, K=15: 19 vs 133 (floor 139, ceil 138);
power-of-2 15 vs 101.  The paper's "19 beyond the window" counts the window: only 10 lie beyond.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lab.ladder.offsets import Ladder
from lab.ladder.plan import layer_sets
from lab.ladder.schedules import Schedule, layer_alphas


def band_mask(distances: Sequence[int], band: int, seq_len: int) -> np.ndarray:
    """Boolean (seq_len,) array: True at δ when |δ − d| ≤ band for some attended d."""
    covered = np.zeros(seq_len + 1, dtype=np.int32)
    for d in distances:  # difference array: O(|set| + T)
        covered[max(d - band, 0)] += 1
        covered[min(d + band + 1, seq_len)] -= 1
    return np.cumsum(covered[:seq_len]) > 0


def gaps(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs [start, end] (inclusive) of distances 1..T−1 where mask is False."""
    out, start = [], None
    for delta in range(1, len(mask)):
        if not mask[delta] and start is None:
            start = delta
        elif mask[delta] and start is not None:
            out.append((start, delta - 1))
            start = None
    if start is not None:
        out.append((start, len(mask) - 1))
    return out


def _band_share(mask: np.ndarray) -> float:
    return float(mask[1:].mean()) if len(mask) > 1 else 1.0


def coverage(
    alphas: Sequence[float],
    seq_len: int,
    ladder: Ladder,
    band: int | None = None,
    longer: int = 8,
) -> dict:
    """The full coverage report for one per-layer α list (see the module docstring)."""
    window, base = ladder.window, ladder.base
    band = window if band is None else band
    if band < 0:
        raise ValueError(f"band={band} must be >= 0 (it defaults to the window W)")
    sets = layer_sets(alphas, seq_len, ladder)
    union = sorted(set().union(*sets))
    counts = np.zeros(seq_len, dtype=np.int64)
    for s in sets:
        counts[s] += 1
    long_sets = layer_sets(alphas, seq_len * longer, ladder)
    masks = [band_mask(s, band, seq_len) for s in sets]
    union_mask = band_mask(union, band, seq_len)
    return {
        "convention": {
            "layers": len(alphas),
            "window": window,
            "rungs": ladder.rungs,
            "seq_len": seq_len,
            "base": base if isinstance(base, str) else list(base),
            "rounding": ladder.rounding,
            "band": band,
            "window_counted": True,
        },
        "alphas": [float(a) for a in alphas],
        "per_layer": [len(s) for s in sets],
        "per_layer_sets": sets,
        "union": len(union),
        "union_beyond_window": sum(1 for d in union if d > window),
        "layers_per_distance": counts.tolist(),
        "band_coverage_per_layer": [_band_share(m) for m in masks],
        "band_coverage": _band_share(union_mask),
        "gaps": gaps(union_mask),
        "beyond_reach": [sorted(set(ls) - set(s)) for ls, s in zip(long_sets, sets)],
    }


def schedule_coverage(
    schedule: Schedule,
    layers: int,
    seq_len: int = 1024,
    ladder: Ladder = Ladder(8),
    band: int | None = None,
    stride: int | None = None,
) -> dict:
    """`coverage` for a named schedule ("fixed", "stagger", "coprime") or a custom α list."""
    alphas = layer_alphas(schedule, layers, stride=stride)
    report = coverage(alphas, seq_len, ladder, band=band)
    report["convention"]["schedule"] = schedule if isinstance(schedule, str) else "custom"
    return report


def describe(report: dict) -> str:
    """One line naming the number and the convention that produced it."""
    c = report["convention"]
    return (
        f"{c.get('schedule', 'custom')}: union {report['union']} distinct distances "
        f"({report['union_beyond_window']} beyond the window) | per layer "
        f"{min(report['per_layer'])}-{max(report['per_layer'])} | band ±{c['band']} covers "
        f"{100 * report['band_coverage']:.1f}% of 1..T-1 | convention: L={c['layers']} "
        f"K={c['rungs']} W={c['window']} T={c['seq_len']} base={c['base']} "
        f"rounding={c['rounding']}, window counted"
    )
