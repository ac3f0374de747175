"""The scale study's two side studies on the confirmation's checkpoints (claims.toml
``[scale] landscape`` and ``recall``): the held-out loss over a grid of fixed α, and the battery
with associative recall — each a committed row a run, and the registered rule that decides it.
Apart from `analysis.experiments.study.scale` because they train nothing: they read
``runs/confirm`` where it exists.  The scale module checks the registration and passes its
folder and the registered settings in, so this module never imports it (no cycle).

    python -m analysis.experiments.study.scale --landscape       # α grid on the confirmation's runs
    python -m analysis.experiments.study.scale --recall          # the battery on them
"""

from __future__ import annotations

import dataclasses
import os

from analysis.experiments.study import confirm
from lab.util import jsonio

__all__ = [
    "LANDSCAPE",
    "RECALL",
    "landscape_rows",
    "recall_rows",
    "run_landscape",
    "landscape_verdict",
    "run_recall",
    "recall_verdicts",
    "recall_family",
    "missing",
]


def missing(out_dir: str, side: str) -> list[str]:
    """The confirmation runs ``side`` (``landscape``: its fixed and learned runs; ``recall``:
    every run) has no committed row for, in the confirmation's order — what a resumed side
    study still has to restore and score."""
    rows = landscape_rows(out_dir) if side == "landscape" else recall_rows(out_dir)
    done = {r["name"] for r in rows}
    schemes = ("fixed", "learned") if side == "landscape" else None
    return [r["run"]["name"] for r in confirm.read_rows()
            if (schemes is None or r["scheme"] in schemes) and r["run"]["name"] not in done]  # fmt: skip


# ---------------------------------------------------------------------------------- landscape
LANDSCAPE = "landscape.jsonl"


def landscape_rows(out_dir: str) -> list[dict]:
    """The committed landscape rows, one a confirmation run on the α grid."""
    return jsonio.read_rows(os.path.join(out_dir, LANDSCAPE))


def run_landscape(
    land: dict, out_dir: str, runs_dir: str = "runs/confirm", log=print, limit=None, names=None
) -> list[dict]:
    """``[scale] landscape``: each confirmation fixed and learned run's held-out loss over the
    α grid ``land`` (the registered ``[scale] landscape``; `lab.evaluation.landscape`), one
    committed row a run in ``landscape.jsonl``.  Reads
    the confirmation's checkpoints, so it runs where they are (``runs_dir``); a run without its
    finished checkpoint there is skipped and named; ``names``: only those runs."""
    from lab.evaluation.evalrun import open_run
    from lab.evaluation.evaluate import heldout_splits
    from lab.evaluation.landscape import alpha_landscape

    path = os.path.join(out_dir, LANDSCAPE)
    done = {r["name"] for r in landscape_rows(out_dir)}
    todo = [r for r in confirm.read_rows() if r["scheme"] in ("fixed", "learned")]
    todo = [
        r
        for r in todo
        if r["run"]["name"] not in done and (names is None or r["run"]["name"] in names)
    ]
    todo = todo[: limit if limit else None]
    rows = []
    for r in todo:
        name = r["run"]["name"]
        folder = os.path.join(runs_dir, name)
        if confirm.finished_folder(r, runs_dir) is None:  # missing, or a killed restore's
            log(f"   {name}: no finished checkpoint in {folder}; skipped (restore it)")
            continue
        run = open_run(folder, log=lambda *a: None)
        (toks,) = heldout_splits(run.data).values()
        pts = alpha_landscape(run.model, toks, land["alphas"], land["one_layer"])
        row = {"name": name, "scheme": r["scheme"], "seed": r["seed"],
               "points": [dataclasses.asdict(p) for p in pts]}  # fmt: skip
        jsonio.append_row(path, row)
        rise = max(p.loss for p in pts) - pts[0].loss
        log(f"   {name}: largest rise over the grid {rise:+.4f} nats")
        rows.append(row)
    return rows


def landscape_verdict(rows: list[dict], confirm_rows: list[dict]) -> dict:
    """The registered rule for "flat": each run's largest rise in held-out ln ppl over the grid
    (against its own trained α) below σ, the seed noise of ln ppl at the tier (the
    confirmation's fixed and learned runs, pooled) — a one-sided one-sample t
    (`decide.compare_to`) whose reversal (rises above σ) is the test against."""
    import math

    from analysis.statistics.decide import Protocol, compare_to
    from analysis.statistics.stats import pooled_std

    by = {"fixed": [], "learned": []}
    for r in confirm_rows:
        if r["scheme"] in by and r["run"].get("ppl"):
            by[r["scheme"]].append(math.log(r["run"]["ppl"]))
    sigma = pooled_std(by["fixed"], by["learned"])
    rises = [max(p["loss"] for p in r["points"]) - r["points"][0]["loss"] for r in rows]
    if len(rises) < 2 or not sigma > 0:
        return {"verdict": "not tested here", "why": "fewer than two runs on the grid"}
    # "rise below σ" as compare_to's "above": the negated rises against −σ
    c = compare_to([-x for x in rises], -sigma, Protocol("landscape", sided="one"))
    verdict = "held" if c.p_raw < 0.05 else "did not hold" if c.p_against < 0.05 else "not shown"
    mean = sum(rises) / len(rises)
    here = (
        f"each run's largest rise in held-out ln ppl over the α grid, against its trained α: "
        f"mean {mean:.4f} nats (range {min(rises):.4f}–{max(rises):.4f}, {len(rises)} runs) "
        f"against σ {sigma:.4f} of ln ppl over the tier's seeds; one-sided t p {c.p_raw:.2g} "
        f"(rises above σ: p {c.p_against:.2g}): {verdict}"
    )
    # each scheme apart, beside the registered pooled test (a reading, not a verdict: the
    # claim is about the learned α, and the fixed-α runs carry most of the pooled test)
    parts = {}
    for scheme in sorted({r["scheme"] for r in rows}):
        x = [v for r, v in zip(rows, rises, strict=True) if r["scheme"] == scheme]
        parts[scheme] = {"n": len(x), "mean_rise": sum(x) / len(x),
                         "above_sigma": sum(v > sigma for v in x)}  # fmt: skip
        if len(x) >= 2:
            parts[scheme]["p"] = compare_to(
                [-v for v in x], -sigma, Protocol("landscape", sided="one")
            ).p_raw
    here += "; each scheme apart (a reading, not the registered test): " + ", ".join(
        f"{k} mean {v['mean_rise']:.4f} over {v['n']} runs, {v['above_sigma']} above σ"
        + (f", p {v['p']:.2g}" if "p" in v else "")
        for k, v in parts.items()
    )
    return {"verdict": verdict, "here": here, "sigma": sigma, "rises": rises, "n": len(rises),
            "mean_rise": mean, "p": c.p_raw, "p_against": c.p_against, "schemes": parts}  # fmt: skip


