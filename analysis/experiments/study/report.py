"""The study's comparisons and its report: the chosen configuration, the calibration curve (a
figure in `analysis.figures.style`'s one style), the seeds and their power, and each comparison at the
chosen rung by the ledger's rules (`analysis.statistics.decide`: the claim's registered test on ln
perplexity, Holm across the study's own family of comparisons, Welch t-intervals, the paper's
effect inside or outside them) with mean ± std beside it.

Why two answers per claim: the study declared its rung comparisons (and planned its seeds for
them) as one family of eight; the claims ledger decides each claim by the protocol claims.toml
registers (its family, the longest-trained tier with seeds). The ledger's is the verdict; the
rung comparison is shown beside it as exploratory, never in its place."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pandas as pd

from analysis.ledger.ledger import load_claims, scheme_pairs
from analysis.reports.report import Report
from analysis.statistics.decide import Decision, Protocol, compare, settle

__all__ = ["verdicts", "calibration_figure", "study_report", "PAPER"]

#: The study's family, declared before its runs: each claims.toml id whose registered protocol
#: decides the comparison (its two schemes and its test read from there), with the paper's
#: numbers as the report shows them (Table 5 at W = 12 over 3 seeds; Table 1 for learned vs
#: fixed, which Table 5 lacks).
_DECLARED = (
    ("t5-stagger-beats-fixed", "42.08 vs 43.18 (−2.5 %)"),
    ("t5-coprime-ties-stagger", "42.18 vs 42.08"),
    ("t5-stagger-beats-pow2-stagger", "42.08 vs 42.84"),
    ("t5-stagger-beats-learned", "42.08 vs 42.85"),
    ("t1-learned-beats-fixed", "42.85 vs 43.18"),
    ("t5-pow2-stagger-beats-fixed", "42.84 vs 43.18"),
)


def _declared() -> tuple:
    by_id = {
        c["id"]: (a, b, c["compare"][2]) for (a, b), c in scheme_pairs(load_claims()[0]).items()
    }
    return tuple(
        (f"{by_id[cid][0]} {by_id[cid][2]} {by_id[cid][1]}", *by_id[cid][:2], "ppl", paper, cid)
        for cid, paper in _DECLARED
    )


#: (claim, a, b, measure, the paper's numbers, the claims.toml id that decides it): the declared
#: comparisons, then Table 3's two on degradation, which no registered comparison of seeds
#: decides. measure "ppl": perplexity at T (lower is better), compared as ln ppl like the
#: ledger; "deg": ppl(4T)/ppl(T) − 1 (lower is better).
PAPER = _declared() + (
    ("stagger beats dense at 4× length", "stagger", "dense", "deg", "−1.3 % vs +201 %", None),
    ("fixed beats dense at 4× length", "fixed", "dense", "deg", "−1.2 % (W=8) vs +201 %", None),
)
#: The Holm family of the study's comparisons at its chosen rung (declared here, before runs).
FAMILY = "study"


def _values(rows, measure: str) -> list[float]:
    out = [
        r["ppl"].get(1, r["ppl"].get("1")) if measure == "ppl" else r["degradation"] for r in rows
    ]
    return [float(v) for v in out if v is not None and math.isfinite(v)]


def _mean_std(x) -> str:
    if not x:
        return "—"
    sd = statistics.stdev(x) if len(x) > 1 else math.nan
    return f"{statistics.fmean(x):.4g} ± {sd:.2g} (n={len(x)})"


def _protocol(claim_id: str | None) -> Protocol:
    """The registered protocol of `claim_id` (claims.toml), in the study's family; a
    degradation comparison (no claim of its own) a two-sided Welch test with no paper size."""
    if claim_id is None:
        return Protocol(FAMILY, "welch", "two", metric="degradation")
    from analysis.ledger.compare import protocol
    from analysis.ledger.ledger import load_claims

    (claim,) = [c for c in load_claims()[0] if c["id"] == claim_id]
    return replace(protocol(claim), family=FAMILY)


def _row(claim, paper, a, b, xa, xb, d: Decision, k=1, unit="") -> dict:
    """One comparison's row, its numbers from the `Decision`."""
    c = d.comparison
    answer = {"held": "yes", "did not hold": "no"}.get(d.verdict, d.verdict)
    if d.reason == "magnitude not reproduced":
        answer = "no (magnitude not reproduced)"
    pe = c.protocol.paper_effect
    line = (
        f"{c.protocol.test} p={c.p_raw:.3g}, Holm p={d.p_adjusted:.3g} ({FAMILY} family); gap "
        f"{c.gap:+.4f} {c.protocol.metric}, 95 % Welch CI [{c.ci[0]:+.4f}, {c.ci[1]:+.4f}]"
        + ("" if pe is None else f", the paper's {pe:+.4f} {d.magnitude}")
        + (f"; detectable with 80 % power: {c.mde:.4f}" if d.verdict == "not shown" else "")
    )
    return {
        "claim": claim,
        "paper": paper,
        "answer": answer,
        "here": f"{a} {_mean_std([k * x for x in xa])}; {b} {_mean_std([k * x for x in xb])}"
        + unit,
        "line": line,
        **d.stats(),
    }


