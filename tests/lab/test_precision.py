"""`lab.machine.precision`: what each precision does on each device, inside and outside an outer autocast.

The dtype a matmul returns is the oracle: bfloat16 under an active autocast, float32 otherwise.
"""

import warnings

import pytest
import torch

import lab.machine.hardware as hw
import lab.machine.precision as P
from lab.machine.precision import PRECISIONS, autocast, check_precision, default_precision


def _matmul_dtype(device="cpu") -> torch.dtype:
    a = torch.ones(4, 4, device=device)
    return (a @ a).dtype


def test_names_and_defaults(cpu_profile):
    assert PRECISIONS == ("fp32", "bf16")
    assert (
        default_precision("cuda") == "bf16" and default_precision(torch.device("cuda:1")) == "bf16"
    )
    assert default_precision("cpu") == "fp32" and default_precision("meta") == "fp32"
    assert check_precision("bf16") == "bf16"
    with pytest.raises(ValueError, match=r"precision='fp16' must be one of \('fp32', 'bf16'\)"):
        autocast("cpu", "fp16")


def test_cpu_bf16_autocasts():
    with autocast("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu")
        assert _matmul_dtype() == torch.bfloat16
    assert _matmul_dtype() == torch.float32


def test_cpu_fp32_switches_an_outer_autocast_off():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with autocast(torch.device("cpu"), "fp32"):
            assert not torch.is_autocast_enabled("cpu")
            assert _matmul_dtype() == torch.float32
        assert _matmul_dtype() == torch.bfloat16


def test_cpu_default_enters_nothing(cpu_profile):
    """precision None on CPU: float32 by itself, and an outer autocast stays in force — on
    either CPU (`auto` is fp32 on both)."""
    with autocast("cpu"):
        assert _matmul_dtype() == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16), autocast("cpu"):
        assert _matmul_dtype() == torch.bfloat16


