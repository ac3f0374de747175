"""The claims ledger: every claim the paper makes (analysis/reference/claims.toml), each given
exactly one verdict from the strongest evidence the store holds.

    led = ledger.build(ledger_evidence.from_store(
        store, grids=ledger_evidence.stored_grids(), timings=ledger_evidence.stored_timings()))
    led.summary()            # "paper's claims (48): 2 held, 5 did not hold, … not tested here"
    led.write_json("reports/x/claims.json")

Verdicts: ``held``, ``did not hold`` (for a comparison also "magnitude not reproduced": the
paper's effect outside the interval), ``conflicting`` (two tiers able to decide disagree: both
shown), ``not shown`` (tested, not decisive: the effect size, the
p-values and the smallest gap the seeds could detect; a result at chance level is labelled "at
chance") and ``not tested here`` (with why, and what would test it).  One rule set, claims.toml's
protocol version 2 (rules R1–R7): every LM claim — comparison, ranking, threshold rule, α drift —
is a registered test (`analysis.ledger.compare`, `analysis.ledger.checks`), and once every claim is
evaluated all tests on one tier's runs are Holm-adjusted together, each shared test once
(`adjust`: the family is the data); claims.json carries the protocol, the ``[protocol]`` rules
and their SHA-256 beside the verdicts.  An LM claim is decided by the registered tier (the one
its seeds were planned for), else by the tier whose test has the most seeds; a probe claim by
the strongest tier (a paper-scale grid beats the reduced probe); the other tiers' verdicts are
listed beside it (``also``).  A tier too small to decide an LM claim (the demo's runs)
reports its numbers with the verdict ``not shown``.  The lab's own findings (the toml's ``lab``
list) get verdicts too, but the summary counts the paper's claims only.

Claims computed from the lab's code with no runs (kinds ``coverage``, ``computed``) are decided
by `analysis.ledger.exact`; the 2×2 of base × schedule, the seed-noise level and the battery's
separation of schemes by `analysis.ledger.across`.  A claim the paper's own numbers contradict
carries the toml's ``paper_contradicts`` (in claims.json, the report and the summary's count):
the flag is the paper against itself, the verdict is still the lab's test.  Table 1's claims
that repeat a Table 5 comparison (``seeds_claim``) are decided on the windows Table 5's twin
does not use, so one set of runs is never one test counted twice.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

import tomllib

from analysis.ledger import compare as ledger_compare
from analysis.ledger.across import ACROSS_CHECKS
from analysis.ledger.checks import LM_CHECKS, Finding
from analysis.ledger.efficiency import EFFICIENCY_CHECKS
from analysis.ledger.exact import exact_findings
from analysis.ledger.families import adjust
from analysis.ledger.probe import PROBE_CHECKS
from analysis.published.paper import REFERENCE_DIR
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = [
    "VERDICTS",
    "CLAIMS_PATH",
    "load_claims",
    "Entry",
    "Ledger",
    "build",
]

VERDICTS = ("held", "did not hold", "conflicting", "not shown", "not tested here")
#: The verdicts that decide a claim one way; two deciding tiers with different ones conflict.
DECISIVE = ("held", "did not hold")
CLAIMS_PATH = str(REFERENCE_DIR / "claims.toml")
STUDY_HINT = "`fiblab demo --scale study` runs a scale that can"
GRID_HINT = (
    "the lab's paper-scale Table 2 grids (`benchmarks/results/probe-marked-paper.jsonl` and "
    "its bf16 twin; `fiblab report --probes FILE` adds others)"
)
_KIND_WORDS = {
    "lm-ppl": "finished LM runs of the configurations it compares (one setup)",
    "lm-extrap": "LM runs of the configurations it needs evaluated beyond their training length",
    "lm-bins": "fib/stagger and fib/fixed LM runs with position-bin evaluations",
    "lm-alpha": "learned-α LM runs with logged α",
    "probe": "marked retrieval-probe cells of the depths and inits it needs",
    "battery": "battery results",
    "efficiency": "timings of the attention paths",
    "method": "record of how the paper's runs were made",
}
#: Kinds decided by computation from the lab's code, no runs (`analysis.ledger.exact`).
COMPUTED = ("coverage", "computed")


def load_claims(path: str = CLAIMS_PATH) -> tuple[list[dict], list[dict]]:
    """(the paper's claims, the lab's findings) as dicts, in file order."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    paper, lab = data.get("paper", []), data.get("lab", [])
    ids = [c["id"] for c in paper + lab]
    dup = sorted(i for i, n in Counter(ids).items() if n > 1)
    if dup:
        raise ValueError(f"{path}: claim ids {dup} appear more than once; give each its own id")
    return paper, lab


