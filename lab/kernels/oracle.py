"""The float64 oracle every attention implementation is checked against.

    oracle_attention(q, k, v, columns, scale=None) -> (B, H, T, D) float64

A deliberately plain restatement of the column operation (`lab.kernels.columns_attention`),
written for reading, not speed: one gather per column, one dense softmax over the columns.  It
takes the columns explicitly — the caller writes them out (or derives them with the code it
wants to test); nothing here computes an attended set from α.

columns   [(d, f), ...]: distance d ≥ 0 (an int) and fraction f (None or 0 for an integer
          column, a float, or a 0-d tensor kept on its graph so that gradients reach α).
          Column (d, f) is *valid* for query t when t ≥ d, and reads the key/value
          (1 − f)·row[t − d] + f·row[max(t − d − 1, 0)].  A column listed twice counts twice.
GQA       query head h reads KV head h // (H / KV).
softmax   over the valid columns of each query, logits q_t·key · scale (scale 1/√D by default).
no valid  a query with no valid column (t below every distance) outputs **zeros** and passes
column    no gradient — the rule of the fused kernels (`lab.kernels`).

Differentiable in q, k, v and every tensor f; inputs of any float dtype are promoted to float64
(the gradients flow back to them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

Column = tuple[int, float | torch.Tensor | None]  # (distance, frac)


def oracle_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    columns: Sequence[Column],
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention over explicit columns in float64 (see the module docstring).

    q (B, H, T, D); k, v (B, KV, T, D) with H % KV == 0.  Returns (B, H, T, D) float64."""
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4:
        raise ValueError(
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: want q (B, H, T, D) "
            f"and k, v (B, KV, T, D)"
        )
    B, H, T, D = q.shape
    KV = k.shape[1]
    if H % KV:
        raise ValueError(f"n_heads={H} must be a multiple of n_kv_heads={KV}")
    if not columns:
        raise ValueError("columns is empty: give at least one (distance, frac)")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    dev = q.device
    q, k, v = q.double(), k.double(), v.double()
    kv_of = torch.arange(H, device=dev) // (H // KV)  # (H,) the KV head each query head reads
    kh, vh = k[:, kv_of], v[:, kv_of]  # (B, H, T, D)
    t = torch.arange(T, device=dev)  # (T,)
    logits, values, valid = [], [], []
    for d, f in columns:
        d = int(d)
        if d < 0:
            raise ValueError(f"distance {d} is negative: distances are d >= 0")
        if f is None:
            f = torch.zeros((), dtype=torch.float64, device=dev)
        elif isinstance(f, torch.Tensor):
            f = f.to(device=dev, dtype=torch.float64)
        else:
            f = torch.tensor(float(f), dtype=torch.float64, device=dev)
        lo, hi = (t - d).clamp(min=0), (t - d - 1).clamp(min=0)  # (T,) rows read
        key = (1 - f) * kh[:, :, lo] + f * kh[:, :, hi]  # (B, H, T, D)
        val = (1 - f) * vh[:, :, lo] + f * vh[:, :, hi]
        logits.append((q * key).sum(-1) * scale)  # (B, H, T)
        values.append(val)
        valid.append(t >= d)
    ok = torch.stack(valid, -1)  # (T, C) column c valid for query t
    row_ok = ok.any(-1, keepdim=True)  # (T, 1) the query reads something
    s = torch.stack(logits, -1).masked_fill(~ok, float("-inf"))  # (B, H, T, C)
    s = s.masked_fill(~row_ok, 0.0)  # empty rows: a finite softmax, zeroed below
    p = torch.softmax(s, -1) * row_ok  # (B, H, T, C)
    return (p[..., None] * torch.stack(values, -2)).sum(-2)  # (B, H, T, D)
