"""Seed statistics: how far apart two configurations are (the primitives; `analysis.statistics.decide`
decides claims with them, `analysis.statistics.assess` words one claim in a sentence).

A *sample* is the values of one configuration over training seeds (e.g. FineWeb-Edu perplexity of
fib/stagger at W = 12 for seeds 42, 43, 44).  NaN values are dropped everywhere.  Every spread is
the sample standard deviation (ddof = 1) unless a function says otherwise; the paper's Table 5
prints the population one (ddof = 0), which :func:`summary` reports as ``std_pop``.

Functions
---------
``summary(values)``
    n, mean, std (ddof 1), std_pop (ddof 0), sem, min, max of one sample (Table 5's statistics).
``samples(df, by, value)``
    ``{config: array of values}`` from a long frame.
``pooled_std(*samples)``
    the pooled standard deviation of k samples, √(Σ(nᵢ−1)sᵢ² / Σ(nᵢ−1)).
``gap(a, b)`` / ``margin(a, b)``
    how much ``a`` beats ``b`` (lower is better by default), raw and in units of a σ.
``welch(a, b)``
    Welch's unequal-variance t-test: t, degrees of freedom (Welch–Satterthwaite), p.
``bootstrap_ci(a, b)``
    a seeded percentile bootstrap interval of the gap (a sketch: too narrow at three seeds a
    side; verdicts use Welch's t-interval, `analysis.statistics.decide.welch_interval`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _st

__all__ = [
    "WelchResult",
    "as_sample",
    "summary",
    "samples",
    "pooled_std",
    "gap",
    "margin",
    "welch_parts",
    "welch",
    "bootstrap_ci",
]


def as_sample(values, name: str = "sample") -> np.ndarray:
    """``values`` as a 1-D float array with NaNs dropped.

    Raises ``ValueError`` naming ``name`` when the values are not numbers or not one-dimensional.
    """
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be one-dimensional (one value per seed), got shape {arr.shape}"
        )
    return arr[~np.isnan(arr)]


def summary(values, name: str = "sample") -> dict:
    """Summary of one sample: ``n``, ``mean``, ``std`` (ddof 1; NaN when n < 2), ``std_pop``
    (ddof 0; NaN when n = 0), ``sem`` (std / √n), ``min``, ``max``."""
    x = as_sample(values, name)
    n = len(x)
    nan = float("nan")
    return {
        "n": n,
        "mean": float(x.mean()) if n else nan,
        "std": float(x.std(ddof=1)) if n >= 2 else nan,
        "std_pop": float(x.std(ddof=0)) if n else nan,
        "sem": float(x.std(ddof=1) / math.sqrt(n)) if n >= 2 else nan,
        "min": float(x.min()) if n else nan,
        "max": float(x.max()) if n else nan,
    }


def _check_columns(df: pd.DataFrame, cols: Sequence[str], who: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{who}: the frame lacks columns {missing} (it has {list(df.columns)})")


def samples(df: pd.DataFrame, by: str | Sequence[str], value: str) -> dict:
    """``{config: values}`` from a long frame: one entry per distinct ``by`` (a column name, or a
    list of names giving tuple keys), the ``value`` column as a float array (NaN dropped), in
    order of first appearance."""
    keys = [by] if isinstance(by, str) else list(by)
    _check_columns(df, keys + [value], "samples")
    out = {}
    for key, g in df.groupby(keys if len(keys) > 1 else keys[0], sort=False, dropna=False):
        out[key] = as_sample(g[value].to_numpy(), f"{value} of {key!r}")
    return out


def pooled_std(*groups) -> float:
    """Pooled standard deviation of k samples: √(Σᵢ (nᵢ−1)·sᵢ² / Σᵢ (nᵢ−1)), sᵢ with ddof 1.

    A sample of one value contributes no degrees of freedom. NaN when no sample has two values.
    """
    if not groups:
        raise ValueError("pooled_std needs at least one sample")
    ss = dof = 0.0
    for i, g in enumerate(groups):
        x = as_sample(g, f"sample {i}")
        if len(x) >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            dof += len(x) - 1
    return math.sqrt(ss / dof) if dof > 0 else float("nan")


def gap(a, b, lower_is_better: bool = True) -> float:
    """How much ``a`` beats ``b``: mean(b) − mean(a) when lower is better (perplexity, loss),
    mean(a) − mean(b) otherwise (accuracy). Positive means ``a`` is better."""
    xa, xb = as_sample(a, "a"), as_sample(b, "b")
    if not len(xa) or not len(xb):
        raise ValueError(f"gap needs values on both sides, got n={len(xa)} and n={len(xb)}")
    d = float(xb.mean() - xa.mean())
    return d if lower_is_better else -d


def margin(a, b, lower_is_better: bool = True, sigma: float | None = None) -> float:
    """:func:`gap` in units of ``sigma``; by default the pooled std of ``a`` and ``b``
    (:func:`pooled_std`). Pass ``sigma`` to use another noise scale, e.g. the pooled std over
    every configuration of a table. NaN when the σ is undefined (fewer than two values on both
    sides); ±inf when it is zero and the gap is not."""
    g = gap(a, b, lower_is_better)
    s = pooled_std(a, b) if sigma is None else float(sigma)
    if math.isnan(s):
        return float("nan")
    if s == 0:
        return 0.0 if g == 0 else math.copysign(math.inf, g)
    return g / s


@dataclass(frozen=True)
class WelchResult:
    """Welch's t-test of mean(a) − mean(b): statistic ``t``, Welch–Satterthwaite degrees of
    freedom ``dof``, two-sided (or one-sided, per ``alternative``) p-value ``p``."""

    t: float
    dof: float
    p: float
    alternative: str = "two-sided"


def welch_parts(a, b) -> tuple[float, float, float, int, int]:
    """(mean(a) − mean(b), its standard error √(s_a²/n_a + s_b²/n_b), the Welch–Satterthwaite
    degrees of freedom (inf with zero spread on both sides), n_a, n_b): what Welch's test and
    its t-interval (`analysis.statistics.decide.welch_interval`) share.  ``ValueError`` with fewer than two
    values on a side."""
    xa, xb = as_sample(a, "a"), as_sample(b, "b")
    if len(xa) < 2 or len(xb) < 2:
        raise ValueError(
            f"Welch's t-test needs at least 2 values per side, got n={len(xa)} and "
            f"n={len(xb)}: add seeds"
        )
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se2 = va + vb
    dof = se2**2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1)) if se2 > 0 else math.inf
    return float(xa.mean() - xb.mean()), math.sqrt(se2), float(dof), len(xa), len(xb)


def welch(a, b, alternative: str = "two-sided") -> WelchResult:
    """Welch's unequal-variance t-test of the means of ``a`` and ``b``.

    t = (x̄_a − x̄_b) / √(s_a²/n_a + s_b²/n_b), dof = (v_a + v_b)² / (v_a²/(n_a−1) + v_b²/(n_b−1))
    with v = s²/n (ddof 1), p from Student's t with that dof. ``alternative``: ``"two-sided"``,
    ``"less"`` (mean a < mean b) or ``"greater"``.

    Needs at least two values on each side (``ValueError`` otherwise). When both samples have zero
    spread: t = ±inf, p = 0 if the means differ; t = NaN, p = NaN if they are equal.
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative={alternative!r} must be 'two-sided', 'less' or 'greater'")
    diff, se, dof, _, _ = welch_parts(a, b)
    se2 = se**2
    if se2 == 0:
        if diff == 0:
            return WelchResult(float("nan"), float("nan"), float("nan"), alternative)
        t = math.copysign(math.inf, diff)
        if alternative == "two-sided":
            p = 0.0
        else:
            p = 0.0 if (t < 0) == (alternative == "less") else 1.0
        return WelchResult(t, float("nan"), p, alternative)
    t = diff / se
    if alternative == "two-sided":
        p = 2.0 * _st.t.sf(abs(t), dof)
    elif alternative == "less":
        p = _st.t.cdf(t, dof)
    else:
        p = _st.t.sf(t, dof)
    return WelchResult(float(t), float(dof), float(min(p, 1.0)), alternative)


def bootstrap_ci(
    a, b, n: int = 10_000, level: float = 0.95, seed: int = 0, lower_is_better: bool = True
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`gap` (a better than b).

    Each of ``n`` resamples draws len(a) values from ``a`` and len(b) from ``b`` with replacement
    (independently, ``numpy.random.default_rng(seed)``) and takes the gap of the means; the
    interval is the (1−level)/2 and (1+level)/2 quantiles of those gaps. With three seeds a side
    there are only 27 × 27 distinct resamples, so the interval is coarse: read it as a sketch.
    """
    xa, xb = as_sample(a, "a"), as_sample(b, "b")
    if not len(xa) or not len(xb):
        raise ValueError(
            f"bootstrap_ci needs values on both sides, got n={len(xa)} and n={len(xb)}"
        )
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must be in (0, 1), e.g. 0.95")
    if int(n) != n or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer number of resamples")
    rng = np.random.default_rng(seed)
    ma = xa[rng.integers(0, len(xa), size=(int(n), len(xa)))].mean(axis=1)
    mb = xb[rng.integers(0, len(xb), size=(int(n), len(xb)))].mean(axis=1)
    g = mb - ma if lower_is_better else ma - mb
    lo, hi = np.quantile(g, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
