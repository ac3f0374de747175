"""The claims ledger's checks of language-model claims (the probe's are `analysis.ledger.probe`,
the comparisons over seeds `analysis.ledger.compare`): one function a claim (by its id in
claims.toml), each deciding the claim on one tier of evidence (`analysis.ledger.evidence.Tier`).

A check returns a `Finding` — ``held``, ``did not hold`` or ``not shown`` (tested, not
decisive) with the numbers and the runs / cells it used — or None when the tier holds nothing
the claim reads.  A language-model claim about means over runs is decided by a test, never by
the means alone (`_tested`): each part is a registered one-sided test (`_above`: one-sample t
against the threshold, or Welch between configurations; its reversal the test against), carried
as a `Pair` so the ledger adjusts it with every test on the same runs (protocol v2, R1–R2);
*held* when every part holds (intersection–union), *did not hold* on a significant reversal or
a missed paper size (R3), else *not shown*; one run a side is no test.
A result at chance level carries ``label="at chance"`` and is never ``held``: a probe grid in
which no cell retrieves cannot show that an init fails, and a battery at chance cannot show a
capacity limit of the paper's models.  The thresholds below are the one definition of each
(claims.toml's ``[protocol] thresholds`` registers them; a test pins one to the other).  The
module passes 450 lines by the test builders `_above` / `_tested`, kept beside the ten checks
that are their only callers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import t as _t

from analysis.statistics.decide import Comparison, Decision
from lab.ladder.drift import INERT_TOL, is_inert

__all__ = [
    "Finding",
    "Pair",
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
#: The lab's same-tokens finding: the later blocks cost under this (% ppl) against the same
#: tokens alone; and its frozen-rungs finding: the never-trained rungs move ppl under this (%).
SAME_TOKENS = 1.0
FROZEN = 1.0
AT_CHANCE = "at chance"


@dataclass
class Finding:
    verdict: str  # held | did not hold | not shown
    here: str  # the numbers, one line
    evidence: list = field(default_factory=list)  # run names / cell keys used
    stats: dict = field(default_factory=dict)
    label: str | None = None  # "at chance"
    # a comparison claim's pairs (`analysis.ledger.compare.Pair`), which the ledger re-decides
    # with the rest of their family; the text before their line, and the paper's relative gap
    tests: list = field(default_factory=list)
    head: str = ""
    rel_gap: float | None = None
    # "pairs": the line is the deciding pair's numbers (`analysis.ledger.compare`); "own": the
    # check's own text (``head``), the decision's words appended once the family is adjusted
    style: str = "pairs"


@dataclass(frozen=True)
class Pair:
    """One comparison of a claim: ``a`` against ``b`` (at window ``W``; None: any), their runs as
    (name, ppl), the `Comparison` on the protocol's metric and, once decided, its `Decision`."""

    a: str
    b: str
    W: int | None
    ra: tuple
    rb: tuple
    comparison: Comparison
    decision: Decision | None = None


# --------------------------------------------------------------------------------------------
# the test behind a claim about means
# --------------------------------------------------------------------------------------------
#: The family a threshold rule's tests start in; the ledger moves every test into the family of
#: the data it reads (`analysis.ledger.ledger.adjust`).
THRESHOLD_FAMILY = "threshold"


def _above(
    a: str,
    b: str,
    x,
    ref: float | None = None,
    y=None,
    metric: str = "value",
    paper: float | None = None,
) -> tuple:
    """One registered one-sided test of a threshold rule: mean(x) above ``ref`` (one-sample t)
    or above mean(y) (Welch), its reversal the test against; ``paper``: the paper's size in the
    same units (its value minus ``ref``), for the magnitude rule.  (a, b, `Comparison`)."""
    from analysis.statistics.decide import Protocol, compare, compare_to

    pr = Protocol(THRESHOLD_FAMILY, "welch", "one", paper_effect=paper, metric=metric)
    x = [float(v) for v in x]
    if y is None:
        return a, b, compare_to(x, float(ref), pr)
    return a, b, compare(x, [float(v) for v in y], pr, lower_is_better=False)


