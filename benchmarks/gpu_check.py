"""One GPU run: check every GPU attention path against float64, then benchmark them.

    python benchmarks/gpu_check.py                              # on an H200: ≈ 8 min, all sections
    python benchmarks/gpu_check.py --budget-s 300 --lengths 1024 16384
    python benchmarks/gpu_check.py --device cpu --smoke         # a dry run of the script on CPU
                                                                # (Triton interpreter, tiny sizes)

Sections (each in its own try/except: an error is printed, recorded and the run goes on; a
section or measurement that would start past --budget-s is skipped and recorded as such):

1. ``check``  outputs and gradients (q, k, v and α) of every path against the float64 oracle
   (`lab.kernels.oracle` over the columns `column_plan` gives), for a few shapes (GQA 1 and 4,
   D 32 and 64, Fibonacci and pow2 bases, integer and learned α): the fused Triton kernel, the
   pure-PyTorch ``shift`` / ``interp`` paths, the ``mask`` path, ``auto`` (whatever the dispatch
   picks) and flex_attention with a hand-built block mask (integer offsets).  float32 to 1e-5;
   bfloat16 (Triton 1e-2, auto 3e-2) against the reference evaluated on the same bf16-rounded
   inputs.
2. ``tune``   the Triton launch shape (queries per program, warps) at one length; the fastest
   forward+backward is used for the rest of the run.
3. ``attn``   attention forward and forward+backward, B=1, 8 heads, 2 KV heads, head_dim 64,
   W=8, Fibonacci K=15, α=1 (integer set, and a learned α tensor), bfloat16, T = 1,024 … 65,536:
   dense causal SDPA (flash), the mask path (T ≤ 16,384), shift, interp, auto and Triton
   (integer, learned); median ms, peak memory, ratios to dense and to mask in the same run.
4. ``train``  a full paper-60m training step (forward, backward, AdamW) at T=1,024 under bf16
   autocast: dense vs fixed vs learned, with the default dispatch (``auto``), with the Triton
   kernel forced, and with the pure-PyTorch paths; tokens/s, ratio to dense, learned / fixed.
5. ``probe``  the retrieval probe (Table 2's cost): the blur gather on the device (its FFT
   implementation; the band kernel is CPU-only) against float64 on CPU, outputs and q/k/v/α
   gradients; then a probe-small training step (T=512, batch 2, bf16 autocast) at depths 2/4/8
   for the dense model and the blur mechanism, and what the 12-cell grid would take.
6. ``flex``   the same attention table's flex_attention column (integer set, hand-built block
   mask, torch.compile'd; CUDA only), last because every length compiles anew.

Everything lands in one JSON (``--out``), rewritten after each section so a cut-off run keeps
what it measured.  Timings are medians after a warm-up (which includes Triton / torch.compile
compilation).

On the lent H200 the image's own ``python3`` holds a CUDA torch and Triton (the project's CPU
venv does not travel); one command for the compiled-kernel test and this script, ≈ 8 min:

    export PYTHONUNBUFFERED=1
    python3 -m pytest -q tests/test_triton_kernel.py -k cuda 2>&1 | tee $OUT/pytest.log
    python3 benchmarks/gpu_check.py --budget-s 390 --out $OUT/gpu-check.json | tee $OUT/log
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lab.attention import column_plan, sparse_attention  # noqa: E402
from lab.kernels.oracle import oracle_attention  # noqa: E402
from lab.measure import peak_growth, time_fn  # noqa: E402
from lab.plan import plan_for  # noqa: E402
from lab.precision import autocast  # noqa: E402


# --------------------------------------------------------------------------------------------
# run state: time budget, results, error log
# --------------------------------------------------------------------------------------------
class Run:
    """Wall-clock budget and the JSON record of one run."""

    def __init__(self, budget_s: float, device: str):
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.device = torch.device(device)
        self.record: dict = {"errors": [], "skipped": []}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def has_time(self, need_s: float, what: str) -> bool:
        """False (and the skip recorded) when fewer than need_s seconds are left."""
        if self.left() >= need_s:
            return True
        self.record["skipped"].append(what)
        print(f"  [budget] skipping {what} ({self.left():.0f} s left, ~{need_s:.0f} s needed)")
        return False

    def error(self, where: str, exc: BaseException) -> None:
        msg = f"{type(exc).__name__}: {exc}"
        self.record["errors"].append(
            {"where": where, "error": msg[:2000], "trace": traceback.format_exc()[-3000:]}
        )
        print(f"  [error] {where}: {msg[:500]}")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# the implementations under test (the float64 reference: lab.kernels.oracle)
# --------------------------------------------------------------------------------------------
def triton_attention(
    q,
    k,
    v,
    alpha,
    window,
    base="fib",
    rungs=15,
    rounding="round",
    reach=None,
    scale=None,
    launch=None,
):
    """The Triton kernel driven as the dispatch would: the column plan from α (a float: the
    integer set; a 0-d tensor: interpolated columns carrying dα), then one fused call."""
    from lab.kernels.triton_attn import triton_columns_attention

    T, D = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    learned = isinstance(alpha, torch.Tensor)
    plan = plan_for(alpha, window, T, base, rungs, rounding, reach, interpolate=learned)
    dists, fracs, interp = plan.kernel_inputs(
        alpha if learned else None,
        q.device,
        torch.float64 if q.dtype == torch.float64 else torch.float32,
    )
    block_t, num_warps = launch or (None, None)
    return triton_columns_attention(
        q, k, v, dists, fracs, scale, interpolated=interp, block_t=block_t, num_warps=num_warps
    )


class FlexInteger:
    """flex_attention over an integer attended set with a block mask built by hand: for each
    128-query tile, the key tiles its distances touch (≤ 2 per distance), no (T, T) evaluation.
    Compiled once per length (torch.compile on CUDA; eager on CPU)."""

    def __init__(self, dists, T: int, device: torch.device, block: int = 128):
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        lut = torch.zeros(T, dtype=torch.bool, device=device)
        lut[torch.tensor(sorted(set(dists)), device=device)] = True

        def mask_mod(b, h, qi, ki):
            delta = qi - ki
            return (delta >= 0) & lut[delta.clamp(min=0)]

        n = (T + block - 1) // block
        rows = []
        for qb in range(n):
            q0, q1 = qb * block, min(T, qb * block + block) - 1
            tiles = set()
            for lo in dists:
                if q1 - lo >= 0:
                    tiles.update(range(max(q0 - lo, 0) // block, (q1 - lo) // block + 1))
            rows.append(sorted(tiles))
        width = max(1, max(len(r) for r in rows))
        idx = torch.zeros(1, 1, n, width, dtype=torch.int32)
        num = torch.zeros(1, 1, n, dtype=torch.int32)
        for i, r in enumerate(rows):
            num[0, 0, i] = len(r)
            idx[0, 0, i, : len(r)] = torch.tensor(r, dtype=torch.int32)
        self.tiles_per_row = sum(len(r) for r in rows) / n
        self.mask = BlockMask.from_kv_blocks(
            num.to(device), idx.to(device), BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(T, T)
        )
        self.fn = (
            torch.compile(flex_attention, dynamic=False)
            if device.type == "cuda"
            else flex_attention
        )

    def __call__(self, q, k, v, scale=None):
        return self.fn(
            q, k, v, block_mask=self.mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401

        return True
    except Exception:
        return False


@contextlib.contextmanager
def flash_only(device: torch.device):
    """Restrict SDPA to the flash kernel on CUDA (the dense baseline); no-op elsewhere."""
    if device.type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        yield


def dense_sdpa(q, k, v):
    return F.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
    )


_FLASH = {"ok": None}  # does flash take these inputs? (first call)


def dense_baseline(q, k, v):
    """Causal SDPA restricted to the flash kernel; SDPA's own choice if flash refuses."""
    if _FLASH["ok"] is not False:
        try:
            with flash_only(q.device):
                out = dense_sdpa(q, k, v)
            _FLASH["ok"] = True
            return out
        except RuntimeError as e:
            _FLASH["ok"] = False
            print(f"  [note] flash SDPA refused ({str(e)[:200]}); dense uses SDPA's default")
    return dense_sdpa(q, k, v)


