"""Annealed Gaussian "blur" gather: the retrieval probe's learned-α attention (never the LM's).

Each rung reads a Gaussian blur of the keys around its continuous distance α·f_k, so d(loss)/dα
is non-zero for every α and a wide blur (annealed 40 → 0.5 by `blur_width`) lets α move across
many integer distances early in training — what the paper's Table 2 probe needs.  Two exact
implementations, measured per shape by ``impl="auto"``: "band" (dense scores, a C++ kernel for
the band sums) and "fft" (O(T) memory, any device).  The columns, the taps, both algorithms and
their costs are specified in docs/blur.md.
"""

from __future__ import annotations

import math
import os

import torch

from lab.kernels.shapes import check_qkv
from lab.ladder.offsets import check_alpha, check_window, fibonacci
from lab.machine import autotune

WIDTH_MIN = 0.25  # w = max(width, WIDTH_MIN)
RADIUS_SIGMAS = 2.5  # R = ceil(2.5·w)
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------
# width annealing
# --------------------------------------------------------------------------------------------
def blur_width(
    step: float, steps: float, w0: float = 40.0, w_end: float = 0.5, frac: float = 0.8
) -> float:
    """Annealed blur width: w = w0·(1−g) + w_end·g with g = min(1, step / (frac·steps)).

    step 0 → w0 (40), step 0.4·steps → 20.25, step ≥ frac·steps → w_end (0.5).
    """
    for name, val in (
        ("step", step),
        ("steps", steps),
        ("w0", w0),
        ("w_end", w_end),
        ("frac", frac),
    ):
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
    if (
        isinstance(width, bool)
        or not isinstance(width, (int, float))
        or not math.isfinite(width)
        or width <= 0
    ):
        raise ValueError(
            f"width={width!r} must be a positive finite number (it is floored at {WIDTH_MIN})"
        )
    return max(float(width), WIDTH_MIN)


def blur_rung_bases(window: int, rungs: int = 15) -> list[int]:
    """The unscaled Fibonacci terms that become rungs: f_k > W (13..987 for W = 8, K = 15)."""
    check_window(window)
    return [f for f in fibonacci(rungs) if f > window]


def _kept(targets: list[float], window: int, seq_len: int) -> list[tuple[int, int]]:
    """(index into targets, centre c) for the kept rungs: c = round(α·f) with W < c ≤ T−1."""
    out = []
    for i, x in enumerate(targets):
        c = int(round(x))  # half-to-even
        if window < c <= seq_len - 1:
            out.append((i, c))
    return out


def blur_centres(alpha: float, window: int, seq_len: int, rungs: int = 15) -> list[int]:
    """Rounded centres c of the kept rungs for a float α (in base order)."""
    check_alpha(alpha)
    return [
        c for _, c in _kept([alpha * f for f in blur_rung_bases(window, rungs)], window, seq_len)
    ]


def _radius(w: float) -> int:
    """R = ceil(2.5·w): a rung's taps are c−R .. c+R (before clamping to [1, T−1])."""
    return math.ceil(RADIUS_SIGMAS * w)


def _fast_len(n: int) -> int:
    """Smallest s·2^a >= n with s in {1, 3, 5, 9, 15}: a length the FFT handles fast."""
    best = []
    for s in (1, 3, 5, 9, 15):
        while s < n:
            s *= 2
        best.append(s)
    return min(best)


def _tap_weights(
    d: torch.Tensor, centres: list[int], w: float, seq_len: int, n: int
) -> torch.Tensor:
    """Gaussian tap weights of every kept rung, folded per clamped offset: (r, n).

    d (r,) the continuous centres α·f of the kept rungs (on α's graph), centres their rounded c.
    Row i holds at column o the summed normalised g_j of rung i's taps clamped to offset o
    (scatter_add, differentiable); offsets outside [1, T−1] stay zero.
    """
    R = _radius(w)
    c = torch.tensor(centres, device=d.device)
    taps = (c[:, None] + torch.arange(-R, R + 1, device=d.device)).clamp_(1, seq_len - 1)  # (r,M)
    g = torch.exp(-0.5 * ((taps.to(d.dtype) - d[:, None]) / w) ** 2)  # (r,M)
    g = g / g.sum(-1, keepdim=True)
    return torch.zeros(len(centres), n, dtype=d.dtype, device=d.device).scatter_add(1, taps, g)


