"""`fiblab report`: a Markdown + HTML report of runs in the store, the claims ledger first."""

from __future__ import annotations

import os
import sys

from fiblab.cli.argtypes import folder_arg, store_arg
from lab.util import paths


def add_report(sub) -> None:
    """`fiblab report`: which runs, which store, where the report goes."""
    s = sub.add_parser("report", help="Markdown + HTML report of runs in the store")
    s.add_argument("runs", nargs="*", help="LM run names (default: every finished run)")
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store (FIBLAB_STORE sets it)",
    )
    s.add_argument(
        "--probes",
        nargs="*",
        default=None,
        help="probe result JSONL files (default: the probe cells in the store)",
    )
    s.add_argument("--dataset", default=None, help="held-out domain (default: the only one)")
    s.add_argument("--title", default="fiblab report", help="the report's title")
    s.add_argument(
        "--paper-db",
        default=None,
        help="also rebuild the paper's tables from the authors' fib.db (default: not)",
    )
    s.add_argument(
        "--out",
        type=folder_arg,
        default=None,
        help="report folder, e.g. reports/NAME (default: none, allowed with --json)",
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="print every table as JSON on stdout: one object, table name → list of rows "
        "(the claims ledger under 'claims')",
    )
    s.add_argument(
        "--no-grids",
        action="store_true",
        help="leave the lab's stored results — the paper-scale probe grids "
        "(benchmarks/results) and the attention timings (benchmarks/attention-*.json) — out of "
        "the claims ledger (default: use them when the checkout has them)",
    )
    s.set_defaults(fn=cmd_report)


def cmd_report(args) -> int:
    """A Markdown + HTML report of runs in the store (every table and figure that applies), the
    claims ledger first and claims.json beside it; with ``--json`` every table as JSON records
    on stdout (the numbers the Markdown prints) and the ledger under ``claims``."""
    from analysis.ledger import evidence as ledger_evidence
    from analysis.ledger import ledger
    from analysis.reports.results import build_report
    from lab.store import Store
    from lab.util import jsonio
    from probes.grid import results_records

    if not args.out and not getattr(args, "json", False):
        raise ValueError("fiblab report needs --out FOLDER (e.g. reports/NAME), or --json")
    if not os.path.exists(args.store):
        raise ValueError(
            f"experiment store {args.store!r} does not exist: train or probe "
            f"something first, or pass --store"
        )
    records = None
    if args.probes:
        records = []
        for path in args.probes:
            if not os.path.exists(path):
                raise ValueError(f"probe results file {path!r} does not exist")
            try:
                records += results_records(path)
            except ValueError as e:
                raise ValueError(f"--probes {e}: give the results a probe grid wrote") from None
    with Store(args.store) as st:
        if args.paper_db and not os.path.exists(args.paper_db):
            raise ValueError(
                f"--paper-db {args.paper_db!r} does not exist (the authors' "
                f"database; a copy ships at ../shared/reference/fib.db)"
            )
        stored = not getattr(args, "no_grids", False)
        grids = ledger_evidence.stored_grids() if stored else []
        timings = ledger_evidence.stored_timings() if stored else []
        led = ledger.build(
            ledger_evidence.from_store(st, records, grids, args.runs or None, timings)
        )
        rep = build_report(
            st,
            args.runs or None,
            records,
            title=args.title,
            dataset=args.dataset,
            paper_db=args.paper_db,
            claims=led,
        )
        paths = rep.write(args.out) if args.out else None
        if paths:
            paths["claims.json"] = led.write_json(os.path.join(args.out, "claims.json"))
    out = sys.stderr if args.json else sys.stdout
    if paths:
        print(f"report: {paths['report.md']} and {paths['report.html']}", file=out)
        print(f"claims: {paths['claims.json']}", file=out)
    print(led.summary(), file=out)
    if args.json:
        tables = rep.records()
        tables["claims"] = led.to_json()
        doc = led.document()
        tables["claims_protocol"] = doc["protocol"]
        tables["claims_protocol_sha256"] = doc["protocol_sha256"]
        tables["claims_summary"] = [
            {"verdict": v, "paper_claims": n} for v, n in led.counts().items()
        ]
        print(jsonio.dumps(tables, indent=1))
    return 0
