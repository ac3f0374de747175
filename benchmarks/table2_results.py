"""Write the measured Table 2 grid into benchmarks/RESULTS.md (between the table2 markers).

    python benchmarks/table2_results.py [benchmarks/results/probe-marked-paper.jsonl ...]
    python benchmarks/table2_results.py --marker table2-bf16 \
        benchmarks/results/probe-marked-paper-bf16.jsonl

Reads probe records (`fiblab probe marked --out FILE`), prints Table 2 beside the paper's values
and every cell, and replaces the text between ``<!-- MARKER:start -->`` and
``<!-- MARKER:end -->`` in RESULTS.md with it (MARKER: ``table2`` unless --marker is given).
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from analysis.tables.probe_table import table2_rows
from benchmarks.header import machine_header  # noqa: E402
from probes.grid import load_records  # noqa: E402
from probes.record import alpha_drift  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "results", "probe-marked-paper.jsonl")


def render(records: list[dict]) -> str:
    lines = [
        "| depth | init | seeds | α range (ours) | acc@200 | acc@350 | α range (paper) | "
        "acc@200 | acc@350 | min/cell |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table2_rows(records, "blur"):  # the paper's values from analysis/reference
        p = r.get("paper")
        theirs = (
            (
                f"{p['alpha_min']:.2f}–{p['alpha_max']:.2f} | {p['acc']['200']:.2f} | "
                f"{p['acc']['350']:.2f}"
            )
            if p
            else "— | — | —"
        )
        lines.append(
            f"| {r['depth']} | {r['init']} | {r['seeds']} | {r['alpha_min']:.3f}–"
            f"{r['alpha_max']:.3f} | {r['acc']['200']:.3f} | {r['acc']['350']:.3f} | "
            f"{theirs} | {r['seconds'] / 60:.0f} |"
        )
    lines += [
        "",
        "| cell | final α per layer | max drift from init | acc@200 | acc@350 |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(records, key=lambda r: (r["seed"], r["depth"], r["init"])):
        lines.append(
            f"| depth {r['depth']} {r['init']} seed {r['seed']} | "
            f"{', '.join(f'{a:.3f}' for a in r['alphas'])} | {alpha_drift(r):.3f} | "
            f"{r['acc']['200']:.3f} | {r['acc']['350']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    marker = "table2"
    if argv[:1] == ["--marker"]:
        if len(argv) < 2:
            raise SystemExit("--marker needs a name, e.g. table2-bf16")
        marker, argv = argv[1], argv[2:]
    paths = argv
    records = [
        r for p in (paths or [DEFAULT]) for r in load_records(p) if r.get("mechanism") == "blur"
    ]
    text = render(records)
    machine_header()  # the machine rendering; the cells were measured where the records say
    print(text)
    results = os.path.join(HERE, "RESULTS.md")
    with open(results, encoding="utf-8") as f:
        old = f.read()
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    new, n = re.subn(
        re.escape(start) + ".*" + re.escape(end),
        lambda _: start + "\n" + text + end,
        old,
        flags=re.S,
    )
    if n != 1:
        raise SystemExit(f"{results}: expected one {marker} marker pair, found {n}")
    with open(results, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
