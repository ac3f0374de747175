"""One-off: move flat modules into sub-packages by concept and rewrite every reference (issue 29).

    .venv/bin/python scripts/repackage.py lab        # plan + move + rewrite

The mapping is old module → new dotted path.  References are rewritten in Python files,
notebooks, Markdown, TOML, shell and Makefiles: ``from P import m`` (m a moved module),
``from P.m import names`` (each name imported from the module that *defines* it, so re-exports
are no longer used), dotted names ``P.m`` and paths ``P/m.py``.  Kept in the history of the
commit that used it; not part of the lab.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

LAB = {
    # the attended set: the paper's rule
    "offsets": "lab.ladder.offsets",
    "plan": "lab.ladder.plan",
    "schedules": "lab.ladder.schedules",
    "schemes": "lab.ladder.schemes",
    "drift": "lab.ladder.drift",
    # sparse attention ops on top of the kernels
    "attention": "lab.sparse.attention",
    "blur": "lab.sparse.blur",
    # the language model
    "model": "lab.lm.model",
    "config": "lab.lm.config",
    "generate": "lab.lm.generate",
    # data
    "corpus": "lab.data.corpus",
    "tokenizer": "lab.data.tokenizer",
    "prepared": "lab.data.prepared",
    "heldout": "lab.data.heldout",
    "sampling": "lab.data.sampling",
    "mixture": "lab.data.mixture",
    "tabular": "lab.data.tabular",
    "windows": "lab.data.windows",
    "data": "lab.data",  # the facade's CLI becomes lab/data/__main__.py
    # training
    "train": "lab.training.train",
    "trainconfig": "lab.training.trainconfig",
    "checkpoint": "lab.training.checkpoint",
    "runphase": "lab.training.runphase",
    "runlog": "lab.training.runlog",
    "runlog_replay": "lab.training.runlog_replay",
    "tblog": "lab.training.tblog",
    "rundata": "lab.training.rundata",
    # the store
    "store": "lab.store",
    "store_connection": "lab.store.connection",
    "store_journal": "lab.store.journal",
    "store_readers": "lab.store.readers",
    "store_schema": "lab.store.schema",
    "store_writers": "lab.store.writers",
    "variant": "lab.store.variant",
    # evaluation
    "evaluate": "lab.evaluation.evaluate",
    "evalkind": "lab.evaluation.evalkind",
    "evalrun": "lab.evaluation.evalrun",
    # models out
    "export": "lab.publish.export",
    "hf": "lab.publish.hf",
    "pretrained": "lab.publish.pretrained",
    # what attention and models cost
    "efficiency": "lab.cost.efficiency",
    "efficiency_measure": "lab.cost.efficiency_measure",
    "measure": "lab.cost.measure",
    "contention": "lab.cost.contention",
    # the machine
    "hardware": "lab.machine.hardware",
    "precision": "lab.machine.precision",
    "autotune": "lab.machine.autotune",
    "cpu_share": "lab.machine.cpu_share",
    "procs": "lab.machine.procs",
    # helpers every layer uses
    "jsonio": "lab.util.jsonio",
    "paths": "lab.util.paths",
    "wording": "lab.util.wording",
    "progress": "lab.util.progress",
}
FILE = {"store": "lab/store/__init__.py", "data": "lab/data/__main__.py"}

ANALYSIS = {
    # the paper's tables, ours beside the published ones
    "comparable": "analysis.tables.comparable",
    "tables_length": "analysis.tables.length",
    "tables_paper": "analysis.tables.beside",
    "tables_position": "analysis.tables.position",
    "tables_ppl": "analysis.tables.ppl",
    "tables_probe": "analysis.tables.probe",
    "tables_rows": "analysis.tables.rows",
    "tables_seeds": "analysis.tables.seeds",
    "tables_store": "analysis.tables.runs",
    "probe_table": "analysis.tables.probe_table",
    # the paper's own numbers
    "paper": "analysis.published.paper",
    "paperdb": "analysis.published.paperdb",
    # statistics
    "stats": "analysis.statistics.stats",
    "decide": "analysis.statistics.decide",
    "power": "analysis.statistics.power",
    "assess": "analysis.statistics.assess",
    "eval_noise": "analysis.statistics.eval_noise",
    # the claims ledger
    "ledger": "analysis.ledger.ledger",
    "ledger_across": "analysis.ledger.across",
    "ledger_checks": "analysis.ledger.checks",
    "ledger_compare": "analysis.ledger.compare",
    "ledger_efficiency": "analysis.ledger.efficiency",
    "ledger_evidence": "analysis.ledger.evidence",
    "ledger_exact": "analysis.ledger.exact",
    "ledger_probe": "analysis.ledger.probe",
    "ledger_report": "analysis.ledger.report",
    "verdict_words": "analysis.ledger.verdict_words",
    # figures
    "plots": "analysis.figures.plots",
    "style": "analysis.figures.style",
    "trajectories": "analysis.figures.trajectories",
    # reports
    "report": "analysis.reports.report",
    "results": "analysis.reports.results",
    # the experiments that train models
    "demo": "analysis.experiments.demo.job",
    "demo_evidence": "analysis.experiments.demo.evidence",
    "demo_report": "analysis.experiments.demo.report",
    "demo_reuse": "analysis.experiments.demo.reuse",
    "study": "analysis.experiments.study.study",
    "study_plan": "analysis.experiments.study.plan",
    "study_precision": "analysis.experiments.study.precision",
    "study_report": "analysis.experiments.study.report",
    "study_windows": "analysis.experiments.study.windows",
    "search": "analysis.experiments.search.search",
    "search_objectives": "analysis.experiments.search.objectives",
    "search_report": "analysis.experiments.search.report",
    "search_space": "analysis.experiments.search.space",
}
FIBLAB = {
    # detached jobs a notebook or the CLI starts, watches, stops and resumes
    "detached": "fiblab.jobs.detached",
    "launch": "fiblab.jobs.launch",
    "probe_launch": "fiblab.jobs.probe_launch",
    "search_launch": "fiblab.jobs.search_launch",
    "probe_progress": "fiblab.jobs.probe_progress",
    "train_command": "fiblab.jobs.train_command",
    "train_estimate": "fiblab.jobs.train_estimate",
    "train_eta": "fiblab.jobs.train_eta",
    # Ray: sweeps, single runs and search trials as tasks
    "ray_cluster": "fiblab.cluster.ray_cluster",
    "ray_progress": "fiblab.cluster.ray_progress",
    "ray_run": "fiblab.cluster.ray_run",
    "ray_search": "fiblab.cluster.ray_search",
    "sweepspec": "fiblab.cluster.sweepspec",
}
ROOTS = {"lab": (LAB, FILE), "analysis": (ANALYSIS, {}), "fiblab": (FIBLAB, {})}
R = "lab"

SKIP_DIRS = {".git", ".venv", ".mutation", "node_modules", "shared", "__pycache__", "runs"}
EXTS = (".py", ".ipynb", ".md", ".toml", ".sh", ".cfg", ".ini", ".yml", ".yaml", ".txt")
NAMES = ("Makefile", "run")


def old_file(m: str) -> str:
    return f"{R}/{m}.py"


def new_file(m: str) -> str:
    return FILE.get(m) or LAB[m].replace(".", "/") + ".py"


# ---------------------------------------------------------------------------- where names live
def _defs(path: str) -> tuple[set, dict]:
    """(names defined at the top of a module, {name: lab module it imports the name from})."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    defined, imported = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node in tree.body or any(node in getattr(b, "body", []) for b in tree.body):
                defined.add(node.name)
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Name):
                        defined.add(x.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(R + "."):
            mod = node.module.split(".")[1]
            if node.module.count(".") == 1 and mod in LAB:
                for a in node.names:
                    imported[a.asname or a.name] = (mod, a.name)
    defined -= set(imported)
    return defined, imported


def owner(mod: str, name: str, table: dict) -> tuple[str, str]:
    """(module that defines ``name`` seen from old module ``mod``, its name there)."""
    seen = set()
    while (mod, name) not in seen:
        seen.add((mod, name))
        defined, imported = table[mod]
        if name in defined or name not in imported:
            return mod, name
        mod, name = imported[name]
    return mod, name


# ---------------------------------------------------------------------------- rewriting
def _split(names: str) -> list[tuple[str, str | None]]:
    out = []
    for part in names.replace("(", " ").replace(")", " ").replace("\\\n", " ").split(","):
        part = " ".join(part.split())
        if not part or part.startswith("#"):
            continue
        part = part.split("#")[0].strip()
        bits = part.split(" as ")
        out.append((bits[0].strip(), bits[1].strip() if len(bits) > 1 else None))
    return out


def _emit(groups: dict, indent: str, sep: str) -> str:
    lines = []
    for mod, names in groups.items():
        txt = ", ".join(n if a is None or a == n else f"{n} as {a}" for n, a in names)
        lines.append(f"{indent}from \x01{mod} import {txt}")
    return sep.join(lines)


def rewrite_imports(text: str, table: dict, sep: str) -> str:
    # from lab import a, b as c
    def from_lab(m):
        indent, names = m.group(1), m.group(2)
        groups: dict = {}
        for n, a in _split(names):
            if n in LAB and LAB[n] != f"{R}.{n}":
                pkg, _, leaf = LAB[n].rpartition(".")
                groups.setdefault(pkg, []).append((leaf, a or (n if leaf != n else None)))
            else:
                groups.setdefault(R, []).append((n, a))
        return _emit(groups, indent, sep)

    # from lab.m import names
    def from_mod(m):
        indent, mod, names = m.group(1), m.group(2), m.group(3)
        if mod not in LAB:
            return m.group(0)
        groups: dict = {}
        for n, a in _split(names):
            if n == "*":
                groups.setdefault(LAB[mod], []).append((n, None))
                continue
            om, on = owner(mod, n, table)
            alias = a if a else (n if on != n else None)
            groups.setdefault(LAB[om], []).append((on, alias))
        return _emit(groups, indent, sep)

    paren = r"\(([^)]*)\)"
    text = re.sub(
        rf"(?m)^([ \t]*)from {R} import (?:{paren}|([^\n\\]*))",
        lambda m: from_lab(_M(m.group(1), m.group(2) if m.group(2) is not None else m.group(3))),
        text,
    )
    text = re.sub(
        rf"(?m)^([ \t]*)from {R}\.(\w+) import (?:{paren}|([^\n\\;\"]*))",
        lambda m: from_mod(
            _M3(m.group(1), m.group(2), m.group(3) if m.group(3) is not None else m.group(4))
        ),
        text,
    )
    return text


class _M:
    def __init__(self, indent, names):
        self._g = {1: indent, 2: names}

    def group(self, i):
        return self._g[i]


class _M3:
    def __init__(self, indent, mod, names):
        self._g = {1: indent, 2: mod, 3: names, 0: f"{indent}from {R}.{mod} import {names}"}

    def group(self, i):
        return self._g[i]


def rewrite_notebook_imports(text: str, table: dict) -> str:
    """Import lines inside a notebook's JSON strings: one line each, joined with '; '."""

    def line(m):
        body = m.group(1)
        new = rewrite_imports(body, table, "; ")
        return '"' + new + m.group(2)

    return re.sub(rf'"((?:from {R}(?:\.\w+)? import [^"\\]*))((?:\\n)?")', line, text)


def rewrite_refs(text: str, table: dict) -> str:
    def name_of(m):  # lab.data.prepare (a re-export) → lab.data.prepared.prepare
        mod, name = m.group(1), m.group(2)
        if mod not in LAB or name in LAB:
            return m.group(0)
        om, on = owner(mod, name, table)
        return f"{LAB[om]}.{on}" if om != mod else m.group(0)

    text = re.sub(rf"(?<![\w.\x01]){R}\.(\w+)\.(\w+)(?!\w)", name_of, text)

    def dotted(m):
        mod = m.group(1)
        return LAB[mod] if mod in LAB else m.group(0)

    text = re.sub(
        rf"(?<![\w.\x01]){R}\.(\w+)(?!\w)",
        dotted,
        text,
    )

    def path(m):
        mod = m.group(1)
        return new_file(mod) if mod in LAB else m.group(0)

    return re.sub(rf"(?<![\w./-]){R}/(\w+)\.py(?!\w)", path, text)


def files():
    for root, dirs, fs in os.walk("."):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for f in fs:
            if f.endswith(EXTS) or f in NAMES:
                yield os.path.join(root, f)


def main() -> int:
    global LAB, FILE, R
    R = sys.argv[1]
    LAB, FILE = ROOTS[R]
    table = {m: _defs(old_file(m)) for m in LAB}
    for m in LAB:
        dst = new_file(m)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        subprocess.run(["git", "mv", old_file(m), dst], check=True)
    for pkg in sorted({v.rpartition(".")[0] for v in LAB.values()} - {R}):
        init = pkg.replace(".", "/") + "/__init__.py"
        parts = pkg.split(".")
        for i in range(2, len(parts)):
            mid = "/".join(parts[:i]) + "/__init__.py"
            if not os.path.exists(mid):
                open(mid, "w").write('"""TODO"""\n')
        if not os.path.exists(init):
            open(init, "w").write('"""TODO"""\n')
    for path in files():
        if path.startswith("./scripts/repackage.py"):
            continue
        text = open(path, encoding="utf-8").read()
        new = text
        if path.endswith(".py"):
            new = rewrite_imports(new, table, "\n")
        elif path.endswith(".ipynb"):
            new = rewrite_notebook_imports(new, table)
        elif path.endswith(".md"):
            new = rewrite_imports(new, table, "\n")
        new = rewrite_refs(new, table).replace("\x01", "")
        if new != text:
            open(path, "w", encoding="utf-8").write(new)
            if path.endswith(".ipynb"):
                json.loads(new)  # still JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