def _tested(components: list[tuple]) -> tuple[str, dict, list]:
    """The verdict of a claim made of one-sided tests (`_above`), decided first as a family of
    its own (the ledger then adjusts them with every test on the same data): *held* when every
    one holds (intersection–union), *did not hold* when one is significantly reversed or
    misses the paper's size, else *not shown*.  Returns (verdict, stats, the tests as
    `analysis.ledger.compare.Pair` s)."""
    from analysis.statistics.decide import settle

    pairs = [Pair(a, b, None, (), (), c) for a, b, c in components]
    decisions = settle([p.comparison for p in pairs])  # settle([]) is []
    verdicts = [d.verdict for d in decisions]
    stats = {
        "test": "one-sided t, intersection–union; Holm over the family of its data",
        "p_for": [p.comparison.p_raw for p in pairs],
        "p_reversed": [p.comparison.p_against for p in pairs],
    }
    if not pairs or not all(p.comparison.tested for p in pairs):
        return "not shown", stats, pairs
    if "did not hold" in verdicts:
        return "did not hold", stats, pairs
    if all(v == "held" for v in verdicts):
        return "held", stats, pairs
    return "not shown", stats, pairs


def _p_words(stats: dict) -> str:
    ps = stats.get("p_for") or []
    if not ps or any(math.isnan(p) for p in ps):
        return "; no test (fewer than 2 runs a side, or no spread)"
    return "; one-sided p " + ", ".join(f"{p:.2g}" for p in ps)


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
    from analysis.published.paper import length_extrapolation

    out = defaultdict(list)
    for r in length_extrapolation().to_dict("records"):
        out[r["model"]].append(float(r["change_at_4x_percent"]))
    return dict(out)


def _paper_words(labels) -> str:
    """The paper's Table 3 change at 4× of each of ``labels`` it has, its W named where it has
    two rows (fib/stagger at W = 12 and 8)."""
    from analysis.published.paper import length_extrapolation

    rows = defaultdict(list)
    for r in length_extrapolation().to_dict("records"):
        rows[r["model"]].append((float(r["change_at_4x_percent"]), r["W"]))
    shown = [
        f"{k} "
        + (f"{rows[k][0][0]:+.1f} %" if len(rows[k]) == 1
           else " / ".join(f"{c:+.1f} % (W={int(w)})" for c, w in rows[k]))
        for k in sorted(labels)
        if k in rows
    ]  # fmt: skip
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
    verdict, runs, note, extra, tests = (*got, "", {}, [])[:5]
    here = f"ppl change 1× → {fmax}× (rungs recomputed): " + ", ".join(
        f"{k} {v[0]:+.1f} %" for k, v in sorted(ch.items())
    )
    here += _paper_words(ch) + note
    stats = {"factor": fmax, **{k: v[0] for k, v in ch.items()}, **extra}
    if fmax < 4:  # the paper's claim is at 4×: no registered test here
        return Finding("not shown", here + f" (only {fmax}× evaluated, the claim is at 4×)", runs,
                       stats)  # fmt: skip
    return Finding(verdict, here, runs, stats, tests=tests, head=here, style="own")


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
    x = ch["dense"][2]
    size = paper - DEGRADES if fmax == 4 else None  # the paper's size, above the threshold
    verdict, tst, tests = _tested(
        [_above("dense", f"+{DEGRADES:g} %", x, DEGRADES, metric="pct_change", paper=size)]
    )
    stats = {"paper_change": paper, "magnitude": mag, "change_ci": ci, **tst}
    note += f" (vs +{DEGRADES:g} %" + _p_words(tst) + ")"
    return verdict, ch["dense"][1], note, stats, tests


