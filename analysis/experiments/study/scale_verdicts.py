"""The scale study's verdicts (claims.toml ``[scale]``, its amendments): decided from the
committed rows alone, each part only once every run it plans is committed — the trend test
(`analysis.statistics.trend`) and its figure, the depth claims by the ledger on the depth cell,
each amendment's claims, the α landscape and the battery — written as ``claims.json`` beside the
rows.  ``python -m analysis.experiments.study.scale --decide`` runs it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from analysis.experiments.study import confirm
from analysis.experiments.study import scale_probes as SPR
from analysis.experiments.study import scale_protocol as proto
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = ["trend_runs", "decide", "committed", "report", "FIGURE"]

#: The trend figure decide() draws beside claims.json once the trend is decided.
FIGURE = "trend.png"


def trend_runs(rows: list[dict], confirm_rows: list[dict], scale: dict | None = None) -> list:
    """(cell, Δcov, scheme, perplexity) of every stagger and fixed run at a registered cell: the
    scale rows, and the confirmation's at its (4, 128) point."""
    sc = scale or proto.load_scale()
    dcov = {tuple(c): d for c, d in zip(sc["cells"], sc["coverage_difference"])}
    registered = {st.name for st in proto.stages(sc)}
    out = [
        (tuple(r["cell"]), dcov[tuple(r["cell"])], r["scheme"], r["run"]["ppl"])
        for r in rows
        if r["scheme"] in ("stagger", "fixed")
        and tuple(r["cell"]) in dcov
        and r["stage"] in registered
    ]
    home = tuple(sc["from_confirmation"])
    out += [
        (home, dcov[home], r["scheme"], r["run"]["ppl"])
        for r in confirm_rows
        if r["scheme"] in ("stagger", "fixed")
    ]
    return [(c, d, s, float("nan") if p is None else p) for c, d, s, p in out]


def _pending(what: str, gaps: dict[str, int], planned: dict[str, int]) -> dict | None:
    """None when nothing is missing, else the "pending" entry that says what is."""
    gaps = {k: v for k, v in gaps.items() if v}
    if not gaps:
        return None
    left = ", ".join(f"{k} {planned[k] - v} of {planned[k]}" for k, v in gaps.items())
    return {
        "verdict": "pending",
        "why": f"{what} is computed once all its planned runs are committed ({left} so far); "
        f"no test is computed on part of a plan",
    }


def decide(out_dir: str = proto.RESULTS_DIR) -> dict:
    """The scale study's verdicts from the committed rows, written as ``claims.json`` beside
    them with ``report.md``: the trend test (`analysis.statistics.trend`), each cell's gap, the
    depth claims decided by the ledger on the depth cell's registered runs alone, each
    registered amendment's claims (`_amendment`), the α landscape and the battery.  Each part is
    decided only once all of its planned runs are committed; before that it is "pending" with no
    statistic computed (a test on part of a plan, looked at as the rows arrive, would be an
    unregistered interim look)."""
    from analysis.ledger import ledger

    sc = proto.load_scale()
    doc = proto.check_registered(out_dir)
    rows = proto.read_rows(out_dir)
    plan = {st.name: len(st.runs) for st in proto.stages(sc)}
    gaps = proto.missing(rows, sc)
    depth_stage = next(st.name for st in proto.stages(sc) if st.name.endswith("-depth"))
    out = {
        "registration": {k: doc[k] for k in ("protocol_sha256", "registered_at", "commit_before")},
        "runs": len(rows),
        "planned": sum(plan.values()),
        "stages": {k: [plan[k] - gaps[k], plan[k]] for k in plan},  # committed, planned
        "depth_cell": list(sc["depth"]["cell"]),
    }
    trend_gaps = {k: v for k, v in gaps.items() if k != depth_stage}
    out["trend"] = _pending("the trend test", trend_gaps, plan) or _trend(rows, sc, doc, out_dir)
    out["trend_home"] = list(sc["from_confirmation"])
    depth_cell = f"L{sc['depth']['cell'][0]}-T{sc['depth']['cell'][1]}"
    depth_gaps = {k: gaps[k] for k in (depth_cell, depth_stage) if k in gaps}
    pend = _pending("the depth claims", depth_gaps, plan)
    if pend:
        out["depth"] = {c: pend for c in sc["depth"]["claims"]}
    else:
        cell = tuple(sc["depth"]["cell"])
        names = {st.name for st in proto.stages(sc) if st.cell == cell}
        depth = [r for r in rows if tuple(r["cell"]) == cell and r["stage"] in names]
        led = ledger.build(confirm.evidence_from_rows(depth, "scale study, depth cell"))
        out["depth"] = {
            e.id: {"verdict": e.verdict, "label": e.label, "here": e.here, "why": e.why}
            for e in led.entries
            if e.id in sc["depth"]["claims"]
        }
    out["amendments"] = {
        st.amendment: _amendment(st, rows, sc, out_dir, doc) for st in proto.amendment_stages()
    }
    confirm.check_registered()  # the landscape and the battery read its runs: its frozen ones
    conf = confirm.read_rows()
    land, rec = SPR.landscape_rows(out_dir), SPR.recall_rows(out_dir)
    want = {r["run"]["name"] for r in conf if r["scheme"] in ("fixed", "learned")}
    left = len(want - {r["name"] for r in land})
    out["landscape"] = _pending(
        "the α landscape", {"landscape": left}, {"landscape": len(want)}
    ) or SPR.landscape_verdict(land, conf)
    left = len({r["run"]["name"] for r in conf} - {r["name"] for r in rec})
    pend = _pending("the battery", {"recall": left}, {"recall": len(conf)})
    if pend:  # the same claims a decided battery lists (the ledger's bat-* entries)
        bat = [c["id"] for c in ledger.load_claims()[0] if c["id"].startswith("bat-")]
        out["battery"] = {c: pend for c in bat}
    else:
        out["battery"] = SPR.recall_verdicts(rec, conf)
        out["battery_family"] = SPR.recall_family(rec)
    out["battery_registered"] = [sc["recall"]["claim"]]  # the others: the ledger's own rules
    atomic_write(os.path.join(out_dir, "claims.json"), jsonio.dumps(out, indent=1))
    atomic_write(os.path.join(out_dir, "report.md"), report(out))
    return out


