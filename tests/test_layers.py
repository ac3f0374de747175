"""The layers hold: import contracts (import-linter), no private names across modules, ruff clean.

The layers, bottom to top: `lab` (the core) < `probes` < `analysis` < `fiblab` (CLI, notebook
widgets, launcher, public API); `lab.kernels` never imports the attention rule above it.  The
contracts live in pyproject.toml; this file runs them, shows once that a forbidden import does
break them, and checks the code style the project keeps (ruff lint + format).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lab", "probes", "analysis", "fiblab")
SCANNED = (*PACKAGES, "benchmarks", "tests")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter's contracts from `root`/pyproject.toml on the packages under `root`."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from importlinter.cli import lint_imports;"
        "sys.exit(lint_imports(config_filename=sys.argv[1] + '/pyproject.toml', no_cache=True))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, cwd=root
    )


def test_import_contracts_hold():
    res = _lint_imports(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


@pytest.mark.parametrize(
    "module, line",
    [
        ("lab/sneaky.py", "import analysis.tables.ppl\n"),  # the core reaching up
        ("lab/kernels/sneaky.py", "from lab.sparse import attention\n"),  # a kernel above the rule
        ("probes/sneaky.py", "import fiblab.cli\n"),  # probes reaching a front end
    ],
)
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line):
    """The same contracts on a copy of the packages with one forbidden import planted."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert _lint_imports(tmp_path).returncode == 0  # the copy is clean before the plant
    (tmp_path / module).write_text(line)
    res = _lint_imports(tmp_path)
    assert res.returncode != 0
    assert "BROKEN" in res.stdout


def _private_imports(path: Path) -> list[str]:
    """`from ours import _name` and `import ours._private` in one file (dunders allowed)."""

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            if any(private(p) for p in node.module.split(".")):
                found.append(f"{path}:{node.lineno} from {node.module}")
            found += [
                f"{path}:{node.lineno} from {node.module} import {a.name}"
                for a in node.names
                if private(a.name)
            ]
        elif isinstance(node, ast.Import):
            found += [
                f"{path}:{node.lineno} import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in PACKAGES and any(private(p) for p in a.name.split("."))
            ]
    return found


def test_no_private_name_is_imported_across_modules():
    bad = [
        hit
        for d in SCANNED
        for f in sorted((ROOT / d).rglob("*.py"))
        for hit in _private_imports(f)
    ]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_the_private_import_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from lab.store import _now\nimport lab._hidden\nfrom lab.store import Store\n")
    assert len(_private_imports(f)) == 2


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.fail("ruff is not installed: bash scripts/setup.sh installs the dev extras")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=ROOT)


def test_ruff_lint_is_clean():
    res = _ruff("check", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format_is_clean():
    res = _ruff("format", "--check", ".")
    assert res.returncode == 0, "run `ruff format .`:\n" + res.stdout + res.stderr


def test_the_public_api_resolves_every_name():
    import fiblab

    for name in fiblab.__all__:
        obj = getattr(fiblab, name)
        assert obj is getattr(__import__(fiblab.API_MODULES[name], fromlist=[name]), name)
    with pytest.raises(AttributeError):
        fiblab.no_such_name  # noqa: B018


# ------------------------------------------------------------------ no cycles, no lazy facades
def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """{module: the project modules it imports}, every import statement counted — those inside
    functions too (a lazy import is still a dependency; hiding a cycle in a function keeps it)."""
    files = {_module_of(p): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
                targets = [owner(n) if n in files else owner(node.module) for n in names]
            elif isinstance(node, ast.Import):
                targets = [owner(a.name) for a in node.names]
            else:
                continue
            graph[mod] |= {t for t in targets if t and t != mod and t.split(".")[0] in PACKAGES}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph()) == []
    # the check itself: a planted two-module cycle and a three-module one are found
    planted = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert cycles(planted) == [["a", "b"], ["c", "d", "e"]]


def test_no_module_level_getattr_but_the_public_api():
    """A module ``__getattr__`` hides where a name lives.  The one kept is ``fiblab``'s public
    API (``fiblab.build_model``, …), lazy so that ``fiblab --help`` loads no torch."""
    found = [
        str(p.relative_to(ROOT))
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if any(
            isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
            for n in ast.parse(p.read_text(encoding="utf-8")).body
        )
    ]
    assert found == ["fiblab/__init__.py"]
