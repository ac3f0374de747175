"""The battery at chance, by equivalence, on fresh items: a registered confirmation of what the
scale study's battery verdicts could not say.

The ledger's battery rule (`analysis/ledger/checks.py` `_battery`, registered for the scale
study) tests each run alone with no family control and cannot show "at chance" — only fail to
show "above".  This protocol asks the paper's question the way the ledger's rules R1/R2 ask a
tie: per task and configuration, an exact binomial equivalence test (TOST) of accuracy within
chance ± a registered margin, its "above" and "below" hypotheses beside it, Holm over all of
them; every confirmation checkpoint on items of its own seed, none scored before.  Frozen
(`register`) before any item is scored; its own folder and hash; it re-decides nothing the
scale study decided (those verdicts stand by their registered rule).

    python -m analysis.experiments.study.battery_fresh --register          # before any scoring
    python -m analysis.experiments.study.battery_fresh --score [--restore] [--limit N]
    python -m analysis.experiments.study.battery_fresh --decide
"""

from __future__ import annotations

import os
import sys

from analysis.experiments.study import confirm, fresh
from analysis.experiments.study import registration as REG
from lab.util import jsonio
from lab.util.files import atomic_write
from probes.battery_run import TASKS  # the battery's tasks, in its order

__all__ = ["PROTOCOL", "RESULTS_DIR", "protocol_hash", "register", "run_score", "decide"]

RESULTS_DIR = os.path.join(REG.ROOT, "benchmarks", "results", "battery-fresh")
MODULE = "analysis.experiments.study.battery_fresh"

#: What is frozen: every field enters the hash (`protocol_hash`).
PROTOCOL = {
    "name": "battery-fresh",
    "version": 1,
    "claims": {
        "ruler_vt": "lab-fresh-ruler-at-chance: RULER variable tracking (8 distractors, 2-4 "
        "hops) is at chance for every configuration of the confirmation's models: accuracy "
        "within 1/9 +- margin",
        "lego": "lab-fresh-lego-at-chance: LEGO over Z/2 (chains of 2-4) is at chance for every "
        "configuration: accuracy within 1/2 +- margin",
        "assoc_recall": "lab-fresh-recall-at-chance: associative recall (12 pairs) is at chance "
        "for every configuration: accuracy within 1/12 +- margin",
    },
    "paper": "section 4.6: the battery at chance and recall zero for every model "
    "(bat-ruler-chance, bat-lego-chance, bat-assoc-recall-zero; their registered verdicts in "
    "the scale study stand)",
    "runs": "every run of benchmarks/results/confirm/runs.jsonl (35), scored on its finished "
    "checkpoint (confirm.finished_folder; confirm.restore retrains a missing one, which must "
    "reproduce its committed perplexity)",
    "items": "probes.battery.run_battery at its defaults (RULER hops 2, 3, 4 at 8 "
    "distractors; LEGO lengths 2, 3, 4; recall 12 pairs): n items a RULER or LEGO cell (3n a "
    "task a run), recall_n recall items a run (a second call, recall alone, same item seed)",
    "n": 1000,
    "recall_n": 3000,
    "item_seed": "seed_base + the run's place in the registration's list (0-34): each run its "
    "own items, none scored before (the scale battery used item seed 0, recall-fresh 1)",
    "seed_base": 1000,
    "unit": "a configuration (the confirmation's schemes): the correct answers of its runs "
    "summed over their items, one binomial count (the runs' item sets are independent draws)",
    "margin": 0.02,
    "margin_why": "an absolute accuracy margin fixed before scoring: finer than the battery's "
    "3-standard-error band at 300 items (+-0.054) and than the excess the exploratory recall "
    "showed on its 100 items (+0.045)",
    "tests": "per task and configuration, three hypotheses on the pooled count, exact binomial: "
    "equivalence (statsmodels.stats.proportion.binom_tost on [chance - margin, chance + "
    "margin]), above (accuracy > chance + margin; scipy.stats.binomtest 'greater'), below "
    "(accuracy < chance - margin; 'less')",
    "family": "Holm at alpha over all 45 hypotheses (3 tasks x 5 configurations x 3), which "
    "share these items (statsmodels.stats.multitest.multipletests, 'holm')",
    "alpha": 0.05,
    "verdict": "per task: held when the equivalence hypothesis is rejected after Holm for every "
    "configuration; did not hold when 'above' or 'below' is rejected after Holm for some "
    "configuration; not shown otherwise. Decided once every run has its row, never on part",
    "reading": "beside the verdicts, deciding nothing: each run's one-sided binomial test of "
    "accuracy > chance per task, Holm over the runs",
    "power_at": {"ruler_vt": 0.118, "lego": 0.498, "assoc_recall": 0.077},
    "power_note": "power at the exploratory rates (the scale battery's means for RULER and "
    "LEGO, recall-fresh's mean for recall), each configuration against Holm's first threshold "
    "alpha/45, every configuration at once",
}


