"""The scale study's trend test (claims.toml ``lab-scale-trend``, ``[scale] trend``): does the
stagger's gain over fixed α grow with the coverage difference it buys?

One registered regression over every cell's runs (statsmodels fits it):

    ln ppl_r = cell_c(r) + β·stagger_r + γ·stagger_r·Δcov_c(r)/100 + ε_r

γ < 0 says the stagger's ln ppl falls further below fixed's as Δcov grows.  Why a regression
and not gap(L=8) − gap(L=4): it reads the four cells at once, and γ is the slope the scale
figure draws.  Why HC3: the cells may differ in seed noise (T = 512 packs four times fewer
windows a batch), and HC3 keeps its size with ten runs a cell where the plain OLS variance
assumes one σ.  Why t with n − k df: HC3's normal reference is liberal at 80 runs.

`cell_gap` is the per-cell gap the figure shows beside it (Welch, `analysis.statistics.decide`),
`trend_power` the power the registration states (the noncentral t under one σ).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

__all__ = ["CellGap", "Trend", "cell_gap", "trend_test", "trend_power"]


@dataclass(frozen=True)
class CellGap:
    """One cell's stagger-over-fixed gap: mean ln ppl(fixed) − mean ln ppl(stagger), nats
    (positive: the stagger is better), with its 95 % Welch interval."""

    cell: tuple[int, int]  # (L, T)
    coverage_difference: int
    gap: float
    ci: tuple[float, float]
    n_stagger: int
    n_fixed: int


@dataclass(frozen=True)
class Trend:
    """The registered test's numbers: γ (nats per 100 distances, negative: the gain grows),
    its HC3 standard error and 95 % interval, the one-sided p of γ < 0 and of its reversal."""

    slope: float
    se: float
    ci: tuple[float, float]
    p: float  # γ < 0
    p_against: float  # γ > 0
    df: int
    n_runs: int
    cells: tuple[CellGap, ...]
    stagger: float = (
        math.nan
    )  # β, the stagger's ln ppl change at Δcov 0: the fitted gap is −(β + γ·Δcov/100)

    def fitted_gap(self, dcov) -> np.ndarray:
        """The regression's gap (fixed − stagger, nats) at coverage difference ``dcov``."""
        return -(self.stagger + self.slope * np.asarray(dcov, float) / 100.0)

    @property
    def gain_per_100(self) -> float:
        """The stagger's extra gain per 100 more distances, nats (−γ)."""
        return -self.slope


def cell_gap(cell, dcov: int, stagger: Sequence[float], fixed: Sequence[float]) -> CellGap:
    """The gap of one cell from its runs' perplexities."""
    from analysis.statistics.decide import welch_interval

    ls, lf = np.log(np.asarray(stagger, float)), np.log(np.asarray(fixed, float))
    if len(ls) >= 2 and len(lf) >= 2:
        ci = welch_interval(lf, ls)
        lo, hi = float(ci[0]), float(ci[1])
    else:
        lo = hi = math.nan
    gap = float(lf.mean() - ls.mean()) if len(ls) and len(lf) else math.nan
    return CellGap(tuple(cell), int(dcov), gap, (lo, hi), len(ls), len(lf))


def _design(runs):
    cells = sorted({r[0] for r in runs})
    X, y = [], []
    for cell, dcov, scheme, ppl in runs:
        s = 1.0 if scheme == "stagger" else 0.0
        X.append([1.0 if c == cell else 0.0 for c in cells] + [s, s * dcov / 100.0])
        y.append(math.log(ppl))
    return np.asarray(X), np.asarray(y), cells


def trend_test(runs: Sequence[tuple]) -> Trend:
    """``runs``: (cell, Δcov, scheme "stagger" | "fixed", perplexity) per finished run (a NaN
    perplexity — an unfinished run — joins nothing, R6).  Needs two cells or more with both
    schemes; ValueError otherwise."""
    import statsmodels.api as sm

    runs = [r for r in runs if r[3] is not None and math.isfinite(r[3]) and r[3] > 0]
    both = {
        c for c in {r[0] for r in runs} if {r[2] for r in runs if r[0] == c} >= {"stagger", "fixed"}
    }
    runs = [r for r in runs if r[0] in both]
    if len(both) < 2:
        raise ValueError("the trend needs stagger and fixed runs at two cells or more")
    X, y, cells = _design(runs)
    fit = sm.OLS(y, X).fit(cov_type="HC3", use_t=True)
    g, se, b = float(fit.params[-1]), float(fit.bse[-1]), float(fit.params[-2])
    df = int(fit.df_resid)
    t = g / se
    h = float(_st.t.ppf(0.975, df)) * se
    by_cell = {}
    for cell, dcov, scheme, ppl in runs:
        by_cell.setdefault((cell, dcov), {"stagger": [], "fixed": []})[scheme].append(ppl)
    gaps = tuple(cell_gap(c, d, v["stagger"], v["fixed"]) for (c, d), v in sorted(by_cell.items()))
    return Trend(
        slope=g, se=se, ci=(g - h, g + h), p=float(_st.t.cdf(t, df)),
        p_against=float(_st.t.sf(t, df)), df=df, n_runs=len(runs), cells=gaps, stagger=b,
    )  # fmt: skip


def trend_power(
    dcovs: Sequence[int], n: int, sigma: float, slope: float, alpha: float = 0.05
) -> float:
    """Power of the registered one-sided test of γ < 0 when the gain grows by ``slope`` nats
    per 100 distances, ``n`` runs a side at each Δcov, one σ (nats).  γ̂/σ is a noncentral t
    under the OLS variance σ²·[(XᵀX)⁻¹]_γγ; the test divides by HC3's, whose expectation under
    one σ is larger — (XᵀX)⁻¹Xᵀ diag(1/(1−h)) X(XᵀX)⁻¹ — so the critical value is scaled by
    the square root of the ratio (10 a side: ×1.05; 5 a side: ×1.12, where the plain formula
    said 0.57 and 400 simulated tests found 0.48)."""
    runs = [((i, 0), d, s, 1.0) for i, d in enumerate(dcovs) for s in ("stagger", "fixed")]
    X, _, _ = _design([r for r in runs for _ in range(n)])
    inv = np.linalg.inv(X.T @ X)
    h = np.einsum("ij,jk,ik->i", X, inv, X)
    hc3 = inv @ ((X / (1 - h)[:, None]).T @ X) @ inv
    ratio = float(hc3[-1, -1] / inv[-1, -1])
    se = sigma * math.sqrt(float(inv[-1, -1]))
    df = X.shape[0] - X.shape[1]
    crit = float(_st.t.ppf(1 - alpha, df)) * math.sqrt(ratio)
    return float(_st.nct.sf(crit, df, abs(slope) / se))
