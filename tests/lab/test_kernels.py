"""The fused C++ kernel and the implementation registry, against independent oracles.

* the kernel (through `sparse_attention(..., impl="cpp")` and directly) against the float64
  oracle `lab.kernels.oracle` (every column's key and value gathered explicitly as
  (1 − f)·row[t − lo] + f·row[max(t − lo − 1, 0)], one masked softmax over the columns), autograd
  for the gradients (q, k, v and α through f = α·f_k − lo); the interpolated column rule is
  re-implemented here from the paper's description;
* torch.autograd.gradcheck in float64 and `torch.library.opcheck` on the custom op;
* the registry: "auto" picks cpp on CPU, FIBLAB_ATTN_IMPL forces an implementation, and a build
  made to fail falls back to PyTorch with one warning and the right answer;
* the model end to end gives the same loss and gradients with impl cpp and torch.

The C++ build happens once per machine (cached on disk) and once per session in memory.
"""

import math
import os
import random
import shutil
import warnings

import pytest
import torch

from lab import kernels
from lab.kernels import cpu
from lab.kernels.oracle import oracle_attention
from lab.ladder.offsets import Ladder, fibonacci, powers_of_two
from lab.ladder.plan import attended_distances
from lab.lm.model import build_model
from lab.machine.measure import ROOT
from lab.sparse.attention import sparse_attention
from lab.util import files

HAVE_COMPILER = any(shutil.which(c) for c in ("c++", "g++", "clang++"))


@pytest.fixture(scope="module")
def built():
    """The compiled kernel; skip only when this machine lacks the C++ toolchain that
    torch.utils.cpp_extension needs (a compiler, and ninja)."""
    from torch.utils.cpp_extension import is_ninja_available

    if not HAVE_COMPILER:
        pytest.skip(
            "no C++ compiler (c++ / g++ / clang++) on PATH: the fused CPU kernel cannot "
            "be built here"
        )
    if not is_ninja_available():
        pytest.skip(
            "ninja is missing (torch.utils.cpp_extension builds with it): pip install ninja"
        )
    status = cpu.status()
    assert status is True, status
    return cpu.load()


# --------------------------------------------------------------------------------------------
# the oracle
# --------------------------------------------------------------------------------------------
def make_qkv(B, H, KV, T, D, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, T, D, generator=g, dtype=dtype),
        torch.randn(B, KV, T, D, generator=g, dtype=dtype),
        torch.randn(B, KV, T, D, generator=g, dtype=dtype),
    )


def oracle(q, k, v, cols, scale):
    """The float64 oracle (`lab.kernels.oracle`); cols = [(lo, f)] with f a float or a 0-d
    tensor.  A query with no valid column reads nothing (output 0), as the fused kernels."""
    return oracle_attention(q, k, v, cols, scale)


def oracle_columns(alpha, W, T, base, rungs):
    """The attended columns, written out: integer sets for a float α; for a tensor α the
    window plus each kept rung (dropped when round(α·f) ≤ W, floor(α·f) > T − 1 or floor taken)
    with f = α·f_k − floor(α·f_k) on α's graph."""
    if not isinstance(alpha, torch.Tensor):
        return [(d, 0.0) for d in attended_distances(alpha, T, Ladder(W, base=base, rungs=rungs))]
    values = fibonacci(rungs) if base == "fib" else powers_of_two(T)
    used = set(range(min(W, T - 1) + 1))
    cols = [(d, 0.0) for d in sorted(used)]
    for fk in values:
        x = float(alpha.detach()) * fk
        lo = math.floor(x)
        if round(x) <= W or lo > T - 1 or lo in used:
            continue
        used.add(lo)
        cols.append((lo, alpha * fk - lo))
    return cols