def load_rules(path: str = CLAIMS_PATH) -> dict:
    """claims.toml's ``[protocol]`` table: the rules every claim is decided by (the registered
    tier, the thresholds, the confirmation), hashed with the claims' tests."""
    with open(path, "rb") as f:
        return dict(tomllib.load(f).get("protocol", {}))


def scheme_pairs(claims: list[dict]) -> dict[tuple[str, str], dict]:
    """{(a, b): claim} of the paper's beats / ties claims between two schemes, by the schemes'
    short names (`lab.ladder.schemes.Scheme.short`: "stagger", "pow2-stagger"); the claim over seeds
    (Table 5) where the paper makes one for the pair, else its first. The one place the study's
    comparisons and the sentences that name a comparison learn which claim it is."""
    from lab.ladder.schemes import SCHEMES

    short = {s.paper: s.short for s in SCHEMES}
    out: dict[tuple[str, str], dict] = {}
    for c in claims:
        a, b, test, scope = (list(c.get("compare") or []) + [""] * 4)[:4]
        if test not in ("beats", "ties") or a not in short or b not in short:
            continue
        pair = (short[a], short[b])
        if pair not in out or (scope == "seeds" and out[pair]["compare"][3] != "seeds"):
            out[pair] = c
    return out


@dataclass
class Entry:
    """One claim and its verdict."""

    id: str
    source: str  # "paper" or "lab"
    claim: str
    paper: str
    where: str
    kind: str
    verdict: str
    here: str
    evidence: dict = field(default_factory=dict)  # {"tier", "scale", "runs"}
    stats: dict = field(default_factory=dict)
    label: str | None = None  # "at chance"
    why: str = ""  # why not tested / why not decisive
    decides: str = ""  # what would test it
    also: list = field(default_factory=list)  # weaker tiers' verdicts
    paper_contradicts: str = ""  # where the paper's own numbers contradict the claim
    exploratory: dict | None = None  # R7: the committed study's verdict beside the confirmatory

    @property
    def shown(self) -> str:
        return self.verdict + (f" ({self.label})" if self.label else "")

    def to_json(self) -> dict:
        return jsonio.clean(dict(self.__dict__))


@dataclass
class Ledger:
    entries: list
    sources: list = field(default_factory=list)
    protocol: dict = field(default_factory=dict)  # {claim id: registered test} (`protocol`)

    def paper(self) -> list[Entry]:
        return [e for e in self.entries if e.source == "paper"]

    def lab(self) -> list[Entry]:
        return [e for e in self.entries if e.source == "lab"]

    def counts(self) -> dict[str, int]:
        """The paper's claims by verdict (every verdict, zeros included)."""
        c = Counter(e.verdict for e in self.paper())
        return {v: c.get(v, 0) for v in VERDICTS}

    def summary(self) -> str:
        c = self.counts()
        chance = sum(1 for e in self.paper() if e.label == "at chance")
        parts = [
            f"{n} {v}" + (f" ({chance} at chance)" if v == "not shown" and chance else "")
            for v, n in c.items()
        ]
        flagged = len(self.contradicted())
        return (
            f"the paper's claims ({len(self.paper())}): "
            + ", ".join(parts)
            + (f"; {flagged} contradicted by the paper's own numbers" if flagged else "")
            + f"; the lab's own findings ({len(self.lab())}) are not counted"
        )

    def contradicted(self) -> list[Entry]:
        """Paper claims its own numbers contradict (claims.toml ``paper_contradicts``)."""
        return [e for e in self.paper() if e.paper_contradicts]

    def cannot_decide(self) -> list[Entry]:
        """Paper claims the evidence here cannot decide: not tested, or tested only by a tier
        too small to decide them."""
        return [e for e in self.paper() if e.verdict == "not tested here" or e.why]

    def to_json(self) -> list[dict]:
        """Every entry as a dict (NaN as None): the ``claims`` of `document`."""
        return [e.to_json() for e in self.entries]

    def document(self) -> dict:
        """claims.json: the registered protocol of every comparison claim, its hash, and the
        entries (a decided comparison's ``stats`` carry p_raw, p_adjusted, family, test, ci,
        direction, magnitude, mde, n_a, n_b)."""
        return {
            "protocol": jsonio.clean(self.protocol),
            "protocol_sha256": protocol_sha256(self.protocol),
            "claims": self.to_json(),
        }

    def write_json(self, path: str) -> str:
        """`document` as strict JSON (null for NaN) at ``path``."""
        return atomic_write(path, jsonio.dumps(self.document(), indent=1))


