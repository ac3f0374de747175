"""α drift: how far a layer's spacing scalar moved from where it started — one definition.

The paper calls learned α "inert" when it stays within 0.05 of its start.  Here, for one run:

    drift of layer l = max over logged steps t of |α_l(t) − α_l(init)|
    drift of the run = max over layers of the layer drifts
    inert            = drift ≤ tol (INERT_TOL = 0.05)

Every caller — the probe records (`probes.record.alpha_drift`), the trajectory frames of
`analysis.figures.trajectories`, the report's claims and the notebook's α panel — uses these functions,
so the report and the notebook give the same verdict on the same run.  A NaN α (a dense layer)
is skipped; a layer whose start is unknown (NaN / None) makes its drift, and the run's, NaN, and
the verdict None ("cannot tell").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["INERT_TOL", "layer_drifts", "alpha_drift", "is_inert"]

#: A learned α within this of its start is "inert" (the paper's wording for its probes).
INERT_TOL = 0.05


def _num(x) -> float:
    return math.nan if x is None else float(x)


def layer_drifts(
    points: Iterable[Sequence[float]], init: Sequence[float] | None
) -> dict[int, float]:
    """{layer: max over ``points`` (α per layer at each logged step) of |α − init[layer]|} for
    every layer with at least one finite α; NaN for a layer whose start is unknown."""
    out: dict[int, float] = {}
    for alphas in points:
        for layer, a in enumerate(alphas):
            a = _num(a)
            if math.isnan(a):
                continue
            a0 = _num(init[layer]) if init is not None and layer < len(init) else math.nan
            d = abs(a - a0)  # NaN when the start is unknown, and then it stays NaN
            prev = out.get(layer, d)
            out[layer] = math.nan if math.isnan(prev) or math.isnan(d) else max(prev, d)
    return out


def alpha_drift(points: Iterable[Sequence[float]], init: Sequence[float] | None = None) -> float:
    """The run's drift: max over layers and logged steps of |α − α_init|.

    ``init`` defaults to the first point (a probe's step 0).  0.0 when no layer has a finite α
    (dense attention); NaN when a start is unknown."""
    points = [list(p) for p in points]
    if init is None:
        init = points[0] if points else None
    d = layer_drifts(points, init).values()
    if any(math.isnan(x) for x in d):
        return math.nan
    return max(d, default=0.0)


def is_inert(drift: float, tol: float = INERT_TOL) -> bool | None:
    """Whether a drift is within ``tol``; None when the drift is unknown (NaN)."""
    if not tol >= 0:
        raise ValueError(f"tol={tol!r} must be a non-negative number (e.g. {INERT_TOL})")
    if drift is None or math.isnan(drift):
        return None
    return bool(drift <= tol)