def rel(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


# --------------------------------------------------------------------------------------------
# the kernel against the oracle: outputs and gradients (q, k, v, α), float32 ≤ 1e-5 relative
# --------------------------------------------------------------------------------------------
def _cases():
    """(B, T, D, W, alpha, base, rungs, G): T below and above the largest rung, never a multiple
    of the kernel's 64-row blocks; head dims vectorised (16, 32, 64) and not (8, 12); GQA ratios
    1, 2 and 4 each with both bases; then seeded random draws."""
    cases = [
        (1, 1000, 8, 8, 1.0, "fib", 15, 4),  # above 987 (the full ladder)
        (1, 600, 16, 8, 0.77, "fib", 15, 2),  # below 987
        (2, 131, 64, 4, 1.5, "fib", 8, 1),  # above 34·1.5 = 51
        (1, 45, 64, 3, 2.0, "fib", 8, 4),  # below 68, integer α
        (2, 77, 32, 2, 0.66, "pow2", 15, 1),
        (1, 150, 16, 6, 1.0, "pow2", 15, 2),
        (1, 97, 64, 5, 1.21, "pow2", 15, 4),
        (2, 70, 12, 1, 0.93, "fib", 10, 2),
    ]
    rng = random.Random(7)
    for _ in range(4):
        cases.append(
            (
                rng.choice([1, 2]),
                rng.choice([37, 99, 203, 259]),
                rng.choice([12, 16, 64]),
                rng.randint(0, 8),
                round(rng.uniform(0.5, 1.5), 3),
                rng.choice(["fib", "pow2"]),
                rng.choice([8, 10, 12]),
                rng.choice([1, 2, 4]),
            )
        )
    return cases


@pytest.mark.parametrize("B,T,D,W,alpha,base,rungs,G", _cases())
@pytest.mark.parametrize("learned", [False, True])
def test_cpp_matches_oracle(built, B, T, D, W, alpha, base, rungs, G, learned):
    KV = 2 if G < 4 else 1
    H = KV * G
    q, k, v = make_qkv(B, H, KV, T, D, seed=T + D + W + G)
    w_out = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(1))
    scale = 1 / math.sqrt(D)

    a_ref = torch.tensor(alpha, dtype=torch.float64, requires_grad=True) if learned else alpha
    X = [x.double().requires_grad_() for x in (q, k, v)]
    ref = oracle(*X, oracle_columns(a_ref, W, T, base, rungs), scale)
    refs = torch.autograd.grad((ref * w_out).sum(), X + ([a_ref] if learned else []))

    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=True) if learned else alpha
    Y = [x.clone().requires_grad_() for x in (q, k, v)]
    got = sparse_attention(*Y, alpha=a, ladder=Ladder(W, base=base, rungs=rungs), impl="cpp")
    grads = torch.autograd.grad((got * w_out).sum(), Y + ([a] if learned else []))

    assert got.dtype == torch.float32 and got.shape == q.shape
    assert rel(got, ref) <= 1e-5
    for name, g_got, g_ref in zip("qkva", grads, refs):
        assert rel(g_got, g_ref) <= 1e-5, name
    if learned:
        assert abs(refs[3].item()) > 1e-3  # the check has teeth


@pytest.mark.parametrize("B,T,D,W,alpha,base,rungs,G", _cases()[:8])
def test_cpp_bfloat16_matches_oracle_within_one_rounding(built, B, T, D, W, alpha, base, rungs, G):
    """bfloat16 q, k, v (learned α): the output and the q/k/v gradients are the float64 oracle's
    on the same (bf16-valued) inputs to within one bf16 rounding, element by element — the
    arithmetic inside is float32, so nothing is lost before the result is rounded; α's gradient
    (float32) as the float32 kernel's."""
    KV = 2 if G < 4 else 1
    H = KV * G
    q, k, v = (x.bfloat16() for x in make_qkv(B, H, KV, T, D, seed=T + D + W + G))
    w_out = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(1)).bfloat16()
    scale = 1 / math.sqrt(D)
    a_ref = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    X = [x.double().requires_grad_() for x in (q, k, v)]
    ref = oracle(*X, oracle_columns(a_ref, W, T, base, rungs), scale)
    refs = torch.autograd.grad((ref * w_out.double()).sum(), [*X, a_ref])

    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    Y = [x.clone().requires_grad_() for x in (q, k, v)]
    got = sparse_attention(*Y, alpha=a, ladder=Ladder(W, base=base, rungs=rungs), impl="cpp")
    grads = torch.autograd.grad((got * w_out).sum(), [*Y, a])

    assert got.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in grads[:3])
    for name, g_got, g_ref in zip(["out", "q", "k", "v"], [got, *grads[:3]], [ref, *refs[:3]]):
        err = (g_got.double() - g_ref).abs()
        bound = 2.0**-8 * g_ref.abs() + 1e-5 * g_ref.abs().max()  # half an ulp of bf16 is 2^-9
        assert bool((err <= bound).all()), (name, float((err - bound).max()))
    assert rel(grads[3], refs[3]) <= 1e-4
    assert abs(refs[3].item()) > 1e-3