# --------------------------------------------------------------------------------------------
# section 1: correctness against float64
# --------------------------------------------------------------------------------------------
CHECK_SHAPES = [
    dict(B=2, H=8, KV=2, T=1000, D=64, alpha=0.8, window=8, base="fib", rungs=15),
    dict(B=1, H=4, KV=4, T=777, D=32, alpha=1.3, window=6, base="fib", rungs=15),
    dict(B=1, H=8, KV=2, T=1024, D=64, alpha=0.7, window=8, base="pow2", rungs=15),
]
SMOKE_CHECK_SHAPES = [dict(B=1, H=4, KV=2, T=45, D=16, alpha=0.8, window=3, base="fib", rungs=9)]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    s = b.abs().max().item()
    e = (a - b).abs().max().item()
    return e / s if s > 0 else e


def section_check(run: Run, shapes, launch=None) -> None:
    dev = run.device
    results = run.record.setdefault("check", [])
    for si, sh in enumerate(shapes):
        if not run.has_time(15, f"check shape {si}"):
            return
        try:
            g = torch.Generator(device="cpu").manual_seed(si)
            B, H, KV, T, D = sh["B"], sh["H"], sh["KV"], sh["T"], sh["D"]
            q64 = torch.randn(B, H, T, D, generator=g, dtype=torch.float64).to(dev)
            k64 = torch.randn(B, KV, T, D, generator=g, dtype=torch.float64).to(dev)
            v64 = torch.randn(B, KV, T, D, generator=g, dtype=torch.float64).to(dev)
            go64 = torch.randn(B, H, T, D, generator=g, dtype=torch.float64).to(dev)
            kw = dict(window=sh["window"], base=sh["base"], rungs=sh["rungs"])
            scale = 1.0 / math.sqrt(D)
            a32 = float(torch.tensor(sh["alpha"], dtype=torch.float32))  # α as training holds it
            refs, alpha_scale = {}, {}

            def rounded(x, dt):  # the values a `dt` run is given, in float64
                return x.to(dt).double() if dt != torch.float32 else x

            ref_dtypes = (torch.float32, torch.bfloat16) if dev.type == "cuda" else (torch.float32,)
            for mode, rdt in ((m, d) for m in ("int", "learned") for d in ref_dtypes):
                q, k, v = (rounded(x, rdt).clone().requires_grad_() for x in (q64, k64, v64))
                if mode == "int":
                    cols = column_plan(sh["alpha"], sh["window"], T, sh["base"], sh["rungs"])
                    leaves = (q, k, v)
                else:
                    a = torch.tensor(a32, dtype=torch.float64, device=dev, requires_grad=True)
                    cols = column_plan(
                        a, sh["window"], T, sh["base"], sh["rungs"], interpolate=True
                    )
                    leaves = (q, k, v, a)
                fr = [f for _, f in cols if f is not None]
                out = oracle_attention(q, k, v, cols, scale)
                grads = torch.autograd.grad(out, leaves + tuple(fr), rounded(go64, rdt))
                refs[mode, rdt] = [out.detach()] + list(grads[: len(leaves)])
                if mode == "learned":
                    # dα = Σ_c f_k·dfrac_c has terms of both signs: its error is measured
                    # against Σ_c |f_k·dfrac_c| (f_k = (lo + frac) / α), not against |dα|
                    alpha_scale[rdt] = sum(
                        abs(float(g)) * (lo + float(f.detach())) / a32
                        for g, (lo, f) in zip(
                            grads[len(leaves) :], [c for c in cols if c[1] is not None]
                        )
                    )
            del out

            def impls():
                yield (
                    "triton",
                    "int",
                    torch.float32,
                    1e-5,
                    lambda q, k, v, a: triton_attention(q, k, v, sh["alpha"], launch=launch, **kw),
                )
                yield (
                    "triton",
                    "learned",
                    torch.float32,
                    1e-5,
                    lambda q, k, v, a: triton_attention(q, k, v, a, launch=launch, **kw),
                )
                if dev.type == "cuda":
                    yield (
                        "triton",
                        "int",
                        torch.bfloat16,
                        1e-2,
                        lambda q, k, v, a: triton_attention(
                            q, k, v, sh["alpha"], launch=launch, **kw
                        ),
                    )
                    yield (
                        "triton",
                        "learned",
                        torch.bfloat16,
                        1e-2,
                        lambda q, k, v, a: triton_attention(q, k, v, a, launch=launch, **kw),
                    )
                for path in ("shift", "mask", "auto"):
                    yield (
                        path,
                        "int",
                        torch.float32,
                        1e-5,
                        lambda q, k, v, a, p=path: sparse_attention(
                            q, k, v, alpha=sh["alpha"], path=p, **kw
                        ),
                    )
                for path in ("interp", "auto"):
                    yield (
                        path,
                        "learned",
                        torch.float32,
                        1e-5,
                        lambda q, k, v, a, p=path: sparse_attention(q, k, v, alpha=a, path=p, **kw),
                    )
                if dev.type == "cuda":
                    yield (
                        "auto",
                        "int",
                        torch.bfloat16,
                        3e-2,
                        lambda q, k, v, a: sparse_attention(
                            q, k, v, alpha=sh["alpha"], path="auto", **kw
                        ),
                    )
                    yield (
                        "auto",
                        "learned",
                        torch.bfloat16,
                        3e-2,
                        lambda q, k, v, a: sparse_attention(q, k, v, alpha=a, path="auto", **kw),
                    )
                if flex_available() and si == 0:  # one shape: compiles are slow
                    dists = plan_for(sh["alpha"], sh["window"], T, sh["base"], sh["rungs"]).dists
                    flex = FlexInteger(dists, T, dev)
                    yield (
                        "flex",
                        "int",
                        torch.float32,
                        1e-5,
                        lambda q, k, v, a: flex(q, k, v, scale=scale),
                    )

            for name, mode, dt, tol, fn in impls():
                label = f"{name}/{mode}/{str(dt).split('.')[-1]}"
                try:
                    cpu_flex = name == "flex" and dev.type != "cuda"  # no flex backward on CPU
                    q, k, v = (
                        x.detach().to(dt).requires_grad_(not cpu_flex) for x in (q64, k64, v64)
                    )
                    # α in float64 (its float32 value): the plan's α·f is then exact, and the
                    # comparison measures the kernels, not float32 rounding of large rungs
                    a = torch.tensor(a32, dtype=torch.float64, device=dev, requires_grad=True)
                    out = fn(q, k, v, a)
                    leaves = (q, k, v) + ((a,) if mode == "learned" else ())
                    ref = refs[mode, dt]
                    if cpu_flex:
                        grads, ref = [], ref[:1]
                    else:
                        grads = torch.autograd.grad(out, leaves, go64.to(dt))
                    names = ["out", "dq", "dk", "dv", "dalpha"][: len(ref)]
                    errs = {n: rel_err(x, r) for n, x, r in zip(names, [out] + list(grads), ref)}
                    if "dalpha" in errs and alpha_scale.get(dt):
                        errs["dalpha"] = abs(float(grads[3]) - float(ref[4])) / alpha_scale[dt]
                    ok = all(e <= tol for e in errs.values())
                    results.append(
                        dict(
                            shape=si, impl=name, mode=mode, dtype=str(dt), tol=tol, errs=errs, ok=ok
                        )
                    )
                    print(
                        f"  shape {si} {label:<26} {'ok ' if ok else 'FAIL'} "
                        + " ".join(f"{n} {e:.1e}" for n, e in errs.items()),
                        flush=True,
                    )
                except Exception as e:
                    run.error(f"check shape {si} {label}", e)
                    results.append(
                        dict(
                            shape=si,
                            impl=name,
                            mode=mode,
                            dtype=str(dt),
                            ok=False,
                            error=f"{type(e).__name__}: {e}"[:500],
                        )
                    )
        except Exception as e:
            run.error(f"check shape {si}", e)


