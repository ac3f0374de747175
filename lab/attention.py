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
distance and a fraction).  ``_ShiftedAttention`` below is its pure-PyTorch reference
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
from lab.offsets import (Base, attended_distances, check_alpha, check_window, interp_columns,
                         resolve_base)

PATHS = ("auto", "shift", "interp", "mask", "dense")
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------
# the column plan: which distances a query reads, integer or interpolated
# --------------------------------------------------------------------------------------------
def column_plan(alpha, window: int, seq_len: int, base: Base = "fib", rungs: int = 15,
                rounding: str = "round", reach: int | None = None,
                interpolate: bool = False) -> list[tuple[int, torch.Tensor | None]]:
    """Columns as (distance lo, frac) pairs; frac is None for an exact integer column.

    With ``interpolate=False`` (float α) the columns are the integer attended set.  With
    ``interpolate=True`` (α a 0-d tensor) the window is exact and each kept rung carries
    frac = α·f − floor(α·f) as a tensor attached to α's graph.  Rung decisions need the values
    of α·f on the host: one transfer per call, not one per rung.
    """
    check_window(window)
    if not interpolate:
        return [(d, None) for d in attended_distances(alpha, window, seq_len, base, rungs,
                                                      rounding, reach)]
    reach_ = seq_len if reach is None else reach
    f = torch.tensor(resolve_base(base, rungs, max(reach_, 2)), dtype=alpha.dtype,
                     device=alpha.device)
    targets = alpha.reshape(()) * f                                           # (K,)
    cols: list[tuple[int, torch.Tensor | None]] = [(d, None) for d in range(min(window, seq_len - 1) + 1)]
    for kk, lo in interp_columns(targets.detach().cpu().tolist(), window, seq_len, reach):
        cols.append((lo, targets[kk] - lo))
    return cols


# --------------------------------------------------------------------------------------------
# the shift machinery shared by `shift` and `interp`
# --------------------------------------------------------------------------------------------
def _scores_at(qg: torch.Tensor, k: torch.Tensor, d: int) -> torch.Tensor:
    """q[t]·k[t−d] for t ≥ d. qg (B,KV,G,T,D), k (B,KV,T,D) -> (B,KV,G,T−d)."""
    T = qg.shape[-2]
    return (qg[..., d:, :] * k[:, :, None, : T - d, :]).sum(-1)


def _add_values_at(out: torch.Tensor, w: torch.Tensor, v: torch.Tensor, d: int) -> None:
    """out[t] += w[t]·v[t−d] for t ≥ d. out (B,KV,G,T,D), w (B,KV,G,T−d), v (B,KV,T,D)."""
    T = out.shape[-2]
    out[..., d:, :] += w[..., None] * v[:, :, None, : T - d, :]


def _dot_at(a: torch.Tensor, b: torch.Tensor, d: int) -> torch.Tensor:
    """a[t]·b[t−d] for t ≥ d. a (B,KV,G,T,D), b (B,KV,T,D) -> (B,KV,G,T−d)."""
    return _scores_at(a, b, d)


def _group_sum_at(out: torch.Tensor, w: torch.Tensor, a: torch.Tensor, d: int) -> None:
    """out[s] += Σ_g w[g, s+d]·a[g, s+d] for s < T−d. out (B,KV,T,D), w (B,KV,G,T−d),
    a (B,KV,G,T,D): the scatter back to the key/value row a query at distance d read."""
    T = a.shape[-2]
    out[:, :, : T - d, :] += (w[..., None] * a[..., d:, :]).sum(2)


