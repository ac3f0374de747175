"""Sparse Fibonacci attention: one function, four exact paths.

Inputs are already rotated by RoPE at their true positions.  Shapes (GQA, G = H / KV):

    q        (B, H,  T, D)        query head h reads KV head h // G (repeat-interleave grouping)
    k, v     (B, KV, T, D)
    output   (B, H,  T, D)

Paths
-----
``shift``   integer offsets (fixed / staggered / coprime / pow2 models).  One score column per
            attended distance d, computed from aligned slices q[d:]·k[:T−d]; one softmax over the
            C columns; outputs accumulated from aligned slices of v.  Memory is O(B·H·T·C): no
            (T, T) tensor and no (T, C, D) stack of gathered keys is ever built.
``interp``  learned α.  Rung k reads the interpolated key (1−frac)·k[t−lo] + frac·k[t−lo−1]
            (lo = floor(α·f_k), the lo+1 row clamped at position 0).  Because the score and the
            output are linear in the key and value, an interpolated column is a blend of two
            shifted integer columns, so it runs on the same machinery and stays O(T) in memory;
            d(loss)/dα flows through frac (non-zero even when α·f is an integer).
``mask``    a boolean (T, T) mask through scaled_dot_product_attention: the paper's fused path,
            O(T²), kept as an oracle and for comparison.
``dense``   plain causal attention, the dense baseline.

Every query attends at least itself (distance 0), so no row is empty; masked logits are −inf and
receive exactly zero probability.

Implementations of shift / interp (``impl``)
--------------------------------------------
Both paths read one `lab.ladder.plan.ColumnPlan` (the columns, decided once from α in float64 and
cached) and reduce to one low-level operation, ``lab.kernels.columns_attention`` (C columns, each
a distance and a fraction; `plan_attention` runs a plan through it).  ``lab.kernels.reference`` is its pure-PyTorch reference
(``impl="torch"``); ``impl="cpp"`` is the fused C++ kernel (CPU), ``impl="triton"`` the fused
Triton kernel (CUDA), and ``impl="auto"`` (the default) picks the fastest available one for the
device, falling back to the reference with a warning.  ``FIBLAB_ATTN_IMPL`` overrides "auto".
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from lab import kernels
from lab.kernels.shapes import check_qkv
from lab.ladder.offsets import Ladder, check_alpha
from lab.ladder.plan import ColumnPlan, plan_for

PATHS = ("auto", "shift", "interp", "mask", "dense")


def plan_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: ColumnPlan,
    alpha=None,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """One `ColumnPlan` through `lab.kernels.columns_attention`.  Returns (B, H, T, D).

    ``alpha`` the 0-d tensor the plan was built from, when the fractions must carry dα."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # half-precision q: the fractions stay float32 (the fused kernels compute in float32; the
    # PyTorch path casts them to q's dtype itself, `lab.kernels`)
    half = q.dtype in (torch.bfloat16, torch.float16)
    dists, fracs, interp = plan.kernel_inputs(alpha, q.device, torch.float32 if half else q.dtype)
    return kernels.columns_attention(q, k, v, dists, fracs, scale, impl, interpolated=interp)


# --------------------------------------------------------------------------------------------
# mask and dense paths
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def _bool_mask_cpu(seq_len: int, distances: tuple[int, ...]) -> torch.Tensor:
    t = torch.arange(seq_len)
    delta = t[:, None] - t[None, :]  # (T, T)
    return torch.isin(delta, torch.tensor(distances))


def bool_mask(seq_len: int, distances, device=None) -> torch.Tensor:
    """(T, T) boolean mask, True where query i may attend key j, i.e. (i − j) ∈ distances."""
    return _bool_mask_cpu(seq_len, tuple(int(d) for d in distances)).to(device)


def dense_attention(q, k, v, scale: float | None = None) -> torch.Tensor:
    """Plain causal attention with GQA (the dense baseline)."""
    _, H, KV, _, _ = check_qkv(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=H != KV)


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------
def sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    alpha,
    ladder: Ladder,
    path: str = "auto",
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention over {0..W} ∪ scaled rungs.  Returns (B, H, T, D).

    ladder  the window, base, rungs, rounding and reach (`lab.ladder.offsets.Ladder`, e.g.
            ``Ladder(8)``).  Its reach defaults to the input length T; pass the training length
            to freeze the rung set when running a model at a longer length.

    alpha   a Python float selects the integer attended set (rounded by ``rounding``); a 0-d
            tensor selects the interpolated gather and carries the gradient to α.
    path    "auto" (float → shift, tensor → interp), "shift", "interp", "mask" or "dense".
    impl    how shift / interp run: "auto" (the faster of the device's fused kernel and
            PyTorch, measured once per machine and shape class; the FIBLAB_ATTN_IMPL
            environment variable overrides it), "torch", "cpp" or "triton" —
            see `lab.kernels`.  The mask and dense paths ignore it.
    """
    B, H, KV, T, D = check_qkv(q, k, v)
    if path not in PATHS:
        raise ValueError(f"path={path!r} is unknown: use one of {PATHS}")
    if impl not in kernels.IMPLS:
        raise ValueError(f"impl={impl!r} is unknown: use one of {kernels.IMPLS}")
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if path == "dense":
        return dense_attention(q, k, v, scale)
    is_tensor = isinstance(alpha, torch.Tensor)
    if is_tensor:
        if alpha.numel() != 1:
            raise ValueError(
                f"alpha tensor must hold one value (0-d); got shape {tuple(alpha.shape)}"
            )
        value = float(alpha.detach())  # the one host transfer: the plan needs α's value
        check_alpha(value)
        if path in ("shift", "mask"):
            raise ValueError(
                f"path={path!r} uses integer offsets and carries no gradient to a "
                f"tensor alpha: pass alpha as a float, or use path='interp'"
            )
        path = "interp"
    else:
        check_alpha(alpha)
        value = alpha
        path = "shift" if path == "auto" else path
    plan = plan_for(value, T, ladder, interpolate=path == "interp")
    if path == "mask":
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=bool_mask(T, plan.lo, q.device), scale=scale, enable_gqa=H != KV
        )
    return plan_attention(q, k, v, plan, alpha if is_tensor else None, scale, impl)