# --------------------------------------------------------------------------------------------
# sections 2 and 3: attention timings
# --------------------------------------------------------------------------------------------
ATTN = dict(B=1, H=8, KV=2, D=64, window=8, rungs=15)
REPS = [3, 25]  # min / max timed repetitions (--smoke: 1 / 1)


def attn_inputs(T: int, dev: torch.device, dtype: torch.dtype, grad: bool):
    g = torch.Generator(device="cpu").manual_seed(0)
    B, H, KV, D = ATTN["B"], ATTN["H"], ATTN["KV"], ATTN["D"]
    q, k, v = (
        torch.randn(B, n, T, D, generator=g).to(dev, dtype).requires_grad_(grad)
        for n in (H, KV, KV)
    )
    return q, k, v


def attn_impls(T: int, dev: torch.device, launch):
    """name -> (callable(q, k, v, alpha_tensor), learned?)"""
    W, K = ATTN["window"], ATTN["rungs"]
    impls = {
        "dense-sdpa": (lambda q, k, v, a: dense_baseline(q, k, v), False),
        "mask": (
            lambda q, k, v, a: sparse_attention(q, k, v, alpha=1.0, window=W, rungs=K, path="mask"),
            False,
        ),
        "shift": (
            lambda q, k, v, a: sparse_attention(
                q, k, v, alpha=1.0, window=W, rungs=K, path="shift"
            ),
            False,
        ),
        "interp": (
            lambda q, k, v, a: sparse_attention(q, k, v, alpha=a, window=W, rungs=K, path="interp"),
            True,
        ),
        "auto-int": (
            lambda q, k, v, a: sparse_attention(q, k, v, alpha=1.0, window=W, rungs=K),
            False,
        ),
        "auto-learned": (
            lambda q, k, v, a: sparse_attention(q, k, v, alpha=a, window=W, rungs=K),
            True,
        ),
        "triton-int": (
            lambda q, k, v, a: triton_attention(q, k, v, 1.0, W, rungs=K, launch=launch),
            False,
        ),
        "triton-learned": (
            lambda q, k, v, a: triton_attention(q, k, v, a, W, rungs=K, launch=launch),
            True,
        ),
    }
    return impls