def verdicts(
    cal: dict, cmp_: dict, sc, longer: dict | None = None, ledger: dict | None = None
) -> list[dict]:
    """One dict a claim: the rung rule's answer on dense's degradation, then each comparison
    of `PAPER` at the chosen rung, tested as claims.toml registers it (perplexities as ln ppl)
    and Holm-adjusted together (`analysis.statistics.decide.settle`, family `FAMILY`), stagger vs fixed
    carrying its planned power; then stagger vs fixed at the top rung when stage 3 ran
    (``longer``) — shown as *exploratory*: a second look at the same claim is not its verdict.
    ``ledger`` ({claim id: verdict}, the claims ledger on the study's store) gives each row
    with a registered claim its verdict (``verdict``); the rung's ``answer`` is the study's own
    comparison beside it."""
    chosen = cal["chosen"]
    rows = {s: list(v) for s, v in cmp_["runs"].items()}
    if not rows.get("dense"):  # a study from before dense had seeds of its own in stage 2
        rows["dense"] = [r for r in cal["rows"] if r["scheme"] == "dense" and r["steps"] == chosen]
    top = max(sc.factors)
    deg = _values(rows["dense"], "deg")
    out = [
        {
            "claim": f"dense attention degrades at {top}× the training length",
            "id": "t3-dense-degrades",
            "paper": "+201 % at 4× (Table 3)",
            "answer": "yes" if cal["degrades"] else "no",
            "here": f"dense {_mean_std([100 * d for d in deg])} % at {chosen} steps",
            "line": f"rule: mean ≥ +{sc.min_rise:.0%} and > {sc.spread_k:g} std above 0; "
            f"smallest rung meeting it: {chosen if cal['degrades'] else 'none'}",
            "n_a": len(deg),
            "n_b": 0,
        }
    ]
    tested = []  # (index in out, claim, paper, a, b, xa, xb, comparison, k, unit)
    for claim, a, b, measure, paper, claim_id in PAPER:
        if measure == "deg" and top != 4:
            claim = claim.replace("4×", f"{top}×")
        xa, xb = _values(rows.get(a, []), measure), _values(rows.get(b, []), measure)
        if not xa or not xb:
            missing = a if not xa else b
            why = (cmp_.get("same") or {}).get(missing) or "budget or scale"
            why = f"not run ({missing}: {why})"
            out.append(
                {
                    "claim": claim,
                    "id": claim_id,
                    "paper": paper,
                    "answer": "not tested",
                    "here": why,
                    "line": why,
                    "n_a": len(xa),
                    "n_b": len(xb),
                }
            )
            continue
        to = math.log if measure == "ppl" else float
        c = compare([to(x) for x in xa], [to(x) for x in xb], _protocol(claim_id))
        k, unit = (100, " %") if measure == "deg" else (1, "")
        tested.append((len(out), claim, paper, a, b, xa, xb, c, k, unit))
        out.append({"id": claim_id})
    decisions = settle([t[7] for t in tested])
    for (i, claim, paper, a, b, xa, xb, _, k, unit), d in zip(tested, decisions):
        out[i].update(_row(claim, paper, a, b, xa, xb, d, k, unit))
        if claim == "stagger beats fixed":
            out[i]["power"] = (cmp_.get("plan") or {}).get("achieved")
        noise = (cmp_.get("eval_noise") or {}).get(claim)
        if noise:  # evaluation noise (paired window bootstrap) beside the seed noise
            out[i]["eval_se"] = noise["eval"]["se"]
            out[i]["seed_se"] = noise["seed_se"]
    if longer and longer.get("runs"):
        xa, xb = (_values(longer["runs"].get(s, []), "ppl") for s in ("stagger", "fixed"))
        if len(xa) > 1 and len(xb) > 1:
            pr = replace(_protocol("t5-stagger-beats-fixed"), family="exploratory")
            (d,) = settle([compare([math.log(x) for x in xa], [math.log(x) for x in xb], pr)])
            claim = f"stagger beats fixed after {longer['steps']} steps (exploratory)"
            row = _row(claim, PAPER[0][4], "stagger", "fixed", xa, xb, d)
            row["line"] = row["line"].replace(f"({FAMILY} family)", "(alone)")
            out.append({**row, "id": PAPER[0][5], "answer": f"exploratory: {row['answer']}"})
    for row in out:
        row["verdict"] = (ledger or {}).get(row.get("id"), "—")
    return out


