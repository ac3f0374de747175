"""Shape checks shared by every attention implementation (pure PyTorch, C++, Triton).

q        (B, H,  T, D)        query head h reads KV head h // (H / KV)
k, v     (B, KV, T, D)
"""

from __future__ import annotations

import math

import torch


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int]:
    """Validate shapes; return (B, H, KV, T, D)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a 4-D tensor (B, heads, T, head_dim); got {got}")
    B, H, T, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    Bk, KV, Tk, Dk = k.shape
    if (Bk, Tk, Dk) != (B, T, D):
        raise ValueError(
            f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)} in batch, "
            f"length or head_dim"
        )
    if KV < 1 or H % KV != 0:
        raise ValueError(f"n_heads={H} must be a multiple of n_kv_heads={KV}")
    return B, H, KV, T, D


def check_columns(q, k, v, dists, fracs, scale) -> None:
    """Validate the shared low-level interface's arguments (clear errors naming the fix)."""
    check_qkv(q, k, v)
    if not isinstance(dists, torch.Tensor) or dists.dim() != 1 or dists.numel() < 1:
        raise ValueError("dists must be a 1-D int64 tensor of C >= 1 distances")
    if dists.dtype.is_floating_point or dists.dtype.is_complex or dists.dtype == torch.bool:
        raise ValueError(f"dists must hold integers (int64); got {dists.dtype}")
    if not isinstance(fracs, torch.Tensor) or fracs.shape != dists.shape:
        got = tuple(fracs.shape) if isinstance(fracs, torch.Tensor) else type(fracs).__name__
        raise ValueError(
            f"fracs must be a float tensor of shape {tuple(dists.shape)} (one per "
            f"column); got {got}"
        )
    if not fracs.dtype.is_floating_point:
        raise ValueError(f"fracs must be a float tensor; got {fracs.dtype}")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number; got {scale!r}")
