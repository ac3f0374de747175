"""Fused column attention in Triton: forward and backward kernels behind one autograd Function.

The computation is the one `lab.kernels.reference.ShiftedAttention` writes with aligned slices: every
query t reads C columns; column c has a distance lo_c ≥ 0 and a fraction f_c, and reads

    key_c(t)   = (1 − f_c)·k[t − lo_c] + f_c·k[max(t − lo_c − 1, 0)]      for t ≥ lo_c
    value_c(t) = the same blend of v                                        (masked for t < lo_c)

then one softmax over the C scores q[t]·key_c(t)·scale.  Integer columns have f_c = 0 and read
one row.  Shapes (GQA, G = H / KV, query head h reads KV head h // G):

    q          (B, H,  T, D)       k, v   (B, KV, T, D)
    dists      (C,) int64          fracs  (C,) float, differentiable (the gradient to α)
    output     (B, H,  T, D)

The three kernels (forward, backward over queries, backward over keys, no atomics, float32
accumulation) and their scratch memory: docs/kernels.md.

On a CUDA device the kernels compile; on CPU they run only under Triton's interpreter
(``TRITON_INTERPRET=1`` set before this module is imported), in float32 — that is how the tests
check them.  Any head dim D ≥ 1 works (tiles are padded to the next power of two and masked).

One module over ≈450 lines on purpose: the three kernels and the autograd Function that launches
them share one layout (block sizes, the log-sum-exp, the (B, H, C, T) scratch), so they change
together.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from lab.kernels.shapes import check_columns, check_qkv

__all__ = ["triton_columns_attention", "plan_tensors", "available", "interpreted", "default_launch"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------
@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    Out,
    Lse,
    Dists,
    Fracs,
    Flags,
    sq_b,
    sq_h,
    sq_t,
    sk_b,
    sk_h,
    sk_t,
    sv_b,
    sv_h,
    sv_t,
    so_b,
    so_h,
    so_t,
    H,
    G,
    T,
    C,
    D,
    scale,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bh = tl.program_id(0)  # (b, h) fastest: the G heads of one KV
    pid_t = tl.program_id(1)  # head run side by side and share its rows
    b = (bh // H).to(tl.int64)
    h = bh % H
    kvh = h // G
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # queries (BT,)
    d = tl.arange(0, BLOCK_D)  # (BD,)
    t_ok = t < T
    d_ok = d[None, :] < D  # (1, BD)
    q = tl.load(
        Q + b * sq_b + h * sq_h + t[:, None] * sq_t + d[None, :],
        mask=t_ok[:, None] & d_ok,
        other=0.0,
    ).to(tl.float32)  # (BT, BD)
    k_base = K + b * sk_b + kvh * sk_h
    v_base = V + b * sv_b + kvh * sv_h
    m = tl.full((BLOCK_T,), -1.0e30, tl.float32)  # running max
    l = tl.zeros((BLOCK_T,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_T, BLOCK_D), tl.float32)  # (BT, BD)
    for c in range(0, C):
        lo = tl.load(Dists + c)
        ok = t_ok & (t >= lo)  # (BT,)
        r_lo = t - lo
        m_lo = ok[:, None] & d_ok
        key = tl.load(k_base + r_lo[:, None] * sk_t + d[None, :], mask=m_lo, other=0.0).to(
            tl.float32
        )  # (BT, BD)
        val = tl.load(v_base + r_lo[:, None] * sv_t + d[None, :], mask=m_lo, other=0.0).to(
            tl.float32
        )
        if tl.load(Flags + c) != 0:  # interpolated column
            f = tl.load(Fracs + c).to(tl.float32)
            r_hi = tl.maximum(r_lo - 1, 0)
            k_hi = tl.load(k_base + r_hi[:, None] * sk_t + d[None, :], mask=m_lo, other=0.0).to(
                tl.float32
            )
            v_hi = tl.load(v_base + r_hi[:, None] * sv_t + d[None, :], mask=m_lo, other=0.0).to(
                tl.float32
            )
            key = key + f * (k_hi - key)
            val = val + f * (v_hi - val)
        s = tl.where(ok, tl.sum(q * key, 1) * scale, float("-inf"))  # (BT,)
        m_new = tl.maximum(m, s)
        corr = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * corr + p
        acc = acc * corr[:, None] + p[:, None] * val
        m = m_new
    has = l > 0
    out = acc / tl.where(has, l, 1.0)[:, None]
    lse = tl.where(has, m + tl.log(tl.where(has, l, 1.0)), float("inf"))
    tl.store(
        Out + b * so_b + h * so_h + t[:, None] * so_t + d[None, :],
        out.to(Out.dtype.element_ty),
        mask=t_ok[:, None] & d_ok,
    )
    tl.store(Lse + bh.to(tl.int64) * T + t, lse, mask=t_ok)


@triton.jit
def _bwd_query_kernel(
    Q,
    K,
    V,
    Out,
    DO,
    Lse,
    Dists,
    Fracs,
    Flags,
    DQ,
    Pbuf,
    Gbuf,
    Partial,
    sq_b,
    sq_h,
    sq_t,
    sk_b,
    sk_h,
    sk_t,
    sv_b,
    sv_h,
    sv_t,
    so_b,
    so_h,
    so_t,
    sd_b,
    sd_h,
    sd_t,
    H,
    G,
    T,
    C,
    D,
    scale,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DFRAC: tl.constexpr,
):
    bh = tl.program_id(0)  # (b, h) fastest: the G heads of one KV
    pid_t = tl.program_id(1)  # head run side by side and share its rows
    b = (bh // H).to(tl.int64)
    h = bh % H
    kvh = h // G
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # queries (BT,)
    d = tl.arange(0, BLOCK_D)
    t_ok = t < T
    d_ok = d[None, :] < D
    m_t = t_ok[:, None] & d_ok
    q = tl.load(Q + b * sq_b + h * sq_h + t[:, None] * sq_t + d[None, :], mask=m_t, other=0.0).to(
        tl.float32
    )  # (BT, BD)
    do = tl.load(DO + b * sd_b + h * sd_h + t[:, None] * sd_t + d[None, :], mask=m_t, other=0.0).to(
        tl.float32
    )
    o = tl.load(Out + b * so_b + h * so_h + t[:, None] * so_t + d[None, :], mask=m_t, other=0.0).to(
        tl.float32
    )
    lse = tl.load(Lse + bh.to(tl.int64) * T + t, mask=t_ok, other=float("inf"))
    delta = tl.sum(do * o, 1)  # Σ_c P_c·dP_c (BT,)
    k_base = K + b * sk_b + kvh * sk_h
    v_base = V + b * sv_b + kvh * sv_h
    dq = tl.zeros((BLOCK_T, BLOCK_D), tl.float32)
    scratch = bh.to(tl.int64) * C * T  # (b, h) of (B,H,C,T)
    part_base = (bh.to(tl.int64) * tl.num_programs(1) + pid_t) * C
    for c in range(0, C):
        lo = tl.load(Dists + c)
        ok = t_ok & (t >= lo)
        r_lo = t - lo
        m_lo = ok[:, None] & d_ok
        key = tl.load(k_base + r_lo[:, None] * sk_t + d[None, :], mask=m_lo, other=0.0).to(
            tl.float32
        )
        val = tl.load(v_base + r_lo[:, None] * sv_t + d[None, :], mask=m_lo, other=0.0).to(
            tl.float32
        )
        dkey_f = tl.zeros((BLOCK_T,), tl.float32)  # q·(k_hi − k_lo)
        dval_f = tl.zeros((BLOCK_T,), tl.float32)  # dO·(v_hi − v_lo)
        if tl.load(Flags + c) != 0:
            f = tl.load(Fracs + c).to(tl.float32)
            r_hi = tl.maximum(r_lo - 1, 0)
            k_hi = tl.load(k_base + r_hi[:, None] * sk_t + d[None, :], mask=m_lo, other=0.0).to(
                tl.float32
            )
            v_hi = tl.load(v_base + r_hi[:, None] * sv_t + d[None, :], mask=m_lo, other=0.0).to(
                tl.float32
            )
            dkey_f = tl.sum(q * (k_hi - key), 1)
            dval_f = tl.sum(do * (v_hi - val), 1)
            key = key + f * (k_hi - key)
            val = val + f * (v_hi - val)
        s = tl.sum(q * key, 1) * scale
        p = tl.where(ok, tl.exp(s - lse), 0.0)  # P_c(t) (BT,)
        g = p * (tl.sum(do * val, 1) - delta) * scale  # dL/d(q·key)
        dq += g[:, None] * key
        tl.store(Pbuf + scratch + c * T + t, p, mask=t_ok)
        tl.store(Gbuf + scratch + c * T + t, g, mask=t_ok)
        if DFRAC:
            tl.store(Partial + part_base + c, tl.sum(g * dkey_f + p * dval_f, 0))
    tl.store(
        DQ + bh.to(tl.int64) * T * D + t[:, None] * D + d[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=m_t,
    )


@triton.jit
def _bwd_key_kernel(
    Q,
    DO,
    Dists,
    Fracs,
    Flags,
    Pbuf,
    Gbuf,
    DK,
    DV,
    sq_b,
    sq_h,
    sq_t,
    sd_b,
    sd_h,
    sd_t,
    H,
    KV,
    G,
    T,
    C,
    D,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bk = tl.program_id(0)
    pid_s = tl.program_id(1)
    b = (bk // KV).to(tl.int64)
    kvh = bk % KV
    s = pid_s * BLOCK_T + tl.arange(0, BLOCK_T)  # key rows (BT,)
    d = tl.arange(0, BLOCK_D)
    s_ok = s < T
    d_ok = d[None, :] < D
    dk = tl.zeros((BLOCK_T, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_T, BLOCK_D), tl.float32)
    for c in range(0, C):
        lo = tl.load(Dists + c)
        interp = tl.load(Flags + c) != 0
        f = tl.load(Fracs + c).to(tl.float32)
        t1 = s + lo  # lo tap: query s + lo reads row s
        ok1 = s_ok & (t1 < T)
        m1 = ok1[:, None] & d_ok
        # weight 1 − f; at s = 0 the query's hi tap clamps to row 0 too, so row 0 takes 1
        w1 = tl.where(interp, tl.where(s == 0, 1.0, 1.0 - f), 1.0)  # (BT,)
        t2 = t1 + 1  # hi tap: query s + lo + 1, weight f
        ok2 = s_ok & (t2 < T)
        m2 = ok2[:, None] & d_ok
        for gi in range(0, G):
            h = kvh * G + gi
            scratch = (b * H + h) * C * T + c * T
            q_base = Q + b * sq_b + h * sq_h
            do_base = DO + b * sd_b + h * sd_h
            p1 = tl.load(Pbuf + scratch + t1, mask=ok1, other=0.0)
            g1 = tl.load(Gbuf + scratch + t1, mask=ok1, other=0.0)
            q1 = tl.load(q_base + t1[:, None] * sq_t + d[None, :], mask=m1, other=0.0).to(
                tl.float32
            )
            do1 = tl.load(do_base + t1[:, None] * sd_t + d[None, :], mask=m1, other=0.0).to(
                tl.float32
            )
            dk += (w1 * g1)[:, None] * q1
            dv += (w1 * p1)[:, None] * do1
            if interp:
                p2 = tl.load(Pbuf + scratch + t2, mask=ok2, other=0.0)
                g2 = tl.load(Gbuf + scratch + t2, mask=ok2, other=0.0)
                q2 = tl.load(q_base + t2[:, None] * sq_t + d[None, :], mask=m2, other=0.0).to(
                    tl.float32
                )
                do2 = tl.load(do_base + t2[:, None] * sd_t + d[None, :], mask=m2, other=0.0).to(
                    tl.float32
                )
                dk += (f * g2)[:, None] * q2
                dv += (f * p2)[:, None] * do2
    offs = bk.to(tl.int64) * T * D + s[:, None] * D + d[None, :]
    m_s = s_ok[:, None] & d_ok
    tl.store(DK + offs, dk.to(DK.dtype.element_ty), mask=m_s)
    tl.store(DV + offs, dv.to(DV.dtype.element_ty), mask=m_s)


# --------------------------------------------------------------------------------------------
# launch helpers
# --------------------------------------------------------------------------------------------
def interpreted() -> bool:
    """True when this module's kernels run under Triton's CPU interpreter (TRITON_INTERPRET=1
    was set before the module was imported)."""
    return type(_fwd_kernel).__name__ == "InterpretedFunction"


def available(device: torch.device | str) -> bool:
    """Whether the kernels can run on tensors of `device` in this process."""
    dev = torch.device(device)
    if interpreted():
        return dev.type == "cpu"
    return dev.type == "cuda" and torch.cuda.is_available()


def default_launch(D: int) -> tuple[int, int]:
    """(block of queries / key rows, warps) used when the caller gives none."""
    if interpreted():
        return 16, 1
    block_d = triton.next_power_of_2(D)
    return (32, 4) if block_d <= 64 else (16, 4)


def _last_dim_unit(x: torch.Tensor) -> torch.Tensor:
    """A view with stride 1 along the head dim (a copy only when needed)."""
    return x if x.stride(-1) == 1 else x.contiguous()


class _ColumnsAttention(torch.autograd.Function):
    """Autograd wrapper of the three kernels; differentiable in q, k, v and fracs."""

    @staticmethod
    def forward(ctx, q, k, v, fracs, dists, flags, scale, block_t, num_warps):
        B, H, T, D = q.shape
        KV = k.shape[1]
        G = H // KV
        C = dists.numel()
        q, k, v = _last_dim_unit(q), _last_dim_unit(k), _last_dim_unit(v)
        f32 = fracs.detach().to(torch.float32).contiguous()
        out = torch.empty(B, H, T, D, dtype=q.dtype, device=q.device)
        lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
        block_d = triton.next_power_of_2(D)
        grid = (B * H, triton.cdiv(T, block_t))
        _fwd_kernel[grid](
            q,
            k,
            v,
            out,
            lse,
            dists,
            f32,
            flags,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            v.stride(0),
            v.stride(1),
            v.stride(2),
            out.stride(0),
            out.stride(1),
            out.stride(2),
            H,
            G,
            T,
            C,
            D,
            float(scale),
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            num_warps=num_warps,
        )
        ctx.save_for_backward(q, k, v, out, lse, dists, f32, flags)
        ctx.fracs_dtype = fracs.dtype
        ctx.scale, ctx.block_t, ctx.num_warps = float(scale), block_t, num_warps
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, dists, f32, flags = ctx.saved_tensors
        B, H, T, D = q.shape
        KV = k.shape[1]
        G = H // KV
        C = dists.numel()
        block_t, num_warps = ctx.block_t, ctx.num_warps
        block_d = triton.next_power_of_2(D)
        want_frac = ctx.needs_input_grad[3]
        do = _last_dim_unit(grad_out.to(q.dtype))
        n_t = triton.cdiv(T, block_t)
        dq = torch.empty(B, H, T, D, dtype=q.dtype, device=q.device)
        pbuf = torch.empty(B, H, C, T, dtype=torch.float32, device=q.device)
        gbuf = torch.empty_like(pbuf)
        partial = torch.zeros(B * H * n_t, C, dtype=torch.float32, device=q.device)
        _bwd_query_kernel[(B * H, n_t)](
            q,
            k,
            v,
            out,
            do,
            lse,
            dists,
            f32,
            flags,
            dq,
            pbuf,
            gbuf,
            partial,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            v.stride(0),
            v.stride(1),
            v.stride(2),
            out.stride(0),
            out.stride(1),
            out.stride(2),
            do.stride(0),
            do.stride(1),
            do.stride(2),
            H,
            G,
            T,
            C,
            D,
            ctx.scale,
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            DFRAC=want_frac,
            num_warps=num_warps,
        )
        dk = torch.empty(B, KV, T, D, dtype=k.dtype, device=k.device)
        dv = torch.empty(B, KV, T, D, dtype=v.dtype, device=v.device)
        _bwd_key_kernel[(B * KV, n_t)](
            q,
            do,
            dists,
            f32,
            flags,
            pbuf,
            gbuf,
            dk,
            dv,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            do.stride(0),
            do.stride(1),
            do.stride(2),
            H,
            KV,
            G,
            T,
            C,
            D,
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            num_warps=num_warps,
        )
        dfracs = partial.sum(0).to(ctx.fracs_dtype) if want_frac else None
        return dq, dk, dv, dfracs, None, None, None, None, None


# --------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------
def _check_inputs(q, k, v, dists, fracs, scale):
    B, H, KV, T, D = check_qkv(q, k, v)
    if min(B, H, T, D) < 1:
        raise ValueError(f"q {tuple(q.shape)} has an empty dimension")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _DTYPES:
        raise ValueError(
            f"q, k, v must share one dtype among float32 / float16 / bfloat16 (the "
            f"Triton kernel accumulates in float32); got {q.dtype}, {k.dtype}, "
            f"{v.dtype} — use the pure-PyTorch path for float64, or run under "
            f"autocast (inputs are then cast to the autocast dtype, as for SDPA)"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    check_columns(q, k, v, dists, fracs, scale)


def triton_columns_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dists: torch.Tensor,
    fracs: torch.Tensor,
    scale: float,
    *,
    interpolated: torch.Tensor | Sequence[bool] | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Softmax attention over C columns with the fused Triton kernels.  Returns (B, H, T, D).

    q       (B, H, T, D); k, v (B, KV, T, D), H a multiple of KV; one dtype among float32 /
            float16 / bfloat16 (under autocast all three are cast to the autocast dtype first,
            as scaled_dot_product_attention does).
    dists   (C,) integer distances lo_c ≥ 0; a column with lo_c ≥ T is read by no query.
            Checked on the host: a CUDA dists costs one sync, so pass it on the CPU.
    fracs   (C,) float fractions, 0 for integer columns; carries the gradient to α.
    scale   multiplies q·key.
    Differentiable in q, k and v and fracs.

    interpolated  which columns read the second (lo + 1) row: a bool (C,) mask.  Default: every
                  column when fracs requires grad (so dfracs is the true derivative even at
                  f = 0), else the columns with f ≠ 0.  A column not marked reads one row, its
                  fraction is ignored and its dfrac is 0.
    block_t, num_warps  launch shape (default: `default_launch`); block_t a power of two ≥ 16.
    """
    if all(isinstance(x, torch.Tensor) for x in (q, k, v)):
        dev_type = q.device.type
        if torch.is_autocast_enabled(dev_type):  # like SDPA: one autocast dtype for all
            dt = torch.get_autocast_dtype(dev_type)
            q, k, v = q.to(dt), k.to(dt), v.to(dt)
    _check_inputs(q, k, v, dists, fracs, scale)
    dev = q.device
    d_host = dists.detach().to("cpu", torch.int64)
    if int(d_host.min()) < 0:
        raise ValueError(f"dists must be >= 0 (a query reads only the past); got {d_host.tolist()}")
    C = d_host.numel()
    if interpolated is None:
        flags = (
            torch.ones(C, dtype=torch.int32, device=dev)
            if fracs.requires_grad
            else (fracs.detach() != 0).to(device=dev, dtype=torch.int32)
        )
    else:
        flags = torch.as_tensor(interpolated, device=dev)
        if flags.shape != (C,) or flags.dtype != torch.bool:
            raise ValueError(
                f"interpolated must be a bool mask of shape ({C},); got "
                f"{flags.dtype} {tuple(flags.shape)}"
            )
        flags = flags.to(torch.int32)
    bt, nw = default_launch(q.shape[-1])
    block_t = bt if block_t is None else block_t
    num_warps = nw if num_warps is None else num_warps
    if block_t < 16 or block_t & (block_t - 1):
        raise ValueError(f"block_t={block_t} must be a power of two >= 16")
    if not available(dev):
        need = (
            "CPU tensors (this process runs Triton's interpreter)"
            if interpreted()
            else "CUDA tensors on a machine with a GPU, or TRITON_INTERPRET=1 set before "
            "lab.kernels.triton_attn is imported to run on CPU"
        )
        raise RuntimeError(f"triton_columns_attention got tensors on {dev}; it needs {need}")
    dists_dev = dists.detach().to(device=dev, dtype=torch.int64).contiguous()
    return _ColumnsAttention.apply(
        q,
        k,
        v,
        fracs.to(dev),
        dists_dev,
        flags.contiguous(),
        float(scale),
        int(block_t),
        int(num_warps),
    )


def plan_tensors(
    cols: Sequence[tuple[int, torch.Tensor | None]], device=None, dtype: torch.dtype = torch.float32
):
    """A column list [(lo, frac tensor or None)] as kernel inputs: (dists (C,) int64 on the
    host, fracs (C,) `dtype` on `device` and on the fracs' graph, interpolated (C,) bool on the
    host).  Host-side dists are checked without a device sync; the wrapper copies them over.
    Only a conversion (no rung rule here): a layer's plan hands these tensors over directly,
    `lab.ladder.plan.ColumnPlan.kernel_inputs`; this is for hand-written column lists."""
    if not cols:
        raise ValueError("the column plan is empty")
    dists = torch.tensor([int(d) for d, _ in cols], dtype=torch.int64)
    zero = torch.zeros((), dtype=dtype, device=device)
    fracs = torch.stack(
        [zero if f is None else f.reshape(()).to(device=device, dtype=dtype) for _, f in cols]
    )
    interp = torch.tensor([f is not None for _, f in cols], dtype=torch.bool)
    return dists, fracs, interp
