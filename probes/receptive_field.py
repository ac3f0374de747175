"""Receptive-field composition through a stack of sparse layers.

A token reaches back δ positions after ℓ layers when δ = d_1 + … + d_ℓ with d_i in layer i's
attended set (d = 0, staying put, is always allowed because every set contains the window's 0).

    reachable(sets, T)       the reachable set after each layer, as Python-int bitsets (bit δ);
                             exact, one shift-or per attended distance per layer
    min_hops(sets, T)        per distance, the fewest non-zero hops that reach it (−1: never)
    effective_field(...)     the distribution of source distances when each layer spreads weight
                             uniformly over its attended set, optionally keeping `residual` on
                             staying put — a model of how mixing through the stack dilutes reach

After all L layers the reachable set is a Minkowski sum, which does not depend on layer order
(coprime = linear stagger); after ℓ < L layers it does, since different layers come first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.signal import fftconvolve

from lab.ladder.offsets import Ladder
from lab.ladder.plan import layer_sets
from lab.ladder.schedules import layer_alphas
from lab.ladder.schemes import scheme as find_scheme


def reachable(sets: Sequence[Sequence[int]], seq_len: int) -> list[int]:
    """Bitsets (Python ints) of distances reachable after layers 1..L, truncated to < seq_len."""
    full = (1 << seq_len) - 1
    cur, out = 1, []  # bit 0: the token itself
    for s in sets:
        nxt = 0
        for d in s:
            nxt |= cur << d
        cur = nxt & full
        out.append(cur)
    return out


def bits_to_list(bits: int) -> list[int]:
    out, i = [], 0
    while bits:
        if bits & 1:
            out.append(i)
        bits >>= 1
        i += 1
    return out


def reachable_fraction(sets: Sequence[Sequence[int]], seq_len: int) -> list[float]:
    """Share of distances 0..T−1 reachable after each layer."""
    return [bin(b).count("1") / seq_len for b in reachable(sets, seq_len)]


def min_hops(sets: Sequence[Sequence[int]], seq_len: int) -> np.ndarray:
    """(T,) fewest non-zero hops to reach each distance through the whole stack; −1 if never."""
    inf = np.iinfo(np.int64).max // 2
    hops = np.full(seq_len, inf, dtype=np.int64)
    hops[0] = 0
    for s in sets:
        new = hops.copy()  # d = 0: stay put, no hop
        for d in s:
            if 0 < d < seq_len:
                np.minimum(new[d:], hops[:-d] + 1, out=new[d:])
        hops = new
    return np.where(hops >= inf, -1, hops)


def effective_field(
    sets: Sequence[Sequence[int]], seq_len: int, residual: float = 0.0
) -> list[np.ndarray]:
    """Per layer, the (T,) distribution of source distances (mass past T−1 is dropped).

    Each layer maps p → residual·p + (1 − residual)·(p ⊛ uniform(set)).
    """
    if not 0.0 <= residual < 1.0:
        raise ValueError(f"residual={residual} must be in [0, 1)")
    p = np.zeros(seq_len)
    p[0] = 1.0
    out = []
    for s in sets:
        kernel = np.zeros(seq_len)
        kernel[[d for d in s if d < seq_len]] = 1.0 / len(s)
        if len(s) > 64:
            spread = fftconvolve(p, kernel)[:seq_len].clip(min=0.0)
        else:
            spread = np.zeros(seq_len)
            for d in s:
                if d < seq_len:
                    spread[d:] += p[: seq_len - d] / len(s)
        p = residual * p + (1.0 - residual) * spread
        out.append(p.copy())
    return out


def scheme_sets(
    scheme: str,
    layers: int,
    window: int = 8,
    seq_len: int = 1024,
    rungs: int = 15,
    rounding: str = "round",
) -> list[list[int]]:
    """Per-layer sets of a named scheme (`lab.ladder.schemes`, any spelling: fixed, stagger, coprime,
    pow2, pow2-stagger, dense, …; a learned scheme at its initial α)."""
    s = find_scheme(scheme)
    if s.attention == "dense":
        return [list(range(seq_len))] * layers
    return layer_sets(
        layer_alphas(s.schedule, layers),
        seq_len,
        Ladder(window, base=s.base, rungs=rungs, rounding=rounding),
    )


def receptive_report(sets: Sequence[Sequence[int]], seq_len: int, residual: float = 0.0) -> dict:
    """Reachable share per layer, hop statistics and the effective field's spread."""
    hops = min_hops(sets, seq_len)
    field = effective_field(sets, seq_len, residual)
    reach = hops[hops >= 0]
    last = field[-1]
    mass = last.sum()
    mean = float((np.arange(seq_len) * last).sum() / mass) if mass > 0 else 0.0
    return {
        "reachable_fraction": reachable_fraction(sets, seq_len),
        "unreachable": int((hops < 0).sum()),
        "max_min_hops": int(reach.max()) if len(reach) else 0,
        "mean_min_hops": float(reach.mean()) if len(reach) else 0.0,
        "effective_mean_distance": mean,
        "effective_mass_in_window": float(mass),
        "residual": residual,
    }


def compare(
    layers: int = 16,
    window: int = 8,
    seq_len: int = 1024,
    rungs: int = 15,
    rounding: str = "round",
    residual: float = 0.0,
    schemes: Sequence[str] = ("fixed", "stagger", "coprime", "pow2", "pow2-stagger", "dense"),
) -> dict[str, dict]:
    """`receptive_report` for each named scheme under one convention."""
    return {
        s: receptive_report(
            scheme_sets(s, layers, window, seq_len, rungs, rounding), seq_len, residual
        )
        for s in schemes
    }
