"""Section 1: outputs and q/k/v/α gradients of every attention path against the float64 oracle
(`lab.kernels.oracle` over the columns `ColumnPlan.oracle_columns` gives), float32 and (CUDA) bfloat16."""

from __future__ import annotations

import math

import torch

from benchmarks.gpu.flex import FlexInteger, flex_available
from benchmarks.gpu.impls import triton_attention
from benchmarks.gpu.run import Run
from lab.kernels.oracle import oracle_attention
from lab.ladder.offsets import Ladder
from lab.ladder.plan import plan_for
from lab.sparse.attention import sparse_attention

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
            ladder = Ladder(sh["window"], base=sh["base"], rungs=sh["rungs"])
            kw = dict(ladder=ladder)
            scale = 1.0 / math.sqrt(D)
            a32 = float(torch.tensor(sh["alpha"], dtype=torch.float32))  # α as training holds it
            refs, alpha_scale = {}, {}

            def rounded(x, dt):  # the values a `dt` run is given, in float64
                return x.to(dt).double() if dt != torch.float32 else x

            ref_dtypes = (torch.float32, torch.bfloat16) if dev.type == "cuda" else (torch.float32,)
            for mode, rdt in ((m, d) for m in ("int", "learned") for d in ref_dtypes):
                q, k, v = (rounded(x, rdt).clone().requires_grad_() for x in (q64, k64, v64))
                if mode == "int":
                    cols = plan_for(sh["alpha"], T, ladder).oracle_columns()
                    leaves = (q, k, v)
                else:
                    a = torch.tensor(a32, dtype=torch.float64, device=dev, requires_grad=True)
                    cols = plan_for(a, T, ladder, interpolate=True).oracle_columns(a)
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
                if flex_available(dev) and si == 0:  # one shape: compiles are slow
                    dists = plan_for(sh["alpha"], T, ladder).lo
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