def flex_impl(T: int, dev: torch.device):
    """flex_attention over the α=1 integer set (block mask built on first use)."""
    holder = {}

    def flex(q, k, v, a):
        if "f" not in holder:
            holder["f"] = FlexInteger(
                plan_for(1.0, ATTN["window"], T, rungs=ATTN["rungs"]).dists, T, dev
            )
        return holder["f"](q, k, v)

    return {"flex-int": (flex, False)}


def measure(run: Run, name: str, fn, T: int, dtype, backward: bool, learned: bool) -> dict:
    dev = run.device
    q, k, v = attn_inputs(T, dev, dtype, backward)
    a = torch.tensor(1.0, device=dev, requires_grad=backward)
    go = torch.randn(ATTN["B"], ATTN["H"], T, ATTN["D"], device=dev, dtype=dtype)
    leaves = (q, k, v) + ((a,) if learned else ())

    def step():
        if backward:
            out = fn(q, k, v, a)
            torch.autograd.grad(out, leaves, go)
        else:
            with torch.no_grad():
                fn(q, k, v, a)

    sec = time_fn(step, dev, reps=REPS[0], max_reps=REPS[1], min_time_s=0.4).median_s
    rec = dict(impl=name, T=T, mode="fwd+bwd" if backward else "fwd", ms=sec * 1e3)
    if name == "dense-sdpa":
        rec["backend"] = (
            ("flash" if _FLASH["ok"] else "sdpa-default") if dev.type == "cuda" else "cpu"
        )
    if backward:
        rec["peak_mb"] = peak_growth(step, dev).mib if dev.type == "cuda" else None
    return rec


