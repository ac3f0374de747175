"""Associative recall on fresh items: a registered confirmation of what the scale study's battery
left open.

The scale study decided ``bat-assoc-recall-zero`` by the ledger's battery rule, which tests each
run on its own at 0.05 with no control over the family: 12 of the confirmation's 35 runs came out
above chance, none after Holm over the runs, and every run had answered the same 100 items
(benchmarks/results/scale/report.md).  Whether these models recall above chance is therefore
still open.  This protocol asks it once, frozen (`register`) before any of its items is scored:
every confirmation checkpoint on 1000 recall items of a seed no analysis has used, one exact
binomial test a run, Holm over the runs.  Its own folder, its own hash; it re-decides nothing the
scale study decided.

    python -m analysis.experiments.study.recall_fresh --register          # before any scoring
    python -m analysis.experiments.study.recall_fresh --score [--restore] [--limit N]
    python -m analysis.experiments.study.recall_fresh --decide
"""

from __future__ import annotations

import os
import sys

from analysis.experiments.study import fresh
from analysis.experiments.study import registration as REG
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = ["PROTOCOL", "RESULTS_DIR", "protocol_hash", "register", "run_score", "decide"]

RESULTS_DIR = os.path.join(REG.ROOT, "benchmarks", "results", "recall-fresh")
MODULE = "analysis.experiments.study.recall_fresh"

#: What is frozen: every field enters the hash (`protocol_hash`).
PROTOCOL = {
    "name": "recall-fresh",
    "version": 1,
    "claim": "lab-recall-above-chance: some of the confirmation's models recall above chance on "
    "associative-recall items no analysis has seen",
    "runs": "every run of benchmarks/results/confirm/runs.jsonl (35), its checkpoint as "
    "confirm.restore reproduces it (held-out perplexity within RESTORE_TOLERANCE)",
    "task": "assoc_recall",
    "pairs": 12,
    "items": 1000,
    "item_seed": 1,
    "test": "per run: exact one-sided binomial test of correct > items / pairs "
    "(scipy.stats.binomtest, alternative 'greater')",
    "family": "Holm over all the runs (statsmodels.stats.multitest.multipletests, 'holm')",
    "alpha": 0.05,
    "verdict": "held: Holm rejects one run or more (those runs recall above chance); not shown: "
    "none does, which does not show that recall is zero (no equivalence bound is registered); "
    "decided once every run has its row, never on part",
    "power_at": 0.127,  # the runs' mean recall on item seed 0 (scale study): the exploratory rate
}


def protocol_hash(protocol: dict = PROTOCOL) -> str:
    return fresh.protocol_hash(protocol)


def register(out_dir: str = RESULTS_DIR, confirm_rows: list[dict] | None = None) -> dict:
    """Freeze the protocol before any item is scored: refused once a row exists."""
    from analysis.statistics.power import binomial_power

    def power(names):
        p = PROTOCOL
        one = binomial_power(p["power_at"], p["items"], 1 / p["pairs"], p["alpha"] / len(names))
        return (f"{one:.3f}: one run at the exploratory rate {p['power_at']} against Holm's "
                f"first threshold alpha/{len(names)} on {p['items']} items")  # fmt: skip

    return fresh.register(PROTOCOL, out_dir, confirm_rows, power)


def check_registered(out_dir: str = RESULTS_DIR) -> dict:
    return fresh.check_registered(PROTOCOL, out_dir, MODULE)


def rows(out_dir: str = RESULTS_DIR) -> list[dict]:
    return fresh.rows(out_dir)


def score(run_dir: str, protocol: dict = PROTOCOL) -> dict:
    """One checkpoint on the protocol's recall items: items, correct, accuracy, the binomial p."""
    from lab.publish.export import run_model
    from probes.battery import run_battery
    from probes.battery_run import chance_test

    r = run_model(run_dir, "cpu", log=lambda *a: None)
    n, pairs = protocol["items"], protocol["pairs"]
    rep = run_battery(r.model, r.config.model.vocab_size, n=n, seed=protocol["item_seed"],
                      hops=(), lengths=(), pairs=(pairs,))["assoc_recall"]  # fmt: skip
    correct = round(rep["acc"] * n)  # the battery's float32 accuracy holds k / n exactly
    p, _ = chance_test(correct, n, 1 / pairs)  # the battery's own test (its level is ours)
    return {"items": n, "correct": correct, "acc": correct / n, "p": p, "step": r.step}


def run_score(out_dir: str = RESULTS_DIR, runs_dir="runs/confirm", restore=False, limit=None,
              log=print) -> list[str]:  # fmt: skip
    """Score the registered runs without a row, one at a time, each row appended as it is done
    (a run without its finished checkpoint restored first with ``restore``)."""
    return fresh.run_score(
        check_registered(out_dir), out_dir, lambda folder, place: score(folder), runs_dir,
        restore, limit, log,
        lambda r: f"recall {r['acc']:.3f} ({r['correct']}/{r['items']}), p {r['p']:.2g}",
    )  # fmt: skip


def decide(out_dir: str = RESULTS_DIR) -> dict:
    """The registered verdict (pending until every registered run has its row), written as
    ``claims.json`` and ``report.md``."""
    from statsmodels.stats.multitest import multipletests

    reg = check_registered(out_dir)
    ordered, why = fresh.complete_rows(reg, out_dir)
    p = PROTOCOL
    if ordered is None:
        out = {"verdict": "pending", "why": why}
    else:
        rej, p_holm, *_ = multipletests([r["p"] for r in ordered], alpha=p["alpha"], method="holm")
        above = [r["name"] for r, x in zip(ordered, rej) if x]
        accs = [r["acc"] for r in ordered]
        out = {
            "verdict": "held" if above else "not shown",
            "above": above, "p_holm": dict(zip(reg["runs"], map(float, p_holm))),
            "above_raw": sum(r["p"] < p["alpha"] for r in ordered),
            "mean_acc": sum(accs) / len(accs), "min_acc": min(accs), "max_acc": max(accs),
            "here": f"{len(above)} of {len(ordered)} runs above chance after Holm "
            f"(raw {sum(r['p'] < p['alpha'] for r in ordered)}); recall {min(accs):.3f}–"
            f"{max(accs):.3f}, mean {sum(accs) / len(accs):.3f}, against {1 / p['pairs']:.3f} on "
            f"{p['items']} fresh items a run",
        }  # fmt: skip
    doc = {"registration": {k: reg[k] for k in ("protocol_sha256", "registered_at", "power")},
           "claim": PROTOCOL["claim"], "runs": len(rows(out_dir)), "planned": len(reg["runs"]), **out}  # fmt: skip
    atomic_write(os.path.join(out_dir, "claims.json"), jsonio.dumps(doc, indent=1))
    atomic_write(os.path.join(out_dir, "report.md"), report(doc))
    return doc


def report(doc: dict) -> str:
    reg = doc["registration"]
    lines = [
        "# Associative recall on fresh items", "",
        f"Registered {reg['registered_at'][:16]} UTC (SHA-256 `{reg['protocol_sha256'][:12]}…`), "
        f"before any of its items was scored; {doc['runs']} of {doc['planned']} runs scored. "
        f"Claim: {doc['claim']}. Power: {reg['power']}.", "",
        f"**{doc['verdict']}**: {doc.get('here') or doc.get('why', '')}",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return fresh.main(MODULE, __doc__, register, run_score, decide, argv)


if __name__ == "__main__":
    sys.exit(main())