def _amendment(st: proto.Stage, rows: list[dict], sc: dict, out_dir: str, doc: dict) -> dict:
    """An amendment's claims: "pending" while it is unregistered or any planned run lacks its
    row; then each claim's registered comparison on the amendment's runs alone — a tier of its
    own, whose only test it is (R2: a family is the tests on one tier's runs) — at the
    amendment's window, with the equivalence test's own design power beside a tie.  A
    registration that is no longer today's, or rows other than the plan, are errors, never a
    quiet "pending"."""
    from analysis.ledger import compare as LC
    from analysis.ledger import ledger
    from analysis.statistics.power import tost_power

    name = st.amendment
    am = proto.load_amendments()[name]
    if not proto.is_registered(name, out_dir):
        why = f"amendment {name} is not registered (--register-amendment {name})"
        return {c: {"verdict": "pending", "why": why} for c in am["claims"]}
    reg = proto.check_amendment(name, out_dir, doc["protocol_sha256"])
    own = proto.amendment_rows(proto.amendment_folder(name, out_dir))
    _check_rows(own, st, am)
    plan = {st.name: len(st.runs)}
    pend = _pending(f"amendment {name}", {st.name: len(st.runs) - len(own)}, plan)
    if pend:
        return {c: pend for c in am["claims"]}
    tier = confirm.evidence_from_rows(own, f"scale amendment {name}").of("lm")[0]
    claims = {c["id"]: c for c in ledger.load_claims()[0]}
    out = {}
    for cid in am["claims"]:
        c = claims[cid]
        a, b, mode, _ = c["compare"]
        pr = LC.protocol(c)
        f = LC.pairwise(tier, a, b, "seeds", pr, c.get("rel_gap"))
        (pair,) = f.tests
        assert pair.W == am["window"], (pair.W, am["window"])  # its rows are checked above
        here = f.here
        if mode == "ties":  # the line's power is the difference test's: say the tie's own
            power = tost_power(pr.margin, am["plan"]["sigma_ln"], len(pair.ra), len(pair.rb),
                               0.025)  # fmt: skip
            here += (
                f"; the equivalence test's own power for a true tie within ±{pr.margin} "
                f"(α/2, the registered σ {am['plan']['sigma_ln']}): {power:.2f}"
            )
        out[cid] = {"verdict": f.verdict, "label": f.label, "here": here, "amendment": name,
                    "sha256": reg["protocol_sha256"], "registered_at": reg["registered_at"]}  # fmt: skip
    return out


def _check_rows(own: list[dict], st: proto.Stage, am: dict) -> None:
    """An amendment's rows are its plan's and nothing else: each planned (scheme, seed) once,
    at its cell, window and steps (rows merged twice, or from elsewhere, would change what the
    test reads — and which window it reads)."""
    seen = [(r["scheme"], r["seed"]) for r in own]
    extra = [k for k in seen if k not in st.runs] + [k for k in set(seen) if seen.count(k) > 1]
    wrong = [
        r["run"]["name"]
        for r in own
        if r["run"]["W"] != am["window"]
        or list(r["cell"]) != list(am["cell"])
        or r["setup"]["steps"] != am["steps"]
    ]
    if extra or wrong:
        raise ValueError(
            f"amendment rows outside its plan: {sorted(set(extra))} not planned or twice, "
            f"{wrong} at another cell, window or step count; keep one row a planned run"
        )


