"""The flake check (`scripts/flake_check.py`) repeats every test of the job, launcher, panel,
Ray and browser files — the slow-marked ones too.  Oracle: pytest's own collection of the
command it runs, against a count of the test functions in the files by hand."""

import importlib.util
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
    spec = importlib.util.spec_from_file_location(
        "flake_check", os.path.join(ROOT, "scripts", "flake_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_repetition_runs_the_slow_marked_tests_of_its_files_too():
    fc = _script()
    files = ["tests/fiblab/test_browser_02_probes.py", "tests/fiblab/test_browser.py"]
    by_hand = sum(
        len(re.findall(r"^def test_", open(os.path.join(ROOT, f)).read(), re.M)) for f in files
    )
    assert "pytest.mark.slow" in open(os.path.join(ROOT, files[0])).read()  # notebook 02's walk
    cmd = fc.pytest_command(files, "0", ["--collect-only"])
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    collected = re.search(r"(\d+) tests? collected", out.stdout)
    assert collected and int(collected.group(1)) == by_hand, out.stdout[-500:]
    assert "deselected" not in out.stdout
