"""The GPU path that checks itself (issue 16, part 3), on CPU.

``impl="auto"`` trusts the Triton kernel only after its first-use check (`lab.kernels.selfcheck`)
passed in this process.  No GPU here: the tests make CPU the device whose kernel is Triton
(`kernels.DEVICE_KERNEL`) and replace the Triton module by a fake — one that raises, one whose
forward or backward is wrong, one that is right — so that the gate itself is what is tested.
Oracles: the float64 `lab.kernels.oracle` over hand-listed columns, and counts of fake calls.
flex (`lab.kernels.flex`) runs for real: FlexAttention's eager forward exists on CPU.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

from lab import kernels
from lab.kernels import flex, selfcheck
from lab.kernels.oracle import oracle_attention
from lab.kernels.reference import columns_attention_reference
from lab.ladder.offsets import Ladder
from lab.ladder.plan import plan_for
from lab.sparse.attention import sparse_attention

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK_T = selfcheck.SHAPE["T"]


def make_qkv(B, H, KV, T, D, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, n, T, D, generator=g, dtype=dtype) for n in (H, KV, KV))


def rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient (a kernel wrong only there)."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


class FakeTriton:
    """Stands in for lab.kernels.triton_attn: `mode` says how it misbehaves; counts calls
    (check calls are those at the check problem's length)."""

    def __init__(self, mode="right", message="PTX assembly failed"):
        self.mode, self.message = mode, message
        self.calls: list[int] = []  # T of each call

    def available(self, device):
        return True

    def triton_columns_attention(self, q, k, v, dists, fracs, scale, *, interpolated=None):
        self.calls.append(q.shape[-2])
        if self.mode == "raise" or (self.mode == "raise-later" and q.shape[-2] != CHECK_T):
            raise RuntimeError(self.message)
        if self.mode == "dfracs-wrong":  # right everywhere but the gradient to α
            fracs = _ScaleGrad.apply(fracs, 1.5)
        out = columns_attention_reference(q, k, v, dists, fracs, scale, interpolated=interpolated)
        if self.mode == "out-wrong":
            out = out * 1.01
        return out

    def user_calls(self):
        return [t for t in self.calls if t != CHECK_T]


@pytest.fixture
def fake(monkeypatch):
    """CPU plays CUDA: 'auto' prefers Triton there, and Triton is a FakeTriton."""
    holder = {"mod": FakeTriton()}
    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setattr(kernels, "DEVICE_KERNEL", {"cpu": "triton"})
    monkeypatch.setattr(kernels, "_triton_module", lambda: holder["mod"])
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.setattr(selfcheck, "_WARNED", set())

    def use(mode, **kw):
        holder["mod"] = FakeTriton(mode, **kw)
        return holder["mod"]

    return use


def oracle_int(q, k, v, alpha, window, rungs):
    cols = [(d, None) for d in plan_for(alpha, q.shape[-2], Ladder(window, rungs=rungs)).lo]
    return oracle_attention(q, k, v, cols, 1 / math.sqrt(q.shape[-1]))


@pytest.mark.parametrize(
    "mode,match",
    [
        ("raise", r"RuntimeError: PTX assembly failed"),
        ("out-wrong", r"out of the integer-α problem differs from the PyTorch path by 1\.0e-02"),
        (
            "dfracs-wrong",
            r"dfracs of the learned-α problem differs from the PyTorch path by 5\.0e-01",
        ),
    ],
)
def test_auto_falls_back_and_warns_once(fake, mode, match):
    mod = fake(mode)
    q, k, v = make_qkv(1, 4, 2, 50, 8, seed=1)
    with pytest.warns(
        RuntimeWarning, match="triton attention kernel failed its check on cpu float32"
    ) as rec:
        got = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8))
    msgs = [str(w.message) for w in rec if "failed its check" in str(w.message)]
    assert len(msgs) == 1 and "\n" not in msgs[0]
    assert "using the pure-PyTorch path for this process" in msgs[0]
    assert re.search(match, msgs[0]), msgs[0]
    assert rel(got, oracle_int(q, k, v, 1.0, 3, 8)) <= 1e-5  # the PyTorch path's numbers
    n_check = len(mod.calls)
    assert n_check >= 1 and mod.user_calls() == []
    alpha = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not again
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8))
        sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(3, rungs=8)).sum().backward()
    assert len(mod.calls) == n_check  # the verdict is remembered: no second check, no use
    assert alpha.grad is not None and alpha.grad != 0
    v_ = selfcheck.cached("cpu", torch.float32)
    assert v_ is not None and not v_.ok and v_.reason in msgs[0]


