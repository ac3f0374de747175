"""One claim about two samples in one plain-English line ("stagger beats fixed: yes, gap 1.10 =
8.9σ (Welch p=0.0021, …)"), for the front ends and notebooks that show a verdict beside a table.

It sits above both `analysis.statistics.stats` (the samples' statistics) and `analysis.statistics.decide` (the
registered tests and their decision rules): the line is `decide`'s decision for a family of one
claim, worded. The claims ledger adjusts whole families instead (`analysis.ledger.ledger`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from analysis.statistics.decide import Decision, Protocol, compare, settle
from analysis.statistics.stats import as_sample, gap, margin

__all__ = ["claim_kind", "Verdict", "assess", "verdict"]

_BEATS = re.compile(r"\b(beats?|outperforms?|better than|improves? on)\b", re.I)
_TIES = re.compile(r"\b(ties?|matches|match|equals?|same as)\b", re.I)


def claim_kind(claim: str) -> str:
    """``"beats"`` or ``"ties"``: what a claim such as "stagger beats fixed" or "pow2/stagger
    matches fib/learned" asserts. ``ValueError`` when the words say neither."""
    if _TIES.search(claim):
        return "ties"
    if _BEATS.search(claim):
        return "beats"
    raise ValueError(
        f"cannot tell what {claim!r} claims: word it as 'A beats B' or 'A ties B' "
        f"(or pass kind='beats' / kind='ties')"
    )


def _fmt_p(p: float) -> str:
    if math.isnan(p):
        return "n/a"
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


@dataclass(frozen=True)
class Verdict:
    """What :func:`assess` concluded about a claim. ``answer`` is ``"yes"`` (held), ``"no"`` (did
    not hold), ``"not shown"``, ``"cannot tell"`` (fewer than two values on a side) or ``"no
    data"``; ``gap``, ``margin`` (in σ), ``p`` (the registered test's raw p: Welch's for "beats",
    TOST's for "ties") and ``ci`` (Welch t-interval of the gap) are NaN where they could not be
    computed; ``decision`` is the `analysis.statistics.decide.Decision` behind the answer (None without a
    test); ``line`` is the plain-English sentence (also ``str()``)."""

    claim: str
    kind: str
    answer: str
    gap: float
    margin: float
    p: float
    ci: tuple
    n_a: int
    n_b: int
    line: str
    decision: Decision | None = None

    def __str__(self) -> str:
        return self.line


_ANSWER = {"held": "yes", "did not hold": "no", "not shown": "not shown"}


