"""How the core's sub-packages import each other: the pairs that import (either way), the pairs
that import both ways, and the imports that run upward in an order given (issue 43's figures).

    .venv/bin/python scripts/layer_pairs.py [util,machine,ladder,...]   # bottom → top

Every import counts, a function-level one too (`ast`, not import-linter's graph, so the count
does not depend on the contracts)."""

from __future__ import annotations

import ast
import collections
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab")


def edges(root: str = ROOT) -> dict[tuple[str, str], set[str]]:
    """(a, b) → the files of sub-package a that import sub-package b."""
    pkgs = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and d[0] != "_"}
    out: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for dp, _, fs in os.walk(root):
        a = os.path.relpath(dp, root).split(os.sep)[0]
        if a not in pkgs:
            continue
        for f in (f for f in fs if f.endswith(".py")):
            path = os.path.join(dp, f)
            for n in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                    names = [n.module] + [f"{n.module}.{x.name}" for x in n.names]
                elif isinstance(n, ast.Import):
                    names = [x.name for x in n.names]
                else:
                    continue
                for m in names:
                    q = m.split(".")
                    if q[0] == "lab" and len(q) > 1 and q[1] in pkgs and q[1] != a:
                        out[(a, q[1])].add(os.path.relpath(path, os.path.dirname(root)))
    return out


def main(argv: list[str]) -> int:
    e = edges()
    pkgs = sorted({p for pair in e for p in pair})
    n = len(pkgs)
    print(f"{n} sub-packages; {len({frozenset(k) for k in e})} of {n * (n - 1) // 2} pairs import")
    both = sorted({tuple(sorted(k)) for k in e if k[::-1] in e})
    print(f"both ways: {len(both)} {both}")
    if argv:
        rank = {p: i for i, p in enumerate(argv[0].split(","))}
        up = sorted((a, b) for (a, b) in e if rank[a] < rank[b])
        print(f"upward in {argv[0]}: {len(up)}")
        for a, b in up:
            print(f"  {a} -> {b}: {sorted(e[(a, b)])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
