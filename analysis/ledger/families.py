"""The family of a test is its data (claims.toml, protocol version 2, rule R2): once every
claim is evaluated, all tests on one tier's runs are Holm-adjusted together — the paper's
claims in one family a tier, the lab's findings in another — and a test two claims make is
counted once.  Each claim's tests are then decided at those adjusted p-values under the
claim's own protocol (its magnitude, its margin).  Apart from `analysis.ledger.ledger` so that
the rule reads on one screen.
"""

from __future__ import annotations

from dataclasses import replace

from analysis.ledger import compare as ledger_compare
from analysis.statistics.decide import decide as decide_one
from analysis.statistics.decide import settle

__all__ = ["family_of", "adjust"]


def family_of(source: str, tier) -> str:
    """The family of every test on one tier's runs: the data decides it, not the claim (the
    paper's claims one family a tier, the lab's findings another, declared apart)."""
    return f"{source}: {tier.label}"


def _test_key(p) -> tuple:
    """What makes two claims' tests one test: the same runs compared on the same metric by
    the same test (a ranking's pair is the pairwise claim's test; a two-sided Welch test of a
    against b is the test of b against a).  A threshold rule's tests (no runs named) are their
    own."""
    c = p.comparison
    pr = c.protocol
    if not p.ra and not p.rb:
        return ("own", id(c))
    a, b = tuple(sorted(n for n, _ in p.ra)), tuple(sorted(n for n, _ in p.rb))
    sides = tuple(sorted((a, b))) if pr.test == "welch" and pr.sided == "two" else (a, b)
    return (pr.test, pr.sided, pr.margin, pr.metric, sides)


def adjust(found: dict[str, list], sources: dict[str, str] | None = None) -> None:
    """Re-decide every finding that has tests with the family of its data (in place), once,
    after every claim is evaluated: Holm over every test on the same tier's runs together
    (`family_of`: all the paper's claims that read them — comparisons, ties, rankings, threshold
    rules, the 2×2 — whether the tier decides a claim or is shown beside it), each test counted
    once however many claims make it (`_test_key`); each claim's tests then decided at those
    adjusted p-values under its own protocol (its magnitude, its margin)."""
    sources = sources or {}
    groups: dict[str, list] = {}
    for cid, fs in found.items():
        for i, (tier, f) in enumerate(fs):
            if f.tests:
                fam = family_of(sources.get(cid, "paper"), tier)
                groups.setdefault(fam, []).append((cid, i))
    for fam, members in groups.items():
        index: dict[tuple, int] = {}
        unique = []
        for cid, i in members:
            for p in found[cid][i][1].tests:
                k = _test_key(p)
                if k not in index:
                    index[k] = len(unique)
                    unique.append(_in_family(p.comparison, fam))
        once = settle(unique)
        for cid, i in members:
            tier, f = found[cid][i]
            ds = []
            for p in f.tests:
                d = once[index[_test_key(p)]]
                ds.append(decide_one(_in_family(p.comparison, fam), d.p_adjusted,
                                     d.p_against_adjusted))  # fmt: skip
            found[cid][i] = (tier, ledger_compare.finish(f, ds))


def _in_family(c, fam: str):
    return replace(c, protocol=replace(c.protocol, family=fam))