def test_chunked_backward_matches_oracle(built):
    """Many threads split each (batch, KV head) into chunks whose scatter spills into the
    previous chunk's rows (the halo buffers): same gradients as the oracle."""
    threads = torch.get_num_threads()
    torch.set_num_threads(8)
    try:
        q, k, v = make_qkv(1, 4, 1, 1000, 16, seed=12)
        a = torch.tensor(1.37, dtype=torch.float64, requires_grad=True)
        Y = [x.clone().requires_grad_() for x in (q, k, v)]
        got = sparse_attention(*Y, alpha=a, ladder=Ladder(4, rungs=8), impl="cpp")
        w = torch.randn(got.shape, generator=torch.Generator().manual_seed(4))
        grads = torch.autograd.grad((got * w).sum(), Y + [a])
    finally:
        torch.set_num_threads(threads)
    a_ref = torch.tensor(1.37, dtype=torch.float64, requires_grad=True)
    X = [x.double().requires_grad_() for x in (q, k, v)]
    ref = oracle(*X, oracle_columns(a_ref, 4, 1000, "fib", 8), 0.25)
    refs = torch.autograd.grad((ref * w).sum(), X + [a_ref])
    assert rel(got, ref) <= 1e-5
    for name, g_got, g_ref in zip("qkva", grads, refs):
        assert rel(g_got, g_ref) <= 1e-5, name


def test_cpp_low_level_edges(built):
    """Columns past the end, no distance-0 column (queries with nothing to read get 0), a
    non-zero fraction marked for a column read at t = lo (the row-0 clamp), odd head dim."""
    q, k, v = make_qkv(2, 6, 3, 23, 5, seed=3)
    cols = [(2, 0.25), (3, 0.0), (7, 0.6), (22, 0.5), (40, 0.3)]
    dists = torch.tensor([c for c, _ in cols])
    fracs = torch.tensor([f for _, f in cols], requires_grad=True)
    got = cpu.cpp_columns_attention(q, k, v, dists, fracs, 0.4)
    assert got[:, :, :2].abs().max() == 0  # t < 2: no valid column
    X = [x.double().requires_grad_() for x in (q, k, v)]
    f64 = fracs.detach().double().requires_grad_()
    ref = oracle(*X, [(lo, f64[i]) for i, (lo, _) in enumerate(cols)], 0.4)
    assert rel(got, ref) <= 1e-5
    w = torch.randn(got.shape, generator=torch.Generator().manual_seed(2))
    g_got = torch.autograd.grad((got * w).sum(), fracs)[0]
    g_ref = torch.autograd.grad((ref * w).sum(), f64, retain_graph=True)[0]
    assert rel(g_got, g_ref) <= 1e-5
    assert g_got[4] == 0 and g_got[3] == 0  # read by no / one query at t=lo
    # fixed non-zero fractions (no gradient wanted for them): dk, dv still see both rows
    kk, vv = k.clone().requires_grad_(), v.clone().requires_grad_()
    out = cpu.cpp_columns_attention(q, kk, vv, dists, fracs.detach(), 0.4)
    dk, dv = torch.autograd.grad((out * w).sum(), (kk, vv))
    dk_ref, dv_ref = torch.autograd.grad((ref * w).sum(), X[1:])
    assert rel(dk, dk_ref) <= 1e-5 and rel(dv, dv_ref) <= 1e-5


def test_gradcheck_float64(built):
    q, k, v = make_qkv(1, 4, 2, 13, 3, seed=4, dtype=torch.float64)
    dists = torch.tensor([0, 1, 2, 5, 8])
    fracs = torch.tensor([0.0, 0.0, 0.0, 0.3, 0.7], dtype=torch.float64)
    inputs = [x.requires_grad_() for x in (q, k, v, fracs)]
    fn = lambda q, k, v, f: cpu.cpp_columns_attention(q, k, v, dists, f, 0.5)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8)


