"""benchmarks/gpu_check.py dry-run on CPU.  The probe section checks the blur gather against
float64 (the check must pass) and times the probe step for both mechanisms; the gate section
runs the Triton first-use check and flex against Triton."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _gpu_check():
    """benchmarks/gpu_check.py as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location(
        "gpu_check", os.path.join(HERE, "..", "benchmarks", "gpu_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_probe_section_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # main() sets it for CPU; undo after
    mod = _gpu_check()
    out = tmp_path / "gc.json"
    assert mod.main(["--device", "cpu", "--smoke", "--sections", "probe", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["errors"] == []
    from lab.machine.hardware import machine

    assert capsys.readouterr().out.splitlines()[0] == machine().line()
    assert rec["machine"] == machine().to_dict()
    checks = rec["probe"]["check"]
    assert checks and all(c["ok"] for c in checks)
    assert all(e <= 1e-4 for e in checks[0]["errors"].values())
    assert {r["mechanism"] for r in rec["probe"]["step"]} == {"dense", "blur"}


@pytest.mark.slow  # ≈ 19 s (a Ray start); the probe section's dry run stays in the default suite
def test_gate_and_ray_hook_dry_run(tmp_path, monkeypatch):
    """The gate section on CPU (Triton's interpreter): the first-use check passes the real
    kernel, flex agrees with Triton, and the Ray section (CUDA only) records itself as skipped."""
    pytest.importorskip("triton")
    # a fresh process: TRITON_INTERPRET counts only if set before the kernel module is imported,
    # and an earlier test in this process may have imported it without
    out = tmp_path / "gc.json"
    root = os.path.join(HERE, "..")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.path.abspath(root))
    script = os.path.join(root, "benchmarks", "gpu_check.py")
    args = ["--dry-run", "--sections", "gate", "ray", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["errors"] == []
    gate = rec["gate"]
    if gate["triton_status"] != "ok":
        pytest.skip(f"Triton cannot run here: {gate['triton_status']}")
    (v,) = gate["verdicts"]
    assert v["ok"] and v["dtype"] == "float32" and max(v["errors"].values()) <= 1e-5
    assert gate["flex_vs_triton"]["ok"] and gate["flex_vs_triton"]["errors"]["out"] <= 1e-5
    assert "ray (needs CUDA: one GPU per task)" in rec["skipped"] and "ray" not in rec


def test_long_context_section_dry_run(tmp_path, monkeypatch):
    """The ``long`` section (issue 41's GPU rows) runs end to end on CPU at smoke size: every
    schedule in both precisions, dense's ratio 1, the sparse ones timed against it."""
    mod = _gpu_check()
    out = tmp_path / "gpu.json"
    assert mod.main(["--device", "cpu", "--smoke", "--sections", "long", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["errors"] == []
    rows = rec["long"]
    assert {(r["precision"], r["schedule"]) for r in rows} == {
        (p, s) for p in ("bf16", "fp32") for s in ("dense", "fixed", "stagger", "learned")
    }
    assert all(r["T"] == 64 and r["step_s"] > 0 for r in rows)
    assert all(r["x_dense"] == 1.0 for r in rows if r["schedule"] == "dense")