def _sparse_flat(ch, fmax):
    """All sparse variants, as the abstract and §4.5 say: each within `LITTLE` of no change;
    each of ours reported inside or outside the paper's Fibonacci range (−1.3…+2.8 %)."""
    sp = {k: v for k, v in ch.items() if k != "dense" and "=" not in k}
    if not sp:
        return None
    fib = [c for k, cs in paper_changes().items() if k.startswith("fib/") for c in cs]
    lo, hi = min(fib), max(fib)
    inside = {k: bool(lo <= v[0] <= hi) for k, v in sp.items()}
    labels = sorted(sp)
    verdict, tst, tests = _tested(
        [
            _above(k, f"−{LITTLE:g} %", [-c for c in sp[k][2]], -LITTLE, metric="-pct_change")
            for k in labels
        ]
    )
    note = f"; ours in the paper's Fibonacci range {lo:+.1f}…{hi:+.1f} %: " + ", ".join(
        f"{k} {'yes' if i else 'no'}" for k, i in sorted(inside.items())
    )
    note += f" (each below +{LITTLE:g} %, {', '.join(labels)}" + _p_words(tst) + ")"
    stats = {"paper_range": [lo, hi], "inside_paper_range": inside, "little": LITTLE, **tst}
    return verdict, [n for v in sp.values() for n in v[1]], note, stats, tests


def _pow2_degrades(ch, fmax):
    fib = {k: v for k, v in ch.items() if k.startswith("fib/")}
    if "pow2/fixed" not in ch or not fib:
        return None
    p2 = ch["pow2/fixed"][2]
    verdict, tst, tests = _tested(
        [_above("pow2/fixed", k, p2, y=fib[k][2], metric="pct_change") for k in sorted(fib)]
    )
    runs = ch["pow2/fixed"][1] + [n for v in fib.values() for n in v[1]]
    # "tested here", so the test does not read as the paper's numbers just before it
    note = f"; tested here: pow2/fixed above {', '.join(sorted(fib))}" + _p_words(tst)
    return verdict, runs, note, tst, tests


def _coprime_less_robust(ch, fmax):
    if "fib/coprime" not in ch or "fib/stagger" not in ch:
        return None
    co, st = ch["fib/coprime"][2], ch["fib/stagger"][2]
    verdict, tst, tests = _tested([_above("fib/coprime", "fib/stagger", co, y=st,
                                         metric="pct_change")])  # fmt: skip
    runs = ch["fib/coprime"][1] + ch["fib/stagger"][1]
    return verdict, runs, "; tested here: coprime above stagger" + _p_words(tst), tst, tests


def _dense_behind_2x(tier) -> Finding | None:
    ppl2 = defaultdict(list)
    for r in tier.lms:
        if 2 in r.ext:
            ppl2[r.label].append((r.name, r.ext[2]))
    if "dense" not in ppl2 or len(ppl2) < 2:
        return None
    m = {k: float(np.mean([p for _, p in v])) for k, v in ppl2.items()}
    ln = {k: [math.log(p) for _, p in v] for k, v in ppl2.items()}  # compared as ln ppl
    others = sorted(k for k in ln if k != "dense")
    verdict, tst, tests = _tested(
        [_above("dense", k, ln["dense"], y=ln[k], metric="log_ppl") for k in others]
    )
    here = "ppl at 2×: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(m.items()))
    here += " (dense above each" + _p_words(tst) + ")"
    runs = [n for v in ppl2.values() for n, _ in v]
    return Finding(verdict, here, runs, tst, tests=tests, head=here, style="own")


def _bins(tier):
    """(fixed's runs' bin losses (runs, bins), the stagger's, the runs) or None."""
    b = defaultdict(list)
    for r in tier.lms:
        if r.bins:
            b[r.label].append(r)
    if not (b.get("fib/stagger") and b.get("fib/fixed")):
        return None
    fx = np.array([r.bins for r in b["fib/fixed"]], dtype=float)  # (runs, bins)
    st = np.array([r.bins for r in b["fib/stagger"]], dtype=float)  # (runs, bins)
    return fx, st, [r.name for r in b["fib/fixed"] + b["fib/stagger"]]