def _trend(rows: list[dict], sc: dict, doc: dict, out_dir: str) -> dict:
    """The registered trend test on every planned stagger and fixed run, and its figure."""
    from analysis.statistics.trend import trend_test

    try:
        t = trend_test(trend_runs(rows, confirm.read_rows(), sc))
    except ValueError as e:
        return {"verdict": "not tested here", "why": str(e)}
    alpha = 0.05
    verdict = "held" if t.p < alpha else "did not hold" if t.p_against < alpha else "not shown"
    out = {"verdict": verdict, "power": sc["trend"]["power"]}
    out.update(jsonio.clean(dataclasses.asdict(t)))
    from analysis.figures.plots import scale_trend

    out["caption"] = caption = (
        f"Registered test (claims.toml lab-scale-trend, frozen {doc['registered_at'][:10]}): "
        f"OLS of ln ppl on cell effects + stagger + stagger × Δcov/100, HC3, one-sided; "
        f"γ {t.slope:+.4f}: the gap changes by {-t.slope:+.4f} nats per 100 more distances "
        f"(95 % CI [{-t.ci[1]:+.4f}, {-t.ci[0]:+.4f}]), p {t.p:.3g}: {verdict}; power "
        f"{sc['trend']['power']} for the hypothesised {sc['trend']['slope_hypothesis']}"
        + (", so 'not shown' says little against a trend" if verdict == "not shown" else "")
        + f". {t.n_runs} runs, fp32; the fit is drawn over our cells only."
    )
    scale_trend(t, sc["paper_point"], os.path.join(out_dir, FIGURE), caption)
    return out


# ------------------------------------------------------------------------------------- report
def committed(out_dir: str = proto.RESULTS_DIR) -> dict:
    """The committed ``claims.json`` as decided (read, never re-decided: what a reader sees)."""
    with open(os.path.join(out_dir, "claims.json"), encoding="utf-8") as f:
        return json.load(f)


def _verdict(v: dict) -> str:
    return f"**{v['verdict']}**" + (f" ({v['label']})" if v.get("label") else "")


def _said(v: dict) -> str:
    return (v.get("here") or v.get("why") or "").replace("|", "/").replace("\n", " ")


def _clause_lines(text: str) -> str:
    """``text`` a clause a line: a break after each "; " outside inline code (a `` `a; b` `` span
    stays whole; a ``<br>`` inside backticks would print literally).  A code span is CommonMark's:
    a run of N backticks closed by the next run of exactly N; an unclosed run is literal text."""
    out, at = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [text[at : m.start()].replace("; ", ";<br>"), m.group(0)]
        at = m.end()
    return "".join(out + [text[at:].replace("; ", ";<br>")])


_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


def _claims_table(claims: dict) -> list[str]:
    """One row a claim.  Its id never breaks at a hyphen (a 1400-px notebook broke
    ``t1-pow2-stagger-beats-pow2-fixed`` over four lines), and its numbers read a clause a
    line: the verdict's own words, split at their semicolons."""
    return ["| claim | verdict | here |", "|---|---|---|"] + [
        f'| <code style="white-space:nowrap">{k}</code> | {_verdict(v)} | '
        f"{_clause_lines(_said(v))} |"
        for k, v in claims.items()
    ]