def section_tune(run: Run, T: int, dtype) -> tuple[int, int] | None:
    """Fastest (block_t, num_warps) for the learned-α Triton path, forward+backward."""
    if run.device.type != "cuda":
        return None
    best, rows = None, []
    for launch in [(16, 2), (32, 2), (32, 4), (64, 4), (64, 8), (128, 8)]:
        if not run.has_time(20, f"tune {launch}"):
            break
        try:
            fn = lambda q, k, v, a, L=launch: triton_attention(
                q, k, v, a, ATTN["window"], rungs=ATTN["rungs"], launch=L
            )
            ms = measure(run, "triton-learned", fn, T, dtype, True, True)["ms"]
            rows.append(dict(block_t=launch[0], num_warps=launch[1], ms=ms))
            print(
                f"  tune T={T} block_t={launch[0]:<4} warps={launch[1]}  {ms:8.2f} ms", flush=True
            )
            if best is None or ms < best[1]:
                best = (launch, ms)
        except Exception as e:
            run.error(f"tune {launch}", e)
    run.record["tune"] = dict(T=T, rows=rows, best=list(best[0]) if best else None)
    return best[0] if best else None


def section_attn(run: Run, lengths, dtype, launch, flex: bool = False) -> None:
    """The timing table; flex=True runs only the flex_attention column (CUDA only: on CPU
    flex_attention has no backward and no compiled kernel)."""
    dev = run.device
    rows = run.record.setdefault("attn", [])
    if flex and (dev.type != "cuda" or not flex_available()):
        run.record["skipped"].append("flex (needs CUDA and torch.nn.attention.flex_attention)")
        return
    for T in lengths:
        impls = flex_impl(T, dev) if flex else attn_impls(T, dev, launch)
        for backward in (False, True):
            for name, (fn, learned) in impls.items():
                if name in ("mask",) and T > 16384:
                    run.record["skipped"].append(f"attn {name} T={T} (O(T²) mask)")
                    continue
                need = (40 if flex else 5) + 4e-4 * T * (3 if name in ("dense-sdpa", "mask") else 1)
                if not run.has_time(need, f"attn {name} T={T} {'fwd+bwd' if backward else 'fwd'}"):
                    continue
                try:
                    rec = measure(run, name, fn, T, dtype, backward, learned)
                    rows.append(rec)
                    mem = f"  peak {rec['peak_mb']:.0f} MiB" if rec.get("peak_mb") else ""
                    print(
                        f"  T={T:<6} {rec['mode']:<8} {name:<15} {rec['ms']:9.2f} ms{mem}",
                        flush=True,
                    )
                except Exception as e:
                    run.error(f"attn {name} T={T} backward={backward}", e)
                    rows.append(
                        dict(
                            impl=name,
                            T=T,
                            mode="fwd+bwd" if backward else "fwd",
                            error=f"{type(e).__name__}: {e}"[:300],
                        )
                    )
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    # ratios in the same run
    for r in rows:
        if "ms" not in r:
            continue
        for base in ("dense-sdpa", "mask"):
            b = next(
                (
                    x
                    for x in rows
                    if x["impl"] == base
                    and x["T"] == r["T"]
                    and x["mode"] == r["mode"]
                    and "ms" in x
                ),
                None,
            )
            if b:
                r[f"x_{base}"] = b["ms"] / r["ms"]  # > 1: faster than base