def protocol_hash(protocol: dict = PROTOCOL) -> str:
    return fresh.protocol_hash(protocol)


#: the battery's defaults the protocol's text names (8 distractors, 12 pairs, 2–4 hops and
#: chains): not in the hash, so `chance` refuses to decide if they change
FROZEN_DEFAULTS = {"N_DISTRACTORS": 8, "ASSOC_PAIRS": (12,), "HOPS": (2, 3, 4),
                   "LEGO_LENGTHS": (2, 3, 4)}  # fmt: skip


def chance(task: str) -> float:
    """The forced-choice rate of a task at the protocol's settings (probes.battery)."""
    import probes.battery as PB

    now = {k: getattr(PB, k) for k in FROZEN_DEFAULTS}
    if now != FROZEN_DEFAULTS:
        raise ValueError(
            f"probes.battery's defaults changed since battery-fresh was registered ({now} vs "
            f"{FROZEN_DEFAULTS}): its rows were scored on the registered ones; restore them"
        )
    return {"ruler_vt": 1 / (PB.N_DISTRACTORS + 1), "lego": 1 / 2,
            "assoc_recall": 1 / PB.ASSOC_PAIRS[0]}[task]  # fmt: skip


def items_per_run(task: str, protocol: dict = PROTOCOL) -> int:
    return protocol["recall_n"] if task == "assoc_recall" else 3 * protocol["n"]


def plan_power(schemes: list[str], protocol: dict = PROTOCOL) -> dict[str, float]:
    """Each task's registered power: every configuration's equivalence shown at once (the
    product over configurations, whose items are independent) at the exploratory rate, each
    against Holm's first threshold (a lower bound on Holm's power)."""
    from analysis.statistics.power import binomial_tost_power

    m, alpha, margin = 3 * 3 * len(set(schemes)), protocol["alpha"], protocol["margin"]
    out = {}
    for task in TASKS:
        c, prod = chance(task), 1.0
        for s in sorted(set(schemes)):
            items = schemes.count(s) * items_per_run(task, protocol)
            rate = protocol["power_at"][task]
            prod *= binomial_tost_power(rate, items, c - margin, c + margin, alpha / m)
        out[task] = prod
    return out


def register(out_dir: str = RESULTS_DIR, confirm_rows: list[dict] | None = None) -> dict:
    """Freeze the protocol before any item is scored: refused once a row exists."""
    rows_ = confirm_rows or confirm.read_rows()

    def power(names):
        pw = plan_power([r["scheme"] for r in rows_])
        return "; ".join(f"{t} {p:.2f}" for t, p in pw.items()) + " — " + PROTOCOL["power_note"]

    return fresh.register(PROTOCOL, out_dir, rows_, power)


def check_registered(out_dir: str = RESULTS_DIR) -> dict:
    return fresh.check_registered(PROTOCOL, out_dir, MODULE)


def rows(out_dir: str = RESULTS_DIR) -> list[dict]:
    return fresh.rows(out_dir)