class _ShiftedAttention(torch.autograd.Function):
    """Softmax attention over C columns, each one or two shifted key/value rows.

    Column c reads distance d_c; an interpolated column (frac f) reads, for t > d_c, the blend
    (1−f)·row[t−d_c] + f·row[t−d_c−1] (at t = d_c the lo+1 row clamps to 0, i.e. the lo row).
    Forward and backward are written out with aligned slices and in-place accumulation, so no
    (T, T) or (T, C, D) tensor exists and autograd records one node, not one per slice; the only
    saved activations are q, k, v and the (B, KV, G, T, C) probabilities.
    """

    @staticmethod
    def forward(ctx, q, k, v, fracs, dists, frac_idx, scale):
        B, H, T, D = q.shape
        KV = k.shape[1]
        G = H // KV
        qg = q.reshape(B, KV, G, T, D)
        acc = torch.promote_types(q.dtype, torch.float32)
        logits = q.new_full((B, KV, G, T, len(dists)), _NEG_INF, dtype=acc)
        for c, (d, fi) in enumerate(zip(dists, frac_idx)):
            s = _dot_at(qg, k, d)                                            # (B,KV,G,T−d)
            if fi >= 0 and d + 1 < T:
                s[..., 1:] += fracs[fi] * (_dot_at(qg, k, d + 1) - s[..., 1:])
            logits[..., d:, c] = s * scale
        probs = torch.softmax(logits, dim=-1)                                # (B,KV,G,T,C)
        out = torch.zeros(B, KV, G, T, D, dtype=v.dtype, device=v.device)
        for c, (d, fi) in enumerate(zip(dists, frac_idx)):
            p = probs[..., d:, c].to(v.dtype)                                # (B,KV,G,T−d)
            if fi >= 0 and d + 1 < T:
                w_hi = p[..., 1:] * fracs[fi]
                p = p.clone()
                p[..., 1:] -= w_hi
                _add_values_at(out, w_hi, v, d + 1)
            _add_values_at(out, p, v, d)
        ctx.save_for_backward(q, k, v, fracs, probs)
        ctx.dists, ctx.frac_idx, ctx.scale = dists, frac_idx, scale
        return out.reshape(B, H, T, D)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, fracs, probs = ctx.saved_tensors
        dists, frac_idx, scale = ctx.dists, ctx.frac_idx, ctx.scale
        B, H, T, D = q.shape
        KV = k.shape[1]
        G = H // KV
        qg = q.reshape(B, KV, G, T, D)
        dog = grad_out.reshape(B, KV, G, T, D).to(v.dtype)
        # dP[t, c] = dO[t]·V_c[t]; kept per column with the raw lo/hi value dots for d(frac)
        dprobs = torch.zeros_like(probs)
        vdots = {}
        for c, (d, fi) in enumerate(zip(dists, frac_idx)):
            dp = _dot_at(dog, v, d)
            if fi >= 0 and d + 1 < T:
                hi = _dot_at(dog, v, d + 1)
                vdots[c] = (dp[..., 1:].clone(), hi)
                dp[..., 1:] += fracs[fi] * (hi - dp[..., 1:])
            dprobs[..., d:, c] = dp
        dlogits = probs * (dprobs - (probs * dprobs).sum(-1, keepdim=True))  # masked: P = 0
        dq = torch.zeros_like(qg)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        dfracs = torch.zeros_like(fracs)
        for c, (d, fi) in enumerate(zip(dists, frac_idx)):
            g = (dlogits[..., d:, c] * scale).to(q.dtype)                    # (B,KV,G,T−d)
            p = probs[..., d:, c].to(v.dtype)
            if fi >= 0 and d + 1 < T:
                f = fracs[fi]
                lo_q, hi_q = _dot_at(qg, k, d)[..., 1:], _dot_at(qg, k, d + 1)
                lo_v, hi_v = vdots[c]
                dfracs[fi] += (g[..., 1:] * (hi_q - lo_q)).sum() + (p[..., 1:] * (hi_v - lo_v)).sum()
                g_hi, p_hi = g[..., 1:] * f, p[..., 1:] * f
                g, p = g.clone(), p.clone()
                g[..., 1:] -= g_hi
                p[..., 1:] -= p_hi
                _add_values_at(dq, g_hi, k, d + 1)
                _group_sum_at(dk, g_hi, qg, d + 1)
                _group_sum_at(dv, p_hi, dog, d + 1)
            _add_values_at(dq, g, k, d)
            _group_sum_at(dk, g, qg, d)
            _group_sum_at(dv, p, dog, d)
        return dq.reshape(B, H, T, D), dk, dv, dfracs, None, None, None


def _shifted_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       cols: list[tuple[int, torch.Tensor | None]], scale: float) -> torch.Tensor:
    """Attention over a column plan (see `column_plan`); differentiable in q, k, v and α."""
    check_qkv(q, k, v)
    interp = [frac for _, frac in cols if frac is not None]
    fracs = (torch.stack([f.reshape(()) for f in interp]).to(q.dtype) if interp
             else q.new_zeros(0))
    frac_idx, n = [], 0
    for _, frac in cols:
        frac_idx.append(n if frac is not None else -1)
        n += frac is not None
    dists = tuple(d for d, _ in cols)
    return _ShiftedAttention.apply(q, k, v, fracs, dists, tuple(frac_idx), scale)


def columns_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                dists: torch.Tensor, fracs: torch.Tensor, scale: float, *,
                                interpolated=None) -> torch.Tensor:
    """`lab.kernels.columns_attention` in pure PyTorch (``impl="torch"``): `_ShiftedAttention`
    over the columns (dists (C,) int, fracs (C,) float; see `lab.kernels`).  Columns with a
    distance ≥ T are read by no query and dropped (their dfrac is 0).  Needs a column at
    distance 0 (every query must read a key; the fused kernels return zeros where none does)."""
    T = check_qkv(q, k, v)[3]
    dl = [int(d) for d in dists.detach().cpu().tolist()]
    if 0 not in dl:
        raise ValueError(f"dists {dl} has no distance 0: the pure-PyTorch reference needs one "
                         f"(every query must read a key); add a column at distance 0")
    if interpolated is None:
        interp = ([True] * len(dl) if fracs.requires_grad
                  else [x != 0 for x in fracs.detach().cpu().tolist()])
    else:
        interp = [bool(x) for x in torch.as_tensor(interpolated).cpu().tolist()]
    keep = [c for c, d in enumerate(dl) if d < T]
    kept_fracs = fracs.to(q.dtype)[torch.tensor(keep, device=fracs.device)]
    frac_idx = tuple(i if interp[c] else -1 for i, c in enumerate(keep))
    return _ShiftedAttention.apply(q, k, v, kept_fracs, tuple(dl[c] for c in keep), frac_idx,
                                   scale)


