"""Attention-path benchmark: every path against dense causal SDPA, in the same process.

    python benchmarks/attention.py                       # T = 1024, 4096, 16384
    python benchmarks/attention.py --lengths 1024 --reps 5

B=1, 8 query heads, 2 KV heads, head_dim 64, W=8, Fibonacci K=15.  Times are medians over
--reps runs after one warm-up; ratios are path / dense.  Peak memory is the growth of the
peak resident set (Linux VmHWM, reset just before) over the resident set after the inputs are
built, during one forward+backward, in a fresh subprocess per (path, T) with glibc's mmap
threshold at 64 KiB so freed tensors leave the resident set (on CUDA: max_memory_allocated).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lab.attention import sparse_attention  # noqa: E402

PATHS = {
    "dense": dict(path="dense", alpha=1.0),
    "mask": dict(path="mask", alpha=1.0),
    "shift": dict(path="shift", alpha=1.0),
    "shift a=0.7": dict(path="shift", alpha=0.7),
    "interp (learned)": dict(path="interp", alpha="tensor"),
}


def make_inputs(T: int, device: str, grad: bool):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, T, 64, generator=g).to(device)
    k = torch.randn(1, 2, T, 64, generator=g).to(device)
    v = torch.randn(1, 2, T, 64, generator=g).to(device)
    for x in (q, k, v):
        x.requires_grad_(grad)
    return q, k, v


def run_once(name: str, q, k, v, backward: bool):
    spec = PATHS[name]
    alpha = spec["alpha"]
    if alpha == "tensor":
        alpha = torch.tensor(1.0, device=q.device, requires_grad=True)
    out = sparse_attention(q, k, v, alpha=alpha, window=8, path=spec["path"])
    if backward:
        out.sum().backward()
    return out


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_time(name: str, T: int, device: str, backward: bool, reps: int) -> float:
    q, k, v = make_inputs(T, device, backward)
    times = []
    for i in range(reps + 1):
        _sync(device)
        t0 = time.perf_counter()
        if backward:
            run_once(name, q, k, v, True)
        else:
            with torch.no_grad():
                run_once(name, q, k, v, False)
        _sync(device)
        if i:                                                      # first run is a warm-up
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_memory_child(name: str, T: int, device: str) -> None:
    """Runs in a subprocess: prints the peak memory growth (bytes) of one forward+backward."""
    q, k, v = make_inputs(T, device, True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run_once(name, q, k, v, True)
        print(torch.cuda.max_memory_allocated() - base)
        return
    with open("/proc/self/clear_refs", "w") as f:                   # reset the peak (VmHWM)
        f.write("5")
    base = _status_kib("VmRSS")
    run_once(name, q, k, v, True)
    print((_status_kib("VmHWM") - base) * 1024)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory(name: str, T: int, device: str) -> int:
    # large blocks go straight to mmap and back to the OS when freed, so resident memory tracks
    # live tensors instead of the allocator's free lists
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, __file__, "--child", name, str(T), device],
                         capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--paths", nargs="+", default=list(PATHS))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        name, T, device = args.child
        peak_memory_child(name, int(T), device)
        return
    print(f"device={args.device} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"B=1 H=8 KV=2 D=64 W=8 fib K=15 reps={args.reps}")
    header = (f"{'T':>6} {'path':<17} {'fwd ms':>10} {'x dense':>8} {'fwd+bwd ms':>11} "
              f"{'x dense':>8} {'peak MiB':>9} {'x dense':>8}")
    print(header)
    rows = []
    for T in args.lengths:
        reps = max(1, args.reps if T <= 4096 else min(args.reps, 2))
        base = None
        for name in ["dense"] + [n for n in args.paths if n != "dense"]:
            fwd = median_time(name, T, args.device, False, reps)
            bwd = median_time(name, T, args.device, True, reps)
            mem = peak_memory(name, T, args.device) / 2 ** 20
            if base is None:
                base = (fwd, bwd, mem)
            row = dict(T=T, path=name, fwd_ms=fwd * 1e3, fwd_ratio=fwd / base[0],
                       fwdbwd_ms=bwd * 1e3, fwdbwd_ratio=bwd / base[1], peak_mib=mem,
                       mem_ratio=mem / base[2] if base[2] > 0 else float("nan"))
            rows.append(row)
            print(f"{T:>6} {name:<17} {row['fwd_ms']:>10.1f} {row['fwd_ratio']:>8.2f} "
                  f"{row['fwdbwd_ms']:>11.1f} {row['fwdbwd_ratio']:>8.2f} {mem:>9.1f} "
                  f"{row['mem_ratio']:>8.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