def calibration_figure(cal: dict, tokens_per_step: int, top: int):
    """Degradation at the top factor against training tokens, one line a scheme (mean over
    seeds), each seed a point; the chosen rung marked."""
    from analysis.figures import style

    fig = style.figure(720, 420)
    ax = fig.subplots()
    by = {}
    for r in cal["rows"]:
        if r["degradation"] is not None and math.isfinite(r["degradation"]):
            by.setdefault(r["scheme"], {}).setdefault(r["steps"], []).append(100 * r["degradation"])
    for i, (s, pts) in enumerate(by.items()):
        c = style.config_color(s, i)
        xs = sorted(pts)
        ax.plot(
            [x * tokens_per_step for x in xs],
            [statistics.fmean(pts[x]) for x in xs],
            marker="o",
            color=c,
            label=s,
        )
        for x in xs:
            ax.scatter([x * tokens_per_step] * len(pts[x]), pts[x], color=c, s=12, alpha=0.5)
    ax.axvline(cal["chosen"] * tokens_per_step, color="0.5", ls="--", lw=1)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel(f"ppl at {top}×T vs T (%)")
    ax.set_title("Calibration: length extrapolation against training")
    style.legend_outside(ax, title="scheme")
    return fig


def study_report(res: dict, ledger_entries=None, lab_entries=None) -> Report:
    """The report of `analysis.experiments.study.study.run_study`'s results; ``ledger_entries``: the claims
    ledger's LM entries on the study's store (`analysis.experiments.study.study.study_ledger`), ``lab_entries``
    its entries on the lab's own LM findings."""
    sc, cal, cmp_ = res["settings"], res["calibration"], res["comparison"]
    top = max(sc["factors"])
    r = Report("fiblab study: the paper's LM claims at a CPU scale chosen by measurement")
    r.text(
        f'`fiblab demo --scale {res["size"]}`. Runs marked `"scale": "study"` in the store. '
        f"T={sc['seq_len']}, W={sc['window']} (sparse), {sc['tokens_per_step']} tokens a step, "
        f"every run trained and evaluated in {res.get('precision', 'the precision not recorded')}, "
        f"no LR decay (each rung continues the one below exactly). Estimated "
        f"{res['estimated_s'] / 60:.1f} of {sc['budget_s'] / 60:.0f} min budget; this invocation "
        f"trained {len(res['trained'])} runs and reused {len(res['reused'])}."
    )
    _calibration_section(r, res, sc, cal, top)
    _runs_section(r, res, cmp_, top)
    _power_section(r, cmp_)
    _noise_section(r, cmp_)
    _verdicts_section(r, res)
    _ledger_section(r, ledger_entries)
    _lab_section(r, res, lab_entries)
    return r


