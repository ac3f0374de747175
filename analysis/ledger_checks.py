"""The claims ledger's checks of language-model claims (the probe's are `analysis.ledger_probe`,
the comparisons over seeds `analysis.ledger_compare`): one function a claim (by its id in
claims.toml), each deciding the claim on one tier of evidence (`analysis.ledger_evidence.Tier`).

A check returns a `Finding` — ``held``, ``did not hold`` or ``not shown`` (tested, not
decisive) with the numbers and the runs / cells it used — or None when the tier holds nothing
the claim reads.
A result at chance level carries ``label="at chance"`` and is never ``held``: a probe grid in
which no cell retrieves cannot show that an init fails, and a battery at chance cannot show a
capacity limit of the paper's models.  The thresholds below are the one definition the main
job's claim list (`analysis.claims`) uses too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import t as _t

from lab.drift import INERT_TOL, is_inert

__all__ = [
    "Finding",
    "LM_CHECKS",
    "AT_CHANCE",
    "RETRIEVED",
    "FAILED",
    "DEGRADES",
    "FLAT",
    "LITTLE",
    "SPREAD",
    "chance_band",
]

#: A probe distance counts as retrieved at this accuracy (chance is 1/n_payload ≈ 0.01) …
RETRIEVED = 0.5
#: … and as failed below this.
FAILED = 0.1
#: Perplexity change at the longest length (%) above which a model "degrades" …
DEGRADES = 10.0
#: … and within which it "keeps" its perplexity (the main job's claim list).
FLAT = 10.0
#: "Little or no degradation" at 4× (the ledger's `t3-sparse-flat`): at most the largest change
#: the paper itself still counts among its robust sparse models — coprime's +2.8 %, which it
#: calls "degrades mildly" (Table 3).
LITTLE = 2.8
#: A staggered probe's final α range at least this wide "stays spread" ([0.55, 1.45] is 0.9).
SPREAD = 0.7
AT_CHANCE = "at chance"


@dataclass
class Finding:
    verdict: str  # held | did not hold | not shown
    here: str  # the numbers, one line
    evidence: list = field(default_factory=list)  # run names / cell keys used
    stats: dict = field(default_factory=dict)
    label: str | None = None  # "at chance"
    # a comparison claim's pairs (`analysis.ledger_compare.Pair`), which the ledger re-decides
    # with the rest of their family; the text before their line, and the paper's relative gap
    tests: list = field(default_factory=list)
    head: str = ""
    rel_gap: float | None = None


# --------------------------------------------------------------------------------------------
# language models: length extrapolation, position bins, learned α
# --------------------------------------------------------------------------------------------
def _fmax(tier) -> int | None:
    return max((f for r in tier.lms for f in r.ext if f > 1), default=None)


def _change(tier, fmax) -> dict:
    """{label: (mean % ppl change from 1× to fmax×, runs, the runs' changes)}."""
    by = defaultdict(list)
    for r in tier.lms:
        base = r.ext.get(1, r.ppl)
        if fmax in r.ext and base and not math.isnan(base):
            by[r.label].append((r.name, 100.0 * (r.ext[fmax] / base - 1)))
    return {
        k: (float(np.mean([c for _, c in v])), [n for n, _ in v], [c for _, c in v])
        for k, v in by.items()
    }


def paper_changes() -> dict[str, list[float]]:
    """The paper's % ppl change at 4× per configuration (Table 3, FineWeb-Edu; a configuration
    at two W has two)."""
    from analysis.paper import length_extrapolation

    out = defaultdict(list)
    for r in length_extrapolation().to_dict("records"):
        out[r["model"]].append(float(r["change_at_4x_percent"]))
    return dict(out)


def _paper_words(labels) -> str:
    pc = paper_changes()
    shown = [
        f"{k} " + "/".join(f"{c:+.1f}" for c in pc[k]) + " %" for k in sorted(labels) if k in pc
    ]
    return "; the paper's at 4× (Table 3): " + ", ".join(shown) if shown else ""


def _extrap(tier, rule) -> Finding | None:
    """A Table 3 claim on one tier: ``rule(changes, factor)`` gives (verdict, runs) or
    (verdict, runs, note, stats); the paper's own changes are shown beside ours."""
    fmax = _fmax(tier)
    if fmax is None:
        return None
    ch = _change(tier, fmax)
    got = rule(ch, fmax)
    if got is None:
        return None
    verdict, runs, note, extra = (*got, "", {})[:4]
    here = f"ppl change 1× → {fmax}× (rungs recomputed): " + ", ".join(
        f"{k} {v[0]:+.1f} %" for k, v in sorted(ch.items())
    )
    here += _paper_words(ch) + note
    if fmax < 4 and verdict != "did not hold":
        verdict, here = "not shown", here + f" (only {fmax}× evaluated, the paper's claim is at 4×)"
    return Finding(
        verdict, here, runs, {"factor": fmax, **{k: v[0] for k, v in ch.items()}, **extra}
    )


def magnitude(paper: float, values) -> tuple[str, list | None]:
    """Whether the paper's number lies inside the 95 % t-interval of our ``values`` (≥ 2 of
    them): ("inside" | "outside", [low, high]); one value: ("n/a", None)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return "n/a", None
    h = float(_t.ppf(0.975, len(x) - 1)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    lo, hi = float(x.mean()) - h, float(x.mean()) + h
    return ("inside" if lo <= paper <= hi else "outside"), [lo, hi]


def _dense_degrades(ch, fmax):
    """Degrades: dense's change above `DEGRADES` (the verdict); the paper's +201 % reported
    beside, inside or outside our interval over dense runs (at 4× only)."""
    if "dense" not in ch:
        return None
    (paper,) = paper_changes()["dense"]
    mag, ci = magnitude(paper, ch["dense"][2]) if fmax == 4 else ("n/a", None)
    where = {"n/a": "no interval (one run, or not at 4×)", "inside": "inside", "outside": "outside"}
    note = f"; the paper's +{paper:.0f} % vs ours: {where[mag]}" + (
        "" if ci is None else f" our 95 % interval [{ci[0]:+.1f}, {ci[1]:+.1f}] %"
    )
    verdict = "held" if ch["dense"][0] > DEGRADES else "did not hold"
    stats = {"paper_change": paper, "magnitude": mag, "ci": ci}
    return verdict, ch["dense"][1], note, stats


def _sparse_flat(ch, fmax):
    """All sparse variants, as the abstract and §4.5 say: each within `LITTLE` of no change;
    each of ours reported inside or outside the paper's Fibonacci range (−1.3…+2.8 %)."""
    sp = {k: v for k, v in ch.items() if k != "dense" and "=" not in k}
    if not sp:
        return None
    fib = [c for k, cs in paper_changes().items() if k.startswith("fib/") for c in cs]
    lo, hi = min(fib), max(fib)
    inside = {k: bool(lo <= v[0] <= hi) for k, v in sp.items()}
    ok = all(v[0] <= LITTLE for v in sp.values())
    note = f"; ours in the paper's Fibonacci range {lo:+.1f}…{hi:+.1f} %: " + ", ".join(
        f"{k} {'yes' if i else 'no'}" for k, i in sorted(inside.items())
    )
    stats = {"paper_range": [lo, hi], "inside_paper_range": inside, "little": LITTLE}
    return ("held" if ok else "did not hold"), [n for v in sp.values() for n in v[1]], note, stats


def _pow2_degrades(ch, fmax):
    fib = {k: v for k, v in ch.items() if k.startswith("fib/")}
    if "pow2/fixed" not in ch or not fib:
        return None
    ok = ch["pow2/fixed"][0] > max(v[0] for v in fib.values())
    return ("held" if ok else "did not hold"), ch["pow2/fixed"][1] + [
        n for v in fib.values() for n in v[1]
    ]


def _coprime_less_robust(ch, fmax):
    if "fib/coprime" not in ch or "fib/stagger" not in ch:
        return None
    ok = ch["fib/coprime"][0] > ch["fib/stagger"][0]
    return ("held" if ok else "did not hold"), ch["fib/coprime"][1] + ch["fib/stagger"][1]


def _dense_behind_2x(tier) -> Finding | None:
    ppl2 = defaultdict(list)
    for r in tier.lms:
        if 2 in r.ext:
            ppl2[r.label].append((r.name, r.ext[2]))
    if "dense" not in ppl2 or len(ppl2) < 2:
        return None
    m = {k: float(np.mean([p for _, p in v])) for k, v in ppl2.items()}
    ok = all(m["dense"] > v for k, v in m.items() if k != "dense")
    here = "ppl at 2×: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(m.items()))
    return Finding("held" if ok else "did not hold", here, [n for v in ppl2.values() for n, _ in v])


def _bins_gap(tier):
    b = defaultdict(list)
    for r in tier.lms:
        if r.bins:
            b[r.label].append(r)
    if not (b.get("fib/stagger") and b.get("fib/fixed")):
        return None
    gap = np.mean([r.bins for r in b["fib/fixed"]], axis=0) - np.mean(
        [r.bins for r in b["fib/stagger"]], axis=0
    )
    return gap, [r.name for r in b["fib/fixed"] + b["fib/stagger"]]


def _every_bin(tier) -> Finding | None:
    got = _bins_gap(tier)
    if got is None:
        return None
    gap, runs = got
    here = "fixed − stagger NLL per bin (nats): " + ", ".join(f"{g:+.3f}" for g in gap)
    return Finding("held" if (gap > 0).all() else "did not hold", here, runs, {"gap": list(gap)})


def _not_long_range(tier) -> Finding | None:
    got = _bins_gap(tier)
    if got is None:
        return None
    gap, runs = got
    late = gap[1:]
    slope = float(np.polyfit(np.arange(len(late)), late, 1)[0]) if len(late) > 1 else 0.0
    rise = slope * (len(late) - 1)
    here = (
        f"fixed − stagger over bins 1…{len(gap) - 1}: mean {late.mean():+.3f} nats, change "
        f"along the window {rise:+.3f}"
    )
    if late.mean() <= 0:
        return Finding("not shown", here + " (no gain here to locate)", runs)
    grows = rise > max(0.01, 0.5 * late.mean())
    return Finding("did not hold" if grows else "held", here, runs, {"rise": rise})


def _lm_inert(tier) -> Finding | None:
    runs = [r for r in tier.lms if r.drift is not None and not math.isnan(r.drift)]
    if not runs:
        return None
    dev = max(r.drift for r in runs)
    return Finding(
        "held" if is_inert(dev) else "did not hold",
        f"largest |α − α_init| over layers and logged steps: {dev:.3f} (inert: ≤ {INERT_TOL})",
        [r.name for r in runs],
        {"drift": dev},
    )


def _same_tokens(tier) -> Finding | None:
    ec = defaultdict(list)
    for r in tier.lms:
        if r.same_tokens is not None:
            ec[r.label].append(r.same_tokens)
    sp = {k: float(np.mean(v)) for k, v in ec.items() if k != "dense"}
    if not sp:
        return None
    here = "ppl of the later blocks vs the same tokens alone: " + ", ".join(
        f"{k} {float(np.mean(v)):+.1f} %" for k, v in sorted(ec.items())
    )
    runs = [r.name for r in tier.lms if r.same_tokens is not None]
    return Finding("held" if all(v < 1.0 for v in sp.values()) else "did not hold", here, runs)


def _frozen(tier) -> Finding | None:
    fg = defaultdict(list)
    for r in tier.lms:
        both = [f for f in r.ext if f > 1 and f in r.frozen]
        if both:
            f = max(both)
            fg[r.label].append(100.0 * (r.ext[f] / r.frozen[f] - 1))
    if not fg:
        return None
    m = {k: float(np.mean(v)) for k, v in fg.items()}
    here = "ppl(recomputed) / ppl(frozen) − 1 at the longest length: " + ", ".join(
        f"{k} {v:+.2f} %" for k, v in sorted(m.items())
    )
    runs = [r.name for r in tier.lms if any(f in r.frozen for f in r.ext if f > 1)]
    return Finding("held" if all(abs(v) < 1.0 for v in m.values()) else "did not hold", here, runs)


def chance_band(chance: float, n: int) -> float:
    """Three binomial standard errors of an accuracy at ``chance`` over ``n`` items."""
    return 3 * math.sqrt(chance * (1 - chance) / n)


def _battery(task: str):
    def check(tier) -> Finding | None:
        rows = [(r.name, r.battery[task]) for r in tier.lms if r.battery and task in r.battery]
        if not rows:
            return None
        ch, n = rows[0][1]["chance"], rows[0][1]["n"]
        tol = chance_band(ch, n)
        accs = [b["acc"] for _, b in rows]
        # the battery's own chance test where the store has one, else 3 standard errors
        near = all(
            b["at_chance"] if "at_chance" in b else abs(b["acc"] - ch) <= tol for _, b in rows
        )
        here = (
            f"accuracy {min(accs):.3f}–{max(accs):.3f} over {len(rows)} runs vs chance {ch:.3f} "
            f"(±{tol:.3f} = 3 standard errors, n={n})"
        )
        if near:
            return Finding("not shown", here, [r for r, _ in rows], label=AT_CHANCE)
        return Finding("did not hold", here, [r for r, _ in rows])

    return check


LM_CHECKS = {
    "t3-dense-degrades": lambda t: _extrap(t, _dense_degrades),
    "t3-sparse-flat": lambda t: _extrap(t, _sparse_flat),
    "t3-pow2-degrades": lambda t: _extrap(t, _pow2_degrades),
    "t3-coprime-less-robust": lambda t: _extrap(t, _coprime_less_robust),
    "t3-dense-behind-at-2x": _dense_behind_2x,
    "t4-stagger-below-fixed-every-bin": _every_bin,
    "t4-gain-not-long-range": _not_long_range,
    "lm-learned-alpha-inert": _lm_inert,
    "lab-same-tokens-context": _same_tokens,
    "lab-frozen-rungs": _frozen,
    "bat-ruler-chance": _battery("ruler_vt"),
    "bat-lego-chance": _battery("lego"),
}