# --------------------------------------------------------------------------------------------
# verdicts
# --------------------------------------------------------------------------------------------
def _check(claim: dict, tier) -> Finding | None:
    if ledger_compare.protocol(claim) is not None:
        return ledger_compare.comparison_check(claim, tier)
    fn = (
        LM_CHECKS.get(claim["id"])
        or ACROSS_CHECKS.get(claim["id"])
        or PROBE_CHECKS.get(claim["id"])
        or EFFICIENCY_CHECKS.get(claim["id"])
    )
    return fn(tier) if fn else None


def _tiers_for(kind: str, evidence) -> list:
    if kind == "probe":
        return evidence.of("probe")
    if kind.startswith("lm") or kind == "battery":
        return evidence.of("lm")
    if kind == "efficiency":
        return evidence.of("efficiency")
    return []


def _entry(claim: dict, source: str, finding: Finding | None, **kw) -> Entry:
    base = dict(
        id=claim["id"],
        source=source,
        claim=claim["claim"],
        paper=claim["paper"],
        where=claim["where"],
        kind=claim["kind"],
        decides=claim.get("decides", ""),
        paper_contradicts=claim.get("paper_contradicts", ""),
    )
    if finding is None:
        return Entry(**base, verdict="not tested here", here="", **kw)
    return Entry(
        **base,
        verdict=finding.verdict,
        here=finding.here,
        stats=finding.stats,
        label=finding.label,
        **kw,
    )


def _untested(f: Finding) -> bool:
    """A comparison with one seed on a side: no test, no power (`ledger_compare`)."""
    return bool(f.tests) and not any(p.comparison.tested for p in f.tests)


def _seeds(f: Finding) -> int:
    """The seeds behind a finding's tests: the smallest side of its smallest test (0 without a
    test)."""
    sides = [min(p.comparison.n_a, p.comparison.n_b or p.comparison.n_a) for p in f.tests]
    return min(sides, default=0)


def registered_tier(tier, rule: dict | None) -> bool:
    """Whether ``tier`` is the one claims.toml registers (``[protocol] tier``: the scale,
    steps and training length its seeds were planned for)."""
    if not rule or tier.kind != "lm":
        return False
    return all(getattr(tier, k, None) == v for k, v in rule.items())


def _strongest(found: list, rule: dict | None = None) -> int:
    """Index of the deciding finding in ``found`` (tiers strongest first), by the registered
    tier rule: the registered tier (``rule``, the one its seeds were planned for) when it has
    evidence for the claim; else, among the tiers able to decide whose finding is a test, the
    one with the most seeds on its smaller side (never fewer seeds when more exist; ties: the
    stronger tier); with no test anywhere, the strongest tier.  The others are shown beside
    (``also``), never as the verdict.  The choice never reads a p-value or a verdict."""
    for i, (tier, _) in enumerate(found):
        if tier.decides and registered_tier(tier, rule):
            return i
    tested = [(i, _seeds(f)) for i, (t, f) in enumerate(found) if t.decides and not _untested(f)]
    if tested:
        return max(tested, key=lambda c: (c[1], -c[0]))[0]
    return 0


def findings(claim: dict, evidence, rule: dict | None = None) -> list[tuple]:
    """(tier, finding) of every tier with evidence for ``claim``, the deciding one first
    (`_strongest` under the registered tier ``rule``); each finding's tests decided as a family
    of their own until `adjust`."""
    if claim["kind"] in COMPUTED:
        return []
    found = []
    for tier in _tiers_for(claim["kind"], evidence):
        f = _check(claim, tier)
        if f is not None:
            found.append((tier, f))
    if found:
        found.insert(0, found.pop(_strongest(found, rule)))
    return found


def _why_untested(claim: dict, found: dict) -> str:
    """Why a claim has no finding: the toml's ``why_untested`` (what the lab cannot measure),
    a Table 1 claim whose only W is its Table 5 twin's (``seeds_claim``: the same runs are
    one test, counted once), else the evidence kind it lacks."""
    if claim.get("why_untested"):
        return claim["why_untested"]
    twin = claim.get("seeds_claim")
    if twin and found.get(twin):
        return (
            f"its runs are at one W only, which `{twin}` decides over seeds; Table 1's claim "
            f"is decided on the other windows, so that one test is counted once"
        )
    return f"the evidence here has no {_KIND_WORDS.get(claim['kind'], 'evidence of this kind')}"


