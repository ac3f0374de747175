"""The pure-PyTorch column attention (``impl="torch"``): the reference the fused kernels match.

`columns_attention_reference` runs `ShiftedAttention`, a hand-written autograd function over C
columns of aligned slices, on any device and dtype.  It lives below the attention rule (it knows
columns, not α or rungs), so `lab.kernels` dispatches to it without importing `lab.sparse.attention`.
"""

from __future__ import annotations

import torch

from lab.kernels.shapes import check_qkv

_NEG_INF = float("-inf")


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


class ShiftedAttention(torch.autograd.Function):
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
            s = _dot_at(qg, k, d)  # (B,KV,G,T−d)
            if fi >= 0 and d + 1 < T:
                s[..., 1:] += fracs[fi] * (_dot_at(qg, k, d + 1) - s[..., 1:])
            logits[..., d:, c] = s * scale
        probs = torch.softmax(logits, dim=-1)  # (B,KV,G,T,C)
        out = torch.zeros(B, KV, G, T, D, dtype=v.dtype, device=v.device)
        for c, (d, fi) in enumerate(zip(dists, frac_idx)):
            p = probs[..., d:, c].to(v.dtype)  # (B,KV,G,T−d)
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
            g = (dlogits[..., d:, c] * scale).to(q.dtype)  # (B,KV,G,T−d)
            p = probs[..., d:, c].to(v.dtype)
            if fi >= 0 and d + 1 < T:
                f = fracs[fi]
                lo_q, hi_q = _dot_at(qg, k, d)[..., 1:], _dot_at(qg, k, d + 1)
                lo_v, hi_v = vdots[c]
                dfracs[fi] += (g[..., 1:] * (hi_q - lo_q)).sum() + (
                    p[..., 1:] * (hi_v - lo_v)
                ).sum()
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


def columns_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dists: torch.Tensor,
    fracs: torch.Tensor,
    scale: float,
    *,
    interpolated=None,
) -> torch.Tensor:
    """`lab.kernels.columns_attention` in pure PyTorch (``impl="torch"``): `ShiftedAttention`
    over the columns (dists (C,) int, fracs (C,) float; see `lab.kernels`).  Columns with a
    distance ≥ T are read by no query and dropped (their dfrac is 0).  Needs a column at
    distance 0 (every query must read a key; the fused kernels return zeros where none does)."""
    T = check_qkv(q, k, v)[3]
    dl = [int(d) for d in dists.detach().cpu().tolist()]
    if 0 not in dl:
        raise ValueError(
            f"dists {dl} has no distance 0: the pure-PyTorch reference needs one "
            f"(every query must read a key); add a column at distance 0"
        )
    if interpolated is None:
        interp = (
            [True] * len(dl)
            if fracs.requires_grad
            else [x != 0 for x in fracs.detach().cpu().tolist()]
        )
    else:
        interp = [bool(x) for x in torch.as_tensor(interpolated).cpu().tolist()]
    keep = [c for c, d in enumerate(dl) if d < T]
    kept_fracs = fracs.to(q.dtype)[torch.tensor(keep, device=fracs.device)]
    frac_idx = tuple(i if interp[c] else -1 for i, c in enumerate(keep))
    return ShiftedAttention.apply(q, k, v, kept_fracs, tuple(dl[c] for c in keep), frac_idx, scale)