# --------------------------------------------------------------------------------------------
# section 4: a full training step
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def forced_triton(launch):
    """Route every sparse attention call of lab.model through the Triton kernel."""
    import lab.model as model_mod

    original = model_mod.sparse_attention

    def routed(
        q,
        k,
        v,
        *,
        alpha,
        window,
        base="fib",
        rungs=15,
        rounding="round",
        path="auto",
        reach=None,
        scale=None,
    ):
        if path in ("dense", "mask"):
            return original(
                q,
                k,
                v,
                alpha=alpha,
                window=window,
                base=base,
                rungs=rungs,
                rounding=rounding,
                path=path,
                reach=reach,
                scale=scale,
            )
        return triton_attention(
            q, k, v, alpha, window, base, rungs, rounding, reach, scale, launch=launch
        )

    model_mod.sparse_attention = routed
    try:
        yield
    finally:
        model_mod.sparse_attention = original


def train_step_time(
    run: Run, preset: str, overrides: dict, batch: int, steps: int, seq_len: int | None
) -> tuple[float, int]:
    """(median seconds of one optimizer step, sequence length)."""
    from lab.model import build_model
    from lab.train import param_groups

    dev = run.device
    torch.manual_seed(0)
    if seq_len:
        overrides = dict(overrides, seq_len=seq_len)
    model = build_model(preset, **overrides).to(dev)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95))
    T, V = model.cfg.seq_len, model.cfg.vocab_size
    g = torch.Generator(device="cpu").manual_seed(0)

    def step():
        ids = torch.randint(0, V, (batch, T + 1), generator=g).to(dev)
        with autocast(dev):  # bf16 on CUDA
            _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    sec = time_fn(step, dev, reps=steps).median_s  # after 1 warm-up
    model = opt = None  # free the device memory (the closure holds the names)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return sec, T


def section_train(
    run: Run, preset: str, batch: int, steps: int, seq_len: int | None, launch
) -> None:
    rows = run.record.setdefault("train", [])
    variants = [
        ("dense", dict(attention="dense"), None),
        ("fixed/auto", dict(schedule="fixed"), None),
        ("learned/auto", dict(schedule="learned"), None),
        ("fixed/triton", dict(schedule="fixed"), "triton"),
        ("learned/triton", dict(schedule="learned"), "triton"),
        ("fixed/shift", dict(schedule="fixed", path="shift"), None),
        ("learned/interp", dict(schedule="learned", path="interp"), None),
        ("stagger/triton", dict(schedule="stagger"), "triton"),
    ]
    for name, ov, force in variants:
        if not run.has_time(30, f"train {name}"):
            continue
        try:
            ctx = forced_triton(launch) if force else contextlib.nullcontext()
            with ctx:
                sec, T = train_step_time(run, preset, ov, batch, steps, seq_len)
            rec = dict(variant=name, preset=preset, batch=batch, seq_len=T, step_s=sec)
            rows.append(rec)
            print(f"  {name:<16} {sec * 1e3:9.1f} ms/step", flush=True)
        except Exception as e:
            run.error(f"train {name}", e)
            rows.append(dict(variant=name, error=f"{type(e).__name__}: {e}"[:300]))
    dense = next((r for r in rows if r.get("variant") == "dense" and "step_s" in r), None)
    for r in rows:
        if "step_s" not in r:
            continue
        r["tokens_per_s"] = r["batch"] * r["seq_len"] / r["step_s"]
        if dense:
            r["x_dense_time"] = r["step_s"] / dense["step_s"]  # < 1: faster than dense
    ratios = {}
    for family in ("auto", "triton"):
        f = next((r for r in rows if r.get("variant") == f"fixed/{family}" and "step_s" in r), None)
        lv = next(
            (r for r in rows if r.get("variant") == f"learned/{family}" and "step_s" in r), None
        )
        if f and lv:
            ratios[f"learned/fixed ({family})"] = lv["step_s"] / f["step_s"]
    f = next((r for r in rows if r.get("variant") == "fixed/shift" and "step_s" in r), None)
    lv = next((r for r in rows if r.get("variant") == "learned/interp" and "step_s" in r), None)
    if f and lv:
        ratios["learned/fixed (pure PyTorch)"] = lv["step_s"] / f["step_s"]
    run.record["train_ratios"] = ratios


