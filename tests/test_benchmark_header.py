"""Every benchmark names its machine first: `benchmarks.header.machine_header` prints
`lab.machine.hardware.machine().line()` with the thread count the script measures with, and the dict
it returns goes into the script's JSON (benchmarks/RESULTS.md cites that line for each table)."""

import dataclasses
import json
import os
import subprocess
import sys

import torch

from benchmarks.header import machine_header
from lab.machine.hardware import machine

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def test_the_header_is_one_line_read_after_the_thread_count_is_set(capsys):
    was = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        info = machine_header()
    finally:
        torch.set_num_threads(was)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    line = out.rstrip("\n")
    assert ", 1 thread · torch " in line
    assert line.startswith(f"{info['cpu_model']} · capability {info['capability']}")
    assert info["threads"] == 1
    assert info["key"] == dataclasses.replace(machine(), threads=1).key


def test_attention_benchmark_prints_the_machine_first_and_writes_it(tmp_path):
    """benchmarks/attention.py at T=64 on one thread, in a fresh process: its first line is
    this machine with 1 thread (not the process's default count), its JSON carries the record."""
    out = tmp_path / "att.json"
    argv = ["--device", "cpu", "--lengths", "64", "--reps", "1", "--rows", "dense", "torch shift"]
    argv += ["--no-memory", "--threads", "1", "--json", str(out)]
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "attention.py"), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "FIBLAB_ATTN_IMPL": "torch"},
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    expected = dataclasses.replace(machine(), threads=1)
    lines = res.stdout.splitlines()
    assert lines[0] == expected.line()
    assert lines[1].startswith("device=cpu ")
    rec = json.loads(out.read_text())
    assert rec["machine"]["threads"] == 1
    assert rec["machine"]["key"] == expected.key
    assert [r["row"] for r in rec["rows"]] == ["dense", "torch shift"]