def _calibration_section(r: Report, res: dict, sc: dict, cal: dict, top) -> None:
    """The rung rule, the chosen rung, every calibration run and the curve."""
    r.heading("Calibration of length extrapolation")
    r.text(
        f"Rung rule: {res['rule']}. Chosen: **{cal['chosen']} steps** "
        + (
            "(dense degrades measurably there)."
            if cal["degrades"]
            else "— no rung within the budget showed dense degrading measurably; the curve "
            "below is the evidence, and stage 2 ran at the largest rung."
        )
    )
    rows = [
        {
            "scheme": x["scheme"],
            "seed": x["seed"],
            "steps": x["steps"],
            "tokens": x["steps"] * sc["tokens_per_step"],
            **{f"ppl_{f}x": x["ppl"].get(f, x["ppl"].get(str(f))) for f in sc["factors"]},
            f"change_{top}x_percent": 100 * x["degradation"]
            if x["degradation"] is not None
            else None,
            f"last_block_vs_alone_{top}x_percent": 100 * x["block_change"]
            if x.get("block_change") is not None
            else None,
        }
        for x in cal["rows"]
    ]
    r.table(
        pd.DataFrame(rows),
        caption=f"change_{top}x: whole-window ppl at {top}×T against T (the rule's measure, the "
        f"paper's Table 3); last_block_vs_alone: the last T positions of the {top}×T windows "
        f"against the same tokens scored in T-windows (position-matched, SPEC §10.2).",
        decimals=3,
        name="calibration",
    )
    r.figure(calibration_figure(cal, sc["tokens_per_step"], top), "calibration")


def _runs_section(r: Report, res: dict, cmp_: dict, top) -> None:
    """Every run of the comparisons (stage 2, and stage 3 where it ran)."""
    runs = [x for rows in cmp_["runs"].values() for x in rows]
    runs += [x for rows in ((res.get("longer") or {}).get("runs") or {}).values() for x in rows]
    if runs:
        r.heading("The comparisons' runs")
        r.table(
            pd.DataFrame(
                [
                    {
                        "scheme": x["scheme"],
                        "seed": x["seed"],
                        "steps": x["steps"],
                        "ppl_1x": x["ppl"].get(1, x["ppl"].get("1")),
                        f"change_{top}x_percent": 100 * x["degradation"]
                        if x["degradation"] is not None
                        else None,
                    }
                    for x in runs
                ]
            ),
            caption="every run of the comparisons: stage 2 at the chosen rung, stage 3 (when "
            "it ran) at the top rung",
            decimals=3,
            name="comparison_runs",
        )


def _power_section(r: Report, cmp_: dict) -> None:
    """The first batch's power plan and the power the seeds that ran achieved."""
    r.heading("Seeds and power")
    fp, pl, pu = cmp_.get("first_plan"), cmp_.get("plan"), cmp_.get("plan_sigma_upper")
    if fp:
        r.text(
            f"First batch: σ's upper 95 % bound {fp['sigma']:.3f} (pooled over stagger and "
            f"fixed), paper gap {fp['rel_gap']:.1%} of {fp['mean']:.2f} → d ≥ {fp['d']:.2f}; "
            f"seeds needed a side for {fp['target']:.0%} power at α = {fp['alpha']:.4g}: "
            f"{fp['needed']}."
        )
    else:
        r.text("The first batch's σ was zero or undefined: no power plan.")
    if pl and pl.get("achieved") is not None:
        r.text(
            f"Ran {pl['seeds']} a side: σ = {pl['sigma']:.3f}, power for the paper's gap at "
            f"α = {pl['alpha']:.4g}: {pl['achieved']:.2f}"
            + (
                f" ({pu['achieved']:.2f} at σ's upper 95 % bound {pu['sigma']:.3f})."
                if pu and pu.get("achieved") is not None
                else "."
            )
        )
    if cmp_.get("skipped"):
        r.text("Not run (budget): " + ", ".join(cmp_["skipped"]) + ".")
    for s, why in (cmp_.get("same") or {}).items():
        r.text(f"Not run: {s} — {why}.")