def report(doc: dict, figure: str | None = FIGURE, title: bool = True) -> str:
    """The scale study in one page (``report.md`` beside claims.json; notebook 05 shows it):
    what is committed stage by stage, the trend test and its figure, each cell's gap, the depth
    claims and each amendment's, the landscape and the battery — every sentence a verdict's own
    words, nothing computed here.  ``figure``: the trend figure's link (None: left out, for a
    page that shows the image itself); ``title=False``: no title of its own, its sections one
    level down (a page whose own heading introduces it, as notebook 05's)."""
    reg = doc["registration"]
    h = "##" if title else "###"
    out = [
        *(["# The scale study", ""] if title else []),
        f"Protocol `[scale]` of claims.toml, frozen {reg['registered_at'][:16]} UTC "
        f"(SHA-256 `{reg['protocol_sha256'][:12]}…`) before any of its own runs; "
        f"{doc['runs']} of the {doc['planned']} runs its four stages plan committed "
        "(`benchmarks/results/scale/runs.jsonl`). A part is decided only once all of its "
        "planned runs are committed.",
        "",
        "| stage | committed | planned |",
        "|---|---:|---:|",
    ]
    out += [f"| `{k}` | {c} | {n} |" for k, (c, n) in doc.get("stages", {}).items()]
    t = doc["trend"]
    # one paragraph: the verdict, then why (pending) or its numbers (the figure's caption)
    said = f": {_said(t)}" if _said(t) else f" — {t['caption']}" if t.get("caption") else ""
    out += ["", f"{h} The trend (`lab-scale-trend`)", "", f"{_verdict(t)}{said}"]
    if t.get("cells"):
        out += [""]
        out += [f"![the stagger's gain against coverage]({figure})", ""] if figure else []
        out += ["| cell (L, T) | Δ coverage | runs (stagger + fixed) | gap, nats | 95 % CI |",
                "|---|---:|---:|---:|---|"]  # fmt: skip
        out += [
            f"| ({c['cell'][0]}, {c['cell'][1]}) | {c['coverage_difference']} | "
            f"{c['n_stagger']} + {c['n_fixed']} | {c['gap']:+.4f} | "
            f"[{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}] |"
            for c in t["cells"]
        ]
        home = doc.get("trend_home")
        if home:
            out += ["", f"The ({home[0]}, {home[1]}) cell's runs are the confirmation's stagger and "
                    "fixed runs (`benchmarks/results/confirm/runs.jsonl`), not the scale study's own."]  # fmt: skip
    L, T = doc.get("depth_cell", ("?", "?"))
    out += ["", f"{h} The claims only depth decides (L = {L}, T = {T})", ""]
    later = {
        cid: name
        for name, claims in doc.get("amendments", {}).items()
        for cid, v in claims.items()
        if v["verdict"] != "pending"
    }
    out += _claims_table(
        {k: {**v, "here": f"{_said(v)} (decided by amendment `{later[k]}` below)"} if k in later
         else v for k, v in doc["depth"].items()}
    )  # fmt: skip
    for name, claims in doc.get("amendments", {}).items():
        out += ["", f"{h} Amendment `{name}`", ""]
        reg = next((v for v in claims.values() if v.get("sha256")), None)
        if reg:  # decided: its registration as checked when it was decided
            out += [f"Registered {reg['registered_at'][:16]} UTC (SHA-256 `{reg['sha256'][:12]}…`), "
                    "before its runs.", ""]  # fmt: skip
        out += ["A cell the registered plan lacked, registered apart: it decides only the claims "
                "below, which the tables above left undecided.", ""]  # fmt: skip
        out += _claims_table(claims)
    out += ["", f"{h} The α landscape and the battery", ""]
    out += _claims_table({"lm-alpha-flat-landscape": doc["landscape"], **doc["battery"]})
    others = [k for k in doc["battery"] if k not in doc.get("battery_registered", [])]
    if doc.get("battery_registered") and others:
        out += ["", f"`[scale]` registers {', '.join(f'`{k}`' for k in doc['battery_registered'])}"
                f" alone; {', '.join(f'`{k}`' for k in others)} are the ledger's standing "
                "battery rules read on the same runs, not registered by `[scale]`."]  # fmt: skip
    out += _family_lines(doc.get("battery_family", {}))
    return "\n".join(out) + "\n"


_TASK_WORDS = {"assoc_recall": "associative recall", "ruler_vt": "RULER", "lego": "LEGO"}


def _family_lines(fam: dict) -> list[str]:
    """The battery's family reading (`scale_probes.recall_family`) under its table, in words."""
    if not fam:
        return []
    one = next(iter(fam.values()))
    out = ["", f"The battery's registered rule tests each of the {one['runs']} runs on its own at "
           f"{one['alpha']:g}, with no control over the family: were every run at chance, one at "
           f"least would land above it with probability {one['familywise_at_chance']:.2f}. "
           "Beside it, a reading that is not a verdict (chosen after the rows were seen): the "
           "same tests with Holm over the runs. The runs' accuracies are not tested together: "
           "every run answers the battery's one item set, so a mean away from chance may be "
           "those items' doing. Fresh items tell, under two protocols each registered before any "
           "of its items was scored: recall above chance, run by run "
           "(`benchmarks/results/recall-fresh/report.md`), and each task at chance by "
           "equivalence, configuration by configuration "
           "(`benchmarks/results/battery-fresh/report.md`).", "",
           "| task | runs above chance: raw / Holm | accuracy over the runs (mean, range) | chance |",
           "|---|---:|---|---:|"]  # fmt: skip
    for task, f in fam.items():
        out.append(
            f"| {_TASK_WORDS.get(task, task)} | {f['above_raw']} / {f['above_holm']} of "
            f"{f['runs']} | {f['mean_acc']:.3f} ({f['min_acc']:.3f}–{f['max_acc']:.3f}; "
            f"{f['items']} items) | {f['chance']:.3f} |"
        )
    return out
