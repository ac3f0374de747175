"""What bf16 buys on this CPU: step times in fp32 and under bf16 autocast, in one process.

    python benchmarks/precision_speed.py               # every workload below, 5 rounds
    python benchmarks/precision_speed.py --reps 3 --only lm-cpu-small probe-demo-d2

Why: ``--precision auto`` follows the hardware (`lab.machine.precision`): bf16 on CPUs with AMX /
AVX512-BF16, fp32 elsewhere.  Whether bf16 is *faster* there depends on the workload: the
lab's CPU models are small (d = 128), where the casts autocast adds can outweigh faster
matmuls.  The fused C++ attention kernel takes bfloat16 (float32 inside); the third column
times bf16 with the PyTorch attention path instead (``FIBLAB_ATTN_IMPL=torch``, what bf16 ran
before the kernel took it), so the last column is what the fused kernel buys under bf16.  Each
workload's callables are timed in turns (`lab.machine.measure.time_round_robin`: background load
hits all alike) and the table gives the minimum and median of fp32 and bf16, bf16 / fp32 of the
minima (< 1: bf16 faster) and fused / PyTorch-path under bf16.

Workloads: the training step (forward, backward, AdamW) of the CPU presets' model
(cpu-small, T = 256, 16 windows: stagger and dense) and of the paper's model (paper-60m,
T = 1024, one window: stagger and dense); the retrieval probe's step (blur cell, staggered
init) at the demo's and the paper's scale, depth 2; the evaluation's forward (cpu-small
stagger, 8 windows, no grad).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from lab import kernels
from lab.lm.model import FibLM
from lab.lm.modelconfig import config_for
from lab.machine import contention
from lab.machine.measure import time_round_robin
from lab.machine.precision import autocast
from lab.training.optim import param_groups

HERE = os.path.dirname(os.path.abspath(__file__))
# name: (model preset, model overrides, batch, T)
LM = {
    "lm-cpu-small-stagger": ("cpu-small", {"schedule": "stagger"}, 16, 256),
    "lm-cpu-small-dense": ("cpu-small", {"attention": "dense"}, 16, 256),
    "lm-paper-60m-stagger": ("paper-60m", {"schedule": "stagger"}, 1, 1024),
    "lm-paper-60m-dense": ("paper-60m", {"attention": "dense"}, 1, 1024),
}
PROBES = {"probe-demo-d2": ("demo", 2), "probe-paper-d2": ("paper", 2)}
EVAL = {"eval-cpu-small-stagger": ("cpu-small", {"schedule": "stagger"}, 8, 256)}


def lm_step(spec: tuple, precision: str):
    """One training step of a fresh model of `spec` on random ids (drawn before timing)."""
    preset, over, batch, T = spec
    torch.manual_seed(0)
    model = FibLM(config_for(preset, seq_len=T, **over))
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-4)
    ids = torch.randint(0, model.cfg.vocab_size, (batch, T + 1), generator=torch.Generator())

    def step():
        with autocast("cpu", precision):
            _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def eval_forward(spec: tuple, precision: str):
    preset, over, batch, T = spec
    torch.manual_seed(0)
    model = FibLM(config_for(preset, seq_len=T, **over)).eval()
    ids = torch.randint(0, model.cfg.vocab_size, (batch, T), generator=torch.Generator())

    def fwd():
        with torch.no_grad(), autocast("cpu", precision):
            model(ids)

    return fwd


def probe_step(spec: tuple, precision: str):
    from probes.runner import blur_step

    return blur_step(*spec, precision)


WORKLOADS = {
    **{k: (lm_step, v) for k, v in LM.items()},
    **{k: (probe_step, v) for k, v in PROBES.items()},
    **{k: (eval_forward, v) for k, v in EVAL.items()},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--reps", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "precision-speed.json"))
    a = ap.parse_args(argv)
    info = machine_header()
    print(f"{a.reps} rounds after one warm-up; minimum and median of each")
    print(
        f"{'workload':<24} {'fp32 min':>9} {'med':>7} {'bf16 min':>9} {'med':>7} {'bf16/fp32':>9}"
        f" {'bf16 torch-attn':>15} {'fused/torch':>11}"
    )
    with contention.watch() as load:
        rows = [_row(name, a.reps) for name in a.only]
    print(load.result.line() + " while this ran")
    with open(a.out, "w") as fh:
        json.dump({"machine": info, "load": load.result.to_dict(), "rows": rows}, fh, indent=1)
    return 0


def _torch_attention(fn):
    """``fn`` run with the PyTorch attention path (the env var `lab.kernels` reads per call)."""

    def run():
        old = os.environ.get(kernels.ENV)
        os.environ[kernels.ENV] = "torch"
        try:
            fn()
        finally:
            if old is None:
                del os.environ[kernels.ENV]
            else:
                os.environ[kernels.ENV] = old

    return run


def _row(name: str, reps: int) -> dict:
    """Time one workload's fp32, bf16 and bf16-with-PyTorch-attention callables in turns;
    print and return its row."""
    make, spec = WORKLOADS[name]
    fns = {p: make(spec, p) for p in ("fp32", "bf16")}
    fns["bf16-torch"] = _torch_attention(make(spec, "bf16"))
    t = time_round_robin(fns, reps=reps)
    f, b, bt = t["fp32"], t["bf16"], t["bf16-torch"]
    print(
        f"{name:<24} {f.min_s * 1e3:>7.0f}ms {f.median_s * 1e3:>5.0f}ms "
        f"{b.min_s * 1e3:>7.0f}ms {b.median_s * 1e3:>5.0f}ms {b.min_s / f.min_s:>8.2f}× "
        f"{bt.min_s * 1e3:>13.0f}ms {b.min_s / bt.min_s:>10.2f}×",
        flush=True,
    )
    return {
        "workload": name,
        "fp32_s": list(f.times_s),
        "bf16_s": list(b.times_s),
        "bf16_torch_attention_s": list(bt.times_s),
        "ratio_min": b.min_s / f.min_s,
        "fused_over_torch_bf16": b.min_s / bt.min_s,
    }


if __name__ == "__main__":
    sys.exit(main())
