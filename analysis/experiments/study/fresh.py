"""What the registered fresh-item studies share (`recall_fresh`, `battery_fresh`): a protocol
(a dict, hashed whole) frozen before any of its items is scored; the confirmation's checkpoints
scored one run at a time — only a finished one (`confirm.finished_folder`), restored first when
asked — one row appended a run; a decision only once every registered run has its row, each
scored on its finished model.  Each study keeps its own protocol, scoring and verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable

from analysis.experiments.study import confirm
from analysis.experiments.study import registration as REG
from lab.util import jsonio

__all__ = ["ROWS", "protocol_hash", "rows", "register", "check_registered", "run_score",
           "complete_rows", "main"]  # fmt: skip

ROWS = "rows.jsonl"


def protocol_hash(protocol: dict) -> str:
    return hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()


def rows(out_dir: str) -> list[dict]:
    return jsonio.read_rows(os.path.join(out_dir, ROWS))


def register(
    protocol: dict, out_dir: str, confirm_rows: list[dict] | None, power: Callable[[list], str]
) -> dict:
    """Freeze ``protocol`` before any item is scored: refused once a row exists or when it is
    registered already.  ``power(run names)`` says the registered power in words."""
    if rows(out_dir):
        raise ValueError(
            f"{os.path.join(out_dir, ROWS)} holds scored runs: it cannot be frozen now"
        )
    if os.path.exists(os.path.join(out_dir, REG.REGISTRATION)):
        raise ValueError(f"{out_dir} is registered already: a changed protocol is a new one")
    names = [r["run"]["name"] for r in (confirm_rows or confirm.read_rows())]
    return REG.freeze(
        out_dir, protocol_hash(protocol), protocol=protocol, runs=names, power=power(names),
        note="frozen before any fresh item was scored; decides only its own claims",
    )  # fmt: skip


def check_registered(protocol: dict, out_dir: str, module: str) -> dict:
    return REG.frozen(
        os.path.join(out_dir, REG.REGISTRATION), protocol_hash(protocol),
        f"python -m {module} --register", "restore PROTOCOL as it was frozen",
    )  # fmt: skip


def run_score(
    reg: dict, out_dir: str, score: Callable[[str, int], dict], runs_dir: str, restore: bool,
    limit: int | None, log: Callable, line: Callable[[dict], str],
) -> list[str]:  # fmt: skip
    """Score the registered runs without a row, in the registration's order, one at a time, each
    row appended as it is done; ``score(folder, place)`` gives a row's fields (``place``: the
    run's index in the registration).  A run without its finished checkpoint is restored first
    with ``restore``, else refused."""
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
               **score(folder, reg["runs"].index(name))}  # fmt: skip
        jsonio.append_row(os.path.join(out_dir, ROWS), row)
        log(f"   {name}: {line(row)}")
    return todo


def complete_rows(reg: dict, out_dir: str) -> tuple[list[dict] | None, str]:
    """(every registered run's row in the registration's order, "") once all are scored, else
    (None, why): no test is computed on part.  A row for a run the registration lacks, or one
    scored on a checkpoint before the run's registered steps, is refused (ValueError)."""
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
    if left:
        return None, f"{len(got)} of {len(reg['runs'])} runs scored; no test is computed on part"
    return [got[n] for n in reg["runs"]], ""


def main(
    module: str, doc: str, register: Callable[[], dict], score: Callable[..., list],
    decide: Callable[[], dict], argv=None,
) -> int:  # fmt: skip
    """The command line every fresh-item study has: --register, --score [--restore] [--limit],
    --decide; bad input or a refused step ends in one line and exit code 2."""
    ap = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--register", action="store_true", help="freeze the protocol (before scoring)")
    g.add_argument("--score", action="store_true", help="score the runs without a row")
    g.add_argument("--decide", action="store_true", help="the registered verdict")
    ap.add_argument("--restore", action="store_true", help="retrain a missing checkpoint first")
    ap.add_argument("--limit", type=int, default=None, help="score at most N runs")
    args = ap.parse_args(argv)
    try:
        REG.check_limit(args.limit)
        if args.register:
            reg = register()
            print(f"registered {reg['protocol_sha256'][:12]}… at {reg['registered_at']}; "
                  f"power {reg['power']}")  # fmt: skip
        elif args.score:
            score(restore=args.restore, limit=args.limit)
        else:
            out = decide()
            print(json.dumps({k: v for k, v in out.items() if not k.startswith("p_")}, indent=1))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
