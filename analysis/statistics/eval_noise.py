"""How much of a comparison's gap is evaluation noise: a paired bootstrap over held-out windows.

A seed comparison (`analysis.statistics.decide`) treats each run's held-out perplexity as exact. It is
not: it is a mean over a finite set of windows, and another draw of held-out text would move
it. Both models of a comparison are scored on the *same* windows, so the noise that matters is
that of the per-window difference, not of either model alone. The paired bootstrap resamples
windows (with replacement, the same draw for every run of both sides) and recomputes the gap;
its spread is the evaluation noise of the gap, reported beside the seed noise (the Welch
standard error of the per-seed values). When the evaluation noise is much smaller, more seeds
— not more held-out text — is what would sharpen the verdict.

Units: per-window mean NLL in nats per token, so a side's mean over its runs and windows is
the mean ln perplexity the ledger compares (every window has the same number of tokens). The
gap is how much ``a`` beats ``b`` (lower is better): mean(b) − mean(a), as in `analysis.statistics.decide`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["EvalNoise", "window_bootstrap", "seed_se"]


@dataclass(frozen=True)
class EvalNoise:
    """The paired window bootstrap of one comparison's gap."""

    gap: float  # mean(b) − mean(a) over runs and windows (nats per token)
    se: float  # the bootstrap standard deviation of the gap: its evaluation noise
    ci: tuple[float, float]  # percentile interval of the resampled gaps
    windows: int
    n_boot: int

    def to_json(self) -> dict:
        return {
            "gap": self.gap,
            "se": self.se,
            "ci": list(self.ci),
            "windows": self.windows,
            "n_boot": self.n_boot,
        }


def window_bootstrap(a, b, n_boot: int = 4000, seed: int = 0, level: float = 0.95) -> EvalNoise:
    """The paired bootstrap over windows of the gap between two sides' runs.

    a: (n_a, W) per-window mean NLL of side a's runs; b: (n_b, W) the same windows scored by
    side b's runs. Because every run sees the same resampled windows, the gap of a resample is
    the mean of the per-window differences d_w = mean_b(w) − mean_a(w) over the drawn windows;
    for large W its standard deviation approaches std(d_w)/sqrt(W)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(
            f"shapes {a.shape} and {b.shape}: give (runs, windows) arrays over the same windows"
        )
    if a.shape[0] < 1 or b.shape[0] < 1 or a.shape[1] < 2:
        raise ValueError(f"shapes {a.shape} and {b.shape}: need a run a side and 2 windows")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie in (0, 1), e.g. 0.95")
    d = b.mean(axis=0) - a.mean(axis=0)  # (W,) per-window gap of the side means
    W = d.shape[0]
    rng = np.random.default_rng(seed)
    gaps = np.empty(n_boot)
    for i in range(0, n_boot, 500):  # (chunk, W) index draws, bounded memory
        k = min(500, n_boot - i)
        gaps[i : i + k] = d[rng.integers(0, W, size=(k, W))].mean(axis=1)
    lo, hi = np.quantile(gaps, [(1 - level) / 2, (1 + level) / 2])
    return EvalNoise(float(d.mean()), float(gaps.std(ddof=1)), (float(lo), float(hi)), W, n_boot)


def seed_se(a, b) -> float:
    """The seed noise of the same gap: Welch's standard error sqrt(s_a²/n_a + s_b²/n_b) of the
    per-run values (NaN with fewer than 2 runs a side)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float(math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