def test_multiline_error_is_one_line(fake):
    fake("raise", message="ptxas fatal\n  line 2\n  line 3")
    q, k, v = make_qkv(1, 2, 1, 30, 8, seed=2)
    with pytest.warns(RuntimeWarning) as rec:
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(2, rungs=6))
    (msg,) = [str(w.message) for w in rec if "failed its check" in str(w.message)]
    assert "\n" not in msg and "ptxas fatal line 2 line 3" in msg


def test_a_right_kernel_passes_once_and_is_used(fake):
    mod = fake("right")
    q, k, v = make_qkv(1, 4, 2, 50, 8, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8))
        n_check = len(mod.calls) - 1
        alpha = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
        sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(3, rungs=8)).sum().backward()
    assert n_check == 2  # the check: integer and learned problem, once each
    assert mod.user_calls() == [50, 50]  # both user calls went to the (fake) Triton kernel
    v_ = selfcheck.cached("cpu", torch.float32)
    assert v_.ok and v_.reason == ""
    assert set(v_.errors) == {
        f"{m}/{n}" for m in ("int", "learned") for n in ("out", "dq", "dk", "dv")
    } | {"learned/dfracs"}
    assert max(v_.errors.values()) <= 1e-5  # float32 reference vs float64
    assert rel(a, oracle_int(q, k, v, 1.0, 3, 8)) <= 1e-5
    # a second dtype is a second verdict
    q16 = q.to(torch.bfloat16)
    sparse_attention(
        q16, k.to(torch.bfloat16), v.to(torch.bfloat16), alpha=1.0, ladder=Ladder(3, rungs=8)
    )
    assert selfcheck.cached("cpu", torch.bfloat16).ok and len(selfcheck.verdicts()) == 2


def test_an_error_after_a_passed_check_falls_back(fake):
    mod = fake("raise-later", message="illegal memory access")
    q, k, v = make_qkv(1, 4, 2, 50, 8, seed=4)
    with pytest.warns(RuntimeWarning, match="RuntimeError: illegal memory access.*pure-PyTorch"):
        got = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8))
    assert rel(got, oracle_int(q, k, v, 1.0, 3, 8)) <= 1e-5
    assert mod.user_calls() == [50]
    assert not selfcheck.cached("cpu", torch.float32).ok
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8))
    assert mod.user_calls() == [50]  # not tried again


def test_forced_triton_is_not_checked(fake, monkeypatch):
    mod = fake("out-wrong")
    q, k, v = make_qkv(1, 2, 1, 40, 8, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8), impl="triton")
        monkeypatch.setenv(kernels.ENV, "triton")
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3, rungs=8))
    assert mod.calls == [40, 40] and selfcheck.verdicts() == []
    assert rel(got, oracle_int(q, k, v, 1.0, 3, 8)) == pytest.approx(0.01, rel=1e-3)


def test_no_check_while_tracing_means_torch(fake, monkeypatch):
    mod = fake("right")
    monkeypatch.setattr(selfcheck, "can_check", lambda: False)
    assert kernels.resolve("auto", "cpu", torch.float32) == "torch"
    assert mod.calls == [] and selfcheck.verdicts() == []  # nothing decided for later