def test_custom_op_registration(built):
    q, k, v = make_qkv(1, 4, 2, 20, 16, seed=5)
    dists, fracs = torch.tensor([0, 1, 3, 7]), torch.tensor([0.0, 0.0, 0.4, 0.1])
    args = (
        q.requires_grad_(),
        k.requires_grad_(),
        v.requires_grad_(),
        dists,
        fracs.requires_grad_(),
        torch.ones(4, dtype=torch.bool),
        0.25,
    )
    torch.library.opcheck(
        torch.ops.fiblab.cpu_columns_fwd.default,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


def test_interpolated_mask_rules(built):
    q, k, v = make_qkv(1, 2, 1, 10, 4, seed=6)
    with pytest.raises(ValueError, match="not marked interpolated"):
        cpu.cpp_columns_attention(
            q, k, v, torch.tensor([0, 3]), torch.tensor([0.0, 0.5]), 0.5, interpolated=[True, False]
        )
    with pytest.raises(ValueError, match="float32 / float64"):
        cpu.cpp_columns_attention(
            q.half(), k.half(), v.half(), torch.tensor([0]), torch.zeros(1), 0.5
        )
    with pytest.raises(ValueError, match=">= 0"):
        cpu.cpp_columns_attention(q, k, v, torch.tensor([0, -1]), torch.zeros(2), 0.5)


# --------------------------------------------------------------------------------------------
# the registry: automatic choice, forcing, fallback
# --------------------------------------------------------------------------------------------
def test_auto_picks_cpp_on_cpu(built, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    assert kernels.available()["cpp"] is True
    assert kernels.available()["torch"] is True
    assert kernels.resolve("auto", "cpu", torch.float32) == "cpp"
    assert kernels.resolve("auto", "cpu", torch.float64) == "cpp"
    assert kernels.resolve("auto", "cpu", torch.bfloat16) == "cpp"  # float32 inside
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unsupported dtype: silent
        assert kernels.resolve("auto", "cpu", torch.float16) == "torch"
    monkeypatch.setenv(kernels.ENV, "torch")
    assert kernels.resolve("auto", "cpu", torch.float32) == "torch"
    assert kernels.resolve("cpp", "cpu", torch.float32) == "cpp"  # an explicit impl wins
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(ValueError, match="FIBLAB_ATTN_IMPL='fast' is unknown"):
        kernels.resolve("auto", "cpu", torch.float32)
    with pytest.raises(ValueError, match="impl='gpu' is unknown"):
        kernels.resolve("gpu", "cpu", torch.float32)
    with pytest.raises(kernels.ImplUnavailable, match="runs on CPU tensors"):
        kernels.resolve("cpp", "cuda", torch.float32)


def test_env_var_switches_the_model_path(built, monkeypatch):
    calls = []
    real = cpu.cpp_columns_attention
    monkeypatch.setattr(
        cpu, "cpp_columns_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    q, k, v = make_qkv(1, 4, 2, 40, 16, seed=8)
    monkeypatch.delenv(kernels.ENV, raising=False)
    a = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3))
    assert len(calls) == 1
    monkeypatch.setenv(kernels.ENV, "torch")
    b = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3))
    assert len(calls) == 1
    assert (a - b).abs().max() <= 1e-5


def test_fallback_when_the_build_fails(monkeypatch):
    def no_compiler():
        raise RuntimeError("Error building extension: c++: command not found")

    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setattr(cpu, "_STATE", {})  # forget any loaded build
    monkeypatch.setattr(cpu, "_build", no_compiler)
    monkeypatch.setattr(kernels, "_WARNED", set())
    q, k, v = make_qkv(1, 4, 2, 50, 8, seed=9)
    alpha = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    with pytest.warns(
        RuntimeWarning, match="cpp attention kernel is unavailable.*command not found.*pure-PyTorch"
    ):
        got = sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(3, rungs=8))
    ref = oracle(
        q,
        k,
        v,
        oracle_columns(torch.tensor(0.8, dtype=torch.float64), 3, 50, "fib", 8),
        1 / math.sqrt(8),
    )
    assert rel(got, ref) <= 1e-5
    got.sum().backward()
    assert alpha.grad is not None and alpha.grad != 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not again
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3))
    status = kernels.available()["cpp"]
    assert isinstance(status, str) and "command not found" in status
    with pytest.raises(
        kernels.ImplUnavailable, match="impl='cpp' cannot run here.*command not found"
    ):
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(3), impl="cpp")


def test_auto_falls_back_when_triton_is_missing(monkeypatch):
    def missing():
        raise ImportError("No module named 'triton'")

    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setattr(kernels, "_triton_module", missing)
    monkeypatch.setattr(kernels, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="triton attention kernel is unavailable.*No module"):
        assert kernels.resolve("auto", "cuda", torch.float32) == "torch"
    assert "No module named 'triton'" in kernels.available()["triton"]
    with pytest.raises(kernels.ImplUnavailable, match="impl='triton' cannot run here"):
        kernels.resolve("triton", "cuda", torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float64: no Triton kernel
        assert kernels.resolve("auto", "cuda", torch.float64) == "torch"


def test_unknown_impl_is_rejected():
    q, k, v = make_qkv(1, 2, 1, 8, 4, seed=1)
    with pytest.raises(ValueError, match="impl='fast' is unknown"):
        sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(2), impl="fast")