def assess(
    a,
    b,
    claim: str,
    *,
    kind: str | None = None,
    lower_is_better: bool = True,
    alpha: float = 0.05,
    sigma: float | None = None,
    tie_margin: float | None = None,
    paper_effect: float | None = None,
    sided: str = "two",
    level: float = 0.95,
    digits: int = 2,
) -> Verdict:
    """Decide ``claim`` about sample ``a`` against sample ``b``; see :func:`verdict` for the
    rules. Returns the :class:`Verdict` with every number behind the sentence."""
    kind = claim_kind(claim) if kind is None else kind
    if kind not in ("beats", "ties"):
        raise ValueError(f"kind={kind!r} must be 'beats' or 'ties'")
    xa, xb = as_sample(a, "a"), as_sample(b, "b")
    nan = float("nan")
    sizes = f"n={len(xa)} vs {len(xb)}"
    if not len(xa) or not len(xb):
        return Verdict(
            claim,
            kind,
            "no data",
            nan,
            nan,
            nan,
            (nan, nan),
            len(xa),
            len(xb),
            f"{claim}: no data ({sizes})",
        )
    g = gap(xa, xb, lower_is_better)
    f = f"{{:.{digits}f}}"
    if len(xa) < 2 or len(xb) < 2:
        few = " and ".join(
            f"{side} has {len(x)} value" for side, x in (("a", xa), ("b", xb)) if len(x) < 2
        )
        line = (
            f"{claim}: cannot tell, too few seeds ({few}; need at least 2 per side for a "
            f"spread): gap {f.format(g)}, no p-value ({sizes})"
        )
        return Verdict(claim, kind, "cannot tell", g, nan, nan, (nan, nan), len(xa), len(xb), line)
    m = margin(xa, xb, lower_is_better, sigma)
    test = "tost" if kind == "ties" else "welch"
    pr = Protocol("this claim", test, sided, tie_margin, paper_effect, alpha=alpha)
    (d,) = settle([compare(xa, xb, pr, lower_is_better, level)])
    c = d.comparison
    answer = _ANSWER[d.verdict]
    why = {
        "reversal": ", a significant reversal",
        "magnitude not reproduced": ", magnitude not reproduced",
        "outside margin": ", outside the margin",
    }.get(d.reason, "")
    sig = "σ" if sigma is None else "σ (given)"
    m_txt = "n/a" if math.isnan(m) else f"{m:.1f}{sig}"
    if kind == "ties" and tie_margin:
        ptxt = f"TOST p={_fmt_p(c.p_raw)} at ±{f.format(tie_margin)}"
        if d.reason == "outside margin":
            ptxt += f", outside it p={_fmt_p(c.p_against)}"
    elif kind == "ties":
        ptxt = f"no margin to test a tie at; Welch p={_fmt_p(c.p_against)}"
    else:
        ptxt = f"Welch p={_fmt_p(c.p_raw)}" + ("" if sided == "two" else ", one-sided")
    pe = "" if paper_effect is None else f", the paper's {f.format(paper_effect)} {d.magnitude}"
    line = (
        f"{claim}: {answer}{why}, gap {f.format(g)} = {m_txt} ({ptxt}, {level:.0%} CI of the "
        f"gap [{f.format(c.ci[0])}, {f.format(c.ci[1])}]{pe}; {sizes})"
    )
    if answer == "not shown" and math.isfinite(c.mde):
        line += f"; detectable with 80 % power: {f.format(c.mde)}"
    return Verdict(claim, kind, answer, g, m, c.p_raw, c.ci, len(xa), len(xb), line, d)


def verdict(
    a,
    b,
    claim: str,
    *,
    kind: str | None = None,
    lower_is_better: bool = True,
    alpha: float = 0.05,
    sigma: float | None = None,
    tie_margin: float | None = None,
    paper_effect: float | None = None,
    sided: str = "two",
    level: float = 0.95,
    digits: int = 2,
) -> str:
    """One plain-English line on ``claim`` about sample ``a`` against sample ``b``, decided by
    the rules of `analysis.statistics.decide` for a family of one claim (the ledger adjusts families).

    ``kind`` (default: read from the claim's wording, :func:`claim_kind`):

    ``"beats"``
        *yes* when Welch's test (two-sided, or ``sided="one"``) rejects at ``alpha`` with ``a``
        better (see :func:`gap`); *no* on a significant reversal, or when ``paper_effect`` (a
        gap in the values' units) lies outside the ``level`` Welch t-interval of the gap
        ("magnitude not reproduced"); else *not shown*. A gap ≤ 0 that is not significant is
        *not shown*, not *no*.
    ``"ties"``
        *yes* only when the equivalence test (TOST, Welch) shows the gap inside ±``tie_margin``;
        *no* when the gap is significantly outside it; else *not shown*. A large p of a
        difference test is not a tie; without a margin a tie cannot be shown, only refuted by a
        significant difference.

    The line gives the gap, the margin in σ (pooled std of a and b, or ``sigma``), the test's
    p, the ``level`` t-interval of the gap and, when not shown, the gap these seeds detect with
    80 % power, e.g. ``"stagger beats fixed: yes, gap 1.10 = 8.9σ (Welch p=0.0021, 95% CI of the
    gap [0.80, 1.40]; n=3 vs 3)"``. With fewer than two values on a side it says the question
    cannot be settled ("cannot tell, too few seeds") and gives no p-value. :func:`assess`
    returns the same decision with its numbers.
    """
    return assess(
        a,
        b,
        claim,
        kind=kind,
        lower_is_better=lower_is_better,
        alpha=alpha,
        sigma=sigma,
        tie_margin=tie_margin,
        paper_effect=paper_effect,
        sided=sided,
        level=level,
        digits=digits,
    ).line