class _Columns(torch.autograd.Function):
    """The attention over the columns, forward and backward by hand (time-last layout).

    qT (B,KV,G,D,T); kvT (2,B,KV,D,T) = the keys and values; blurred: one (2,B,KV,D,T−c) tensor
    per kept rung (its blurred keys / values for t = c..T−1).  Window column d reads
    kvT[..., t−d], rung column reads its blurred rows.  Returns outT (B,KV,G,D,T).

    Written out instead of left to autograd: every column costs a few in-place passes over a
    (B,KV,G,D,T) slice instead of padded copies, a stacked copy and CopySlices' clone + zero-fill
    of the whole gradient per column.  The largest tensors are the logits / probabilities
    (B,KV,G,C,T) and (B,KV,G,D,T) ones.
    """

    @staticmethod
    def forward(ctx, qT, kvT, scale, window_cols, centres, *blurred):
        T = qT.shape[-1]
        cols = [(d, kvT[..., : T - d]) for d in window_cols] + [
            (c, kvb) for c, kvb in zip(centres, blurred)
        ]  # (s0, (2,…,T−s0))
        B, KV, G, D, _ = qT.shape
        acc = torch.promote_types(qT.dtype, torch.float32)  # fp32 at least
        logits = qT.new_full((B, KV, G, len(cols), T), _NEG_INF, dtype=acc)  # (B,KV,G,C,T)
        for j, (s0, kv) in enumerate(cols):
            s = torch.linalg.vecdot(qT[..., s0:], kv[0][:, :, None], dim=-2)  # (B,KV,G,T−s0)
            logits[..., j, s0:] = s * scale
        probs = torch.softmax(logits, dim=-2).to(kvT.dtype)  # (B,KV,G,C,T)
        del logits
        out = qT.new_zeros((B, KV, G, D, T), dtype=kvT.dtype)
        for j, (s0, kv) in enumerate(cols):
            out[..., s0:].addcmul_(probs[..., j, None, s0:], kv[1][:, :, None])
        ctx.save_for_backward(qT, kvT, probs, *blurred)
        ctx.scale, ctx.window_cols, ctx.centres = scale, window_cols, centres
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gout):
        qT, kvT, probs, *blurred = ctx.saved_tensors
        scale, window_cols, centres = ctx.scale, ctx.window_cols, ctx.centres
        T, G = qT.shape[-1], qT.shape[2]
        cols = [(d, kvT[..., : T - d]) for d in window_cols] + [
            (c, kvb) for c, kvb in zip(centres, blurred)
        ]
        gout = gout.contiguous()  # (B,KV,G,D,T)
        acc = torch.promote_types(qT.dtype, torch.float32)
        # dL/dp per column (zero where t < start: p is exactly 0 there), softmax backward
        dp = torch.zeros(probs.shape, dtype=acc, device=probs.device)  # (B,KV,G,C,T)
        for j, (s0, kv) in enumerate(cols):
            dp[..., j, s0:] = torch.linalg.vecdot(gout[..., s0:], kv[1][:, :, None], dim=-2)
        pa = probs.to(acc)
        dlog = pa * (dp - (pa * dp).sum(-2, keepdim=True))
        del dp, pa
        dlog = dlog.to(qT.dtype) * scale  # (B,KV,G,C,T)
        dq = torch.zeros_like(qT)
        dkv = torch.zeros_like(kvT)  # (2,B,KV,D,T)
        dblurred = []
        for j, (s0, kv) in enumerate(cols):
            dl = dlog[..., j, None, s0:]  # (B,KV,G,1,T−s0)
            p = probs[..., j, None, s0:]
            dq[..., s0:].addcmul_(dl, kv[0][:, :, None])
            if j < len(window_cols):  # rows t − d of k, v
                dst = dkv[..., : T - s0]
            else:  # the blurred rows
                dst = kv.new_zeros(kv.shape)
                dblurred.append(dst)
            for g in range(G):  # Σ over the group
                dst[0].addcmul_(dl[:, :, g], qT[:, :, g, :, s0:])
                dst[1].addcmul_(p[:, :, g], gout[:, :, g, :, s0:])
        return dq, dkv, None, None, None, *dblurred