def score(run_dir: str, place: int, protocol: dict = PROTOCOL) -> dict:
    """One checkpoint on its own items (item seed seed_base + place): each task's items and
    count correct (RULER and LEGO from one battery call, recall from a second, recall alone)."""
    from lab.publish.export import run_model
    from probes.battery import run_battery
    from probes.battery_run import rows_of, settings

    seed = protocol["seed_base"] + place
    r = run_model(run_dir, "cpu", log=lambda *a: None)
    vocab = r.config.model.vocab_size
    tasks = {}
    for n, kw, keep in ((protocol["n"], {}, ("ruler_vt", "lego")),
                        (protocol["recall_n"], {"hops": (), "lengths": ()}, ("assoc_recall",))):  # fmt: skip
        rep = run_battery(r.model, vocab, n=n, seed=seed, **kw)
        for row in rows_of(rep, n, seed, r.step, settings(vocab)):
            if row.task in keep:
                tasks[row.task] = {"items": row.items, "correct": row.correct, "acc": row.accuracy}
    return {"item_seed": seed, "step": r.step, "tasks": tasks}


def run_score(out_dir: str = RESULTS_DIR, runs_dir="runs/confirm", restore=False, limit=None,
              log=print) -> list[str]:  # fmt: skip
    """Score the registered runs without a row, one at a time, each row appended as it is done
    (a run without its finished checkpoint restored first with ``restore``)."""
    return fresh.run_score(
        check_registered(out_dir), out_dir, lambda folder, place: score(folder, place), runs_dir,
        restore, limit, log,
        lambda r: ", ".join(f"{t} {v['acc']:.3f}" for t, v in r["tasks"].items()),
    )  # fmt: skip


def tests(ordered: list[dict], protocol: dict = PROTOCOL) -> list[dict]:
    """The 45 hypotheses: per task and configuration, the pooled count's equivalence, above and
    below p-values, Holm-adjusted over all of them (a pure function of the rows)."""
    from scipy.stats import binomtest
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import binom_tost, proportion_confint

    margin, cells = protocol["margin"], []
    schemes = list(dict.fromkeys(r["scheme"] for r in ordered))
    for task in TASKS:
        c = chance(task)
        lo, up = c - margin, c + margin
        for s in schemes:
            k = sum(r["tasks"][task]["correct"] for r in ordered if r["scheme"] == s)
            n = sum(r["tasks"][task]["items"] for r in ordered if r["scheme"] == s)
            ci = proportion_confint(k, n, alpha=2 * protocol["alpha"], method="beta")
            cells.append({
                "task": task, "scheme": s, "runs": sum(r["scheme"] == s for r in ordered),
                "items": n, "correct": k, "acc": k / n, "ci90": [float(ci[0]), float(ci[1])],
                "chance": c, "p": {
                    "equivalent": float(binom_tost(k, n, lo, up)[0]),
                    "above": float(binomtest(k, n, up, alternative="greater").pvalue),
                    "below": float(binomtest(k, n, lo, alternative="less").pvalue),
                },
            })  # fmt: skip
    flat = [(i, h) for i, cell in enumerate(cells) for h in ("equivalent", "above", "below")]
    rej, adj, *_ = multipletests([cells[i]["p"][h] for i, h in flat], protocol["alpha"], "holm")
    for (i, h), r, a in zip(flat, rej, adj):
        cells[i].setdefault("p_holm", {})[h] = float(a)
        cells[i].setdefault("rejected", {})[h] = bool(r)
    return cells


def verdicts(cells: list[dict]) -> dict[str, str]:
    """Each task's verdict by the registered rule."""
    out = {}
    for task in TASKS:
        mine = [c for c in cells if c["task"] == task]
        if all(c["rejected"]["equivalent"] for c in mine):
            out[task] = "held"
        elif any(c["rejected"]["above"] or c["rejected"]["below"] for c in mine):
            out[task] = "did not hold"
        else:
            out[task] = "not shown"
    return out


