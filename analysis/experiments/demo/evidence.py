"""The main job's results as the claims ledger's evidence (`from_demo`): each language model's
result (`analysis.experiments.demo.job.lm_stage`'s dict: its training, its evaluation on one dataset, its
battery) read as an `LMRun` (`demo_run`, through the readers of its label, perplexity,
extrapolation cells, α drift and same-token change), joined to a store's runs when there is one."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from analysis.ledger.evidence import (
    LM_RANK,
    Evidence,
    LMRun,
    Tier,
    add_timings,
    from_store,
    probe_tiers,
)
from lab.ladder.drift import alpha_drift

__all__ = ["lm_label", "lm_ppl", "lm_cells", "lm_drift", "extra_context", "demo_run", "from_demo"]


def lm_label(lm: dict) -> str:
    """'dense', 'fixed', 'stagger', 'coprime', 'learned' (or the schedule's repr)."""
    ev = lm["eval"]
    if ev.get("attention") == "dense":
        return "dense"
    s = ev.get("schedule")
    return s if isinstance(s, str) else "custom"


def lm_drift(lm: dict) -> float:
    """An LM run's α drift (`lab.ladder.drift.alpha_drift`): from ``lm["alpha_trajectory"]``
    ({"points": α per layer at each logged step, "init": α per layer at the start}, what the
    store holds and the notebook reads) when present, else from the final α against α = 1
    (a learned schedule's default start)."""
    t = lm.get("alpha_trajectory")
    if t and t.get("points"):
        return alpha_drift(t["points"], t["init"])
    final = lm["train"]["alphas"]
    return alpha_drift([final], [1.0] * len(final))


def _dataset(lm: dict) -> dict:
    return next(iter(lm["eval"]["datasets"].values()))


def lm_ppl(lm: dict) -> float:
    """Held-out perplexity at the training length (whole windows)."""
    p = _dataset(lm).get("perplexity")
    return p["ppl"] if p else math.nan


def lm_cells(lm: dict) -> dict[tuple[int, str], dict]:
    """{(factor, policy): cell dict} of the run's extrapolation (evaluated cells only)."""
    return {
        (c["factor"], c["policy"]): c
        for c in _dataset(lm).get("cells", [])
        if not c.get("skipped") and c.get("ppl") is not None
    }


def extra_context(lm: dict, factor: int | None = None) -> float | None:
    """% change of the same tokens' ppl: blocks j ≥ 1 of the ``factor``× windows (default: the
    run's longest, rung set recomputed) against the same tokens in their own training-length
    windows, averaged over blocks; None without those numbers."""
    cells = lm_cells(lm)
    if factor is None:
        factor = max((f for f, p in cells if p == "recompute"), default=None)
    c = cells.get((factor, "recompute"))
    if not c or len(c.get("same_tokens") or []) != len(c["blocks"]) or len(c["blocks"]) < 2:
        return None
    return float(
        np.mean(
            [
                100.0 * (b["ppl"] / s["ppl"] - 1)
                for b, s in zip(c["blocks"][1:], c["same_tokens"][1:])
            ]
        )
    )


def demo_run(lm: dict) -> LMRun:
    """The main job's result dict of one LM (`analysis.experiments.demo.job.lm_stage`) as an `LMRun`."""
    cells = lm_cells(lm)
    label = lm_label(lm)
    paper = "dense" if label == "dense" else f"{lm.get('base') or 'fib'}/{label}"
    bins = next(iter(lm["eval"]["datasets"].values())).get("bins")
    return LMRun(
        name=lm.get("name", label),
        label=paper,
        W=lm.get("window"),
        seed=lm.get("seed"),
        ppl=lm_ppl(lm),
        ext={f: c["ppl"] for (f, p), c in cells.items() if p == "recompute"},
        frozen={f: c["ppl"] for (f, p), c in cells.items() if p == "freeze"},
        same_tokens=extra_context(lm),
        bins=tuple(bins["loss"]) if bins else None,
        drift=lm_drift(lm) if label == "learned" else None,
        battery=lm.get("battery") if lm.get("battery") and "skipped" not in lm["battery"] else None,
    )


def from_demo(
    cov: dict | None, records: list[dict], lms: list[dict], store=None, grids=(), timings=()
) -> Evidence:
    """The main job's evidence: with a store, every run it holds (the job's own LMs read back
    with their configs, plus e.g. study runs), the job's same-token and battery numbers added
    to its runs; without one, the job's results alone. Plus the stored grids."""
    by_name = {lm["name"]: demo_run(lm) for lm in lms}
    if store is not None:
        ev = from_store(store, records, grids, timings=timings)
        tiers = []
        for t in ev.tiers:
            if t.kind == "lm":
                runs = tuple(
                    replace(
                        r,
                        same_tokens=by_name[r.name].same_tokens,
                        battery=r.battery or by_name[r.name].battery,
                    )
                    if r.name in by_name
                    else r
                    for r in t.lms
                )
                t = replace(t, lms=runs)
            tiers.append(t)
        ev.tiers = tiers
    else:
        ev = Evidence(sources=["this job"])
        tiers, where = probe_tiers([], records, grids)
        ev.tiers += tiers
        ev.sources += where
        if lms:
            scale = "study" if any(n.startswith("study-") for n in by_name) else "demo"
            ev.tiers.append(
                Tier(
                    "lm",
                    scale,
                    (LM_RANK[scale], 0),
                    f"{len(lms)} LM runs of this job",
                    scale == "study",
                    lms=tuple(by_name.values()),
                )
            )
        add_timings(ev, timings)
    ev.coverage = cov
    return ev