class _Band(torch.autograd.Function):
    """The band stage of the dense-score implementation (C++, lab/kernels/csrc/blur_band.h).

    S (B,H,T,T) the scaled scores q_t·k_u, W (r,T) the folded tap weights → A (B,H,T,T), the
    weight every key row gets (A·V is the output).  Backward: dS and dW (→ dα via W's graph).
    """

    @staticmethod
    def forward(ctx, S, W, lo, hi, centres, window_cols):
        from lab.kernels import cpu

        A, P = cpu.load().band_forward(S, W, lo, hi, centres, window_cols)
        ctx.save_for_backward(S, W, P)
        ctx.plan = (lo, hi, centres, window_cols)
        return A

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dA):
        from lab.kernels import cpu

        S, W, P = ctx.saved_tensors
        dS, dW = cpu.load().band_backward(S, dA, P, W, *ctx.plan)
        return dS, dW, None, None, None, None


BAND_MAX_ELEMENTS = 1 << 25  # band's memory bound: "auto" offers it while B·H·T² stays below


IMPL_ENV = "FIBLAB_BLUR_IMPL"  # forces impl="auto" to fft or band (benchmarks, comparisons)


def _use_band(impl: str, q: torch.Tensor, B: int, H: int, T: int, call: tuple = ()) -> bool:
    """Whether `blur_attention` runs band.  ``call`` (q, k, v, alpha, window, width, rungs,
    scale, C): the call's arguments and column count, for "auto" to measure both on."""
    if impl == "auto" and os.environ.get(IMPL_ENV):
        impl = os.environ[IMPL_ENV]
        if impl not in ("fft", "band"):
            raise ValueError(f"{IMPL_ENV}={impl!r} must be 'fft' or 'band'")
    if impl not in ("auto", "fft", "band"):
        raise ValueError(f"impl={impl!r} must be 'auto', 'fft' or 'band'")
    if impl == "fft":
        return False
    from lab.kernels import cpu

    ok = q.device.type == "cpu" and cpu.status() is True
    if impl == "band":
        if not ok:
            raise ValueError(
                f"impl='band' needs the C++ kernel on CPU tensors (q on {q.device}; "
                f"kernel: {cpu.status()}): use impl='fft'"
            )
        return True
    if not (ok and B * H * T * T <= BAND_MAX_ELEMENTS):
        return False
    if not call or not autotune.measurable(*call[:4]):
        return True  # the static order: band where it can run
    q, k, v, alpha, window, width, rungs, scale, C = call
    grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v, alpha)
    )
    cls = autotune.shape_class(q.device, q.dtype, grad=grad, bh=B * H, t=T, d=q.shape[-1], c=C)
    rows = autotune.timing_rows(B, H, q.device)
    runs = {name: _timed_run(name, grad, rows, *call[:-1]) for name in ("band", "fft")}
    return autotune.choose("blur_attention", cls, runs) == "band"


def _timed_run(name: str, grad: bool, rows: int, q, k, v, alpha, window, width, rungs, scale):
    """A zero-argument callable running `blur_attention(impl=name)` once on the first `rows`
    batch rows of the call's tensors, detached (no random draw), with the backward of
    out.sum() when `grad`.  Nothing is built until it is called."""

    def run():
        qd, kd, vd = (t.detach()[:rows].requires_grad_(t.requires_grad) for t in (q, k, v))
        a = alpha
        if isinstance(a, torch.Tensor):
            a = a.detach().requires_grad_(a.requires_grad)
        kw = dict(window=window, width=width, rungs=rungs, scale=scale, impl=name)
        out = blur_attention(qd, kd, vd, alpha=a, **kw)
        wrt = [t for t in (qd, kd, vd, a) if isinstance(t, torch.Tensor) and t.requires_grad]
        if grad and wrt:
            torch.autograd.grad(out.sum(), wrt)

    return run