def _every_bin(tier) -> Finding | None:
    """Lower loss in every bin: each bin's one-sided Welch test (fixed above stagger)."""
    got = _bins(tier)
    if got is None:
        return None
    fx, st, runs = got
    gap = fx.mean(0) - st.mean(0)
    verdict, tst, tests = _tested(
        [
            _above("fib/fixed", "fib/stagger", fx[:, j], y=st[:, j], metric=f"nll_bin{j}")
            for j in range(len(gap))
        ]
    )
    here = "fixed − stagger NLL per bin (nats): " + ", ".join(f"{g:+.3f}" for g in gap)
    here += _p_words(tst)
    return Finding(verdict, here, runs, {"gap": list(gap), **tst}, tests=tests, head=here,
                   style="own")  # fmt: skip


def _not_long_range(tier) -> Finding | None:
    """The gain is not long-range: it does not grow along the window. Tested as the per-run
    slope of the loss over bins 1…: the gain grows when fixed's slope is significantly above
    the stagger's (did not hold). "Held" would need an equivalence margin the paper does not
    give, so absence of growth is *not shown*; with no gain to locate, not shown too."""
    got = _bins(tier)
    if got is None:
        return None
    fx, st, runs = got
    gap = fx.mean(0) - st.mean(0)
    late = gap[1:]
    x = np.arange(late.shape[0])
    if len(late) < 2:
        return None
    slope = lambda m: np.polyfit(x, m[:, 1:].T, 1)[0] * (len(late) - 1)  # noqa: E731 (runs,)
    sf, ss = slope(fx), slope(st)
    rise = float(sf.mean() - ss.mean())
    here = (
        f"fixed − stagger over bins 1…{len(gap) - 1}: mean {late.mean():+.3f} nats, change "
        f"along the window {rise:+.3f}"
    )
    if late.mean() <= 0:
        return Finding("not shown", here + " (no gain here to locate)", runs)
    # the registered test refutes only: the stagger's slope against fixed's, the growth of the
    # gain (fixed's slope above) its test against; nothing can hold it (no margin)
    a, b, c = _above("fib/stagger", "fib/fixed", ss, y=sf, metric="slope")
    c = replace(c, p_raw=math.nan)
    p = math.nan if c.p_against is None else c.p_against
    stats = {"rise": rise, "p_grows": p, "test": "one-sided Welch on per-run slopes"}
    words = "no test" if p is None or math.isnan(p) else f"growth p {p:.2g}"
    head = here + f"; {words} (a tie needs a margin the paper does not give)"
    verdict, _, tests = _tested([(a, b, c)])
    verdict = "did not hold" if verdict == "did not hold" else "not shown"
    return Finding(verdict, head, runs, stats, tests=tests, head=head, style="own")


def _lm_inert(tier) -> Finding | None:
    """Learned α stays within `INERT_TOL` of its start: each run's largest |α − α_init| (over
    layers and logged steps) below the threshold, a one-sided one-sample t over runs; the
    largest of all is reported beside (and whether it alone is inert)."""
    runs = [r for r in tier.lms if r.drift is not None and not math.isnan(r.drift)]
    if not runs:
        return None
    dev = max(r.drift for r in runs)
    verdict, tst, tests = _tested(
        [
            _above(
                "fib/learned",
                f"{INERT_TOL:g}",
                [-r.drift for r in runs],
                -INERT_TOL,
                metric="-alpha_drift",
            )
        ]  # fmt: skip
    )
    here = (
        f"largest |α − α_init| over layers and logged steps: {dev:.3f} over {len(runs)} runs "
        f"(inert: ≤ {INERT_TOL}; every run {'is' if is_inert(dev) else 'is not'})" + _p_words(tst)
    )
    stats = {"drift": dev, **tst}
    return Finding(verdict, here, [r.name for r in runs], stats, tests=tests, head=here,
                   style="own")  # fmt: skip


