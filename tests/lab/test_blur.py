"""The Gaussian blur gather (retrieval probe) against independent oracles.

* output vs a brute-force float64 loop per query position, with the rung rule, the clamped taps
  and the Gaussian weights re-implemented here in plain Python;
* dLoss/dα vs central finite differences;
* the width annealing schedule;
* the narrow-width limit vs the integer shift path on the same rung set (a bound, not equality:
  at the width floor 0.25 the two neighbour taps keep relative weight e^-8 each);
* no (T, T) or (T, M, D) sized tensor, forward and backward (the FFT implementation);
* input validation.

Both implementations — "fft" (blurred rows by FFT) and "band" (dense scores + the C++ band
kernel) — are checked against the oracles (the IMPLS parameter); the band kernel's bfloat16
storage (the probe under autocast) against float32, and the automatic choice.
"""

import math

import pytest
import torch
from memtrace import MaxNumel

import lab.sparse.blur as blur_mod
from lab.kernels import cpu
from lab.ladder.offsets import Ladder, fibonacci
from lab.ladder.plan import rung_distances
from lab.sparse.attention import sparse_attention
from lab.sparse.blur import blur_attention, blur_centres, blur_width

IMPLS = [
    "fft",
    pytest.param(
        "band",
        marks=pytest.mark.skipif(
            cpu.status() is not True, reason="the C++ kernel cannot be built here"
        ),
    ),
]


def make_qkv(B, H, KV, T, D, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, T, D, generator=g, dtype=dtype),
        torch.randn(B, KV, T, D, generator=g, dtype=dtype),
        torch.randn(B, KV, T, D, generator=g, dtype=dtype),
    )


def oracle_blur(q, k, v, alpha, window, width, rungs=15):
    """Per query position: window keys, then each kept rung's blurred key summed tap by tap."""
    B, H, T, D = q.shape
    KV = k.shape[1]
    w = max(width, 0.25)
    R = math.ceil(2.5 * w)
    cols = []  # (c, [(tap, weight), ...]) per kept rung
    for f in fibonacci(rungs):
        if f <= window:
            continue
        dk = alpha * f
        c = round(dk)
        if c <= window or c > T - 1:
            continue
        taps = [min(max(j, 1), T - 1) for j in range(c - R, c + R + 1)]
        g = [math.exp(-0.5 * ((j - dk) / w) ** 2) for j in taps]
        cols.append((c, [(j, gj / sum(g)) for j, gj in zip(taps, g)]))
    out = torch.zeros_like(q)
    for h in range(H):
        kv = h // (H // KV)
        for t in range(T):
            keys, vals = [], []  # each (B, D)
            for d in range(min(window, T - 1) + 1):
                if d <= t:
                    keys.append(k[:, kv, t - d])
                    vals.append(v[:, kv, t - d])
            for c, taps in cols:
                if c <= t:
                    keys.append(sum(gj * k[:, kv, max(t - j, 0)] for j, gj in taps))
                    vals.append(sum(gj * v[:, kv, max(t - j, 0)] for j, gj in taps))
            s = torch.stack(keys, 1) @ q[:, h, t, :, None] / math.sqrt(D)  # (B, C, 1)
            out[:, h, t] = (s.softmax(1) * torch.stack(vals, 1)).sum(1)
    return out