def _band_attention(q, k, v, targets, kept, w, window_cols, scale, dtype):
    """The dense-score implementation: S = scale·QKᵀ (BLAS), the band kernel, out = A·V."""
    B, H, T, D = q.shape
    KV = k.shape[1]
    G = H // KV
    centres = [c for _, c in kept]
    R = _radius(w)
    lo = [max(c - R, 1) for c in centres]
    hi = [min(c + R, T - 1) for c in centres]
    qs = (q.to(dtype) * scale).reshape(B, KV, G * T, D)
    S = (qs @ k.to(dtype).transpose(-1, -2)).reshape(B, H, T, T)  # (B,H,T,T)
    if S.dtype not in (torch.float32, torch.float64, torch.bfloat16):  # e.g. float16
        S = S.float()
    acc = torch.float64 if S.dtype == torch.float64 else torch.float32  # the kernel's math
    if centres:
        idx = torch.tensor([i for i, _ in kept], device=targets.device)
        W = _tap_weights(targets[idx], centres, w, T, T).to(acc)  # (r, T)
    else:
        W = S.new_zeros(0, T, dtype=acc)
    A = _Band.apply(S, W, lo, hi, centres, len(window_cols))  # (B,H,T,T), S's dtype
    out = A.reshape(B, KV, G * T, T) @ v.to(A.dtype)  # (B,KV,G·T,D)
    return out.reshape(B, H, T, D).to(dtype)  # fft's output dtype


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------
def blur_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    alpha,
    window: int,
    width: float,
    rungs: int = 15,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention over the exact window {0..W} plus Gaussian-blurred Fibonacci rungs.

    alpha   the learned scale, a 0-d tensor (its gradient flows through the rung centres α·f
            inside the Gaussian weights); a Python number is accepted as a constant.
    window  W ≥ 0; rungs are the Fibonacci terms f > W among the first ``rungs``.
    width   the Gaussian width in positions (> 0; floored at 0.25), e.g. `blur_width(step, steps)`.
    impl    "fft" (blurred rows by FFT, O(T) memory), "band" (dense scores + the C++ band
            kernel, O(B·H·T²) memory, ≈2–3× faster at the probe's T = 512) or "auto" (the
            faster of the two where band can run, measured once per machine and shape class
            and cached: see the module docstring; the environment variable
            FIBLAB_BLUR_IMPL=fft|band forces one).  The two compute the same function
            (tests: both against a brute-force loop).
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
    a = a.to(torch.promote_types(a.dtype, torch.float32))  # taps in ≥ fp32
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)

    fs = blur_rung_bases(window, rungs)
    targets = a * torch.tensor(fs, dtype=a.dtype, device=a.device)  # (K',) d_k = α·f_k
    kept = _kept(targets.detach().cpu().tolist(), window, T)  # one host transfer
    centres = [c for _, c in kept]

    window_cols = list(range(min(window, T - 1) + 1))
    call = (q, k, v, alpha, window, width, rungs, scale, len(window_cols) + len(kept))
    if _use_band(impl, q, B, H, T, call):
        return _band_attention(q, k, v, targets, kept, w, window_cols, scale, dtype)

    qT = q.to(dtype).reshape(B, KV, G, T, D).transpose(-1, -2).contiguous()  # (B,KV,G,D,T)
    kv = torch.stack((k.to(dtype), v.to(dtype))).transpose(-1, -2)  # (2,B,KV,D,T) view
    blurred = []
    if centres:
        R = _radius(w)
        P = max(min(R, T - 1 - c) for c in centres)  # max over rungs hi−c
        n = _fast_len(T + P)
        kvp = torch.cat((kv[..., :1].expand(*kv.shape[:-1], P), kv), -1)  # (2,B,KV,D,T+P)
        kvT = kvp[..., P:]  # (2,B,KV,D,T)
        fdt = torch.promote_types(dtype, torch.float32)  # FFT in ≥ fp32
        spec = torch.fft.rfft(kvp.to(fdt), n=n)  # (2,B,KV,D,n/2+1)
        idx = torch.tensor([i for i, _ in kept], device=a.device)
        wts = _tap_weights(targets[idx], centres, w, T, n)  # (r, n)
        wspec = torch.fft.rfft(wts.to(fdt), n=n)  # (r, n/2+1)
        for i, c in enumerate(centres):
            y = torch.fft.irfft(spec * wspec[i], n=n)  # (2,B,KV,D,n)
            blurred.append(y[..., P + c : P + T].to(dtype))  # (2,B,KV,D,T−c)
    else:
        kvT = kv.contiguous()
    outT = _Columns.apply(qT, kvT, scale, window_cols, centres, *blurred)  # (B,KV,G,D,T)
    return outT.transpose(-1, -2).reshape(B, H, T, D)
