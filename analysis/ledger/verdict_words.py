"""Words that follow the numbers: the README's and RESULTS' sentences on the paper's language-model
claims are generated from a committed ``claims.json``, and checked against it.

Between the markers ``<!-- lm-verdicts begin … -->`` and ``<!-- lm-verdicts end -->`` a document
holds the table `lm_block` writes from the claims file (``lm-summary`` markers: its one-line count
of verdicts, for the README); `problems` reports a block that is not what the file gives today, and any line outside the blocks that names an LM claim (by id, or by
the study's wording of it) beside a verdict the file does not carry. Run

    python -m analysis.ledger.verdict_words benchmarks/results/confirm/claims.json README.md benchmarks/RESULTS.md --also benchmarks/results/scale/claims.json
    python -m analysis.ledger.verdict_words benchmarks/results/scale/claims.json README.md benchmarks/RESULTS.md --blocks-only

to rewrite the blocks after a new study, and ``--check`` to only report (the test suite runs the
check, so a "held" the verdict does not carry fails CI).  The scale study's depth claims have
their own blocks (RESULTS' table, the README's count), from
``benchmarks/results/scale/claims.json`` (``--blocks-only``: its blocks alone); a sentence may
quote either file's verdict (``--also``: the scale study decides claims the confirmation leaves
"not tested here").
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from analysis.ledger.ledger import load_claims, scheme_pairs

__all__ = ["BEGIN", "END", "lm_claims", "lm_block", "sync", "problems", "main"]

#: A block's markers; ``form`` is "verdicts" (the table) or "summary" (the count line alone).
BEGIN = "<!-- lm-{form} begin: generated from {source} by `python -m analysis.ledger.verdict_words`; do not edit -->"
END = "<!-- lm-{form} end -->"
FORMS = ("verdicts", "summary")
_BLOCK = re.compile(
    r"<!-- lm-(verdicts|summary) begin: generated from (\S+) .*?-->\n(.*?)<!-- lm-\1 end -->", re.S
)

#: The ways a sentence names a comparison claim without its id ("a beats b", "a ties b", "a vs b",
#: "a over b", "a's gain over b", the schemes by their short names), → the id; the pairs are
#: claims.toml's own (`analysis.ledger.ledger.scheme_pairs`).
_PAIRS = {pair: c["id"] for pair, c in scheme_pairs(load_claims()[0]).items()}
ALIASES = {
    re.compile(
        rf"(?<![\w-]){re.escape(a)}(?:'s gain)?\s+(?:beats|ties|vs\.?|over|against)\s+"
        rf"{re.escape(b)}(?![\w-])"
    ): cid
    for (a, b), cid in _PAIRS.items()
}
#: Words that state a verdict, as the ledger writes them and as a sentence might.
_WORDS = {
    "held": "held",
    "did not hold": "did not hold",
    "not shown": "not shown",
    "not tested here": "not tested here",
    "yes": "held",
    "magnitude not reproduced": "magnitude not reproduced",
    "at chance": "at chance",
}


def lm_claims(doc: dict) -> list[dict]:
    """The paper's language-model claims of a claims.json document, in file order; of the scale
    study's claims.json (no ``claims`` list), the depth claims by id, each as a decided
    amendment (``amendments``) decides it where one does."""
    if "claims" not in doc:
        later = {
            k: {**v, "here": f"amendment `{v['amendment']}` (SHA-256 {v['sha256'][:12]}…): "
                f"{v.get('here', '')}"}
            for am in doc.get("amendments", {}).values()
            for k, v in am.items()
            if v["verdict"] != "pending"
        }  # fmt: skip
        depth = doc["depth"] | later
        return [{"id": k, "source": "paper", "kind": "lm", **v} for k, v in depth.items()]
    return [
        c
        for c in doc["claims"]
        if c.get("source") == "paper" and str(c.get("kind", "")).startswith("lm")
    ]


def _p(v) -> str:
    return "–" if v is None else f"{v:.3g}"


#: The unit of each registered test's effect (stats["metric"]); a threshold rule's effect is
#: its value's distance past the threshold, in the threshold's own unit.
UNITS = {
    "log_ppl": "nats",
    "nll_bin0": "nats",
    "slope": "nats / bin",
    "pct_change": "% points",
    "-pct_change": "% points",
    "-alpha_drift": "α",
}


def unit(metric: str | None) -> str:
    return UNITS.get(metric or "", metric or "")


def seeds(s: dict) -> str:
    """Runs a side: "5 vs 10", or "5" for a one-sample (threshold) test."""
    if s.get("n_a") is None:
        return ""
    return f"{s['n_a']} vs {s['n_b']}" if s.get("n_b") else f"{s['n_a']}"


def _numbers(c: dict) -> str:
    s = c.get("stats") or {}
    if "p_adjusted" in s and s.get("ci") and s.get("effect") is not None:
        lo, hi = s["ci"]  # the registered metric's effect, positive in the claim's direction
        what = "gap" if s.get("n_b") else "past the threshold"
        return (
            f"{s.get('a')} vs {s.get('b')}: {what} {s['effect']:+.4f} {unit(s.get('metric'))}, "
            f"95 % CI [{lo:+.4f}, {hi:+.4f}], p {_p(s.get('p_raw'))}, Holm p "
            f"{_p(s['p_adjusted'])} ({s.get('family')}; n = {seeds(s)})"
        )
    return (c.get("here") or c.get("why") or "").replace("|", "/").replace("\n", " ")


def _verdict(c: dict) -> str:
    return c["verdict"] + (f" — {c['label']}" if c.get("label") else "")


def lm_block(doc: dict, source: str, form: str = "verdicts") -> str:
    """The markdown block (markers included) of the LM claims' verdicts: one row a claim
    (``form="verdicts"``), or only the line that counts them (``form="summary"``)."""
    rows = lm_claims(doc)
    sha = doc.get("protocol_sha256") or doc.get("registration", {}).get("protocol_sha256", "")
    counts: dict[str, int] = {}
    for c in rows:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    what = "language-model claims"
    if "claims" not in doc and doc.get("depth_cell"):  # the scale study's: depth claims only
        what = "claims that only depth decides, at (L, T) = ({}, {}),".format(*doc["depth_cell"])
    lines = [
        BEGIN.format(form=form, source=source),
        f"The paper's {len(rows)} {what} as `{source}` decides them: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + f" (protocol SHA-256 `{sha[:12]}…`{_amended(doc)}).",
    ]
    if form == "verdicts":
        lines += ["", "| claim | verdict | here |", "|---|---|---|"]
        lines += [f"| `{c['id']}` | **{_verdict(c)}** | {_numbers(c)} |" for c in rows]
    return "\n".join(lines) + "\n" + END.format(form=form)


def _amended(doc: dict) -> str:
    """The decided amendments' own hashes, for the count line of a scale study's claims.json."""
    done = {}
    for am in doc.get("amendments", {}).values():
        for v in am.values():
            if v["verdict"] != "pending":
                done[v["amendment"]] = v["sha256"]
    return "".join(f"; amendment {k} `{v[:12]}…`" for k, v in done.items())


def sync(text: str, doc: dict, source: str) -> str:
    """``text`` with every block generated from ``source`` rewritten from ``doc`` in its own
    form (another source's blocks, and text without a block, are unchanged)."""
    return _BLOCK.sub(
        lambda m: lm_block(doc, source, m.group(1)) if m.group(2) == source else m.group(0), text
    )


def _said(line: str) -> set[str]:
    low = line.lower()
    return {v for w, v in _WORDS.items() if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", low)}


def problems(text: str, doc: dict, source: str, lines: bool = True, also: tuple = ()) -> list[str]:
    """What in ``text`` says more (or other) than ``doc``: a block generated from ``source``
    that differs from the one the file gives, and a line outside every block that names one LM
    claim beside a verdict word the claim does not carry.  A block from another source (the
    scale study's depth claims in RESULTS) is checked by the call for that source; ``lines=False``
    checks the blocks alone (the prose answers to one source, the confirmation's).  ``also``:
    other sources' documents whose verdicts a line may quote too (the scale study's, which
    decides claims the confirmation leaves "not tested here")."""
    out = []
    for m in _BLOCK.finditer(text):
        if m.group(2) == source and m.group(0) != lm_block(doc, source, m.group(1)):
            out.append(f"the block from {m.group(2)} is not what {source} gives today")
    if not lines:
        return out
    verdicts = {c["id"]: {c["verdict"], c.get("label")} - {None} for c in lm_claims(doc)}
    for other in also:
        for c in lm_claims(other):
            verdicts.setdefault(c["id"], set()).update({c["verdict"], c.get("label")} - {None})
    outside = _BLOCK.sub("", text)
    for n, line in enumerate(outside.splitlines(), 1):
        named = {i for i in verdicts if i in line}
        named |= {i for a, i in ALIASES.items() if a.search(line.lower()) and i in verdicts}
        if len(named) != 1:  # a line naming several claims cannot be attributed word by word
            continue
        (cid,) = named
        wrong = _said(line) - verdicts[cid]
        if wrong:
            out.append(
                f"line {n} names {cid} beside {sorted(wrong)}, but {source} says "
                f"{sorted(verdicts[cid])}: {line.strip()[:160]}"
            )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m analysis.ledger.verdict_words", description=__doc__
    )
    ap.add_argument("claims", help="a claims.json (e.g. benchmarks/results/study/claims.json)")
    ap.add_argument(
        "docs", nargs="+", help="markdown files holding lm-verdicts or lm-summary blocks"
    )
    ap.add_argument("--check", action="store_true", help="report only; exit 1 on a problem")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        help="another claims.json whose verdicts a sentence may quote (the scale study's)",
    )
    ap.add_argument(
        "--blocks-only",
        action="store_true",
        help="check only this file's blocks, not the prose (a second source, e.g. the scale study's)",
    )
    a = ap.parse_args(argv)
    with open(a.claims, encoding="utf-8") as f:
        doc = json.load(f)
    also = []
    for path in a.also:
        with open(path, encoding="utf-8") as f:
            also.append(json.load(f))
    bad = 0
    for path in a.docs:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not a.check:
            text = sync(text, doc, a.claims)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        for p in problems(text, doc, a.claims, lines=not a.blocks_only, also=tuple(also)):
            print(f"{path}: {p}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
