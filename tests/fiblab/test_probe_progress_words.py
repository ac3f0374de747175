"""Notebook 02's progress words (issue 28 item 7): the kernel compilation is announced only
when the kernel is not built yet, since a built one gives the first step in about a second."""

from __future__ import annotations

from fiblab.jobs import probe_progress as PP
from lab.kernels import cpu


def test_the_compile_note_only_when_the_kernel_is_not_built(monkeypatch, tmp_path):
    cell = {"mechanism": "blur", "depth": 2, "init": "uniform", "seed": 0, "phase": "building"}
    monkeypatch.setattr(cpu, "_STATE", {})  # not loaded in this process
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # an empty cache
    assert not cpu.is_cached()
    words = PP.activity("running", 4, [cell], 0)
    assert "compiling the attention kernel" in words and "once" in words
    path = cpu._cache_file(cpu._NATIVE_FLAGS)
    assert path.startswith(str(tmp_path))
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").close()  # the build is in the cache now
    assert cpu.is_cached()
    words = PP.activity("running", 4, [cell], 0)
    assert words == "blur depth 2 uniform seed 0: building the model and taking its first step"


def test_a_long_grid_says_how_long_before_it_starts(monkeypatch):
    """`fiblab probe marked` defaults to the paper's 2,500-step grid; it now prints the cells,
    steps and the wall time from a step timed here (issue 28 item 7). The estimate is the
    timed step × steps × cells ÷ jobs, checked with a fake clock."""
    from dataclasses import replace

    from lab.machine import measure
    from probes.settings import SCALES, Cell

    class T:
        min_s = 0.5

    monkeypatch.setattr(measure, "time_fn", lambda *a, **k: T())
    cells = [Cell("blur", d, i, s) for d in (2, 4) for i in ("uniform", "staggered") for s in (0,)]
    paper = SCALES["paper"]
    line = PP.start_estimate(cells, paper, "paper", "marked", jobs=2)
    want = 4 * 0.5 * paper.steps / 2
    from lab.util.wording import duration

    assert line.startswith(f"4 cells to train × {paper.steps:,} steps (paper scale)")
    assert f"≈ {duration(want)} on this machine" in line and "jobs=2" in line
    assert PP.start_estimate(cells, SCALES["tiny"], "tiny", "marked") is None  # short: silent
    assert PP.start_estimate(cells, replace(paper, steps=10), "paper", "marked") is None
    assert PP.start_estimate(cells, paper, "paper", "shift") is None
    assert PP.start_estimate([], paper, "paper", "marked") is None
