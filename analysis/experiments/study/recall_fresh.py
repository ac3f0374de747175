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

import argparse
import hashlib
import json
import os
import sys

from analysis.experiments.study import confirm
from analysis.experiments.study import registration as REG
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = ["PROTOCOL", "RESULTS_DIR", "protocol_hash", "register", "run_score", "decide"]

RESULTS_DIR = os.path.join(REG.ROOT, "benchmarks", "results", "recall-fresh")
ROWS = "rows.jsonl"

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
    return hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()


def register(out_dir: str = RESULTS_DIR, confirm_rows: list[dict] | None = None) -> dict:
    """Freeze the protocol before any item is scored: refused once a row exists."""
    if rows(out_dir):
        raise ValueError(
            f"{os.path.join(out_dir, ROWS)} holds scored runs: it cannot be frozen now"
        )
    if os.path.exists(os.path.join(out_dir, REG.REGISTRATION)):
        raise ValueError(f"{out_dir} is registered already: a changed protocol is a new one")
    from analysis.statistics.power import binomial_power

    names = [r["run"]["name"] for r in (confirm_rows or confirm.read_rows())]
    p = PROTOCOL
    one = binomial_power(p["power_at"], p["items"], 1 / p["pairs"], p["alpha"] / len(names))
    return REG.freeze(
        out_dir, protocol_hash(), protocol=p, runs=names,
        power=f"{one:.3f}: one run at the exploratory rate {p['power_at']} against Holm's first "
        f"threshold alpha/{len(names)} on {p['items']} items",
        note="frozen before any fresh item was scored; decides only its own claim",
    )  # fmt: skip


def check_registered(out_dir: str = RESULTS_DIR) -> dict:
    return REG.frozen(
        os.path.join(out_dir, REG.REGISTRATION), protocol_hash(),
        "python -m analysis.experiments.study.recall_fresh --register",
        "restore PROTOCOL as it was frozen",
    )  # fmt: skip


def rows(out_dir: str = RESULTS_DIR) -> list[dict]:
    return jsonio.read_rows(os.path.join(out_dir, ROWS))


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
    (restored first with ``restore`` when its checkpoint folder is missing)."""
    reg = check_registered(out_dir)
    done = {r["name"] for r in rows(out_dir)}
    conf = {r["run"]["name"]: r for r in confirm.read_rows()}
    todo = [n for n in reg["runs"] if n not in done][:limit]
    for name in todo:
        folder = os.path.join(runs_dir, name)
        if confirm.finished_folder(conf[name], runs_dir) is None:  # missing, or part-trained
            if not restore:
                raise ValueError(
                    f"no finished checkpoint in {folder}: pass --restore to retrain (or finish) it"
                )
            confirm.restore(names={name}, runs_dir=runs_dir)
        row = {"name": name, "scheme": conf[name]["scheme"], "seed": conf[name]["seed"],
               **score(folder)}  # fmt: skip
        jsonio.append_row(os.path.join(out_dir, ROWS), row)
        log(
            f"   {name}: recall {row['acc']:.3f} ({row['correct']}/{row['items']}), p {row['p']:.2g}"
        )
    return todo


def decide(out_dir: str = RESULTS_DIR) -> dict:
    """The registered verdict (pending until every registered run has its row), written as
    ``claims.json`` and ``report.md``."""
    from statsmodels.stats.multitest import multipletests

    reg = check_registered(out_dir)
    got = {r["name"]: r for r in rows(out_dir)}
    if set(got) - set(reg["runs"]):
        raise ValueError(
            f"rows for runs the registration lacks: {sorted(set(got) - set(reg['runs']))}"
        )
    steps = {r["run"]["name"]: r["setup"]["steps"] for r in confirm.read_rows()}
    early = [
        f"{n} (step {r['step']} of {steps[n]})" for n, r in got.items() if r["step"] != steps[n]
    ]
    if early:  # the protocol scores each run's finished model, nothing earlier
        raise ValueError(
            f"rows scored an unfinished checkpoint: {', '.join(early)}; remove those rows and "
            f"score them again (--score --restore)"
        )
    left = [n for n in reg["runs"] if n not in got]
    p = PROTOCOL
    if left:
        out = {"verdict": "pending",
               "why": f"{len(got)} of {len(reg['runs'])} runs scored; no test is computed on part"}  # fmt: skip
    else:
        ordered = [got[n] for n in reg["runs"]]
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
           "claim": PROTOCOL["claim"], "runs": len(got), "planned": len(reg["runs"]), **out}  # fmt: skip
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
    ap = argparse.ArgumentParser(prog="python -m analysis.experiments.study.recall_fresh",
                                 description=__doc__.split("\n\n")[0])  # fmt: skip
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--register", action="store_true", help="freeze the protocol (before scoring)")
    g.add_argument("--score", action="store_true", help="score the runs without a row")
    g.add_argument("--decide", action="store_true", help="the registered verdict")
    ap.add_argument("--restore", action="store_true", help="retrain a missing checkpoint first")
    ap.add_argument("--limit", type=int, default=None, help="score at most N runs")
    args = ap.parse_args(argv)
    try:
        if args.register:
            doc = register()
            print(
                f"registered {doc['protocol_sha256'][:12]}… at {doc['registered_at']}; power {doc['power']}"
            )
        elif args.score:
            run_score(restore=args.restore, limit=args.limit)
        else:
            print(json.dumps({k: v for k, v in decide().items() if k != "p_holm"}, indent=1))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