# (alpha, width, W, T, H, KV): widths 6 and 9 make taps clamp at 1 (W = 0, 1: c = 1, 2) and at
# T − 1 (a rung centred near the end of the sequence).
CASES = [
    (1.0, 2.0, 8, 40, 2, 2),
    (0.73, 6.0, 0, 30, 4, 2),  # R = 15; f = 1 → c = 1: taps clamp at 1; f = 34 → c = 25: at 29
    (1.37, 9.0, 1, 36, 4, 1),  # R = 23; f = 2 → c = 3 and f = 21 → c = 29: clamp at 1 and 35
    (0.55, 0.1, 3, 48, 6, 3),  # width floored to 0.25
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("alpha,width,W,T,H,KV", CASES)
def test_matches_bruteforce(alpha, width, W, T, H, KV, impl):
    q, k, v = make_qkv(2, H, KV, T, 4, seed=T)
    got = blur_attention(
        q, k, v, alpha=torch.tensor(alpha, dtype=torch.float64), window=W, width=width, impl=impl
    )
    want = oracle_blur(q, k, v, alpha, W, width)
    assert got.shape == q.shape
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_cases_exercise_clamping():
    """The CASES above really hit both clamp boundaries (so the oracle tests cover them)."""
    hit_lo = hit_hi = False
    for alpha, width, W, T, _, _ in CASES:
        R = math.ceil(2.5 * max(width, 0.25))
        for c in blur_centres(alpha, W, T):
            hit_lo |= c - R < 1
            hit_hi |= c + R > T - 1
    assert hit_lo and hit_hi


@pytest.mark.parametrize("impl", IMPLS)
def test_alpha_gradient_matches_finite_differences(impl):
    q, k, v = make_qkv(1, 4, 2, 64, 4, seed=3)
    wgt = torch.randn(q.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    a0, W, width, eps = 0.81, 4, 3.0, 1e-6
    # no α·f within eps of a half-integer: the rounded centres stay put across the stencil
    assert all(abs((a0 * f) % 1 - 0.5) > 1e-3 for f in fibonacci(15))

    def loss(a):
        return (blur_attention(q, k, v, alpha=a, window=W, width=width, impl=impl) * wgt).sum()

    a = torch.tensor(a0, dtype=torch.float64, requires_grad=True)
    loss(a).backward()
    with torch.no_grad():
        fd = (
            loss(torch.tensor(a0 + eps, dtype=torch.float64))
            - loss(torch.tensor(a0 - eps, dtype=torch.float64))
        ) / (2 * eps)
    assert abs(fd.item()) > 1e-3
    assert abs(a.grad.item() - fd.item()) <= 0.01 * abs(fd.item())


@pytest.mark.parametrize("impl", IMPLS)
def test_gradcheck_qkv_and_alpha(impl):
    q, k, v = make_qkv(1, 2, 1, 14, 3, seed=5)
    a = torch.tensor(0.93, dtype=torch.float64)  # no α·f at a half-integer (0.9·5 is)
    for x in (q, k, v, a):
        x.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q_, k_, v_, a_: blur_attention(q_, k_, v_, alpha=a_, window=1, width=2.0, impl=impl),
        (q, k, v, a),
        fast_mode=True,
    )


def test_width_schedule():
    assert blur_width(0, 1000) == 40.0
    assert blur_width(400, 1000) == pytest.approx(20.25, abs=1e-12)
    assert blur_width(800, 1000) == pytest.approx(0.5, abs=1e-12)
    assert blur_width(1000, 1000) == pytest.approx(0.5, abs=1e-12)
    assert blur_width(5000, 1000) == pytest.approx(0.5, abs=1e-12)
    ws = [blur_width(s, 1000) for s in range(0, 1001, 50)]
    assert all(a >= b for a, b in zip(ws, ws[1:]))
    with pytest.raises(ValueError, match="steps=0"):
        blur_width(0, 0)
    with pytest.raises(ValueError, match="step=-1"):
        blur_width(-1, 10)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_narrow_width_approaches_integer_shift(alpha):
    """Not exact by construction, so checked as a bound.  With α·f integer the rung set equals
    the shift path's on the same base (f > W) exactly; at w = 0.25 each blurred key/value is
    (1−ε)·row[t−c] + ε·(mean of rows t−c±1) with ε = 2e^-8/(1+2e^-8), so the output differs
    from the shift path by at most, to first order, 2·ε·vmax·(1 + scale·|q|·2|k|)."""
    W, T, D = 8, 300, 8
    q, k, v = make_qkv(1, 4, 2, T, D, seed=11)
    base = [f for f in fibonacci(15) if f > W]
    assert blur_centres(alpha, W, T) == rung_distances(alpha, T, Ladder(W, base=base))  # exact
    ref = sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(W, base=base), path="shift")
    a = torch.tensor(alpha, dtype=torch.float64)
    err_narrow = (blur_attention(q, k, v, alpha=a, window=W, width=0.25) - ref).abs().max()
    err_wide = (blur_attention(q, k, v, alpha=a, window=W, width=1.0) - ref).abs().max()
    eps = 2 * math.exp(-8) / (1 + 2 * math.exp(-8))
    qn, kn, vmax = q.norm(dim=-1).max(), k.norm(dim=-1).max(), v.abs().max()
    bound = 2 * eps * vmax * (1 + qn * 2 * kn / math.sqrt(D))
    assert 0 < err_narrow < bound
    assert err_narrow < err_wide / 100


