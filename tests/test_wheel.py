"""A wheel built from the repository installs in a fresh virtual environment (no system site
packages) with the tested torch, and its `fiblab` command keeps runs and store in the working
directory, not inside site-packages.

Slow (minutes: it installs torch and the lab's dependencies into a new venv from the package
index pip is configured with); ``pytest -m slow tests/test_wheel.py`` runs it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what the wheel is built from: the packages, and pyproject's data file (JupyterLab's overrides)
WHEEL_SOURCES = [
    "lab",
    "probes",
    "analysis",
    "fiblab",
    "notebooks/jupyterlab",
    "pyproject.toml",
    "README.md",
]


def _run(cmd, cwd, env=None, timeout=1200):
    res = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def _tested_torch() -> str:
    """The torch bound pyproject.toml declares (e.g. "torch>=2.13,<2.14")."""
    text = (ROOT / "pyproject.toml").read_text()
    (torch,) = re.findall(r'^\s*"(torch[<>=!~].*?)"', text, re.MULTILINE)
    return torch


@pytest.mark.slow
def test_the_wheel_installs_with_the_tested_torch_and_keeps_runs_in_the_cwd(tmp_path):
    src = tmp_path / "src"  # a copy, so building leaves no build/ or egg-info in the checkout
    for name in WHEEL_SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(p, src / name)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, src], tmp_path)
    (wheel,) = wheels.glob("fiblab-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], tmp_path)  # no --system-site-packages
    py, fiblab = venv / "bin" / "python", venv / "bin" / "fiblab"
    _run([py, "-m", "pip", "install", "-q", wheel], tmp_path)

    code = "import sys, torch; print(torch.__version__); print(sys.prefix)"
    version, prefix = _run([py, "-c", code], tmp_path).stdout.split()
    assert prefix == str(venv)  # the new venv's own torch, not the test runner's
    overrides = venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert overrides.read_bytes() == (ROOT / "notebooks/jupyterlab/overrides.json").read_bytes()
    major_minor = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    spec = _tested_torch()
    assert spec == "torch>=2.13,<2.14" and major_minor == (2, 13), (version, spec)

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FIBLAB_STORE")}
    env.pop("FIBLAB_RUNS", None)
    out = _run([fiblab, "--version"], work, env).stdout.strip()
    assert out.startswith("fiblab ")
    argv = ["probe", "marked", "--scale", "tiny", "--mechanisms", "dense", "--depths", "2"]
    _run([fiblab, *argv, "--seeds", "0", "--steps", "2", "--no-progress"], work, env)
    assert (work / "runs" / "fiblab.db").is_file()
    assert (work / "runs" / "probes" / "marked-tiny.jsonl").is_file()
    site = Path(_run([py, "-c", "import lab; print(lab.__file__)"], work, env).stdout.strip())
    assert str(site).startswith(str(venv))  # the installed copy ran, not this checkout
    assert not list(site.parents[1].glob("runs"))  # nothing written into site-packages
    # the notebooks' and the launcher's base is the working directory too
    code = "from fiblab.jobs import launch; print(launch.DEFAULT_STORE)"
    assert _run([py, "-c", code], work, env).stdout.strip() == str(work / "runs" / "fiblab.db")