@pytest.mark.slow  # 12 s; the kernel itself is checked by test_triton_kernel, the fallback by the fakes above
def test_the_check_passes_the_real_triton_kernel_under_the_interpreter():
    """The check itself, on the real kernel (Triton's CPU interpreter, in a subprocess since
    TRITON_INTERPRET must be set before the kernel module is imported)."""
    pytest.importorskip("triton")
    code = (
        "import torch\n"
        "from lab.kernels import selfcheck, triton_attn\n"
        "def run(q, k, v, d, f, s, i):\n"
        "    return triton_attn.triton_columns_attention(q, k, v, d, f, s, interpolated=i)\n"
        "v = selfcheck.check(run, 'cpu', torch.float32)\n"
        "print(v.ok, max(v.errors.values()), v.reason)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    ok, worst = res.stdout.split()[:2]
    assert ok == "True" and float(worst) <= 1e-5, res.stdout


# --------------------------------------------------------------------------------------------
# flex
# --------------------------------------------------------------------------------------------
FLEX = flex.status("cpu")
needs_flex = pytest.mark.skipif(FLEX is not True, reason=f"FlexAttention cannot run: {FLEX}")


def test_key_tiles_by_hand():
    # T=300, tiles of 128: query tiles [0,127], [128,255], [256,299]
    assert flex.key_tiles([0, 130], 300, 128) == [[0], [0, 1], [0, 1, 2]]
    assert flex.key_tiles([0, 1], 300, 128) == [[0], [0, 1], [1, 2]]
    assert flex.key_tiles([0, 400], 300, 128) == [[0], [1], [2]]  # 400 ≥ T: read by no query


@needs_flex
@pytest.mark.parametrize(
    "B,H,KV,T,D,alpha,window,base,rungs",
    [
        (1, 4, 2, 300, 16, 1.0, 8, "fib", 15),  # three query tiles, GQA 2
        (2, 4, 4, 45, 8, 0.8, 3, "fib", 9),  # T below one tile
        (1, 8, 2, 260, 32, 0.7, 4, "pow2", 10),
        (1, 2, 1, 200, 16, 1.4, 0, "fib", 12),  # no window beyond distance 0
    ],
)
def test_flex_forward_matches_the_float64_oracle(B, H, KV, T, D, alpha, window, base, rungs):
    q, k, v = make_qkv(B, H, KV, T, D, seed=T + H)
    plan = plan_for(alpha, T, Ladder(window, base=base, rungs=rungs))
    ref = oracle_attention(q, k, v, [(d, None) for d in plan.lo], 1 / math.sqrt(D))
    with torch.no_grad():
        got = sparse_attention(
            q, k, v, alpha=alpha, ladder=Ladder(window, base=base, rungs=rungs), impl="flex"
        )
        got64 = sparse_attention(
            q.double(),
            k.double(),
            v.double(),
            alpha=alpha,
            ladder=Ladder(window, base=base, rungs=rungs),
            impl="flex",
        )
    assert got.dtype == torch.float32 and rel(got, ref) <= 1e-5
    assert rel(got64, ref) <= 1e-12


@needs_flex
def test_flex_matches_hand_listed_distances():
    q, k, v = make_qkv(1, 2, 1, 150, 8, seed=9)
    dists = [0, 1, 2, 5, 129, 140]  # crosses a tile edge; 140 < T
    ref = oracle_attention(q, k, v, [(d, None) for d in dists], 0.3)
    with torch.no_grad():
        got = kernels.columns_attention(
            q, k, v, torch.tensor(dists), torch.zeros(6), 0.3, impl="flex"
        )
    assert rel(got, ref) <= 1e-5


@needs_flex
def test_flex_refuses_what_it_cannot_do():
    q, k, v = make_qkv(1, 2, 1, 40, 8, seed=10)
    alpha = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="impl='flex' runs integer α only.*impl='auto'"):
        sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(3), impl="flex")
    with pytest.raises(ValueError, match="impl='flex' needs distinct distances"):
        with torch.no_grad():
            kernels.columns_attention(
                q, k, v, torch.tensor([0, 1, 1]), torch.zeros(3), 0.3, impl="flex"
            )
    qg = q.clone().requires_grad_()
    with pytest.raises(ValueError, match="no backward on CPU.*torch.no_grad"):
        sparse_attention(qg, k, v, alpha=1.0, ladder=Ladder(3), impl="flex")
    with pytest.raises(ValueError, match="impl='flex' cannot run here"):
        kernels.resolve("flex", "meta", torch.float32)
