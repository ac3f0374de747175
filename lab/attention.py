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
Both paths reduce to one low-level operation, ``lab.kernels.columns_attention`` (C columns, each a
distance and a fraction).  ``lab.kernels.reference`` is its pure-PyTorch reference
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
from lab.kernels.shapes import check_qkv  # noqa: F401  (re-exported: lab.blur uses it)
from lab.offsets import (
    Base,
    attended_distances,
    check_alpha,
    check_window,
    interp_columns,
    resolve_base,
)

PATHS = ("auto", "shift", "interp", "mask", "dense")


# --------------------------------------------------------------------------------------------
# the column plan: which distances a query reads, integer or interpolated
# --------------------------------------------------------------------------------------------
def column_plan(
    alpha,
    window: int,
    seq_len: int,
    base: Base = "fib",
    rungs: int = 15,
    rounding: str = "round",
    reach: int | None = None,
    interpolate: bool = False,
) -> list[tuple[int, torch.Tensor | None]]:
    """Columns as (distance lo, frac) pairs; frac is None for an exact integer column.

    With ``interpolate=False`` (float α) the columns are the integer attended set.  With
    ``interpolate=True`` (α a 0-d tensor) the window is exact and each kept rung carries
    frac = α·f − floor(α·f) as a tensor attached to α's graph.  Rung decisions need the values
    of α·f on the host: one transfer per call, not one per rung.
    """
    check_window(window)
    if not interpolate:
        return [
            (d, None)
            for d in attended_distances(alpha, window, seq_len, base, rungs, rounding, reach)
        ]
    reach_ = seq_len if reach is None else reach
    f = torch.tensor(
        resolve_base(base, rungs, max(reach_, 2)), dtype=alpha.dtype, device=alpha.device
    )
    targets = alpha.reshape(()) * f  # (K,)
    cols: list[tuple[int, torch.Tensor | None]] = [
        (d, None) for d in range(min(window, seq_len - 1) + 1)
    ]
    for kk, lo in interp_columns(targets.detach().cpu().tolist(), window, seq_len, reach):
        cols.append((lo, targets[kk] - lo))
    return cols


def _interp_column_tensors(
    alpha: torch.Tensor, window: int, seq_len: int, base: Base, rungs: int, reach: int | None
):
    """`column_plan(..., interpolate=True)` as kernel inputs: (dists (C,) int64 on CPU, fracs
    (C,) on α's graph, interpolated (C,) bool).  Same rule and the same α·f values; the
    fractions come from two tensor ops, α·F − LO, instead of one graph node per rung."""
    check_window(window)
    reach_ = seq_len if reach is None else reach
    f = torch.tensor(
        resolve_base(base, rungs, max(reach_, 2)), dtype=alpha.dtype, device=alpha.device
    )
    targets = (alpha.detach().reshape(()) * f).cpu().tolist()  # one transfer
    n_win = min(window, seq_len - 1) + 1
    kept = interp_columns(targets, window, seq_len, reach)  # [(rung, lo)]
    dists = list(range(n_win)) + [lo for _, lo in kept]
    scale_f = [0.0] * n_win + [float(f[kk]) for kk, _ in kept]
    fracs = alpha.reshape(()) * torch.tensor(
        scale_f, dtype=alpha.dtype, device=alpha.device
    ) - torch.tensor([0] * n_win + [lo for _, lo in kept], dtype=alpha.dtype, device=alpha.device)
    interp = torch.tensor([False] * n_win + [True] * len(kept))
    return torch.tensor(dists, dtype=torch.int64), fracs, interp


def _columns(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cols: list[tuple[int, torch.Tensor | None]],
    scale: float,
    impl: str,
) -> torch.Tensor:
    """An integer column plan (see `column_plan`) through `lab.kernels.columns_attention`."""
    if any(frac is not None for _, frac in cols):
        raise ValueError(
            "_columns takes integer columns; interpolated ones go through _interp_column_tensors"
        )
    dists = torch.tensor([d for d, _ in cols], dtype=torch.int64)
    return kernels.columns_attention(
        q,
        k,
        v,
        dists,
        q.new_zeros(len(cols)),
        scale,
        impl,
        interpolated=torch.zeros(len(cols), dtype=torch.bool),
    )


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
    window: int,
    base: Base = "fib",
    rungs: int = 15,
    rounding: str = "round",
    path: str = "auto",
    reach: int | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention over {0..W} ∪ scaled rungs.  Returns (B, H, T, D).

    alpha   a Python float selects the integer attended set (rounded by ``rounding``); a 0-d
            tensor selects the interpolated gather and carries the gradient to α.
    path    "auto" (float → shift, tensor → interp), "shift", "interp", "mask" or "dense".
    reach   the length the rung set is computed for (default: the input length T).  Pass the
            training length to freeze the rung set when running a model at a longer length.
    impl    how shift / interp run: "auto" (fused kernel for the device, else PyTorch; the
            FIBLAB_ATTN_IMPL environment variable overrides it), "torch", "cpp" or "triton" —
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
    check_window(window)
    is_tensor = isinstance(alpha, torch.Tensor)
    if is_tensor:
        if alpha.numel() != 1:
            raise ValueError(
                f"alpha tensor must hold one value (0-d); got shape {tuple(alpha.shape)}"
            )
        check_alpha(float(alpha.detach()))
        if path in ("shift", "mask"):
            raise ValueError(
                f"path={path!r} uses integer offsets and carries no gradient to a "
                f"tensor alpha: pass alpha as a float, or use path='interp'"
            )
        path = "interp"
    else:
        check_alpha(alpha)
        path = "shift" if path == "auto" else path
    if path == "mask":
        dists = attended_distances(alpha, window, T, base, rungs, rounding, reach)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=bool_mask(T, dists, q.device), scale=scale, enable_gqa=H != KV
        )
    if path == "interp":
        a = alpha if is_tensor else torch.tensor(float(alpha), dtype=torch.float64)
        dists, fracs, interp = _interp_column_tensors(a.to(q.device), window, T, base, rungs, reach)
        return kernels.columns_attention(
            q, k, v, dists, fracs.to(q.dtype), scale, impl, interpolated=interp
        )
    cols = column_plan(alpha, window, T, base, rungs, rounding, reach)
    return _columns(q, k, v, cols, scale, impl)
