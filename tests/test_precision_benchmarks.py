"""The fp32-vs-bf16 benchmarks behind RESULTS' "One lab on every CPU": the speed script runs,
names its machine and load, and times both precisions; the quality table's arithmetic by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lab.machine.measure import ROOT

sys.path.insert(0, str(ROOT))
from benchmarks.precision_quality import summarise  # noqa: E402


def test_speed_script_times_both_precisions_and_says_the_load(tmp_path):
    out = tmp_path / "speed.json"
    argv = ["--only", "probe-demo-d2", "--reps", "1", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "precision_speed.py"), *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert " · capability " in lines[0] and lines[-1].endswith("while this ran")
    assert "other processes used" in lines[-1]
    rec = json.loads(out.read_text())
    (row,) = rec["rows"]
    assert row["workload"] == "probe-demo-d2" and len(row["fp32_s"]) == len(row["bf16_s"]) == 1
    assert row["ratio_min"] == pytest.approx(row["bf16_s"][0] / row["fp32_s"][0])
    assert set(rec["load"]) >= {"other_cores", "busy", "cores"}


def test_quality_summary_is_paired_differences_over_the_fp32_seed_sigma():
    rows = [
        {"preset": "p", "seed": s, "precision": prec, "ppl": v}
        for s, prec, v in [
            (1, "fp32", 10.0),
            (1, "bf16", 10.5),
            (2, "fp32", 12.0),
            (2, "bf16", 11.9),
            (3, "fp32", 11.0),
        ]
    ]
    t = summarise(rows)["p"]
    assert t["seeds"] == [1, 2, 3] and t["diffs"] == pytest.approx([0.5, -0.1])
    assert t["mean_diff"] == pytest.approx(0.2)
    assert t["seed_sigma"] == pytest.approx(1.0)  # stdev of 10, 12, 11 (ddof 1)
    assert t["fp32_mean"] == pytest.approx(11.0) and t["bf16_mean"] == pytest.approx(11.2)
    assert t["diff_over_sigma"] == pytest.approx(0.2)