def _interp_column_tensors(alpha: torch.Tensor, window: int, seq_len: int, base: Base,
                           rungs: int, reach: int | None):
    """`column_plan(..., interpolate=True)` as kernel inputs: (dists (C,) int64 on CPU, fracs
    (C,) on α's graph, interpolated (C,) bool).  Same rule and the same α·f values; the
    fractions come from two tensor ops, α·F − LO, instead of one graph node per rung."""
    check_window(window)
    reach_ = seq_len if reach is None else reach
    f = torch.tensor(resolve_base(base, rungs, max(reach_, 2)), dtype=alpha.dtype,
                     device=alpha.device)
    targets = (alpha.detach().reshape(()) * f).cpu().tolist()                # one transfer
    n_win = min(window, seq_len - 1) + 1
    kept = interp_columns(targets, window, seq_len, reach)                   # [(rung, lo)]
    dists = list(range(n_win)) + [lo for _, lo in kept]
    scale_f = [0.0] * n_win + [float(f[kk]) for kk, _ in kept]
    fracs = (alpha.reshape(()) * torch.tensor(scale_f, dtype=alpha.dtype, device=alpha.device)
             - torch.tensor([0] * n_win + [lo for _, lo in kept], dtype=alpha.dtype,
                            device=alpha.device))
    interp = torch.tensor([False] * n_win + [True] * len(kept))
    return torch.tensor(dists, dtype=torch.int64), fracs, interp


def _columns(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cols: list[tuple[int, torch.Tensor | None]], scale: float, impl: str) -> torch.Tensor:
    """An integer column plan (see `column_plan`) through `lab.kernels.columns_attention`."""
    if any(frac is not None for _, frac in cols):
        raise ValueError("_columns takes integer columns; interpolated ones go through "
                         "_interp_column_tensors")
    dists = torch.tensor([d for d, _ in cols], dtype=torch.int64)
    return kernels.columns_attention(q, k, v, dists, q.new_zeros(len(cols)), scale, impl,
                                     interpolated=torch.zeros(len(cols), dtype=torch.bool))


# --------------------------------------------------------------------------------------------
# mask and dense paths
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def _bool_mask_cpu(seq_len: int, distances: tuple[int, ...]) -> torch.Tensor:
    t = torch.arange(seq_len)
    delta = t[:, None] - t[None, :]                                          # (T, T)
    return torch.isin(delta, torch.tensor(distances))


def bool_mask(seq_len: int, distances, device=None) -> torch.Tensor:
    """(T, T) boolean mask, True where query i may attend key j, i.e. (i − j) ∈ distances."""
    return _bool_mask_cpu(seq_len, tuple(int(d) for d in distances)).to(device)


def dense_attention(q, k, v, scale: float | None = None) -> torch.Tensor:
    """Plain causal attention with GQA (the dense baseline)."""
    _, H, KV, _, _ = check_qkv(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                          enable_gqa=H != KV)


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------
def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, alpha, window: int,
                     base: Base = "fib", rungs: int = 15, rounding: str = "round",
                     path: str = "auto", reach: int | None = None,
                     scale: float | None = None, impl: str = "auto") -> torch.Tensor:
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
            raise ValueError(f"alpha tensor must hold one value (0-d); got shape "
                             f"{tuple(alpha.shape)}")
        check_alpha(float(alpha.detach()))
        if path in ("shift", "mask"):
            raise ValueError(f"path={path!r} uses integer offsets and carries no gradient to a "
                             f"tensor alpha: pass alpha as a float, or use path='interp'")
        path = "interp"
    else:
        check_alpha(alpha)
        path = "shift" if path == "auto" else path
    if path == "mask":
        dists = attended_distances(alpha, window, T, base, rungs, rounding, reach)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask(T, dists, q.device),
                                              scale=scale, enable_gqa=H != KV)
    if path == "interp":
        a = alpha if is_tensor else torch.tensor(float(alpha), dtype=torch.float64)
        dists, fracs, interp = _interp_column_tensors(a.to(q.device), window, T, base, rungs,
                                                      reach)
        return kernels.columns_attention(q, k, v, dists, fracs.to(q.dtype), scale, impl,
                                         interpolated=interp)
    cols = column_plan(alpha, window, T, base, rungs, rounding, reach)
    return _columns(q, k, v, cols, scale, impl)