# --------------------------------------------------------------------------------------------
# the retrieval probe: blur gather on the device, and the probe's training step
# --------------------------------------------------------------------------------------------
PROBE_CHECK_SHAPES = [
    dict(B=2, H=4, KV=2, T=512, D=64, alpha=0.83, width=20.0),
    dict(B=1, H=4, KV=1, T=300, D=32, alpha=1.37, width=0.5),
]
SMOKE_PROBE_SHAPES = [dict(B=1, H=2, KV=1, T=40, D=8, alpha=0.9, width=3.0)]


def section_probe(run: Run, smoke: bool, steps: int) -> None:
    from lab.blur import blur_attention
    from probes.retrieval import SCALES, Cell, build_probe_model, task_loss

    dev = run.device
    rows = run.record.setdefault("probe", {"check": [], "step": []})
    for shp in SMOKE_PROBE_SHAPES if smoke else PROBE_CHECK_SHAPES:
        try:
            g = torch.Generator().manual_seed(shp["T"])
            B, H, KV, T, D = (shp[x] for x in ("B", "H", "KV", "T", "D"))
            qkv = [torch.randn(B, n, T, D, generator=g, dtype=torch.float64) for n in (H, KV, KV)]
            wgt = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)

            def run_blur(xs, a, impl):
                out = blur_attention(*xs, alpha=a, window=8, width=shp["width"], impl=impl)
                (out.double() * wgt.to(out.device)).sum().backward()
                return [out] + [x.grad for x in xs] + [a.grad]

            ref_in = [x.clone().requires_grad_(True) for x in qkv]
            ref = run_blur(
                ref_in, torch.tensor(shp["alpha"], dtype=torch.float64, requires_grad=True), "fft"
            )
            dev_in = [x.to(dev, torch.float32).requires_grad_(True) for x in qkv]
            got = run_blur(
                dev_in, torch.tensor(shp["alpha"], device=dev, requires_grad=True), "auto"
            )
            errs = {
                n: rel_err(a.cpu(), b)
                for n, a, b in zip(("out", "dq", "dk", "dv", "dalpha"), got, ref)
            }
            ok = all(e <= 1e-4 for e in errs.values())
            rows["check"].append(dict(shape=shp, errors=errs, ok=ok))
            print(
                f"  blur {shp}: "
                + " ".join(f"{k} {v:.1e}" for k, v in errs.items())
                + ("" if ok else "  FAIL"),
                flush=True,
            )
        except Exception as e:
            run.error(f"probe check {shp}", e)
    settings = SCALES["tiny"] if smoke else SCALES["paper"]
    for depth in (2,) if smoke else (2, 4, 8):
        for mech in ("dense", "blur"):
            if not run.has_time(20, f"probe step {mech} depth {depth}"):
                continue
            try:
                torch.manual_seed(0)
                cell = Cell(mech, depth, "staggered" if mech == "blur" else "-", 0)
                model = build_probe_model(cell, settings).to(dev)
                if mech == "blur":
                    model.set_blur_width(20.0)
                opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
                gen = torch.Generator().manual_seed(0)

                def step():
                    with autocast(dev):  # bf16 on CUDA
                        loss = task_loss(model, cell, settings, gen)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()

                sec = time_fn(step, dev, reps=steps).median_s
                rows["step"].append(dict(mechanism=mech, depth=depth, step_s=sec))
                print(f"  probe-small depth {depth} {mech:<6} {sec * 1e3:8.1f} ms/step", flush=True)
                model = opt = None  # free the device memory (the closure holds the names)
            except Exception as e:
                run.error(f"probe step {mech} depth {depth}", e)
    blur = {r["depth"]: r["step_s"] for r in rows["step"] if r["mechanism"] == "blur"}
    if not smoke and len(blur) == 3:
        rows["grid_minutes_one_at_a_time"] = sum(4 * 2500 * s for s in blur.values()) / 60
        print(
            f"  the 12-cell Table 2 grid at these step times: "
            f"{rows['grid_minutes_one_at_a_time']:.1f} min"
        )


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------
def print_tables(run: Run) -> None:
    rows = [r for r in run.record.get("attn", []) if "ms" in r]
    if rows:
        names = list(dict.fromkeys(r["impl"] for r in rows))
        for mode in ("fwd", "fwd+bwd"):
            print(f"\nattention {mode}, ms (× = dense time / this time; higher is faster)")
            print(f"{'T':>7} " + " ".join(f"{n:>18}" for n in names))
            for T in sorted({r["T"] for r in rows}):
                cells = []
                for n in names:
                    r = next(
                        (x for x in rows if x["impl"] == n and x["T"] == T and x["mode"] == mode),
                        None,
                    )
                    cells.append(
                        f"{r['ms']:9.2f} ×{r.get('x_dense-sdpa', float('nan')):6.1f}"
                        if r
                        else f"{'—':>16}"
                    )
                print(f"{T:>7} " + " ".join(f"{c:>18}" for c in cells))
        print("\npeak memory, fwd+bwd, MiB")
        for T in sorted({r["T"] for r in rows}):
            cells = [
                f"{r['impl']} {r['peak_mb']:.0f}"
                for r in rows
                if r["T"] == T and r["mode"] == "fwd+bwd" and r.get("peak_mb") is not None
            ]
            print(f"{T:>7}  " + ", ".join(cells))
    train = [r for r in run.record.get("train", []) if "step_s" in r]
    if train:
        print(
            f"\ntraining step ({train[0]['preset']}, batch {train[0]['batch']}, "
            f"T={train[0]['seq_len']})"
        )
        for r in train:
            print(
                f"  {r['variant']:<16} {r['step_s'] * 1e3:8.1f} ms  "
                f"{r['tokens_per_s']:10.0f} tok/s  time/dense {r.get('x_dense_time', 0):.2f}"
            )
        for k, v in run.record.get("train_ratios", {}).items():
            print(f"  {k}: {v:.2f}")
    checks = run.record.get("check", [])
    if checks:
        bad = [c for c in checks if not c.get("ok")]
        print(
            f"\nchecks: {len(checks) - len(bad)}/{len(checks)} within tolerance"
            + (
                ""
                if not bad
                else "; failing: "
                + ", ".join(f"shape {c['shape']} {c['impl']}/{c['mode']}/{c['dtype']}" for c in bad)
            )
        )
    if run.record["errors"]:
        print(f"errors: {len(run.record['errors'])} (details in the JSON)")