def _noise_section(r: Report, cmp_: dict) -> None:
    """Each gap's evaluation noise beside its seed noise (where the study scored it)."""
    noise = cmp_.get("eval_noise") or {}
    if noise:
        r.heading("Evaluation noise beside seed noise")
        r.text(
            "Each gap in ln perplexity, its evaluation noise — the standard deviation of the gap "
            "over a paired bootstrap of the held-out windows (the same resampled windows for "
            "every run of both sides, `analysis.statistics.eval_noise`) — and its seed noise (Welch's "
            "standard error of the per-run values). Where the evaluation noise is the smaller, "
            "more seeds, not more held-out text, would sharpen the verdict."
        )
        r.table(
            pd.DataFrame(
                [
                    {
                        "comparison": claim,
                        "gap (nats)": v["eval"]["gap"],
                        "evaluation SE": v["eval"]["se"],
                        "seed SE": v["seed_se"],
                        "windows": v["eval"]["windows"],
                    }
                    for claim, v in noise.items()
                ]
            ),
            decimals=4,
            name="eval_noise",
        )


def _verdicts_section(r: Report, res: dict) -> None:
    """The ledger's verdict and the study's own answer at the chosen rung, per claim."""
    r.heading("Verdicts")
    r.text(
        "*verdict*: the claims ledger's, by the analysis claims.toml registers for the claim "
        "(its Holm family, the longest-trained tier with seeds; the section below and "
        "claims.json). *at the chosen rung*: this study's comparison at that rung, Holm over "
        f"the study's own family of {len(PAPER)} declared before its runs (its seeds were "
        "planned for it) — exploratory beside the verdict where the two differ. — : no "
        "registered claim, or no ledger on the study's store."
    )
    r.table(
        pd.DataFrame(
            [
                {
                    "claim": v["claim"],
                    "verdict": v.get("verdict", "—"),
                    "at the chosen rung": v["answer"],
                    **{k: v.get(k) for k in ("paper", "here", "line", "power")},
                }
                for v in res["verdicts"]
            ]
        ),
        decimals=3,
        name="verdicts",
    )


def _ledger_section(r: Report, ledger_entries) -> None:
    """The claims ledger's LM entries on the study's store (none: left out)."""
    if not ledger_entries:
        return
    from analysis.ledger.report import ledger_frame, stats_frame

    counts = {}
    for e in ledger_entries:
        counts[e.verdict] = counts.get(e.verdict, 0) + 1
    r.heading("The claims ledger's language-model claims on these runs")
    r.text(
        f"{len(ledger_entries)} LM claims of the paper: "
        + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        + ". Decided by `analysis.ledger.ledger` from every finished run in the store (study runs "
        "over demo runs; a comparison with seeds on both sides over one seed a side); "
        "`fiblab report --store` shows the whole ledger."
    )
    r.table(ledger_frame(ledger_entries), name="ledger", decimals=2)
    st = stats_frame(ledger_entries)
    if not st.empty:
        r.table(st, name="claims_stats", decimals=3)


def _lab_section(r: Report, res: dict, entries) -> None:
    """The lab's own arms (stage 4) and the ledger's verdicts on the lab's LM findings: apart
    from the paper's claims and never counted for them."""
    lab = res.get("lab") or {}
    if not lab and not entries:
        return
    from analysis.ledger.report import ledger_frame, stats_frame

    r.heading("The lab's own findings on these runs (not the paper's)")
    if lab.get("skipped"):
        r.text("The lab's arms were not run: over the budget.")
    for s, rows in (lab.get("runs") or {}).items():
        alphas = ", ".join(f"{a:.4f}" for a in (lab.get("alphas") or {}).get(s, []))
        ppl = _values(rows, "ppl")
        r.text(
            f"**{s}** (α per layer {alphas}) at {lab['steps']} steps: {_mean_std(ppl)} held-out "
            "perplexity; the stagger's runs at that rung are the comparison's other side."
        )
    if entries:
        r.table(ledger_frame(entries), name="lab_ledger", decimals=2)
        st = stats_frame(entries)
        if not st.empty:
            r.table(st, name="lab_claims_stats", decimals=3)
