"""Shape checks shared by every attention implementation (pure PyTorch, C++, Triton).

    q        (B, H,  T, D)        query head h reads KV head h // (H / KV)
    k, v     (B, KV, T, D)
"""
from __future__ import annotations

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
        raise ValueError(f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)} in batch, "
                         f"length or head_dim")
    if KV < 1 or H % KV != 0:
        raise ValueError(f"n_heads={H} must be a multiple of n_kv_heads={KV}")
    return B, H, KV, T, D
