"""`fiblab report`: a Markdown + HTML report of runs in the store, the claims ledger first."""

from __future__ import annotations

import os
import sys


def cmd_report(args) -> int:
    """A Markdown + HTML report of runs in the store (every table and figure that applies), the
    claims ledger first and claims.json beside it; with ``--json`` every table as JSON records
    on stdout (the numbers the Markdown prints) and the ledger under ``claims``."""
    from analysis.ledger import evidence as ledger_evidence
    from analysis.ledger import ledger
    from analysis.reports.results import build_report
    from lab.store import Store
    from lab.util import jsonio
    from probes.grid import load_records

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
            records += load_records(path)
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