def test_no_quadratic_or_band_tensor():
    B, H, KV, T, D, W, width = 1, 2, 1, 512, 4, 4, 40.0
    M = 2 * math.ceil(2.5 * width) + 1  # 201 taps
    q, k, v = make_qkv(B, H, KV, T, D, dtype=torch.float32)
    for x in (q, k, v):
        x.requires_grad_(True)
    a = torch.tensor(1.0, requires_grad=True)
    C = W + 1 + len(blur_centres(1.0, W, T))
    with MaxNumel() as m:
        blur_attention(q, k, v, alpha=a, window=W, width=width, impl="fft").sum().backward()
    assert a.grad is not None and a.grad.item() != 0.0
    linear = max(B * H * T * C, B * KV * D * (T + M))  # logits / gathered rows
    assert m.max_numel <= linear
    assert m.max_numel < T * T // 4 and m.max_numel < T * M * D // 16


def test_validation():
    q, k, v = make_qkv(1, 2, 1, 16, 4)
    a = torch.tensor(1.0)
    for width in (0, 0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="width="):
            blur_attention(q, k, v, alpha=a, window=2, width=width)
    with pytest.raises(ValueError, match=r"0-d.*\(1,\)"):
        blur_attention(q, k, v, alpha=torch.tensor([1.0]), window=2, width=1.0)
    with pytest.raises(ValueError, match="W=-1"):
        blur_attention(q, k, v, alpha=a, window=-1, width=1.0)
    with pytest.raises(ValueError, match="alpha=-0.5"):
        blur_attention(q, k, v, alpha=torch.tensor(-0.5), window=2, width=1.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_matches_bruteforce_width_beyond_sequence(impl):
    """R = 100 > T: most taps clamp at 1 or T − 1 (the FFT padding P is then T − 1 − c)."""
    q, k, v = make_qkv(1, 2, 1, 40, 3, seed=41)
    got = blur_attention(
        q, k, v, alpha=torch.tensor(1.1, dtype=torch.float64), window=2, width=40.0, impl=impl
    )
    want = oracle_blur(q, k, v, 1.1, 2, 40.0)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("width", [40.0, 0.5])
def test_float32_agrees_with_float64(width, impl):
    """Output and all gradients in float32 (FFT in float32) stay close to the float64 result."""
    q, k, v = make_qkv(2, 4, 2, 300, 16, seed=13)
    wgt = torch.randn(q.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    res = {}
    for dtype in (torch.float32, torch.float64):
        xs = [x.to(dtype).requires_grad_(True) for x in (q, k, v)]
        a = torch.tensor(0.93, dtype=torch.float64, requires_grad=True)  # same α in both runs
        out = blur_attention(*xs, alpha=a, window=8, width=width, impl=impl)
        (out * wgt.to(dtype)).sum().backward()
        res[dtype] = [out] + [x.grad for x in xs] + [a.grad]
    for lo, hi in zip(res[torch.float32], res[torch.float64]):
        scale = 1 + hi.abs().max().item()
        assert (lo.double() - hi).abs().max().item() <= 1e-5 * scale


def _grads(impl, dtype, width, autocast=False):
    """Output and q/k/v/α gradients of one blur layer (float64 inputs cast to `dtype`)."""
    q, k, v = make_qkv(2, 4, 2, 200, 16, seed=17)
    wgt = torch.randn(q.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    xs = [x.to(dtype).requires_grad_(True) for x in (q, k, v)]
    a = torch.tensor(0.87, dtype=torch.float64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = blur_attention(*xs, alpha=a, window=8, width=width, impl=impl)
    (out.double() * wgt).sum().backward()
    return [out.double()] + [x.grad.double() for x in xs] + [a.grad]


@pytest.mark.skipif(cpu.status() is not True, reason="the C++ kernel cannot be built here")
@pytest.mark.parametrize("width", [20.0, 0.5])
def test_band_bfloat16_autocast_close_to_float64(width):
    """Under bf16 autocast (the probe's `precision="bf16"`) the band kernel reads and writes
    bfloat16 scores: output and gradients within bf16 rounding of the float64 result, and the
    FFT implementation under the same autocast agrees to the same order."""
    ref = _grads("fft", torch.float64, width)
    for impl in ("band", "fft"):
        got = _grads(impl, torch.float32, width, autocast=True)
        for lo, hi in zip(got, ref):
            scale = hi.abs().max().item()
            assert (lo - hi).abs().max().item() <= 0.03 * scale + 1e-6


def test_band_choice_and_fallback(monkeypatch):
    q, k, v = make_qkv(1, 2, 1, 16, 4)
    a = torch.tensor(1.0)
    with pytest.raises(ValueError, match="impl='nope'"):
        blur_attention(q, k, v, alpha=a, window=2, width=1.0, impl="nope")
    calls = []
    real = blur_mod._band_attention
    monkeypatch.setattr(blur_mod, "_band_attention", lambda *args: calls.append(1) or real(*args))
    if cpu.status() is True:
        blur_attention(q, k, v, alpha=a, window=2, width=1.0)  # auto: small → band
        assert calls == [1]
        monkeypatch.setattr(blur_mod, "BAND_MAX_ELEMENTS", 2 * 16 * 16 - 1)
        blur_attention(q, k, v, alpha=a, window=2, width=1.0)  # above the limit
        assert calls == [1]
    before = len(calls)
    monkeypatch.setenv("FIBLAB_BLUR_IMPL", "fft")  # forced: no band call
    blur_attention(q, k, v, alpha=a, window=2, width=1.0)
    assert len(calls) == before
    monkeypatch.setenv("FIBLAB_BLUR_IMPL", "fast")
    with pytest.raises(ValueError, match="FIBLAB_BLUR_IMPL='fast'"):
        blur_attention(q, k, v, alpha=a, window=2, width=1.0)
    monkeypatch.delenv("FIBLAB_BLUR_IMPL")
    monkeypatch.setattr(cpu, "_STATE", {})  # forget any loaded build

    def no_compiler():
        raise RuntimeError("c++: not found")

    monkeypatch.setattr(cpu, "_build", no_compiler)
    monkeypatch.setattr(blur_mod, "BAND_MAX_ELEMENTS", 1 << 25)
    out = blur_attention(q, k, v, alpha=a, window=2, width=1.0)  # auto → fft
    assert len(calls) == before
    torch.testing.assert_close(out, oracle_blur(q, k, v, 1.0, 2, 1.0), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"impl='band' needs the C\+\+ kernel.*c\+\+: not found"):
        blur_attention(q, k, v, alpha=a, window=2, width=1.0, impl="band")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("T,W", [(1, 0), (2, 0), (3, 1), (3, 8), (14, 1)])
def test_short_sequences(T, W, impl):
    """T at and below the window and the first rungs (no rung kept, or one at the very end)."""
    q, k, v = make_qkv(1, 2, 1, T, 4, seed=T + 7 * W)
    got = blur_attention(
        q, k, v, alpha=torch.tensor(0.7, dtype=torch.float64), window=W, width=3.0, impl=impl
    )
    torch.testing.assert_close(got, oracle_blur(q, k, v, 0.7, W, 3.0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_no_rung_kept_under_autocast(impl):
    """T = 5 < every rung: only the window; bf16 autocast must still run (and match float64)."""
    q, k, v = make_qkv(1, 2, 1, 5, 4, seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = blur_attention(
            q.float(), k.float(), v.float(), alpha=torch.tensor(1.0), window=8, width=3.0, impl=impl
        )
    want = oracle_blur(q, k, v, 1.0, 8, 3.0)
    assert (got.double() - want).abs().max().item() <= 0.03 * want.abs().max().item()


@pytest.mark.parametrize("impl", IMPLS)
def test_output_dtype_follows_the_inputs(impl):
    """Both implementations return the inputs' dtype, float16 and bf16 autocast included."""
    q, k, v = make_qkv(1, 2, 1, 40, 4, seed=5)
    a = torch.tensor(0.9)
    want = oracle_blur(q, k, v, 0.9, 2, 3.0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        got = blur_attention(
            q.to(dtype), k.to(dtype), v.to(dtype), alpha=a, window=2, width=3.0, impl=impl
        )
        assert got.dtype == dtype
        assert (got.double() - want).abs().max().item() <= 0.03 * want.abs().max().item()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # q, k, v stay float32
        got = blur_attention(
            q.float(), k.float(), v.float(), alpha=a, window=2, width=3.0, impl=impl
        )
    assert got.dtype == torch.float32
