"""The claims ledger's checks of the retrieval-probe claims (the paper's Table 2), on one tier
of probe records (`analysis.ledger.evidence.Tier`): best-distance accuracy over seeds, the α
drift from a uniform start (`lab.ladder.drift`, through `probes.record.alpha_drift`) and the α spread
from a staggered one.  A grid in which no cell retrieves labels a failure "at chance".
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from analysis.ledger.checks import AT_CHANCE, FAILED, RETRIEVED, SPREAD, Finding
from lab.ladder.drift import is_inert
from probes.record import alpha_drift as record_drift

__all__ = ["PROBE_CHECKS"]


def _cells(tier) -> dict:
    by = defaultdict(list)
    for r in tier.records:
        by[(int(r["depth"]), r["init"])].append(r)
    return by


def _best(rs) -> float:
    """The best-retrieved distance's accuracy, mean over seeds."""
    return max(float(np.mean([r["acc"][d] for r in rs])) for d in rs[0]["acc"])


def _keys(rs) -> list:
    return [r.get("key") or f"d{r['depth']}/{r['init']}/s{r['seed']}" for r in rs]


def _any_retrieves(by) -> bool:
    return any(max(r["acc"].values()) >= RETRIEVED for rs in by.values() for r in rs)


def _fails(depth_ok) -> callable:
    def check(tier) -> Finding | None:
        by = _cells(tier)
        cells = {d: rs for (d, i), rs in sorted(by.items()) if depth_ok(d, i)}
        if not cells:
            return None
        accs = {d: _best(rs) for d, rs in cells.items()}
        here = "best accuracy over the distances: " + ", ".join(
            f"depth {d} {a:.2f}" for d, a in accs.items()
        )
        keys = [k for rs in cells.values() for k in _keys(rs)]
        if max(accs.values()) >= FAILED:
            return Finding("did not hold", here, keys)
        if not _any_retrieves(by):
            return Finding(
                "not shown",
                here + "; no cell of this grid retrieves, so a failure says nothing",
                keys,
                label=AT_CHANCE,
            )
        return Finding("held", here, keys)

    return check


def _staggered_retrieves(tier) -> Finding | None:
    by = _cells(tier)
    cells = {d: by[(d, "staggered")] for d in (2, 4) if (d, "staggered") in by}
    if not cells:
        return None
    accs = {d: _best(rs) for d, rs in cells.items()}
    here = "best accuracy over the distances: " + ", ".join(
        f"depth {d} {a:.2f}" for d, a in accs.items()
    )
    if len(cells) < 2:
        here += " (one of depths 2 and 4 only)"
    keys = [k for rs in cells.values() for k in _keys(rs)]
    ok = min(accs.values()) >= RETRIEVED
    label = AT_CHANCE if max(accs.values()) < FAILED else None
    return Finding("held" if ok else "did not hold", here, keys, label=label)


def _inert_uniform(tier) -> Finding | None:
    by = _cells(tier)
    cells = {d: rs for (d, i), rs in sorted(by.items()) if i == "uniform"}
    drifts = {d: max(record_drift(r) for r in rs) for d, rs in cells.items()}
    drifts = {d: x for d, x in drifts.items() if not math.isnan(x)}
    if not drifts:
        return None
    here = "largest |α − α_init| over layers and logged steps: " + ", ".join(
        f"depth {d} {x:.3f}" for d, x in drifts.items()
    )
    ok = is_inert(max(drifts.values()))
    keys = [k for d in drifts for k in _keys(cells[d])]
    return Finding("held" if ok else "did not hold", here, keys, {"drift": drifts})


def _spread(tier) -> Finding | None:
    by = _cells(tier)
    cells = {d: rs for (d, i), rs in sorted(by.items()) if i == "staggered"}
    if not cells:
        return None
    ranges = {
        d: (min(a for r in rs for a in r["alphas"]), max(a for r in rs for a in r["alphas"]))
        for d, rs in cells.items()
    }
    here = "final α range: " + ", ".join(
        f"depth {d} {lo:.2f}–{hi:.2f}" for d, (lo, hi) in ranges.items()
    )
    ok = all(hi - lo >= SPREAD for lo, hi in ranges.values())
    return Finding(
        "held" if ok else "did not hold", here, [k for rs in cells.values() for k in _keys(rs)]
    )


def _specialises(tier) -> Finding | None:
    by = _cells(tier)
    rs = [r for d in (2, 4) for r in by.get((d, "staggered"), [])]
    if not rs:
        return None
    hits = [r for r in rs if max(r["acc"].values()) >= RETRIEVED]
    keys = _keys(rs)
    if not hits:
        return Finding(
            "not shown", "no staggered cell at depth 2 or 4 retrieves", keys, label=AT_CHANCE
        )
    one = [r for r in hits if min(r["acc"].values()) < FAILED]
    here = (
        f"{len(one)} of {len(hits)} retrieving cells serve one distance (the other < {FAILED}): "
        + "; ".join(
            f"d{r['depth']} s{r['seed']} " + "/".join(f"{a:.2f}" for a in r["acc"].values())
            for r in hits
        )
    )
    # the paper: it "tends to" specialise, so most retrieving cells must
    return Finding("held" if 2 * len(one) > len(hits) else "did not hold", here, _keys(hits))


PROBE_CHECKS = {
    "t2-inert-uniform": _inert_uniform,
    "t2-staggered-stays-spread": _spread,
    "t2-uniform-fails-deep": _fails(lambda d, i: i == "uniform" and d >= 4),
    "t2-staggered-retrieves": _staggered_retrieves,
    "t2-depth8-unsolved": _fails(lambda d, i: i == "staggered" and d >= 8),
    "t2-staggered-specialises": _specialises,
}
