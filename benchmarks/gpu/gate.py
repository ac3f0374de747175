"""Section 0, ``gate``: what ``impl="auto"`` decides on this GPU, and flex against Triton.

1. The Triton kernel's first-use check (`lab.kernels.selfcheck`), run here explicitly for float32
   and bfloat16 as ``auto`` runs it on first use: the verdicts, their errors and reasons.  Since
   they are the process's verdicts, the later sections' ``auto`` rows use what they decided.
2. flex (impl="flex") against the Triton kernel on one integer-α attention problem of the timing
   table's shape: outputs (and q/k/v gradients on CUDA), relative max error, both directions of
   the comparison being independent implementations of the same attended set.
"""

from __future__ import annotations

import math

import torch

from benchmarks.gpu.flex import FlexInteger, flex_available
from benchmarks.gpu.impls import triton_attention
from benchmarks.gpu.run import Run
from lab import kernels
from lab.kernels import selfcheck
from lab.ladder.offsets import Ladder
from lab.ladder.plan import plan_for

FLEX_VS_TRITON = dict(B=1, H=8, KV=2, D=64, window=8, rungs=15, alpha=1.0)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    s = float(b.abs().max())
    return float((a - b).abs().max()) / s if s > 0 else float((a - b).abs().max())


def section_gate(run: Run, T: int, smoke: bool) -> None:
    dev = run.device
    rec = run.record.setdefault("gate", {})
    dtypes = [torch.float32] + ([torch.bfloat16] if dev.type == "cuda" else [])
    status = kernels.triton_status(dev)
    rec["triton_status"] = status if status is not True else "ok"
    verdicts = rec.setdefault("verdicts", [])
    if status is True:
        for dt in dtypes:
            v = selfcheck.verdict(_triton_call, dev, dt)
            verdicts.append(
                dict(ok=v.ok, device=v.device, dtype=v.dtype, reason=v.reason, errors=v.errors)
            )
            worst = max(v.errors.values()) if v.errors else float("nan")
            print(
                f"  triton check {v.dtype:<9} {'ok ' if v.ok else 'FAIL'} worst {worst:.1e} "
                f"{v.reason}",
                flush=True,
            )
        rec["auto_picks"] = {
            str(dt).removeprefix("torch."): kernels.resolve("auto", dev, dt) for dt in dtypes
        }
        print(f"  auto picks (static order): {rec['auto_picks']}")
    else:
        print(f"  triton unavailable: {status}")
    if not flex_available(dev) or status is not True:
        run.record["skipped"].append("gate flex-vs-triton (needs flex and Triton)")
        return
    if not run.has_time(60 if dev.type == "cuda" else 5, "gate flex-vs-triton"):
        return
    c = FLEX_VS_TRITON
    T = min(T, 64) if smoke else T
    dt = torch.float32 if dev.type != "cuda" else torch.bfloat16
    grad = dev.type == "cuda"  # no flex backward on CPU
    g = torch.Generator(device="cpu").manual_seed(7)
    q, k, v = (
        torch.randn(c["B"], n, T, c["D"], generator=g).to(dev, dt).requires_grad_(grad)
        for n in (c["H"], c["KV"], c["KV"])
    )
    plan = plan_for(c["alpha"], T, Ladder(c["window"], rungs=c["rungs"]))
    flex = FlexInteger(plan.lo, T, dev)
    outs = {}
    for name, fn in (
        ("flex", lambda: flex(q, k, v, scale=1 / math.sqrt(c["D"]))),
        (
            "triton",
            lambda: triton_attention(q, k, v, c["alpha"], Ladder(c["window"], rungs=c["rungs"])),
        ),
    ):
        out = fn()
        go = torch.ones_like(out)
        grads = torch.autograd.grad(out, (q, k, v), go) if grad else ()
        outs[name] = [out.detach()] + [x.detach() for x in grads]
    names = ["out", "dq", "dk", "dv"][: len(outs["flex"])]
    errs = {n: _rel(a, b) for n, a, b in zip(names, outs["flex"], outs["triton"])}
    tol = 1e-5 if dt == torch.float32 else 2e-2
    rec["flex_vs_triton"] = dict(
        T=T, dtype=str(dt), errors=errs, tol=tol, ok=all(e <= tol for e in errs.values())
    )
    print(
        f"  flex vs triton T={T} {str(dt).removeprefix('torch.')}: "
        + " ".join(f"{n} {e:.1e}" for n, e in errs.items()),
        flush=True,
    )


def _triton_call(q, k, v, dists, fracs, scale, interpolated):
    from lab.kernels.triton_attn import triton_columns_attention

    return triton_columns_attention(q, k, v, dists, fracs, scale, interpolated=interpolated)
