"""Mutation testing of the lab's core modules with mutmut: the share of planted bugs the tests catch.

    .venv/bin/python scripts/mutation.py                 # every group (make mutation)
    .venv/bin/python scripts/mutation.py plan coverage   # some groups
    .venv/bin/python scripts/mutation.py --list          # the groups, modules and tests

Why a script around mutmut: mutmut reads one ``[tool.mutmut]`` section and writes its mutated
copies under ``mutants/`` of the folder it runs in.  Each group here pairs core modules with the
tests that are meant to pin them (running the whole suite per mutant would take days on 2
cores), so each group runs in its own copy of the tracked files, ``.mutation/GROUP/``
(git-ignored), with its own section.  Groups can run one after another or on separate machines.

Per module it prints killed / survived / other and the score = killed / (killed + survived);
timeouts and segfaults count as caught (the mutant changed behaviour, a test noticed), "no
tests" (code no selected test reaches) is listed apart.  Surviving mutants are listed with
``mutmut show`` diffs in ``.mutation/GROUP/survivors.txt`` so that each is either killed by a new
test or recorded as equivalent in benchmarks/RESULTS.md.  The default test command never runs
this (it takes minutes per group).

Two things the copy needs that plain mutmut would get wrong here:

* mutmut copies only the source packages and ``tests/`` into ``mutants/``; tests that read
  ``benchmarks/``, ``notebooks/``, ``scripts/`` or the README failed the stats run there (the whole
  ``plan`` group came out "not checked").  Every other top-level entry goes in ``also_copy``.
* mutmut forks each mutant from the process that ran the clean tests, so `lab.ladder.plan`'s memoised
  plans built there survive into every mutant: a mutant of the plan builder (or of the offsets
  rules it calls) was never executed for arguments a clean test had cached, and the stats run
  recorded only the first test to build a plan as "covering" the builder.  The copy's
  ``tests/conftest.py`` gets an autouse fixture that empties the plan cache before each test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"

#: group → (modules to mutate, tests that pin them)
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "plan": (
        ["lab/ladder/offsets.py", "lab/ladder/plan.py", "lab/ladder/schedules.py"],
        [
            "tests/lab/test_offsets.py",
            "tests/lab/test_plan.py",
            "tests/lab/test_schedules.py",
            "tests/lab/test_plan_laws.py",
            "tests/lab/test_plan_edges.py",
        ],
    ),
    "coverage": (
        ["probes/coverage.py", "probes/receptive_field.py"],
        ["tests/probes/test_coverage.py", "tests/probes/test_coverage_laws.py"],
    ),
    "tables": (
        [
            "analysis/tables/comparable.py",
            "analysis/tables/rows.py",
            "analysis/statistics/stats.py",
        ],
        [
            "tests/analysis/test_tables.py",
            "tests/analysis/test_stats.py",
            "tests/lab/test_variants.py",
            "tests/analysis/test_table_aggregation.py",
            "tests/analysis/test_stats_samples.py",
            "tests/analysis/test_stats_verdicts.py",
            "tests/analysis/test_comparable.py",
            "tests/analysis/test_tables_rows.py",
            # reads benchmarks/results/, which mutmut does not copy into mutants/
            "--deselect=tests/analysis/test_tables.py::test_table2_agrees_with_the_probe_runner_on_measured_cells",
        ],
    ),
    "store": (
        [
            "lab/store/schema.py",
            "lab/store/connection.py",
            "lab/store/writers.py",
            "lab/store/readers.py",
        ],
        [
            "tests/lab/test_store.py",
            "tests/probes/test_records.py",
            "tests/lab/test_store_roundtrip.py",
            "tests/lab/test_store_connection.py",
            "tests/lab/test_store_writers.py",
            "tests/lab/test_store_readers.py",
            # reads benchmarks/results/, which mutmut does not copy into mutants/
            "--deselect=tests/probes/test_records.py::test_table2_rows_put_the_paper_beside_ours_only_where_it_applies",
        ],
    ),
    # issue 27: the decision rules of every verdict
    "verdicts": (
        ["analysis/statistics/decide.py", "analysis/statistics/assess.py"],
        [
            "tests/analysis/test_decide.py",
            "tests/analysis/test_decide_mutants.py",
            "tests/analysis/test_ledger_decide.py",
            "tests/analysis/test_stats_verdicts.py",
        ],
    ),
    # issue 27: the ledger (one verdict a claim, tiers ranked) and the evidence it reads
    "ledger": (
        [
            "analysis/ledger/ledger.py",
            "analysis/ledger/families.py",
            "analysis/ledger/evidence.py",
            "analysis/experiments/demo/evidence.py",
        ],
        [
            "tests/analysis/test_ledger.py",
            "tests/analysis/test_ledger_paper.py",
            "tests/analysis/test_ledger_decide.py",
            "tests/analysis/test_ledger_tests.py",
            "tests/analysis/test_ledger_evidence.py",
            "tests/analysis/test_ledger_sources.py",
            "tests/analysis/test_ledger_rules.py",
            "tests/analysis/test_ledger_planted.py",
            "tests/analysis/test_ledger_rules_pinned.py",
        ],
    ),
    # issue 27: the study's plan (rung rule, seeds from σ's bound, budget)
    "study-plan": (["analysis/experiments/study/plan.py"], ["tests/analysis/test_study_plan.py"]),
    # issue 27: the checks behind the LM verdicts
    "ledger-checks": (
        ["analysis/ledger/checks.py"],
        [
            "tests/analysis/test_ledger_tests.py",
            "tests/analysis/test_ledger_checks_lines.py",
            "tests/analysis/test_ledger_checks_rules.py",
            "tests/analysis/test_ledger.py",
            "tests/analysis/test_ledger_paper.py",
            "tests/analysis/test_ledger_decide.py",
            "tests/analysis/test_ledger_rules.py",
            "tests/analysis/test_ledger_planted.py",
        ],
    ),
    # issue 27: the variant that groups runs (its tests train models: seconds a mutant)
    "variant": (["lab/store/variant.py"], ["tests/lab/test_variants.py"]),
}
CAUGHT = {"killed", "timeout", "segfault", "caught by type check"}
SOURCES = ["lab", "probes", "analysis", "fiblab"]

#: appended to the copy's tests/conftest.py (see the module docstring)
FRESH_PLANS = '''

# --- added by scripts/mutation.py, in the mutation copy only ---
@pytest.fixture(autouse=True)
def _mutation_fresh_plans():
    """No plan cached by the clean run (mutmut's fork parent) or an earlier test is reused."""
    from lab.ladder import plan as _plan

    _plan._cached_build.cache_clear()
    yield
'''


def _copy_tree(dest: Path) -> None:
    """The tracked files (and untracked, not ignored ones) of the checkout into `dest`."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _section(modules: list[str], tests: list[str], also_copy: list[str]) -> str:
    as_toml = lambda xs: "[" + ", ".join(json.dumps(x) for x in xs) + "]"  # noqa: E731
    return (
        "\n[tool.mutmut]\n"
        f"source_paths = {as_toml(SOURCES)}\n"
        f"also_copy = {as_toml(also_copy)}\n"
        f"only_mutate = {as_toml(modules)}\n"
        f"pytest_add_cli_args_test_selection = {as_toml(tests)}\n"
        # -n 0: mutmut runs and records each test in its own process, not in xdist's workers
        'pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider", "-n", "0"]\n'
        "use_git_change_detection = false\n"
        # mutmut's default (15 × the tests' time, CPU limit twice that) let each mutant that
        # loops forever (e.g. ``d *= 2`` → ``d *= 1``) run for minutes; 5 × still leaves room
        # for a loaded machine
        "timeout_multiplier = 5.0\n"
    )


def _statuses(folder: Path, modules: list[str]) -> dict[str, dict[str, list[str]]]:
    """{module: {status: [mutant names]}} from mutmut's .meta files."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, dict[str, list[str]]] = {}
    for mod in modules:
        meta = folder / "mutants" / f"{mod}.meta"
        by: dict[str, list[str]] = {}
        if meta.exists():
            codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
            for name, code in codes.items():
                by.setdefault(status_by_exit_code[code], []).append(name)
        out[mod] = by
    return out


def run_group(name: str, children: int) -> dict:
    modules, tests = GROUPS[name]
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    _copy_tree(folder)
    also_copy = sorted(
        p.name
        for p in folder.iterdir()
        if p.name not in {*SOURCES, "tests", "pyproject.toml", "mutants"}
    )
    with open(folder / "pyproject.toml", "a") as f:
        f.write(_section(modules, tests, also_copy))
    with open(folder / "tests" / "conftest.py", "a") as f:
        f.write(FRESH_PLANS)
    env = {**os.environ, "FIBLAB_AUTOTUNE": "0", "FIBLAB_CACHE_DIR": str(folder / ".cache")}
    env.pop("PYTHONPATH", None)
    t0 = time.perf_counter()
    mutmut = [sys.executable, "-m", "mutmut"]
    done = subprocess.run(
        [*mutmut, "run", "--max-children", str(children)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    (folder / "mutmut-run.log").write_text(done.stdout + done.stderr)
    stats = _statuses(folder, modules)
    survivors = {mod: by.get("survived", []) for mod, by in stats.items()}
    _write_diffs(folder, env, survivors)
    return {"group": name, "wall_s": wall, "returncode": done.returncode, "modules": stats}


def _write_diffs(folder: Path, env: dict, survivors: dict[str, list[str]]) -> None:
    """survivors.txt: each survivor's diff, from one process (``mutmut show`` per mutant took
    ≈ 3 s each, minutes per group)."""
    script = (
        "import json, sys\n"
        "from mutmut.mutation.diff_apply import get_diff_for_mutant\n"
        "for mod, names in json.loads(sys.argv[1]).items():\n"
        "    for m in names:\n"
        "        d = get_diff_for_mutant(m, path=mod)\n"
        "        print(f'### {m}\\n{d}\\n')\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script, json.dumps(survivors)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    (folder / "survivors.txt").write_text(shown.stdout + shown.stderr)


def _report(result: dict) -> list[str]:
    lines = []
    for mod, by in result["modules"].items():
        caught = sum(len(v) for k, v in by.items() if k in CAUGHT)
        survived = len(by.get("survived", []))
        other = {k: len(v) for k, v in by.items() if k not in CAUGHT | {"survived"}}
        total = caught + survived
        score = f"{100 * caught / total:.1f} %" if total else "n/a"
        extra = ", ".join(f"{k} {v}" for k, v in sorted(other.items()))
        lines.append(
            f"| {mod} | {caught} | {survived} | {score} |{(' ' + extra) if extra else ''} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("groups", nargs="*", help=f"default: all of {list(GROUPS)}")
    p.add_argument("--list", action="store_true", help="print the groups and exit")
    p.add_argument("--children", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.list:
        for g, (mods, tests) in GROUPS.items():
            print(f"{g}: {' '.join(mods)}  ←  {' '.join(tests)}")
        return 0
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        print(f"mutation: unknown group(s) {unknown}: use some of {list(GROUPS)}", file=sys.stderr)
        return 2
    results = []
    print("| module | caught | survived | score | other |\n|---|---|---|---|---|")
    for g in args.groups or list(GROUPS):
        r = run_group(g, args.children)
        results.append(r)
        print("\n".join(_report(r)), flush=True)
        print(f"<!-- group {g}: {r['wall_s']:.0f} s, mutmut exit {r['returncode']} -->", flush=True)
        if r["returncode"] != 0:
            log = WORK / g / "mutmut-run.log"
            print(f"mutation: mutmut failed in group {g}: see {log}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any(r["returncode"] != 0 for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
