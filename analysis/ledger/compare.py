"""The claims ledger's language-model comparisons over seeds: "a beats b", "a ties b", and the
rankings ("the best sparse model is the stagger", "dense is best"), each tested as registered in
claims.toml and decided by the rules of `analysis.statistics.decide`.

A claim's protocol (`protocol`) comes from its toml entry: ``metric`` (``log_ppl``: the values
compared are ln perplexity, nats per token, so a gap is ≈ a relative gap and the paper's gap
carries to runs of another scale), ``sided``, ``margin`` (a tie's), ``paper_effect`` and
``family``. A check returns a `Finding` whose ``tests`` are its `Pair` s — one comparison per
window W (``scope="every"``), the W with the most seeds (``"seeds"``), every W but that one
(``"grid"``: Table 1's claim whose W with the most seeds its Table 5 twin decides, so the same
runs are never one test counted twice), or one per rival of a ranking — decided first as a
family of their own; `analysis.ledger.ledger.adjust` then re-decides them with every test on the
same tier's runs (the family is the data; `finish` on the adjusted decisions; the toml's
``family`` names the table a claim comes from). A ranking's ``paper_effect``
is the paper's gap to its nearest rival (dense against the best sparse model: the 26 %), so it
applies to that pair only; the other pairs test the order. The ``additive`` mode (the 2×2 of
base × schedule) is `analysis.ledger.across.additive`, whose contrast joins its data's family.

A claim of several pairs holds when every pair holds (each W, each rival: an intersection–union
test, which needs no correction across its own pairs — the family's Holm makes it conservative),
does not hold when any pair does not, and is not shown otherwise.  Runs labelled
``…/coprime=stagger`` (`analysis.ledger.evidence.run_label`: the same model as the stagger) are
never compared and never ranked.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from analysis.ledger.across import additive
from analysis.ledger.checks import Finding, Pair
from analysis.ledger.evidence import runs_by_window
from analysis.statistics.decide import Decision, Protocol, compare, settle, tie_power
from analysis.statistics.power import plan
from analysis.statistics.stats import pooled_std, summary

__all__ = [
    "MODES",
    "MAGNITUDE",
    "protocol",
    "pairwise",
    "ranking",
    "finish",
    "comparison_check",
]

#: compare modes of claims.toml tested by this module: pairwise, and rankings.
MODES = ("beats", "ties", "best", "worst", "best-vs-sparse", "additive")
#: The label of a comparison that did not hold because the paper's effect lies outside the
#: interval: the verdict reads "did not hold (magnitude not reproduced)".
MAGNITUDE = "magnitude not reproduced"


def protocol(claim: dict) -> Protocol | None:
    """The registered test of a comparison claim (None for a claim of another kind). A
    comparison claim without a ``family`` is an error: its test must be registered."""
    cmp = claim.get("compare")
    if not cmp or cmp[2] not in MODES:
        return None
    if "family" not in claim:
        raise ValueError(
            f"claim {claim['id']!r} compares runs but registers no family (claims.toml: add "
            f"family, sided, paper_effect and, for a tie, margin)"
        )
    return Protocol(
        family=claim["family"],
        test="tost" if cmp[2] in ("ties", "additive") else "welch",
        sided=claim.get("sided", "two"),
        margin=claim.get("margin"),
        paper_effect=claim.get("paper_effect"),
        metric=claim.get("metric", "log_ppl"),
    )


def _values(runs, metric: str) -> list[float]:
    ppl = [p for _, p in runs]
    return [math.log(p) for p in ppl] if metric == "log_ppl" else ppl


def _pair(a, b, W, ra, rb, pr: Protocol) -> Pair:
    c = compare(_values(ra, pr.metric), _values(rb, pr.metric), pr)
    return Pair(a, b, W, tuple(ra), tuple(rb), c)


def _fmt(x, d=2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def _line(p: Pair, rel_gap: float | None) -> tuple[str, dict]:
    """(the pair's numbers in one line, its stats record)."""
    xa, xb = [v for _, v in p.ra], [v for _, v in p.rb]
    da, db = summary(xa), summary(xb)
    c, d = p.comparison, p.decision
    sigma = pooled_std(xa, xb)
    gap = db["mean"] - da["mean"]  # ppl, positive: a better
    pw, tie = None, tie_power(c)  # a tie's power is its TOST's, not a gap's (`tie_power`)
    if (
        tie is None
        and rel_gap
        and sigma > 0
        and math.isfinite(sigma)
        and min(len(xa), len(xb)) >= 2
    ):
        pw = plan(rel_gap, db["mean"], sigma, seeds=len(xa), seeds_b=len(xb))
    stats = {
        "a": p.a,
        "b": p.b,
        "W": p.W,
        "mean_a": da["mean"],
        "std_a": da["std"],
        "mean_b": db["mean"],
        "std_b": db["std"],
        "gap": gap,
        "margin_sigma": gap / sigma if sigma > 0 else math.nan,
        "paper_rel_gap": rel_gap,
        "power": tie[0] if tie else pw.achieved if pw else None,
        "seeds_needed": tie[1] if tie else pw.needed if pw else None,
        "power_of": "a tie" if tie else "the paper's gap" if pw else None,
        **d.stats(),
    }
    w = "" if p.W is None else f" at W={p.W}"
    unit = " nats" if c.protocol.metric == "log_ppl" else ""
    line = (
        f"{p.a} {_fmt(da['mean'])} ± {_fmt(da['std'])} (n={da['n']}) vs {p.b} "
        f"{_fmt(db['mean'])} ± {_fmt(db['std'])} (n={db['n']}){w}: gap {_fmt(gap)} ppl"
    )
    if c.tested:
        line += (
            (f" = {_fmt(gap / sigma, 1)}σ" if sigma > 0 else " (no spread over seeds)")
            + f"; {c.protocol.metric} gap {c.gap:+.4f}{unit}, 95 % "
            f"t-interval [{c.ci[0]:+.4f}, {c.ci[1]:+.4f}]"
        )
    line += f"; {d.wording(a=p.a, b=p.b)}"
    if pw is not None and pw.achieved is not None:
        line += (
            f"; as a lone test, power {pw.achieved:.2f} for the paper's {100 * rel_gap:.1f} % gap (needs "
            f"{pw.needed} seeds a side)"
        )
    return line, stats


def finish(f: Finding, decisions: list[Decision]) -> Finding:
    """``f`` with its pairs decided by ``decisions`` (one per pair, in order): did not hold if any
    pair did not, held if every pair held, else not shown. The line and stats are those of the
    first pair that did not hold, else the first pair (the W with the most seeds, or the
    nearest rival); the other pairs' verdicts follow the line, and all of them are in
    ``stats["pairs"]``."""
    pairs = [replace(p, decision=d) for p, d in zip(f.tests, decisions, strict=True)]
    verdicts = [d.verdict for d in decisions]
    if "did not hold" in verdicts:
        verdict = "did not hold"
    elif all(v == "held" for v in verdicts):
        verdict = "held"
    else:
        verdict = "not shown"
    shown = verdicts.index("did not hold") if verdict == "did not hold" else 0
    label = MAGNITUDE if pairs[shown].decision.reason == MAGNITUDE else f.label
    if f.style == "own":  # a threshold rule or a contrast: its text, then the decisions' words
        decided = [{"a": p.a, "b": p.b, "W": p.W, "verdict": p.decision.verdict,
                    **p.decision.stats()} for p in pairs]  # fmt: skip
        words = "; ".join(_own_words(p) for p in pairs)
        stats = {**decided[shown], **f.stats, "pairs": decided}  # the check's own numbers win
        return replace(f, verdict=verdict, here=f"{f.head}; {words}", stats=stats, label=label,
                       tests=pairs)  # fmt: skip
    line, stats = _line(pairs[shown], f.rel_gap)
    others = [f"{_where(p)}: {p.decision.verdict}" for i, p in enumerate(pairs) if i != shown]
    if others:
        line += f" (others: {', '.join(others)})"
        stats["pairs"] = [
            {"a": p.a, "b": p.b, "W": p.W, "verdict": p.decision.verdict, **p.decision.stats()}
            for p in pairs
        ]
    return replace(f, verdict=verdict, here=f.head + line, stats=stats, label=label, tests=pairs)


def _own_words(p: Pair) -> str:
    """One test of a threshold rule or contrast, in words: what it tests and its decision (its
    direction is a larger value — "pow2/fixed degrades more" —, not a better score)."""
    return f"{p.a} vs {p.b}: {p.decision.wording(a=p.a, b=p.b, ahead='above')}"


def _where(p: Pair) -> str:
    return f"W={p.W}" if p.W is not None else f"{p.a} vs {p.b}"


def _settled(pairs: list[Pair], runs: list[str], rel_gap=None, head: str = "") -> Finding:
    """A finding of ``pairs`` decided as a family of its own (the ledger re-decides it with its
    family's other claims)."""
    f = Finding("not shown", "", runs, tests=pairs, head=head, rel_gap=rel_gap)
    return finish(f, settle([p.comparison for p in pairs]))


def pairwise(tier, a: str, b: str, scope: str, pr: Protocol, rel_gap=None) -> Finding | None:
    """``a`` beats / ties ``b`` on held-out perplexity: at the W with the most seeds
    (``scope="seeds"``), at every common W (``"every"``, the best-seeded W first) or at every
    common W but the best-seeded one (``"grid"``; None when there is no other)."""
    sa, sb = runs_by_window(tier, a), runs_by_window(tier, b)
    common = sorted((w for w in sa if w in sb), key=lambda w: (w is not None, w or 0))
    if not common and (a == "dense" or b == "dense") and sa and sb:
        common = [None]
        sa, sb = {None: sum(sa.values(), [])}, {None: sum(sb.values(), [])}
    if not common:
        return None
    best = max(common, key=lambda w: (min(len(sa[w]), len(sb[w])), w or 0))
    others = [w for w in common if w != best]
    ws = {"every": [best] + others, "grid": others}.get(scope, [best])
    if not ws:
        return None
    pairs = [_pair(a, b, w, sa[w], sb[w], pr) for w in ws]
    runs = [n for w in ws for n, _ in sa[w] + sb[w]]
    return _settled(pairs, runs, rel_gap)


def _best_w(tier) -> dict:
    """{label: (W, [(run, ppl)], mean ppl)}: each configuration at its best W (lowest mean
    perplexity); ``…=stagger`` labels (a model under another's name) left out."""
    out = {}
    for label in sorted({r.label for r in tier.lms if "=" not in r.label}):
        by_w = runs_by_window(tier, label)
        if by_w:
            w = min(by_w, key=lambda k: float(np.mean([p for _, p in by_w[k]])))
            out[label] = (w, by_w[w], float(np.mean([p for _, p in by_w[w]])))
    return out


def ranking(tier, target: str, mode: str, pr: Protocol) -> Finding | None:
    """A ranking claim as pairs, the target against each rival, each at its best W: ``best``
    (the target beats every other sparse configuration), ``worst`` (every other sparse
    configuration beats it), ``best-vs-sparse`` (dense beats every sparse configuration).
    The rivals are the paper's configurations (no ``custom`` one); the nearest comes first."""
    m = _best_w(tier)
    # the paper's matrix only: a custom schedule or base (the lab's search's best) is not one of
    # the models the paper ranks, and would turn its ranking into another claim
    sparse = [k for k in m if k != "dense" and "custom" not in k.split("/")]
    if mode == "best-vs-sparse":
        target, rivals = "dense", sparse
        if "dense" not in m or not sparse:
            return None
    else:
        rivals = [k for k in sparse if k != target]
        if target not in sparse or len(sparse) < 3:
            return None
    rivals.sort(key=lambda k: abs(m[k][2] - m[target][2]))
    # the paper's effect is its gap to the nearest rival (dense: to the best sparse model)
    near = min(rivals, key=lambda k: m[k][2]) if mode == "best-vs-sparse" else rivals[0]
    pairs = []
    for k in rivals:
        pk = pr if k == near else replace(pr, paper_effect=None)
        if mode == "worst":  # the claim: every rival beats the target
            pairs.append(_pair(k, target, None, m[k][1], m[target][1], pk))
        else:
            pairs.append(_pair(target, k, None, m[target][1], m[k][1], pk))
    shown = sorted([target, *rivals], key=lambda k: m[k][2])
    head = (
        "mean ppl (best W each): "
        + ", ".join(f"{k}{'' if m[k][0] is None else f' W={m[k][0]}'} {m[k][2]:.2f}" for k in shown)
        + "; "
    )
    runs = [n for k in shown for n, _ in m[k][1]]
    return _settled(pairs, runs, None, head)


def comparison_check(claim: dict, tier) -> Finding | None:
    """The finding of a comparison claim (`MODES`) on one tier, decided as a family of its own;
    None for a claim of another kind or a tier without the runs it compares."""
    pr = protocol(claim)
    if pr is None:
        return None
    a, b, mode, scope = claim["compare"]
    if mode == "additive":
        return additive(tier, a, b, pr)
    if mode in ("beats", "ties"):
        return pairwise(tier, a, b, scope, pr, claim.get("rel_gap"))
    return ranking(tier, a, mode, pr)
