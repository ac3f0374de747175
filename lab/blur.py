"""Annealed Gaussian "blur" gather: the retrieval probe's learned-α attention.

Retrieval-only.  This module is used by the retrieval probe to learn a scale α that can actually
move; it is never used in the language-model attention (lab.attention / lab.model).

Shapes (GQA, G = H / KV; query head h reads KV head h // G, K/V are never repeated):

    q        (B, H,  T, D)
    k, v     (B, KV, T, D)
    alpha    0-d tensor (carries the gradient)
    output   (B, H,  T, D)

Columns a query at position t attends
-------------------------------------
* window   d = 0 .. min(W, T−1): the exact rows t−d (valid for t ≥ d), as in lab.attention.
* rungs    Fibonacci terms f_k > W (the filter is on the unscaled f, not α·f; f = 13..987 for
           W = 8, K = 15).  Rung k is centred at the continuous distance d_k = α·f_k and reads a
           Gaussian blur of the keys / values around it:

               w  = max(width, 0.25)          R = ceil(2.5·w)
               c  = round(d_k)                (half-to-even, detached)
               skip the rung when c ≤ W or c > T − 1
               taps j = clamp(c−R .. c+R, 1, T−1)      M = 2R+1 taps (boundary taps may repeat)
               g_j = exp(−½·((j − d_k)/w)²) / Σ_j exp(−½·((j − d_k)/w)²)
               kb[t] = Σ_j g_j · k[max(t − j, 0)]       (vb likewise)    valid for t ≥ c

           No collision rule: every kept rung is its own column.  d(loss)/dα flows only through
           d_k inside g, and it is non-zero for every α because the Gaussian is smooth in d_k —
           the point of the blur: a wide Gaussian (w0 = 40) lets α move across many integer
           distances early in training; `blur_width` anneals it to 0.5.

One softmax (at least fp32) over the W+1 window columns and the kept rung columns, scale
1/sqrt(D) unless given; output = Σ p · (value of each column).

Cost
----
Per rung the M clamped taps are folded into one weight per distinct offset o ∈ [lo, hi]
(scatter_add, differentiable), L = hi − lo + 1 ≤ M.  kb and vb are then a causal depthwise
convolution over time of k / v (conv1d, kernel length L) computed for t ≥ c only, on rows gathered
with index max(·, 0) — which is the "replicate row 0 on the left" padding.  Time
O(B·KV·D·T·M) per rung for k and v plus O(B·H·T·D) for the score and the value update; memory
O(B·H·T·(D + C)): no (T, T) tensor and no (T, M, D) band of gathered keys is built.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lab.attention import _add_values_at, _scores_at, check_qkv
from lab.offsets import check_alpha, check_window, fibonacci

WIDTH_MIN = 0.25          # w = max(width, WIDTH_MIN)
RADIUS_SIGMAS = 2.5       # R = ceil(2.5·w)
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------
# width annealing
# --------------------------------------------------------------------------------------------
def blur_width(step: float, steps: float, w0: float = 40.0, w_end: float = 0.5,
               frac: float = 0.8) -> float:
    """Annealed blur width: w = w0·(1−g) + w_end·g with g = min(1, step / (frac·steps)).

    step 0 → w0 (40), step 0.4·steps → 20.25, step ≥ frac·steps → w_end (0.5).
    """
    for name, val in (("step", step), ("steps", steps), ("w0", w0), ("w_end", w_end),
                      ("frac", frac)):
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise ValueError(f"{name}={val!r} must be a finite number")
    if step < 0:
        raise ValueError(f"step={step!r} must be >= 0")
    if steps <= 0:
        raise ValueError(f"steps={steps!r} must be > 0")
    if not 0 < frac <= 1:
        raise ValueError(f"frac={frac!r} must lie in (0, 1]")
    if w0 <= 0 or w_end <= 0:
        bad = ("w0", w0) if w0 <= 0 else ("w_end", w_end)
        raise ValueError(f"{bad[0]}={bad[1]!r} must be > 0 (a Gaussian width)")
    g = min(1.0, step / (frac * steps))
    return w0 * (1.0 - g) + w_end * g


# --------------------------------------------------------------------------------------------
# the rung plan
# --------------------------------------------------------------------------------------------
def check_width(width) -> float:
    if isinstance(width, bool) or not isinstance(width, (int, float)) \
            or not math.isfinite(width) or width <= 0:
        raise ValueError(f"width={width!r} must be a positive finite number (it is floored at "
                         f"{WIDTH_MIN})")
    return max(float(width), WIDTH_MIN)


def blur_rung_bases(window: int, rungs: int = 15) -> list[int]:
    """The unscaled Fibonacci terms that become rungs: f_k > W (13..987 for W = 8, K = 15)."""
    check_window(window)
    return [f for f in fibonacci(rungs) if f > window]


def _kept(targets: list[float], window: int, seq_len: int) -> list[tuple[int, int]]:
    """(index into targets, centre c) for the kept rungs: c = round(α·f) with W < c ≤ T−1."""
    out = []
    for i, x in enumerate(targets):
        c = int(round(x))                                                    # half-to-even
        if window < c <= seq_len - 1:
            out.append((i, c))
    return out


def blur_centres(alpha: float, window: int, seq_len: int, rungs: int = 15) -> list[int]:
    """Rounded centres c of the kept rungs for a float α (in base order)."""
    check_alpha(alpha)
    return [c for _, c in _kept([alpha * f for f in blur_rung_bases(window, rungs)], window,
                                seq_len)]


def _offset_weights(d: torch.Tensor, c: int, w: float, seq_len: int) -> tuple[int, torch.Tensor]:
    """Gaussian tap weights folded per distinct clamped offset.

    d is the 0-d continuous centre α·f (on α's graph).  Returns (lo, weights) with weights (L,)
    the summed normalised g_j of the taps clamped to offset lo + i, L = hi − lo + 1.
    """
    R = math.ceil(RADIUS_SIGMAS * w)
    lo, hi = max(c - R, 1), min(c + R, seq_len - 1)
    taps = torch.arange(c - R, c + R + 1, device=d.device).clamp_(1, seq_len - 1)  # (M,)
    g = torch.exp(-0.5 * ((taps.to(d.dtype) - d) / w) ** 2)                         # (M,)
    g = g / g.sum()
    weights = torch.zeros(hi - lo + 1, dtype=d.dtype, device=d.device)               # (L,)
    return lo, weights.scatter_add(0, taps - lo, g)


def _blurred_rows(x: torch.Tensor, lo: int, weights: torch.Tensor, c: int) -> torch.Tensor:
    """xb[t] = Σ_i weights[i]·x[max(t − lo − i, 0)] for t = c .. T−1.

    x (B,KV,T,D) -> (B,KV,T−c,D).  A causal depthwise conv1d over time: the rows
    max(t − hi, 0) .. t − lo for t ∈ [c, T) are gathered once (index clamped at 0 = left
    replicate padding of row 0), then correlated with the flipped weights.
    """
    B, KV, T, D = x.shape
    L = weights.shape[0]
    hi = lo + L - 1
    idx = torch.arange(c - hi, T - lo, device=x.device).clamp_(min=0)       # (T−c+L−1,)
    rows = x.index_select(2, idx)                                            # (B,KV,T−c+L−1,D)
    rows = rows.permute(0, 1, 3, 2).reshape(B, KV * D, -1)                   # (B,KV·D,T−c+L−1)
    kern = weights.flip(0).to(x.dtype).reshape(1, 1, L).expand(KV * D, 1, L)  # (KV·D,1,L)
    out = F.conv1d(rows, kern, groups=KV * D)                                # (B,KV·D,T−c)
    return out.reshape(B, KV, D, T - c).permute(0, 1, 3, 2)                  # (B,KV,T−c,D)


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------
def blur_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, alpha, window: int,
                   width: float, rungs: int = 15, scale: float | None = None) -> torch.Tensor:
    """Attention over the exact window {0..W} plus Gaussian-blurred Fibonacci rungs.

    alpha   the learned scale, a 0-d tensor (its gradient flows through the rung centres α·f
            inside the Gaussian weights); a Python number is accepted as a constant.
    window  W ≥ 0; rungs are the Fibonacci terms f > W among the first ``rungs``.
    width   the Gaussian width in positions (> 0; floored at 0.25), e.g. `blur_width(step, steps)`.
    Returns (B, H, T, D).  Retrieval probe only; not part of the LM attention.
    """
    B, H, KV, T, D = check_qkv(q, k, v)
    G = H // KV
    check_window(window)
    w = check_width(width)
    if isinstance(alpha, torch.Tensor):
        if alpha.dim() != 0:
            raise ValueError(f"alpha must be a 0-d tensor; got shape {tuple(alpha.shape)}")
        if not alpha.is_floating_point():
            raise ValueError(f"alpha must be a floating-point tensor; got dtype {alpha.dtype}")
        check_alpha(float(alpha.detach()))
        a = alpha.to(q.device)
    else:
        check_alpha(alpha)
        a = torch.tensor(float(alpha), dtype=torch.float64, device=q.device)
    a = a.to(torch.promote_types(a.dtype, torch.float32))                    # taps in ≥ fp32
    scale = 1.0 / math.sqrt(D) if scale is None else scale

    fs = blur_rung_bases(window, rungs)
    targets = a * torch.tensor(fs, dtype=a.dtype, device=a.device)          # (K',) d_k = α·f_k
    kept = _kept(targets.detach().cpu().tolist(), window, T)                 # one host transfer

    qg = q.reshape(B, KV, G, T, D)                                           # no K/V repeat
    window_cols = list(range(min(window, T - 1) + 1))
    scores = []
    for d in window_cols:
        s = _scores_at(qg, k, d)                                             # (B,KV,G,T−d)
        scores.append(F.pad(s * scale, (d, 0), value=_NEG_INF))             # (B,KV,G,T)
    blurred = []
    for i, c in kept:
        lo, wts = _offset_weights(targets[i], c, w, T)                       # (L,)
        kb = _blurred_rows(k, lo, wts, c)                                    # (B,KV,T−c,D)
        vb = _blurred_rows(v, lo, wts, c)                                    # (B,KV,T−c,D)
        s = (qg[..., c:, :] * kb[:, :, None]).sum(-1)                        # (B,KV,G,T−c)
        scores.append(F.pad(s * scale, (c, 0), value=_NEG_INF))             # (B,KV,G,T)
        blurred.append((c, vb))
    logits = torch.stack(scores, dim=-1)                                     # (B,KV,G,T,C)
    acc = torch.promote_types(logits.dtype, torch.float32)                  # fp32 at least
    probs = torch.softmax(logits.to(acc), dim=-1).to(v.dtype)               # (B,KV,G,T,C)

    out = torch.zeros(B, KV, G, T, D, dtype=v.dtype, device=v.device)       # (B,KV,G,T,D)
    for col, d in enumerate(window_cols):
        _add_values_at(out, probs[..., d:, col], v, d)
    for j, (c, vb) in enumerate(blurred):
        p = probs[..., c:, len(window_cols) + j]                             # (B,KV,G,T−c)
        out[..., c:, :] += p[..., None] * vb[:, :, None]
    return out.reshape(B, H, T, D)
