"""Attention benchmark: every path and implementation against dense causal SDPA, in one process.

    python benchmarks/attention.py                                   # T = 1024, 4096, 16384
    python benchmarks/attention.py --lengths 1024 4096 16384 65536 --reps 3
    python benchmarks/attention.py --lengths 65536 --rows dense "cpp shift" "cpp interp"

B=1, 8 query heads, 2 KV heads, head_dim 64, W=8, Fibonacci K=15 (19 columns at α=1).  Rows:

    dense          causal SDPA (the baseline)
    mask           the paper's fused path: a boolean (T, T) mask through SDPA (skipped above
                   --mask-max, where its O(T²) memory does not fit)
    <impl> shift   integer offsets, α = 1 (fixed / stagger / coprime models)
    <impl> interp  learned α = 1 (a tensor; the backward includes dα)
    <impl> interp.77  learned α = 0.77: every rung blends two rows (not run by default)
    with <impl> = torch (pure-PyTorch reference), cpp (fused C++ kernel, CPU) or triton (fused
    Triton kernel, CUDA).

Times are medians (or --stat min) over --reps runs (after one warm-up at T ≤ 16384 and for the fused kernels at
any T), wall time or (--clock cpu)
the process's CPU time; speedups are dense / row and mask / row from the same run.
"learned/fixed" is an implementation's interp (and interp.77) time over its shift time.  Peak
memory is the growth of the peak resident set (Linux VmHWM, reset just
before) over the resident set after the inputs are built, during one forward+backward, in a
fresh subprocess per (row, T) with glibc's mmap threshold at 64 KiB so freed tensors leave the
resident set (on CUDA: max_memory_allocated).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from lab.ladder.offsets import Ladder

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from lab import kernels
from lab.machine import contention
from lab.machine.measure import CLOCKS, peak_growth, run_child, time_fn
from lab.sparse.attention import sparse_attention

ROWS = {
    "dense": dict(path="dense", alpha=1.0, impl="torch"),
    "mask": dict(path="mask", alpha=1.0, impl="torch"),
    "torch shift": dict(path="shift", alpha=1.0, impl="torch"),
    "torch interp": dict(path="interp", alpha="tensor", impl="torch"),
    "cpp shift": dict(path="shift", alpha=1.0, impl="cpp"),
    "cpp interp": dict(path="interp", alpha="tensor", impl="cpp"),
    "triton shift": dict(path="shift", alpha=1.0, impl="triton"),
    "triton interp": dict(path="interp", alpha="tensor", impl="triton"),
    # learned α away from integers (every rung blends two rows); not in the default set
    "torch interp.77": dict(path="interp", alpha="tensor", value=0.77, impl="torch"),
    "cpp interp.77": dict(path="interp", alpha="tensor", value=0.77, impl="cpp"),
    "triton interp.77": dict(path="interp", alpha="tensor", value=0.77, impl="triton"),
}


def default_rows(device: str) -> list[str]:
    fused = "cpp" if device == "cpu" else "triton"
    return ["dense", "mask", "torch shift", "torch interp", f"{fused} shift", f"{fused} interp"]


def make_inputs(T: int, device: str, grad: bool):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, T, 64, generator=g).to(device)
    k = torch.randn(1, 2, T, 64, generator=g).to(device)
    v = torch.randn(1, 2, T, 64, generator=g).to(device)
    for x in (q, k, v):
        x.requires_grad_(grad)
    return q, k, v


def run_once(name: str, q, k, v, backward: bool):
    spec = ROWS[name]
    alpha = spec["alpha"]
    if alpha == "tensor":
        alpha = torch.tensor(spec.get("value", 1.0), device=q.device, requires_grad=backward)
    out = sparse_attention(
        q, k, v, alpha=alpha, ladder=Ladder(8), path=spec["path"], impl=spec["impl"]
    )
    if backward:
        out.sum().backward()
    return out


def median_time(
    name: str,
    T: int,
    device: str,
    backward: bool,
    reps: int,
    clock: str = "wall",
    stat: str = "median",
) -> float:
    q, k, v = make_inputs(T, device, backward)
    warm = T <= 16384 or ROWS[name]["impl"] in ("cpp", "triton")  # fused kernels: cheap

    def call():
        if backward:
            run_once(name, q, k, v, True)
            q.grad = k.grad = v.grad = None
        else:
            with torch.no_grad():
                run_once(name, q, k, v, False)

    return time_fn(call, device, warmup=int(warm), reps=reps, clock=clock).stat(stat)


def peak_memory_child(name: str, T: int, device: str) -> None:
    """Runs in a subprocess: prints the peak memory growth (bytes; nan where it cannot be
    measured) of one forward+backward."""
    run_once(name, *make_inputs(min(T, 128), device, True), True)  # first-call set-up
    q, k, v = make_inputs(T, device, True)
    print(peak_growth(lambda: run_once(name, q, k, v, True), device).bytes)


def peak_memory(name: str, T: int, device: str, threads: int) -> float:
    """Bytes, measured in a fresh process (`lab.machine.measure.run_child`: freed blocks go back to
    the system, so the resident set tracks live tensors)."""
    argv = [__file__, "--threads", str(threads), "--child", name, str(T), device]
    return float(run_child(argv, f"peak memory of {name} at T={T}"))


def _fmt(x: float | None, spec: str) -> str:
    return format(x, spec) if x is not None else "—".rjust(len(format(1.0, spec)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument(
        "--reps",
        type=int,
        default=5,
        help="timed runs per cell (at most 2 above T=4096, 1 above 16384)",
    )
    p.add_argument(
        "--rows",
        nargs="+",
        default=None,
        choices=list(ROWS),
        help="rows to run (default: dense, mask, torch and the device's fused kernel)",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="wall time, or this process's CPU time (all threads: with --threads 1 "
        "it ignores time spent descheduled on a busy machine)",
    )
    p.add_argument(
        "--stat",
        choices=["median", "min"],
        default="median",
        help="summary of the timed runs (min is steadier on a busy machine)",
    )
    p.add_argument(
        "--mask-max", type=int, default=16384, help="skip the O(T²) mask path above this length"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--json", default=None, help="also write the machine and the rows to this file")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        name, T, device = args.child
        peak_memory_child(name, int(T), device)
        return
    info = machine_header()  # after set_num_threads; not in the child (its last line is data)
    rows = args.rows or default_rows(args.device)
    rows = ["dense"] + [r for r in rows if r != "dense"]
    for name in rows:  # build / check once, up front
        impl = ROWS[name]["impl"]
        if impl != "torch":
            kernels.resolve(impl, args.device, torch.float32)
    print(
        f"device={args.device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"B=1 H=8 KV=2 D=64 W=8 fib K=15 reps={args.reps} float32 clock={args.clock} "
        f"stat={args.stat}"
    )
    print(
        f"{'T':>6} {'row':<15} {'fwd ms':>9} {'×dense':>7} {'fwd+bwd ms':>11} {'×dense':>7} "
        f"{'×mask':>7} {'peak MiB':>9} {'mem/dense':>9}"
    )
    out_rows = []
    load = contention.watch().__enter__()  # how busy other processes kept the machine
    for T in args.lengths:
        reps = args.reps if T <= 4096 else min(args.reps, 2) if T <= 16384 else 1
        times: dict[str, tuple[float, float, float | None]] = {}
        for name in rows:
            if name == "mask" and T > args.mask_max:
                continue
            fwd = median_time(name, T, args.device, False, reps, args.clock, args.stat)
            both = median_time(name, T, args.device, True, reps, args.clock, args.stat)
            mem = (
                None
                if args.no_memory
                else peak_memory(name, T, args.device, torch.get_num_threads()) / 2**20
            )
            times[name] = (fwd, both, mem)
            dense, mask = times["dense"], times.get("mask")
            row = dict(
                T=T,
                row=name,
                fwd_ms=fwd * 1e3,
                fwdbwd_ms=both * 1e3,
                peak_mib=mem,
                fwd_speedup_vs_dense=dense[0] / fwd,
                fwdbwd_speedup_vs_dense=dense[1] / both,
                fwdbwd_speedup_vs_mask=mask[1] / both if mask else None,
                mem_vs_dense=(mem / dense[2] if mem is not None and dense[2] else None),
            )
            out_rows.append(row)
            print(
                f"{T:>6} {name:<15} {fwd * 1e3:>9.1f} {row['fwd_speedup_vs_dense']:>7.1f} "
                f"{both * 1e3:>11.1f} {row['fwdbwd_speedup_vs_dense']:>7.1f} "
                f"{_fmt(row['fwdbwd_speedup_vs_mask'], '7.1f')} {_fmt(mem, '9.1f')} "
                f"{_fmt(row['mem_vs_dense'], '9.2f')}",
                flush=True,
            )
        for impl in ("torch", "cpp", "triton"):
            b = times.get(f"{impl} shift")
            for variant in ("interp", "interp.77"):
                a = times.get(f"{impl} {variant}")
                if a and b:
                    print(
                        f"{T:>6} {impl:<6} learned/fixed ({variant}): fwd {a[0] / b[0]:.2f}, "
                        f"fwd+bwd {a[1] / b[1]:.2f}",
                        flush=True,
                    )
    load.__exit__(None, None, None)
    print(load.result.line() + " while this ran")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"machine": info, "load": load.result.to_dict(), "rows": out_rows}, f, indent=1
            )


if __name__ == "__main__":
    main()