def test_cuda_contexts_are_bf16_autocast_or_off():
    """On CUDA the default is bfloat16 autocast and "fp32" an autocast switched off (built
    without a GPU too: the context records its device and dtype)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" on a CPU-only build
        for prec in (None, "bf16"):
            ctx = autocast("cuda", prec)
            assert isinstance(ctx, torch.autocast)
            assert ctx.device == "cuda" and ctx.fast_dtype == torch.bfloat16
        off = autocast("cuda", "fp32")
        assert isinstance(off, torch.autocast) and off.device == "cuda"
    if not torch.cuda.is_available():
        return
    with autocast("cuda"):  # pragma: no cover - GPU machines
        assert _matmul_dtype("cuda") == torch.bfloat16
    with torch.autocast("cuda", dtype=torch.bfloat16), autocast("cuda", "fp32"):
        assert _matmul_dtype("cuda") == torch.float32


# --------------------------------------------------------------------------------------------
# auto without a workload class: bf16 on CUDA, fp32 on every CPU whatever its features (mocked);
# the features decide only whether a forced bf16 is emulated (and warns)
# --------------------------------------------------------------------------------------------


def _cpu(monkeypatch, capability="AVX2", avx512_bf16=False, amx=False, arm=False):
    """Pretend this CPU has the given PyTorch capability and bf16 features."""
    monkeypatch.delenv(hw.BF16_ENV, raising=False)
    monkeypatch.setattr(hw, "_cpu_facts", lambda: ("Test CPU", capability, avx512_bf16, amx, arm))
    monkeypatch.setattr(P, "_WARNED", set())


@pytest.mark.parametrize(
    "features, native",
    [
        ({"capability": "AVX2"}, False),
        ({"capability": "AVX512"}, False),  # AVX-512 without BF16: emulated, slow
        ({"capability": "AVX512", "avx512_bf16": True}, True),
        ({"capability": "AVX512", "amx": True}, True),
        ({"capability": "DEFAULT", "arm": True}, True),
    ],
)
def test_auto_is_fp32_on_every_cpu(monkeypatch, features, native):
    """bf16 was measured slower than fp32 on the native-bf16 Xeon for every workload of the
    lab (benchmarks/precision_speed.py), and fp32 everywhere keeps results alike across CPUs."""
    _cpu(monkeypatch, **features)
    assert hw.native_bf16("cpu") is native
    assert P.resolve_precision("auto", "cpu") == "fp32"
    assert P.resolve_precision(None, "cpu") == "fp32"
    assert P.default_precision("cpu") == "fp32"
    assert P.describe_auto("cpu") == "auto (fp32 on this CPU)"
    assert (P.slow_bf16_reason("cpu") is None) is native


def test_auto_is_bf16_on_cuda_and_the_env_overrides_the_features(monkeypatch):
    _cpu(monkeypatch)
    assert P.resolve_precision("auto", "cuda") == "bf16" and P.describe_auto("cuda:0").endswith(
        "(bf16 on CUDA)"
    )
    monkeypatch.setenv(hw.BF16_ENV, "1")
    assert hw.native_bf16("cpu") and P.resolve_precision("auto", "cpu") == "fp32"
    _cpu(monkeypatch, amx=True)
    monkeypatch.setenv(hw.BF16_ENV, "0")
    assert not hw.native_bf16("cpu") and P.slow_bf16_reason("cpu") is not None


def test_forced_bf16_on_avx2_runs_and_warns_once(monkeypatch):
    _cpu(monkeypatch)
    with pytest.warns(RuntimeWarning, match=r"Test CPU, PyTorch capability AVX2.*≈ 20× slower"):
        assert P.resolve_precision("bf16", "cpu") == "bf16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second time: silent
        assert P.resolve_precision("bf16", "cpu") == "bf16"
        assert P.resolve_precision("fp32", "cpu") == "fp32"
    _cpu(monkeypatch, amx=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # native: no warning at all
        assert P.resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match=r"precision='fp16' must be one of \('auto', 'fp32'"):
        P.resolve_precision("fp16", "cpu")


def test_torch_feature_probes_are_read(monkeypatch):
    """The machine's features come from PyTorch's CPUID probes (mocked here)."""
    monkeypatch.delenv(hw.BF16_ENV, raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    for probe, field in (
        ("_is_avx512_bf16_supported", "avx512_bf16"),
        ("_is_amx_tile_supported", "amx"),
    ):
        others = {"_is_avx512_bf16_supported", "_is_amx_tile_supported"} - {probe}
        monkeypatch.setattr(torch.cpu, probe, lambda: True)
        for other in others:
            monkeypatch.setattr(torch.cpu, other, lambda: False)
        monkeypatch.setattr(hw, "_cpuinfo", lambda: {"model name": "Mock Xeon", "flags": "avx2"})
        facts = hw._cpu_facts.__wrapped__()
        assert facts[:2] == ("Mock Xeon", "AVX512") and facts[2 if field == "avx512_bf16" else 3]
        monkeypatch.setattr(hw, "_cpu_facts", lambda f=facts: f)
        m = hw.machine()
        assert m.cpu_bf16 and "native bf16" in m.line() and m.to_dict()["capability"] == "AVX512"
        monkeypatch.undo()
        monkeypatch.delenv(hw.BF16_ENV, raising=False)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")


def test_machine_key_separates_machines(monkeypatch):
    _cpu(monkeypatch)
    avx2 = hw.machine().key
    _cpu(monkeypatch, amx=True)
    assert hw.machine().key != avx2


def test_none_inherits_an_enclosing_lab_precision(cpu_profile):
    """A run's evaluation (precision None) computes in what its training chose, even where the
    device default differs: bf16 inside a lab bf16 context, fp32 inside an fp32 one."""
    with autocast("cpu"):
        assert _matmul_dtype() == torch.float32  # the default on every CPU
    with autocast("cpu", "bf16"), autocast("cpu"):
        assert _matmul_dtype() == torch.bfloat16
    with autocast("cpu", "fp32"), autocast("cpu"):
        assert _matmul_dtype() == torch.float32
    with autocast("cpu", "fp32"):
        with autocast("cpu", "bf16"):
            assert _matmul_dtype() == torch.bfloat16
        assert _matmul_dtype() == torch.float32


@pytest.mark.slow  # ≈ 18 s: two CLI probes in subprocesses
def test_cli_probe_keys_by_the_resolved_precision_and_warns_in_one_line(tmp_path):
    """`fiblab probe --precision auto` keys its record by what auto chose — fp32 on either CPU
    (FIBLAB_CPU_BF16 stands in for the hardware); a forced bf16 where it is not native prints
    one plain line, no Python warning dump."""
    import json
    import os
    import subprocess
    import sys

    from lab.machine.measure import ROOT

    def probe(precision: str, native: str):
        out = tmp_path / f"{precision}-{native}.jsonl"
        cmd = [sys.executable, "-m", "fiblab.cli", "probe", "marked", "--scale", "tiny"]
        cmd += ["--depths", "2", "--init", "uniform", "--seeds", "0", "--steps", "2", "--json"]
        cmd += ["--precision", precision, "--store", "", "--out", str(out)]
        env = {**os.environ, hw.BF16_ENV: native, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])["key"], done.stderr

    key, err = probe("auto", "0")
    assert key.endswith("/w2") and "bf16" not in err
    key, err = probe("auto", "1")
    assert key.endswith("/w2") and "slower" not in err
    key, err = probe("bf16", "0")
    assert key.endswith("/w2/bf16")
    lines = [ln for ln in err.splitlines() if "bf16" in ln]
    assert len(lines) == 1 and lines[0].startswith("fiblab: bf16 on CPU: ")
    assert "RuntimeWarning" not in err and "Traceback" not in err
