"""The attention paths under test beside `lab.sparse.attention.sparse_attention`: the Triton kernel
driven from the column plan as the dispatch would, and the dense causal SDPA baseline (flash)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from lab.ladder.offsets import Ladder
from lab.ladder.plan import plan_for


def triton_attention(
    q,
    k,
    v,
    alpha,
    ladder: Ladder,
    scale=None,
    launch=None,
):
    """The Triton kernel driven as the dispatch would: the column plan from α (a float: the
    integer set; a 0-d tensor: interpolated columns carrying dα), then one fused call."""
    from lab.kernels.triton_attn import triton_columns_attention

    T, D = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    learned = isinstance(alpha, torch.Tensor)
    plan = plan_for(alpha, T, ladder, interpolate=learned)
    dists, fracs, interp = plan.kernel_inputs(
        alpha if learned else None,
        q.device,
        torch.float64 if q.dtype == torch.float64 else torch.float32,
    )
    block_t, num_warps = launch or (None, None)
    return triton_columns_attention(
        q, k, v, dists, fracs, scale, interpolated=interp, block_t=block_t, num_warps=num_warps
    )


@contextlib.contextmanager
def flash_only(device: torch.device):
    """Restrict SDPA to the flash kernel on CUDA (the dense baseline); no-op elsewhere."""
    if device.type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        yield


def dense_sdpa(q, k, v):
    return F.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
    )


_FLASH = {"ok": None}  # does flash take these inputs? (first call)


def dense_baseline(q, k, v):
    """Causal SDPA restricted to the flash kernel; SDPA's own choice if flash refuses."""
    if _FLASH["ok"] is not False:
        try:
            with flash_only(q.device):
                out = dense_sdpa(q, k, v)
            _FLASH["ok"] = True
            return out
        except RuntimeError as e:
            _FLASH["ok"] = False
            print(f"  [note] flash SDPA refused ({str(e)[:200]}); dense uses SDPA's default")
    return dense_sdpa(q, k, v)


def flash_taken() -> bool | None:
    """Did flash take the dense baseline's inputs (None before the first call)?"""
    return _FLASH["ok"]