def run_reading(ordered: list[dict], protocol: dict = PROTOCOL) -> dict[str, dict]:
    """The reading beside the verdicts: runs above chance per task, raw and after Holm."""
    from scipy.stats import binomtest
    from statsmodels.stats.multitest import multipletests

    out = {}
    for task in TASKS:
        ps = [binomtest(r["tasks"][task]["correct"], r["tasks"][task]["items"], chance(task),
                        alternative="greater").pvalue for r in ordered]  # fmt: skip
        rej = multipletests(ps, protocol["alpha"], "holm")[0]
        out[task] = {"raw": int(sum(p < protocol["alpha"] for p in ps)), "holm": int(sum(rej)),
                     "min_p": float(min(ps))}  # fmt: skip
    return out


def decide(out_dir: str = RESULTS_DIR) -> dict:
    """The registered verdicts (pending until every registered run has its row), written as
    ``claims.json`` and ``report.md``."""
    reg = check_registered(out_dir)
    ordered, why = fresh.complete_rows(reg, out_dir)
    if ordered is None:
        out = {"verdict": "pending", "why": why}
    else:
        cells = tests(ordered)
        out = {"verdicts": verdicts(cells), "cells": cells, "reading": run_reading(ordered)}
    doc = {"registration": {k: reg[k] for k in ("protocol_sha256", "registered_at", "power")},
           "claims": PROTOCOL["claims"], "margin": PROTOCOL["margin"],
           "runs": len(rows(out_dir)), "planned": len(reg["runs"]), **out}  # fmt: skip
    atomic_write(os.path.join(out_dir, "claims.json"), jsonio.dumps(doc, indent=1))
    atomic_write(os.path.join(out_dir, "report.md"), report(doc))
    return doc


NAMES = {"ruler_vt": "RULER", "lego": "LEGO", "assoc_recall": "associative recall"}


def report(doc: dict) -> str:
    reg = doc["registration"]
    lines = [
        "# The battery at chance, by equivalence, on fresh items", "",
        f"Registered {reg['registered_at'][:16]} UTC (SHA-256 `{reg['protocol_sha256'][:12]}…`), "
        f"before any of its items was scored; {doc['runs']} of {doc['planned']} runs scored. "
        f"Margin ±{doc['margin']} accuracy around chance; Holm over 45 hypotheses. What is "
        "tested: each configuration's mean accuracy over its runs' items (one pooled count), "
        "not each model; the runs one by one are the reading under each table. "
        f"Power: {reg['power']}.", "",
    ]  # fmt: skip
    if "verdicts" not in doc:
        return "\n".join(lines + [f"**pending**: {doc['why']}"]) + "\n"
    for task in TASKS:
        rd = doc["reading"][task]
        lines += [
            f"## {NAMES[task]}: **{doc['verdicts'][task]}**", "",
            f"Claim: {doc['claims'][task]}.", "",
            "| configuration | runs | items | accuracy (90 % CI, unadjusted) | chance | p equivalent / above / below (Holm over 45) |",
            "|---|---:|---:|---|---:|---|",
        ]  # fmt: skip
        for c in (c for c in doc["cells"] if c["task"] == task):
            ph = c["p_holm"]
            lines.append(
                f"| {c['scheme']} | {c['runs']} | {c['items']} | {c['acc']:.4f} "
                f"({c['ci90'][0]:.4f}–{c['ci90'][1]:.4f}) | {c['chance']:.4f} | "
                f"{ph['equivalent']:.2g} / {ph['above']:.2g} / {ph['below']:.2g} |"
            )
        lines += ["", f"Reading (deciding nothing): {rd['raw']} of {doc['runs']} runs above "
                  f"chance raw, {rd['holm']} after Holm over the runs (smallest p {rd['min_p']:.2g}).",
                  ""]  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    return fresh.main(MODULE, __doc__, register, run_score, decide, argv)


if __name__ == "__main__":
    sys.exit(main())
