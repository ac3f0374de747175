"""Long context, where the method pays: the paper's 60M model's training step at T = 4K, 8K and
16K, dense against fixed, stagger and learned α, in fp32 and (where the CPU has bf16 units)
bf16, with each step's peak memory and the FLOP bound beside it.

    python benchmarks/long_context.py                                # 4K, 8K, 16K; 3 rounds
    python benchmarks/long_context.py --lengths 4096 --reps 5 --precisions fp32
    python benchmarks/long_context.py --lengths 16384 --reps 2 --one-at-a-time  # fits 24 GiB

Why: the step's attention is O(T²) dense and O(T·C) sparse, so the sparse step's share of the
dense one falls with T toward the bound set by everything else (the projections, the MLP, the
32K-vocabulary head).  ``flop ratio`` is that bound: the step's FLOPs (`lab.cost.efficiency`:
the blocks' linear layers, the head, attention by its reads) over the dense step's, the time
ratio a step would have if time followed FLOPs.  Per (T, precision) the four models' steps are
timed in turns (`lab.machine.measure.time_round_robin`: load hits all alike) after one warm-up
round, and the ratio is of the fastest rounds.  At 16K four models at once need ≈ 22 GiB, so
``--one-at-a-time`` builds, warms and times each model alone and frees it before the next (still
one process; turns no longer interleave, so run it on a quiet machine).  Peak memory (fp32 rows) is the growth of the
resident peak over one forward + backward after a warm-up, in a fresh process per model
(`lab.cost.efficiency_measure.peak_memory`: a process that has run other models keeps their
freed blocks resident, so an in-process number would read ≈ 0).  Batch 1, AdamW, the
sparse paths on the fused C++ kernel (bf16: float32 inside), SDPA for dense.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from benchmarks.precision_speed import lm_step  # noqa: E402
from lab.cost.efficiency import analyze, linear_flops
from lab.cost.efficiency_measure import peak_memory
from lab.ladder.schemes import scheme
from lab.lm.modelconfig import config_for
from lab.machine import contention
from lab.machine.hardware import native_bf16
from lab.machine.measure import time_round_robin

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULES = ("dense", "fixed", "stagger", "learned")


def step_flops(cfg) -> float:
    """Forward + backward FLOPs of one sequence (3 × the forward's): the blocks' linear layers,
    the head (2·T·d·V) and attention by its reads (`analyze`)."""
    a = analyze(cfg)
    head = 2 * cfg.seq_len * cfg.d_model * cfg.vocab_size
    return 3.0 * (linear_flops(cfg) + head + a["attn_flops"])


def measure(
    T: int,
    precision: str,
    reps: int,
    preset: str = "paper-60m",
    memory: bool = True,
    schedules=SCHEDULES,
    one_at_a_time: bool = False,
) -> list[dict]:
    """The rows of one (T, precision): each schedule's step times, peak memory, ratios."""
    names = ["dense"] + [s for s in schedules if s != "dense"]
    over = {s: scheme(s).model_overrides() for s in names}
    cfgs = {s: config_for(preset, seq_len=T, **over[s]) for s in names}
    # the training step precision_speed times, at batch 1 and this T
    if one_at_a_time:  # one model (weights, AdamW state, activations) alive at a time
        t = {}
        for s in names:
            step = lm_step((preset, over[s], 1, T), precision)
            t[s] = time_round_robin({s: step}, warmup=1, reps=reps)[s]
            del step
            gc.collect()
    else:
        steps = {s: lm_step((preset, over[s], 1, T), precision) for s in names}
        t = time_round_robin(steps, warmup=1, reps=reps)
        del steps
    peaks = {s: math.nan for s in cfgs}
    if precision == "fp32" and memory:  # in a fresh process each (see the module docstring)
        peaks = {
            s: peak_memory(c, 1, "cpu", ("fwdbwd",))["fwdbwd"] / 2**20 for s, c in cfgs.items()
        }
    flops = {s: step_flops(c) for s, c in cfgs.items()}
    rows = []
    ref = "fixed" if "fixed" in t else "dense"
    for s in names:
        rows.append(
            {
                "T": T,
                "precision": precision,
                "schedule": s,
                "step_s": list(t[s].times_s),
                "min_s": t[s].min_s,
                "median_s": t[s].median_s,
                "x_dense": t[s].min_s / t["dense"].min_s,
                "flop_ratio": flops[s] / flops["dense"],
                "x_fixed": t[s].min_s / t[ref].min_s if ref == "fixed" else math.nan,
                "peak_mib": peaks[s],
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--precisions", nargs="+", default=None, choices=["fp32", "bf16"])
    ap.add_argument("--reps", type=int, default=3, help="timed rounds after the warm-up")
    ap.add_argument("--preset", default="paper-60m")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    ap.add_argument(
        "--schedules", nargs="+", default=list(SCHEDULES), choices=SCHEDULES, help="dense always"
    )
    ap.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="time each model alone and free it before the next (16K on 24 GiB; quiet machine)",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "results", "long-context.json"))
    a = ap.parse_args(argv)
    precisions = a.precisions or (["fp32", "bf16"] if native_bf16("cpu") else ["fp32"])
    info = machine_header()
    turns = "each model alone" if a.one_at_a_time else "in turns"
    print(
        f"{a.preset}, batch 1; {a.reps} rounds after one warm-up, {turns}; "
        f"ratios of the fastest rounds"
    )
    print(
        f"{'T':>6} {'prec':<5} {'schedule':<8} {'min s':>7} {'med s':>7} {'×dense':>7} "
        f"{'flop ratio':>10} {'×fixed':>7} {'peak MiB':>9}"
    )
    rows = []
    with contention.watch() as load:
        for T in a.lengths:
            for p in precisions:
                rs = measure(T, p, a.reps, a.preset, not a.no_memory, a.schedules, a.one_at_a_time)
                for r in rs:
                    rows.append(r)
                    print(
                        f"{T:>6} {p:<5} {r['schedule']:<8} {r['min_s']:>7.2f} "
                        f"{r['median_s']:>7.2f} {r['x_dense']:>6.2f}× {r['flop_ratio']:>9.2f}× "
                        f"{r['x_fixed']:>6.2f}× {r['peak_mib']:>9.0f}",
                        flush=True,
                    )
    print(load.result.line() + " while this ran")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        out = {"machine": info, "load": load.result.to_dict(), "one_at_a_time": a.one_at_a_time}
        json.dump({**out, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