# --------------------------------------------------------------------------------------------
# the model end to end
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", ["fixed", "learned", "stagger"])
@pytest.mark.parametrize("d_model", [32, 64])  # head dim 8 (generic), 16 (vec)
def test_model_same_loss_and_grads_cpp_and_torch(built, monkeypatch, schedule, d_model):
    torch.manual_seed(0)
    model = build_model("tiny", schedule=schedule, d_model=d_model)
    cfg = model.cfg if hasattr(model, "cfg") else model.config
    ids = torch.randint(
        0, cfg.vocab_size, (2, cfg.seq_len + 1), generator=torch.Generator().manual_seed(3)
    )
    results = {}
    for impl in ("cpp", "torch"):
        monkeypatch.setenv(kernels.ENV, impl)
        model.zero_grad(set_to_none=True)
        _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        results[impl] = (loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()})
    (l_cpp, g_cpp), (l_ref, g_ref) = results["cpp"], results["torch"]
    assert l_cpp == pytest.approx(l_ref, rel=1e-6)
    for name, g in g_ref.items():
        assert rel(g_cpp[name], g) <= 1e-4, name
    if schedule == "learned":
        thetas = [n for n in g_ref if n.endswith("theta")]
        assert thetas and all(g_ref[n].abs() > 0 for n in thetas)


@pytest.mark.parametrize("schedule", ["learned", "stagger"])
def test_model_under_bf16_autocast_keeps_the_fused_path(built, monkeypatch, schedule):
    """Under bf16 autocast the sparse model's attention runs in the fused kernel (not PyTorch's
    gathers), and its loss and α gradient stay at fp32's within bf16's rounding of the
    projections: the kernel adds no error of its own beyond one rounding of its output."""
    from lab.machine.precision import autocast

    monkeypatch.delenv(kernels.ENV, raising=False)
    torch.manual_seed(0)
    model = build_model("tiny", schedule=schedule, d_model=64)
    ids = torch.randint(
        0,
        model.cfg.vocab_size,
        (2, model.cfg.seq_len + 1),
        generator=torch.Generator().manual_seed(3),
    )
    calls = []
    real = cpu.cpp_columns_attention
    monkeypatch.setattr(
        cpu, "cpp_columns_attention", lambda *a, **k: calls.append(a[0].dtype) or real(*a, **k)
    )
    out = {}
    for precision in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        with autocast("cpu", precision):
            _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        thetas = [p.grad.clone() for n, p in model.named_parameters() if n.endswith("theta")]
        out[precision] = (loss.item(), thetas)
    assert torch.bfloat16 in calls and torch.float32 in calls
    assert out["bf16"][0] == pytest.approx(out["fp32"][0], rel=1e-2)
    if schedule == "learned":
        top = max(float(g.abs()) for g in out["fp32"][1])  # a small θ gradient is noise
        assert top > 0.1
        for g16, g32 in zip(out["bf16"][1], out["fp32"][1]):
            assert float((g16 - g32).abs()) <= 0.02 * top


def test_cpu_extension_cache_name_is_per_cpu(monkeypatch):
    """A checkout moved between the lab's machines rebuilds: the AVX2 EPYC's and the AVX-512
    Xeon's builds never share an entry (their -march=native code differs)."""
    from lab.kernels import cpu

    epyc = "AuthenticAMD AMD EPYC fpu sse2 avx avx2 fma"
    xeon = "GenuineIntel Intel(R) Xeon(R) Processor fpu sse2 avx avx2 fma avx512f avx512_bf16"
    monkeypatch.setattr(cpu, "cpu_signature", lambda: epyc)
    amd = cpu.extension_name(["-O3", "-march=native"])
    monkeypatch.setattr(cpu, "cpu_signature", lambda: xeon)
    assert cpu.extension_name(["-O3", "-march=native"]) != amd


