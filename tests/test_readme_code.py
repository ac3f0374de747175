"""Every import in the README's Python snippets names a module and a name that exist, and every
`module.name` a snippet reads off an imported lab module exists, so a snippet a reader copies
does not fail on a stale path (one did: `from analysis import tables; tables.table1(…)` after
the tables became a package of modules).  Oracle: importlib on the real packages."""

import ast
import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "notebooks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OURS = ("lab", "probes", "analysis", "fiblab")


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _problems(text: str) -> tuple[list[str], int]:
    """(what a snippet names that does not exist, how many lab imports were checked)."""
    problems, checked = [], 0
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        tree = ast.parse(block)
        modules = {}  # a name bound to one of our modules -> the module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _ours(node.module):
                mod = importlib.import_module(node.module)
                for a in node.names:
                    checked += 1
                    full = f"{node.module}.{a.name}"
                    if _is_module(full):
                        modules[a.asname or a.name] = importlib.import_module(full)
                    elif not hasattr(mod, a.name):
                        problems.append(f"from {node.module} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if _ours(a.name):
                        checked += 1
                        modules[a.asname or a.name] = importlib.import_module(a.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and not hasattr(modules[node.value.id], node.attr)
            ):
                problems.append(f"{node.value.id}.{node.attr}")
    return problems, checked


def test_every_snippet_names_what_exists():
    total = 0
    for doc in DOCS:
        if doc.exists():
            problems, checked = _problems(doc.read_text())
            assert problems == [], f"{doc.name}: {problems}"
            total += checked
    assert total >= 10  # the snippets were found and read


def test_a_stale_snippet_is_caught():
    stale = (
        "```python\nfrom analysis import tables\ntables.table1(x)\nfrom lab.store import Nope\n```"
    )
    assert _problems(stale)[0] == ["from lab.store import Nope", "tables.table1"]