# --------------------------------------------------------------------------------------------
SECTIONS = ("check", "tune", "attn", "train", "probe", "flex")  # run order: flex compiles last


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="benchmarks/results/gpu-check.json", help="JSON results")
    p.add_argument("--budget-s", type=float, default=480, help="overall wall-clock budget")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    p.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384, 65536])
    p.add_argument("--tune-T", type=int, default=16384)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--train-preset", default="paper-60m")
    p.add_argument("--train-batch", type=int, default=8)
    p.add_argument("--train-steps", type=int, default=5)
    p.add_argument("--train-seq-len", type=int, default=None, help="default: the preset's")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes everywhere (a quick test of the script itself)",
    )
    args = p.parse_args(argv)

    if args.device.startswith("cpu"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel import
    elif not torch.cuda.is_available():
        print("no CUDA device here: run on a GPU machine, or --device cpu --smoke for a dry run")
        return 2
    run = Run(args.budget_s, args.device)
    dtype = getattr(torch, args.dtype)
    if args.smoke:
        args.lengths, args.tune_T = [64], 64
        args.train_preset, args.train_batch, args.train_steps = "tiny", 2, 1
        REPS[:] = [1, 1]
        if args.device.startswith("cpu"):
            dtype = torch.float32
    env = dict(
        torch=torch.__version__,
        python=platform.python_version(),
        device=args.device,
        dtype=str(dtype),
        date=time.strftime("%Y-%m-%d %H:%M:%S"),
        args=vars(args),
    )
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as e:
        env["triton"] = f"unavailable: {e}"
    if run.device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(run.device)
    run.record["env"] = env
    print(json.dumps(env))

    launch = None
    sections = [s for s in SECTIONS if s in args.sections]
    for sec in sections:
        print(f"\n== {sec} ({run.left():.0f} s left)", flush=True)
        try:
            if sec == "check":
                section_check(run, SMOKE_CHECK_SHAPES if args.smoke else CHECK_SHAPES)
            elif sec == "tune":
                launch = section_tune(run, args.tune_T, dtype)
            elif sec == "attn":
                section_attn(run, args.lengths, dtype, launch)
            elif sec == "flex":
                section_attn(run, args.lengths, dtype, launch, flex=True)
            elif sec == "train":
                section_train(
                    run,
                    args.train_preset,
                    args.train_batch,
                    args.train_steps,
                    args.train_seq_len,
                    launch,
                )
            elif sec == "probe":
                section_probe(run, args.smoke, 1 if args.smoke else 10)
        except Exception as e:
            run.error(sec, e)
        _write(run, args.out)  # keep partial results
    print_tables(run)
    run.record["elapsed_s"] = time.perf_counter() - run.t0
    _write(run, args.out)
    print(f"\nwrote {args.out} ({run.record['elapsed_s']:.0f} s)")
    return 0


def _write(run: Run, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(run.record, f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
