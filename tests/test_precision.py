"""`lab.precision`: what each precision does on each device, inside and outside an outer autocast.

The dtype a matmul returns is the oracle: bfloat16 under an active autocast, float32 otherwise.
"""

import warnings

import pytest
import torch

from lab.precision import PRECISIONS, autocast, check_precision, default_precision


def _matmul_dtype(device="cpu") -> torch.dtype:
    a = torch.ones(4, 4, device=device)
    return (a @ a).dtype


def test_names_and_defaults():
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


def test_cpu_default_enters_nothing():
    """precision None on CPU: float32 by itself, and an outer autocast stays in force."""
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
