"""The claims ledger in a report: the summary line (the paper's claims only), one table of
every paper claim with the paper's numbers beside ours, the claims the paper's own numbers
contradict (and how), the seed statistics of each LM
comparison (mean ± std, margin in pooled σ, the registered test's raw and Holm-adjusted p,
Welch t-interval, the paper's effect inside or outside it, the detectable gap, power) beside the
paper's, what the evidence here cannot decide (and what would), and the lab's own findings apart.
"""

from __future__ import annotations

import pandas as pd

from analysis.ledger.ledger import GRID_HINT, STUDY_HINT, Ledger
from analysis.reports.report import Report

__all__ = ["ledger_section", "ledger_frame", "stats_frame"]


def ledger_frame(entries) -> pd.DataFrame:
    """One row a claim: id, where, claim, paper, here, verdict, evidence (tier), and
    ``paper contradicts`` ("yes" where the paper's own numbers contradict the claim; the
    report lists how below the table)."""
    cols = ["id", "where", "claim", "paper", "here", "verdict", "evidence", "paper contradicts"]
    return pd.DataFrame(
        [
            {
                "id": e.id,
                "where": e.where,
                "claim": e.claim,
                "paper": e.paper,
                "here": e.here or e.why,
                "verdict": e.shown,
                "evidence": e.evidence.get("tier") or "—",
                "paper contradicts": "yes" if e.paper_contradicts else "",
            }
            for e in entries
        ],
        columns=cols,
    )


def stats_frame(entries) -> pd.DataFrame:
    """The seed statistics of every decided LM comparison (the claims with ``mean_a``): the
    means in ppl, the tested gap (``effect``), its Welch t-interval, the paper's gap and the
    smallest gap the seeds detect (``mde``) in the protocol's metric (nats of ln ppl), the raw
    and Holm-adjusted p of the registered test, and the verdict."""
    rows = []
    for e in entries:
        s = e.stats
        if "mean_a" not in s:
            continue
        ci = s.get("ci") or [None, None]
        rows.append(
            {
                "id": e.id,
                "W": s.get("W"),
                "a": s["a"],
                "mean_a": s["mean_a"],
                "std_a": s["std_a"],
                "n_a": s["n_a"],
                "b": s["b"],
                "mean_b": s["mean_b"],
                "std_b": s["std_b"],
                "n_b": s["n_b"],
                "gap": s["gap"],
                "margin_sigma": s["margin_sigma"],
                "test": s.get("test"),
                "effect": s.get("effect"),
                "ci_low": ci[0],
                "ci_high": ci[1],
                "paper_effect": s.get("paper_effect"),
                "magnitude": s.get("magnitude"),
                "p_raw": s.get("p_raw"),
                "p_adjusted": s.get("p_adjusted"),
                "family": s.get("family"),
                "direction": s.get("direction"),
                "mde": s.get("mde"),
                "power": s.get("power"),
                "seeds_needed": s.get("seeds_needed"),
                "paper": e.paper,
                "verdict": e.shown,
            }
        )
    df = pd.DataFrame(rows)
    for c in ("W", "n_a", "n_b", "seeds_needed"):
        if c in df:
            df[c] = df[c].astype("Int64")
    return df


def ledger_section(report: Report, led: Ledger, title: str = "The paper's claims") -> None:
    """The ledger's blocks (tables ``ledger``, ``claims_stats``, ``lab_findings``)."""
    report.heading(title)
    report.text(
        f"**{led.summary()}.** Each claim is decided by the strongest evidence here (a "
        "paper-scale probe grid over the reduced probe, study runs over the demo's short runs); "
        "*not shown* means tested but not decisive (the statistics, the smallest gap the seeds "
        "could detect and the power the test had for the paper's gap are beside it), *at "
        "chance* marks a result that cannot support anything. The comparisons over seeds are "
        "tested as registered in claims.toml (protocol hashed in claims.json), their p-values "
        "Holm-adjusted within each family; *did not hold (magnitude not reproduced)* means "
        "the paper's effect lies outside the 95 % interval. Sources: "
        + (", ".join(led.sources) or "none")
        + "."
    )
    report.table(ledger_frame(led.paper()), name="ledger", decimals=2)
    flagged = led.contradicted()
    if flagged:
        report.heading("Where the paper's own numbers contradict it", level=3)
        report.text(
            "These claims are contradicted by numbers the paper itself gives (its tables, or "
            "parameters it states); the verdict above is still the lab's own test."
        )
        report.bullets(f"`{e.id}` ({e.where}) — {e.paper_contradicts}" for e in flagged)
    st = stats_frame(led.paper())
    if not st.empty:
        report.table(
            st,
            name="claims_stats",
            decimals=3,
            caption="the LM comparisons over seeds: mean ± sample std (ppl), gap = mean(b) − "
            "mean(a) (positive: a better) and in pooled σ; the registered test (Welch "
            "two-sided, or TOST for a tie) on ln ppl: effect, its 95 % Welch t-interval, the "
            "paper's effect (magnitude: inside / outside the interval) and mde (the gap these "
            "seeds detect with 80 % power) in nats; p raw and Holm-adjusted within the "
            "family; power for the paper's relative gap and the seeds a side 80 % power needs",
        )
    undecided = led.cannot_decide()
    if undecided:
        report.heading("What the evidence here cannot decide", level=3)
        report.bullets(
            f"`{e.id}` — {e.why or 'not tested'}; would be tested by: {e.decides}"
            for e in undecided
        )
        report.text(
            f"The language-model claims need runs at a scale that uses long context: "
            f"{STUDY_HINT}. The probe claims are decided at the paper's scale by {GRID_HINT}."
        )
    if led.lab():
        report.heading("The lab's own findings (beyond the paper; not counted above)", level=3)
        report.table(ledger_frame(led.lab()), name="lab_findings", decimals=2)
