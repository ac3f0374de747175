"""benchmarks/gpu_check.py's probe section, dry-run on CPU: it checks the blur gather against
float64 (the check must pass) and times the probe step for both mechanisms."""

import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def test_probe_section_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # main() sets it for CPU; undo after
    spec = importlib.util.spec_from_file_location(
        "gpu_check", os.path.join(HERE, "..", "benchmarks", "gpu_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "gc.json"
    assert mod.main(["--device", "cpu", "--smoke", "--sections", "probe", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["errors"] == []
    from lab.hardware import machine

    assert capsys.readouterr().out.splitlines()[0] == machine().line()
    assert rec["machine"] == machine().to_dict()
    checks = rec["probe"]["check"]
    assert checks and all(c["ok"] for c in checks)
    assert all(e <= 1e-4 for e in checks[0]["errors"].values())
    assert {r["mechanism"] for r in rec["probe"]["step"]} == {"dense", "blur"}