# ------------------------------------------------------------------------------------- recall
RECALL = "recall.jsonl"


def recall_rows(out_dir: str) -> list[dict]:
    """The committed battery rows, one a confirmation run."""
    return jsonio.read_rows(os.path.join(out_dir, RECALL))


def run_recall(out_dir: str, runs_dir: str = "runs/confirm", log=print, n=100, names=None):
    """``[scale] recall``: the battery (`probes.battery_run.score_run`: RULER, LEGO and the
    associative recall) on every confirmation run (``names``: only those), one committed row a
    run in ``recall.jsonl``; reads the confirmation's checkpoints, so it runs where they are."""
    from probes.battery_run import score_run

    path = os.path.join(out_dir, RECALL)
    done = {r["name"] for r in recall_rows(out_dir)}
    for r in confirm.read_rows():
        name = r["run"]["name"]
        folder = os.path.join(runs_dir, name)
        if names is not None and name not in names:
            continue
        if name in done:
            continue
        if confirm.finished_folder(r, runs_dir) is None:  # missing, or a killed restore's
            log(f"   {name}: no finished checkpoint in {folder}; skipped (restore it)")
            continue
        rb = score_run(folder, n=n, seed=0)
        row = {"name": name, "scheme": r["scheme"], "seed": r["seed"],
               "battery": {x.task: {"acc": x.accuracy, "chance": x.chance, "n": x.items,
                                    "at_chance": x.at_chance, "p": x.p_value} for x in rb.rows}}  # fmt: skip
        jsonio.append_row(path, row)
        log(f"   {name}: recall {row['battery']['assoc_recall']['acc']:.3f}")


def recall_verdicts(recall_rows: list[dict], confirm_rows: list[dict]) -> dict:
    """The battery claims (bat-assoc-recall-zero and its RULER / LEGO siblings) by the ledger's
    own battery rule, on the confirmation's runs with their battery rows."""
    from analysis.ledger import ledger

    bat = {r["name"]: r["battery"] for r in recall_rows}
    rows = []
    for r in confirm_rows:
        if r["run"]["name"] in bat:
            rows.append({**r, "run": {**r["run"], "battery": bat[r["run"]["name"]]}})
    if not rows:
        return {}
    led = ledger.build(confirm.evidence_from_rows(rows, "scale study: the battery"))
    # a claim not tested here carries its why (the ledger's), not an empty line
    return {e.id: {"verdict": e.verdict, "label": e.label, "here": e.here or e.why}
            for e in led.entries if e.id.startswith("bat-")}  # fmt: skip


def recall_family(recall_rows: list[dict], alpha: float = 0.05) -> dict:
    """Beside the registered battery rule, which tests each run on its own at ``alpha`` with no
    control over the family (were 35 runs all at chance, one at least would land "above" 83 %
    of the time): per task, how many runs the same one-sided binomial tests put above chance
    raw and after Holm over the runs (statsmodels; valid under any dependence between runs),
    and the runs' accuracies.  No test of their mean: every run answers the battery's one item
    set, so the runs are not independent draws and their mean's distance from chance may be
    those items' doing.  A reading, not a verdict: chosen after the rows were seen."""
    from statsmodels.stats.multitest import multipletests

    out = {}
    for task in sorted({t for r in recall_rows for t in r["battery"]}):
        cells = [r["battery"][task] for r in recall_rows if task in r["battery"]]
        if len(cells) < 2:
            continue
        accs = [c["acc"] for c in cells]
        holm = multipletests([c["p"] for c in cells], alpha=alpha, method="holm")[0]
        out[task] = {
            "runs": len(cells), "items": cells[0]["n"], "chance": cells[0]["chance"],
            "alpha": alpha, "above_raw": sum(c["p"] < alpha for c in cells),
            "above_holm": int(holm.sum()), "familywise_at_chance": 1 - (1 - alpha) ** len(cells),
            "mean_acc": sum(accs) / len(accs), "min_acc": min(accs), "max_acc": max(accs),
        }  # fmt: skip
    return out
