"""Sections 2, 3 and 6: the Triton launch-shape tune and the attention timing table (forward and
forward+backward, median ms, peak memory, ratios to dense SDPA and to the mask path in the same
run); flex_attention's column runs as its own section, last, since every length compiles anew."""

from __future__ import annotations

import torch

from benchmarks.gpu.flex import FlexInteger, flex_available
from benchmarks.gpu.impls import dense_baseline, flash_taken, triton_attention
from benchmarks.gpu.run import Run
from lab.ladder.offsets import Ladder
from lab.ladder.plan import plan_for
from lab.machine.measure import peak_growth, time_fn
from lab.sparse.attention import sparse_attention

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
            lambda q, k, v, a: sparse_attention(
                q, k, v, alpha=1.0, ladder=Ladder(W, rungs=K), path="mask"
            ),
            False,
        ),
        "shift": (
            lambda q, k, v, a: sparse_attention(
                q, k, v, alpha=1.0, ladder=Ladder(W, rungs=K), path="shift"
            ),
            False,
        ),
        "interp": (
            lambda q, k, v, a: sparse_attention(
                q, k, v, alpha=a, ladder=Ladder(W, rungs=K), path="interp"
            ),
            True,
        ),
        "auto-int": (
            lambda q, k, v, a: sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(W, rungs=K)),
            False,
        ),
        "auto-learned": (
            lambda q, k, v, a: sparse_attention(q, k, v, alpha=a, ladder=Ladder(W, rungs=K)),
            True,
        ),
        "triton-int": (
            lambda q, k, v, a: triton_attention(q, k, v, 1.0, Ladder(W, rungs=K), launch=launch),
            False,
        ),
        "triton-learned": (
            lambda q, k, v, a: triton_attention(q, k, v, a, Ladder(W, rungs=K), launch=launch),
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
                plan_for(1.0, T, Ladder(ATTN["window"], rungs=ATTN["rungs"])).lo, T, dev
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
            ("flash" if flash_taken() else "sdpa-default") if dev.type == "cuda" else "cpu"
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
                q, k, v, a, Ladder(ATTN["window"], rungs=ATTN["rungs"]), launch=L
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
    if flex and (dev.type != "cuda" or not flex_available(dev)):
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