def decide(
    claim: dict, source: str, found: list, cov: dict[str, Finding], why_untested: str = ""
) -> Entry:
    """One claim's entry from its findings (`findings`, deciding first; after `adjust`): the
    first decides, the others go to ``also``. A tier too small to decide (demo runs) reports
    its numbers as ``not shown``, with its verdict as measured (``raw_verdict``). ``cov``: the
    computed claims' findings (`analysis.ledger.exact.exact_findings`)."""
    if claim["kind"] in COMPUTED:
        f = cov.get(claim["id"])
        return _entry(
            claim,
            source,
            f,
            evidence={"tier": "computed", "scale": "exact", "runs": f.evidence if f else []},
        )
    if not found:
        return _entry(
            claim,
            source,
            None,
            why=why_untested or _why_untested(claim, {}),
            evidence={"tier": None, "scale": None, "runs": []},
        )
    (tier, f), rest = found[0], found[1:]
    why = ""
    if not tier.decides:
        raw = f.verdict
        if raw in ("held", "did not hold"):
            f = Finding("not shown", f.here, f.evidence, {**f.stats, "raw_verdict": raw}, f.label)
        why = (
            f"only {tier.scale}-scale runs test it (as measured: {raw}); small models that "
            f"barely use long context cannot decide the paper's LM claims: {STUDY_HINT}"
        )
    also = [
        {"tier": t.label, "scale": t.scale, "verdict": g.verdict, "label": g.label, "here": g.here}
        for t, g in rest
    ]
    f = _conflict(tier, f, rest)
    return _entry(
        claim,
        source,
        f,
        why=why,
        also=also,
        evidence={"tier": tier.label, "scale": tier.scale, "runs": f.evidence},
    )


def _conflict(tier, f: Finding, rest: list) -> Finding:
    """``conflicting`` when another tier able to decide (``decides``) reaches the other deciding
    verdict by the claim's registered test: two significant tests of one comparison pointing
    opposite ways are not settled by ranking the tiers, so both are shown (the deciding tier's
    verdict as ``raw_verdict``). A weaker tier that only fails to show the effect (not shown)
    does not conflict, nor does a reduced probe recipe beside the paper's (a finding without a
    registered test: the paper-scale tier is the claim's test, the reduced one context)."""
    if f.verdict not in DECISIVE or not f.tests:
        return f
    against = [
        (t, g)
        for t, g in rest
        if t.decides and g.tests and g.verdict in DECISIVE and g.verdict != f.verdict
    ]
    if not against:
        return f
    here = f"{tier.label}: {f.verdict} ({f.here})" + "".join(
        f"; {t.label}: {g.verdict} ({g.here})" for t, g in against
    )
    return Finding("conflicting", here, f.evidence, {**f.stats, "raw_verdict": f.verdict}, f.label)


def protocol(claims: list[dict], rules: dict | None = None) -> dict:
    """The registered tests, {id: protocol}, in file order: each comparison claim's
    (`ledger_compare.protocol`) and each threshold rule's (claims.toml ``rule``), and under
    ``"rules"`` the ``[protocol]`` table every claim is decided by (the registered tier, the
    thresholds and windows, the confirmation), so a change of any after the results changes
    the hash."""
    out: dict = {"rules": dict(rules)} if rules else {}
    for c in claims:
        pr = ledger_compare.protocol(c)
        if pr is not None:
            out[c["id"]] = pr.to_json()
        elif "rule" in c:
            out[c["id"]] = {"rule": dict(c["rule"])}
    return out


def protocol_sha256(proto: dict) -> str:
    """The SHA-256 of the protocol's canonical JSON (sorted keys, no spaces): a protocol changed
    after the results changes it."""
    text = json.dumps(jsonio.clean(proto), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build(evidence, claims_path: str = CLAIMS_PATH) -> Ledger:
    """Every claim of the toml, decided on ``evidence`` (`analysis.ledger.evidence.Evidence`):
    each claim's findings first, then the comparisons' families adjusted together, then the
    verdicts."""
    paper, lab = load_claims(claims_path)
    rules = load_rules(claims_path)
    cov = exact_findings(evidence.coverage, evidence.of("efficiency"))
    claims = [(c, "paper") for c in paper] + [(c, "lab") for c in lab]
    found = {c["id"]: findings(c, evidence, rules.get("tier")) for c, _ in claims}
    adjust(found, {c["id"]: source for c, source in claims})
    entries = [
        decide(c, source, found[c["id"]], cov, _why_untested(c, found)) for c, source in claims
    ]
    return Ledger(entries, list(evidence.sources), protocol(paper + lab, rules))