def _same_tokens(tier) -> Finding | None:
    """Each sparse configuration's later blocks cost under 1 % against the same tokens alone:
    a one-sided one-sample t per configuration (intersection–union)."""
    ec = defaultdict(list)
    for r in tier.lms:
        if r.same_tokens is not None:
            ec[r.label].append(r.same_tokens)
    sp = sorted(k for k in ec if k != "dense")
    if not sp:
        return None
    verdict, tst, tests = _tested(
        [_above(k, "−1 %", [-v for v in ec[k]], -SAME_TOKENS, metric="-pct_change") for k in sp]
    )
    here = "ppl of the later blocks vs the same tokens alone: " + ", ".join(
        f"{k} {float(np.mean(v)):+.1f} %" for k, v in sorted(ec.items())
    )
    here += _p_words(tst)
    runs = [r.name for r in tier.lms if r.same_tokens is not None]
    return Finding(verdict, here, runs, tst, tests=tests, head=here, style="own")


def _frozen(tier) -> Finding | None:
    """The never-trained rungs change perplexity by under 1 % either way, per configuration:
    two one-sided one-sample t tests each (inside ±1 %), intersection–union over both sides
    and every configuration."""
    fg = defaultdict(list)
    for r in tier.lms:
        both = [f for f in r.ext if f > 1 and f in r.frozen]
        if both:
            f = max(both)
            fg[r.label].append(100.0 * (r.ext[f] / r.frozen[f] - 1))
    if not fg:
        return None
    m = {k: float(np.mean(v)) for k, v in fg.items()}
    parts = []
    for k in sorted(fg):
        v = fg[k]
        parts.append(_above(k, "+1 %", [-x for x in v], -FROZEN, metric="-pct_change"))
        parts.append(_above(k, "−1 %", v, -FROZEN, metric="pct_change"))
    verdict, tst, tests = _tested(parts)
    here = "ppl(recomputed) / ppl(frozen) − 1 at the longest length: " + ", ".join(
        f"{k} {v:+.2f} %" for k, v in sorted(m.items())
    )
    here += _p_words(tst)
    runs = [r.name for r in tier.lms if any(f in r.frozen for f in r.ext if f > 1)]
    return Finding(verdict, here, runs, tst, tests=tests, head=here, style="own")


def chance_band(chance: float, n: int) -> float:
    """Three binomial standard errors of an accuracy at ``chance`` over ``n`` items."""
    return 3 * math.sqrt(chance * (1 - chance) / n)


def _battery(tier, task: str) -> Finding | None:
    """A battery task at chance for every run (`chance_band`, or the battery's own test)."""
    rows = [(r.name, r.battery[task]) for r in tier.lms if r.battery and task in r.battery]
    if not rows:
        return None
    ch, n = rows[0][1]["chance"], rows[0][1]["n"]
    tol = chance_band(ch, n)
    accs = [b["acc"] for _, b in rows]
    # the battery's own chance test where the store has one, else 3 standard errors
    tested = [b for _, b in rows if "at_chance" in b]
    near = all(b["at_chance"] if "at_chance" in b else abs(b["acc"] - ch) <= tol for _, b in rows)
    here = f"accuracy {min(accs):.3f}–{max(accs):.3f} over {len(rows)} runs vs chance {ch:.3f} "
    if tested:  # say what decided: a run inside the band may still be above by the binomial test
        above = sum(not b["at_chance"] for b in tested)
        here += (
            f"(n={n}): {above} of {len(tested)} runs above chance by the battery's one-sided "
            "binomial test at 0.05, each run on its own (no control over the runs' family)"
        )
    else:
        here += f"(±{tol:.3f} = 3 standard errors, n={n})"
    if near:
        return Finding("not shown", here, [r for r, _ in rows], label=AT_CHANCE)
    return Finding("did not hold", here, [r for r, _ in rows])


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
    # checks built at call time (a lambda, not a closure made at import): a test then reaches
    # the code it runs (a mutation tool cannot reach a closure built before it switched a mutant)
    "bat-ruler-chance": lambda t: _battery(t, "ruler_vt"),
    "bat-lego-chance": lambda t: _battery(t, "lego"),
    "bat-assoc-recall-zero": lambda t: _battery(t, "assoc_recall"),
}