@pytest.mark.slow  # ≈ 1 min: a second build of the extension, in a subprocess
def test_the_avx2_build_matches_the_oracle_on_any_x86_cpu(tmp_path):
    """The kernel built for AVX2 (x86-64-v3, what the AMD EPYC's -march=native gives) passes the
    float64-oracle tests on this machine too, so an AVX-512 machine checks both builds."""
    import subprocess
    import sys

    from lab.kernels import cpu

    env = {**os.environ, cpu.MARCH_ENV: "x86-64-v3", "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(ROOT)
    show = "from lab.kernels import cpu; print(cpu.build_info()['flags'])"
    flags = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True)
    assert "-march=x86-64-v3" in flags.stdout, flags.stderr[-2000:]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__]
    cmd += ["-k", "matches_oracle or gradcheck or low_level", "-m", "not slow"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "passed" in done.stdout and "failed" not in done.stdout
    assert any(p.name.startswith("fiblab_cpu_") for p in tmp_path.iterdir())  # a second build


def test_cpu_extension_cache_name_is_per_checkout(monkeypatch):
    """Two checkouts must not share a build entry: torch rebuilds one whose sources moved."""
    from lab.kernels import cpu

    here = cpu.extension_name(["-O3"])
    assert here == cpu.extension_name(["-O3"])  # stable within a checkout
    assert here != cpu.extension_name(["-O2"])  # flags are part of it
    monkeypatch.setattr(cpu, "CSRC_DIR", "/elsewhere/lab/kernels/csrc")
    assert cpu.extension_name(["-O3"]) != here


def test_a_build_lock_left_by_a_killed_compile_does_not_hang_the_next_process(built, tmp_path):
    """A process killed while torch's loader held this build's ``lock`` file (a run stopped while
    it compiled) left every later process of the checkout waiting on that file for ever.  A
    copy of this build with such a file beside it: a fresh process loads the kernel, says it
    removed the file, and the file is gone (torch's loader alone: a timeout)."""
    import subprocess
    import sys

    src = os.path.dirname(cpu._cache_file(cpu.build_info()["flags"]))
    build_dir = tmp_path / os.path.basename(src)  # TORCH_EXTENSIONS_DIR/<name>, no subfolder
    shutil.copytree(src, build_dir)
    so = next(build_dir.glob("*.so"))
    built_at = so.stat().st_mtime_ns
    (build_dir / "lock").touch()  # what the killed process left
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    show = "from lab.kernels import cpu; print(cpu.build_info()['flags'])"
    try:
        done = subprocess.run(
            [sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the loader waited on the stale lock file for 60 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(build_dir / "lock") in done.stderr and "removed" in done.stderr
    assert not (build_dir / "lock").exists()
    assert so.stat().st_mtime_ns == built_at  # the copied build was loaded, not rebuilt


def test_a_builder_without_the_flock_leaves_torchs_lock_file_alone(tmp_path, monkeypatch, capsys):
    """Only a process holding the build's flock may call torch's lock file stale; where no flock
    can be had (a file system without it) the file may be a live builder's, and stays."""
    import errno

    (tmp_path / "lock").touch()

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "no locks available")

    with monkeypatch.context() as m:
        m.setattr(files.fcntl, "flock", no_flock)
        with cpu._one_builder(str(tmp_path)):
            assert (tmp_path / "lock").exists()
    assert (tmp_path / "lock").exists() and "removed" not in capsys.readouterr().err
    with cpu._one_builder(str(tmp_path)):  # with the flock: stale, removed, and said
        assert not (tmp_path / "lock").exists()
    assert "left by a build that was stopped" in capsys.readouterr().err


def test_a_builder_waits_for_one_alive_and_leaves_its_lock_file_alone(tmp_path, capsys):
    """The other side of clearing a stale lock: while a builder holds the build (here a thread,
    its own open file, as another process would), a second waits — saying so — and finds
    torch's lock file only once the first has removed it (torch removes it at the end)."""
    import threading

    inside, leave, second_in = threading.Event(), threading.Event(), threading.Event()

    def first():
        with cpu._one_builder(str(tmp_path)):
            (tmp_path / "lock").touch()  # torch's loader, building
            inside.set()
            leave.wait(30)
            (tmp_path / "lock").unlink()  # and done

    def second():
        with cpu._one_builder(str(tmp_path)):
            second_in.set()

    a = threading.Thread(target=first)
    a.start()
    assert inside.wait(30)
    b = threading.Thread(target=second)
    b.start()
    assert not second_in.wait(0.5)  # held: a wait, however long the first takes
    assert (tmp_path / "lock").exists()
    leave.set()
    a.join(30)
    b.join(30)
    assert second_in.is_set()
    err = capsys.readouterr().err
    assert "waiting for another process's build" in err and "removed" not in err
